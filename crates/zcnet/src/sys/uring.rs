//! io_uring calls that need `unsafe`: registering buffers and submitting sends whose buffer the
//! kernel reads after submission. The functions here keep the buffer alive until the kernel says
//! it is done with it (the notification CQE), or leak it when that never comes in time.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};

use super::Mmap;
use super::abi;
use super::owned_buf::OwnedBuf;

/// Opcodes this kernel's io_uring supports, from `IORING_REGISTER_PROBE` (Linux 5.6).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpcodeSupport {
    /// `IORING_OP_SEND_ZC` (6.0).
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC` (6.1).
    pub sendmsg_zc: bool,
}

/// `io_uring_setup(2)` with `entries` entries.
pub fn setup(entries: u32) -> io::Result<IoUring> {
    IoUring::new(entries)
}

/// `io_uring_register(IORING_REGISTER_PROBE)`.
pub fn probe_opcodes(ring: &IoUring) -> io::Result<OpcodeSupport> {
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(OpcodeSupport {
        send_zc: probe.is_supported(opcode::SendZc::CODE),
        sendmsg_zc: probe.is_supported(opcode::SendMsgZc::CODE),
    })
}

/// What one `SEND_ZC` request produced.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendZcOutcome {
    /// The result CQE's `res`: bytes sent or `-errno`.
    pub result: i32,
    /// Whether the result CQE carried `IORING_CQE_F_MORE` (a notification follows).
    pub more: bool,
    /// The notification CQE's `res`, when one arrived.
    pub notification: Option<u32>,
}

impl SendZcOutcome {
    /// True when the notification says the kernel copied the data
    /// (`IORING_NOTIF_USAGE_ZC_COPIED`, needs `IORING_SEND_ZC_REPORT_USAGE`).
    pub fn copied(&self) -> Option<bool> {
        self.notification
            .map(|res| res & abi::IORING_NOTIF_USAGE_ZC_COPIED != 0)
    }
}

/// Submits one `IORING_OP_SEND_ZC` of `len` bytes on the connected socket `fd` and waits for
/// its result and, when `F_MORE` says one follows, its notification.
///
/// With `fixed`, the buffer is registered first (`IORING_REGISTER_BUFFERS`, counted against
/// `RLIMIT_MEMLOCK`) and the send uses `IORING_RECVSEND_FIXED_BUF`. If the notification does not
/// arrive within `timeout`, the buffer and ring are leaked rather than freed under the kernel.
pub fn send_zc_once(
    fd: BorrowedFd<'_>,
    len: usize,
    zc_flags: u16,
    fixed: bool,
    timeout: Duration,
) -> io::Result<SendZcOutcome> {
    let ring = setup(4)?;
    let buf = vec![0x5a_u8; len].into_boxed_slice();
    if fixed {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `buf` stays allocated until the ring is dropped (or both are leaked below),
        // so the registered region outlives its registration.
        unsafe { ring.submitter().register_buffers(&[iov])? };
    }
    let mut op =
        opcode::SendZc::new(types::Fd(fd.as_raw_fd()), buf.as_ptr(), len as u32).zc_flags(zc_flags);
    if fixed {
        op = op.buf_index(Some(0));
    }
    let sqe = op.build().user_data(1);
    // SAFETY: the SQE points at `buf`, which lives until the notification CQE has been seen
    // (or is leaked on timeout); the socket `fd` is borrowed for the whole function.
    unsafe {
        ring.submission_shared()
            .push(&sqe)
            .map_err(|_| io::Error::other("submission queue full"))?;
    }
    ring.submit()?;

    let mut out = SendZcOutcome::default();
    let mut have_result = false;
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: only this thread touches the completion queue of this private ring.
        for cqe in unsafe { ring.completion_shared() } {
            let flags = cqe.flags();
            if flags & abi::IORING_CQE_F_NOTIF != 0 {
                out.notification = Some(cqe.result() as u32);
            } else {
                out.result = cqe.result();
                out.more = flags & abi::IORING_CQE_F_MORE != 0;
                have_result = true;
            }
        }
        if have_result && (!out.more || out.notification.is_some()) {
            return Ok(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // The kernel may still read `buf`: leak it and the ring instead of freeing them.
            std::mem::forget(buf);
            std::mem::forget(ring);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no io_uring notification within the timeout",
            ));
        }
        let ts = types::Timespec::from(left.min(Duration::from_millis(50)));
        let args = types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Same as the timeout: the request may still hold `buf`.
                std::mem::forget(buf);
                std::mem::forget(ring);
                return Err(e);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Buffers loaned to io_uring sends, and the ring that tracks them.
// ---------------------------------------------------------------------------------------------

/// Equal-sized buffers in one anonymous mapping, handed out first-in first-out; the mapping can
/// be registered with a ring as one region (`IORING_REGISTER_BUFFERS`, Linux 5.1) for
/// `IORING_RECVSEND_FIXED_BUF` sends.
///
/// Handing buffers out in FIFO order cycles through the whole pool, as a server sending distinct
/// data does; a LIFO pool would keep resending the same cache-hot buffer.
#[derive(Clone, Debug)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    map: Mmap,
    buf_size: usize,
    count: usize,
    free: Mutex<VecDeque<u32>>,
}

impl Pool {
    /// `count` buffers of `buf_size` bytes (the mapping is rounded up to whole pages).
    ///
    /// # Errors
    /// `InvalidInput` for an empty pool or more than `u32::MAX` buffers, or `mmap`'s error.
    pub fn new(count: usize, buf_size: usize) -> io::Result<Pool> {
        let bytes = count
            .checked_mul(buf_size)
            .filter(|&b| b > 0 && count <= u32::MAX as usize)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "empty or oversized pool")
            })?;
        let page = super::page_size();
        let map = Mmap::anonymous(bytes.div_ceil(page) * page)?;
        Ok(Pool {
            inner: Arc::new(PoolInner {
                map,
                buf_size,
                count,
                free: Mutex::new((0..count as u32).collect()),
            }),
        })
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Bytes of the whole mapping (what registration pins and counts against `RLIMIT_MEMLOCK`).
    pub fn region_len(&self) -> usize {
        self.inner.map.len()
    }

    /// Buffers not handed out now.
    pub fn available(&self) -> usize {
        self.inner.free().len()
    }

    /// The next free buffer, its length set to the full buffer size; `None` when all are out.
    pub fn acquire(&self) -> Option<PoolBuf> {
        let index = self.inner.free().pop_front()?;
        Some(PoolBuf {
            pool: self.inner.clone(),
            index,
            len: self.inner.buf_size,
        })
    }
}

impl PoolInner {
    fn free(&self) -> std::sync::MutexGuard<'_, VecDeque<u32>> {
        // A panic while holding the lock cannot leave the queue half-updated (push/pop only).
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One buffer of a [`Pool`], owned exclusively; back in the pool when dropped.
#[derive(Debug)]
pub struct PoolBuf {
    pool: Arc<PoolInner>,
    index: u32,
    len: usize,
}

impl PoolBuf {
    /// Its index in the pool.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The buffer size of its pool.
    pub fn capacity(&self) -> usize {
        self.pool.buf_size
    }

    /// Sets how many bytes (from the start) are sent.
    ///
    /// # Panics
    /// If `len` exceeds [`PoolBuf::capacity`].
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "PoolBuf::set_len beyond capacity");
        self.len = len;
    }

    fn start(&self) -> *mut u8 {
        (self.pool.map.addr() + self.index as usize * self.pool.buf_size) as *mut u8
    }
}

impl std::ops::Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: [start, start + len) lies inside the live mapping (index < count, len <=
        // buf_size) and belongs to this PoolBuf alone: an index is either in the free queue or in
        // exactly one PoolBuf.
        unsafe { std::slice::from_raw_parts(self.start(), self.len) }
    }
}

impl std::ops::DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref; `&mut self` makes the access exclusive, and while the buffer is
        // loaned to the kernel the ring owns the PoolBuf, so no `&mut` can exist then.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.len) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        self.pool.free().push_back(self.index);
    }
}

// SAFETY: the bytes live in the pool's mapping, which the PoolBuf keeps alive (Arc) and which
// never moves; only the owner of the PoolBuf can write them (DerefMut), and a loaned PoolBuf is
// owned by the ring until the kernel is done with it.
unsafe impl OwnedBuf for PoolBuf {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// The request a buffer is sent with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IORING_OP_SEND` (Linux 5.6): the kernel copies; one CQE.
    Send,
    /// `IORING_OP_SEND_ZC` (6.0): result CQE, then a notification CQE when `F_MORE` says so.
    SendZc,
    /// `IORING_OP_SENDMSG` (5.3) with a destination address.
    SendMsg,
    /// `IORING_OP_SENDMSG_ZC` (6.1) with a destination address.
    SendMsgZc,
}

impl SendOp {
    fn zero_copy(self) -> bool {
        matches!(self, SendOp::SendZc | SendOp::SendMsgZc)
    }
}

/// How to send one buffer.
#[derive(Clone, Copy, Debug)]
pub struct SendRequest {
    /// The opcode.
    pub op: SendOp,
    /// `IORING_RECVSEND_FIXED_BUF`: the buffer lies in the registered pool (`SendZc` only).
    pub fixed: bool,
    /// Destination, for the `SendMsg` ops on unconnected sockets.
    pub dest: Option<SocketAddr>,
    /// `send(2)` flags (`MSG_WAITALL` makes a stream send complete in full or fail).
    pub flags: i32,
    /// `IORING_SEND_ZC_REPORT_USAGE`: the notification says whether the kernel copied.
    pub report_usage: bool,
}

/// A buffer the kernel is done with.
#[derive(Debug)]
pub struct Finished<B> {
    /// The buffer.
    pub buf: B,
    /// Bytes the kernel accepted.
    pub sent: usize,
    /// The first error of its request(s), from the result CQE's `-errno`.
    pub error: Option<io::Error>,
    /// Sent with a zero-copy opcode.
    pub zero_copy: bool,
    /// From the notification with `REPORT_USAGE`: `Some(true)` if the kernel copied; `None`
    /// without a notification or without usage reports.
    pub copied: Option<bool>,
}

/// `msghdr` with its one `iovec` and the address, boxed so the pointers inside stay valid until
/// the request's result CQE.
struct MsgStorage {
    hdr: libc::msghdr,
    iov: libc::iovec,
    addr: libc::sockaddr_storage,
}

// SAFETY: the raw pointers inside point only into this same box (and at the slot's buffer, owned
// alongside it); nothing is shared between threads through them.
unsafe impl Send for MsgStorage {}

struct Slot<B> {
    buf: B,
    req: SendRequest,
    fd: RawFd,
    msg: Option<Box<MsgStorage>>,
    sent: usize,
    /// Result CQEs still to come.
    results: u32,
    /// Notifications announced by `F_MORE` minus notifications seen: a notification that
    /// arrives before its result makes this -1 for a while.
    notifs: i32,
    error: Option<i32>,
    copied: Option<bool>,
    usage_retry: bool,
}

/// A ring whose send requests own their buffers: each buffer stays in the ring until its result
/// CQE and, when `IORING_CQE_F_MORE` announced one, its notification CQE have both been seen (in
/// either order), and only then is it handed back. Stream sends the kernel cut short are
/// resubmitted for the rest, and the buffer comes back once, after the last of them.
pub struct SendRing<B: OwnedBuf> {
    ring: IoUring,
    slots: Vec<Option<Slot<B>>>,
    free: Vec<u32>,
    in_flight: usize,
    registered: Option<Pool>,
    usage_refused: bool,
    cqes: Vec<(u64, i32, u32)>,
}

impl<B: OwnedBuf> SendRing<B> {
    /// `io_uring_setup(2)` with `entries` submission entries and twice as many completion
    /// entries (two CQEs per zero-copy request).
    pub fn new(entries: u32) -> io::Result<SendRing<B>> {
        let ring = IoUring::builder()
            .setup_cqsize(entries.saturating_mul(2))
            .build(entries)?;
        Ok(SendRing {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            registered: None,
            usage_refused: false,
            cqes: Vec::new(),
        })
    }

    /// Opcodes of this kernel (`IORING_REGISTER_PROBE`).
    pub fn probe(&self) -> io::Result<OpcodeSupport> {
        probe_opcodes(&self.ring)
    }

    /// Registers `pool`'s mapping as buffer index 0 (`IORING_REGISTER_BUFFERS`); the ring keeps
    /// the pool alive while registered. Pins its pages: counted against `RLIMIT_MEMLOCK` unless
    /// the caller has `CAP_IPC_LOCK`.
    pub fn register(&mut self, pool: &Pool) -> io::Result<()> {
        if self.registered.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a pool is registered",
            ));
        }
        let iov = libc::iovec {
            iov_base: pool.inner.map.addr() as *mut libc::c_void,
            iov_len: pool.inner.map.len(),
        };
        // SAFETY: the region stays mapped while registered: `self.registered` holds the pool
        // until the ring is dropped (the ring field is dropped first, which unregisters).
        unsafe { self.ring.submitter().register_buffers(&[iov])? };
        self.registered = Some(pool.clone());
        Ok(())
    }

    /// Requests whose buffers are still held.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the kernel refused `IORING_SEND_ZC_REPORT_USAGE` (before Linux 6.2) and sends go
    /// on without it.
    pub fn usage_refused(&self) -> bool {
        self.usage_refused
    }

    /// Queues a send of `buf` on `fd`; submitted by the next [`SendRing::submit`] or
    /// [`SendRing::wait`] (or now, when the submission queue is full).
    ///
    /// # Errors
    /// The buffer comes back with `InvalidInput` for a fixed send outside the registered pool or
    /// a buffer over 4 GiB, or with the error of a submission that failed.
    pub fn push(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: B,
        req: SendRequest,
    ) -> Result<(), (B, io::Error)> {
        let len = buf.bytes().len();
        if len > u32::MAX as usize {
            return Err((
                buf,
                io::Error::new(io::ErrorKind::InvalidInput, "buffer over 4 GiB"),
            ));
        }
        if req.fixed && !(req.op == SendOp::SendZc && self.in_registered(buf.bytes())) {
            let what = "a fixed-buffer send needs SEND_ZC and a buffer inside the registered pool";
            return Err((buf, io::Error::new(io::ErrorKind::InvalidInput, what)));
        }
        let key = match self.free.pop() {
            Some(k) => k,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let mut slot = Slot {
            buf,
            req,
            fd: fd.as_raw_fd(),
            msg: None,
            sent: 0,
            results: 1,
            notifs: 0,
            error: None,
            copied: None,
            usage_retry: false,
        };
        let sqe = self.build(&mut slot, key);
        self.slots[key as usize] = Some(slot);
        self.in_flight += 1;
        if let Err(e) = self.push_sqe(&sqe) {
            let slot = self.slots[key as usize].take().expect("just stored");
            self.free.push(key);
            self.in_flight -= 1;
            return Err((slot.buf, e));
        }
        Ok(())
    }

    fn in_registered(&self, bytes: &[u8]) -> bool {
        self.registered.as_ref().is_some_and(|p| {
            let start = p.inner.map.addr();
            let at = bytes.as_ptr() as usize;
            at >= start && at + bytes.len() <= start + p.inner.map.len()
        })
    }

    /// The SQE for the unsent rest of `slot`'s buffer.
    fn build(&self, slot: &mut Slot<B>, key: u32) -> io_uring::squeue::Entry {
        let bytes = &slot.buf.bytes()[slot.sent..];
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        let fd = types::Fd(slot.fd);
        let mut zc_flags = 0;
        if slot.req.report_usage && !self.usage_refused && !slot.usage_retry {
            zc_flags |= abi::IORING_SEND_ZC_REPORT_USAGE;
        }
        let sqe = match slot.req.op {
            SendOp::Send => opcode::Send::new(fd, ptr, len as u32)
                .flags(slot.req.flags)
                .build(),
            SendOp::SendZc => opcode::SendZc::new(fd, ptr, len as u32)
                .flags(slot.req.flags)
                .zc_flags(zc_flags)
                .buf_index(slot.req.fixed.then_some(0))
                .build(),
            SendOp::SendMsg | SendOp::SendMsgZc => {
                let msg = slot.msg.get_or_insert_with(|| {
                    // SAFETY: all-zero is a valid msghdr, iovec and sockaddr_storage.
                    Box::new(unsafe { std::mem::zeroed::<MsgStorage>() })
                });
                msg.iov = libc::iovec {
                    iov_base: ptr as *mut libc::c_void,
                    iov_len: len,
                };
                msg.hdr.msg_iov = &mut msg.iov;
                msg.hdr.msg_iovlen = 1;
                if let Some(dest) = slot.req.dest {
                    let (storage, alen) = super::sockaddr(&dest);
                    msg.addr = storage;
                    msg.hdr.msg_name = (&mut msg.addr as *mut libc::sockaddr_storage).cast();
                    msg.hdr.msg_namelen = alen;
                }
                let hdr: *const libc::msghdr = &msg.hdr;
                if slot.req.op == SendOp::SendMsg {
                    opcode::SendMsg::new(fd, hdr)
                        .flags(slot.req.flags as u32)
                        .build()
                } else {
                    // SENDMSG_ZC takes the zero-copy flags in `ioprio`, as SEND_ZC does.
                    opcode::SendMsgZc::new(fd, hdr)
                        .flags(slot.req.flags as u32)
                        .ioprio(zc_flags)
                        .build()
                }
            }
        };
        sqe.user_data(key as u64)
    }

    fn push_sqe(&mut self, sqe: &io_uring::squeue::Entry) -> io::Result<()> {
        for _ in 0..2 {
            // SAFETY: everything the SQE points at (the buffer, and for SENDMSG the boxed msghdr,
            // iovec and address) is owned by a slot of this ring, which keeps it until the
            // request's last CQE has been seen, and leaks it if the ring goes away first.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.submit()?;
        }
        Err(io::Error::other("io_uring submission queue stays full"))
    }

    /// `io_uring_enter(2)`: submits what is queued without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        loop {
            match self.ring.submit() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                r => return r,
            }
        }
    }

    /// Submits what is queued and waits for at least one CQE, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads every CQE there is and appends the buffers the kernel is done with to `out`.
    /// Returns how many were appended.
    pub fn complete(&mut self, out: &mut Vec<Finished<B>>) -> io::Result<usize> {
        self.cqes.clear();
        self.cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        let before = out.len();
        let mut cqes = std::mem::take(&mut self.cqes);
        for &(key, res, flags) in &cqes {
            self.on_cqe(key as u32, res, flags, out)?;
        }
        cqes.clear();
        self.cqes = cqes;
        Ok(out.len() - before)
    }

    fn on_cqe(
        &mut self,
        key: u32,
        res: i32,
        flags: u32,
        out: &mut Vec<Finished<B>>,
    ) -> io::Result<()> {
        let Some(mut slot) = self.slots.get_mut(key as usize).and_then(Option::take) else {
            // Not ours: a CQE for a slot already finished would be a kernel or bookkeeping bug;
            // dropping it is the only safe thing (no buffer is freed by it).
            return Ok(());
        };
        let mut resubmit = false;
        if flags & abi::IORING_CQE_F_NOTIF != 0 {
            slot.notifs -= 1;
            if slot.req.report_usage && !self.usage_refused {
                let copied = res as u32 & abi::IORING_NOTIF_USAGE_ZC_COPIED != 0;
                slot.copied = Some(slot.copied.unwrap_or(false) | copied);
            }
        } else {
            slot.results -= 1;
            if flags & abi::IORING_CQE_F_MORE != 0 {
                slot.notifs += 1;
            }
            let len = slot.buf.bytes().len();
            if res == -libc::EINVAL
                && slot.req.op.zero_copy()
                && slot.req.report_usage
                && !self.usage_refused
                && slot.sent == 0
            {
                // Kernels before 6.2 refuse IORING_SEND_ZC_REPORT_USAGE: send again without it.
                slot.usage_retry = true;
                resubmit = true;
            } else if res < 0 {
                slot.error.get_or_insert(-res);
            } else {
                slot.sent += res as usize;
                if slot.usage_retry {
                    self.usage_refused = true;
                }
                // A stream send cut short (a signal, or no MSG_WAITALL): send the rest.
                resubmit = res > 0 && slot.sent < len;
            }
        }
        if resubmit {
            slot.results += 1;
            let sqe = self.build(&mut slot, key);
            self.slots[key as usize] = Some(slot);
            return self.push_sqe(&sqe);
        }
        if slot.results == 0 && slot.notifs == 0 {
            self.in_flight -= 1;
            self.free.push(key);
            out.push(Finished {
                zero_copy: slot.req.op.zero_copy(),
                sent: slot.sent,
                error: slot.error.map(io::Error::from_raw_os_error),
                copied: slot.copied,
                buf: slot.buf,
            });
        } else {
            self.slots[key as usize] = Some(slot);
        }
        Ok(())
    }
}

impl<B: OwnedBuf> Drop for SendRing<B> {
    fn drop(&mut self) {
        // Buffers still loaned must not be freed while the kernel may read them.
        for slot in self.slots.drain(..).flatten() {
            std::mem::forget(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The completion state machine on fabricated CQEs: requests are queued but never submitted,
    //! so the kernel never sees them and only the CQEs below exist.

    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    const RESULT_MORE: u32 = abi::IORING_CQE_F_MORE;
    const NOTIF: u32 = abi::IORING_CQE_F_NOTIF;

    fn ring_with(n: usize, op: SendOp) -> Option<(SendRing<Vec<u8>>, UdpSocket)> {
        let mut ring = SendRing::new(64).ok()?;
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..n {
            let req = SendRequest {
                op,
                fixed: false,
                dest: None,
                flags: 0,
                report_usage: true,
            };
            ring.push(sock.as_fd(), vec![i as u8; 1000], req)
                .map_err(|(_, e)| e)
                .unwrap();
        }
        Some((ring, sock))
    }

    fn feed(
        ring: &mut SendRing<Vec<u8>>,
        key: u32,
        res: i32,
        flags: u32,
    ) -> Vec<Finished<Vec<u8>>> {
        let mut out = Vec::new();
        ring.on_cqe(key, res, flags, &mut out).unwrap();
        out
    }

    #[test]
    fn zero_copy_buffer_comes_back_after_result_and_notification_in_either_order() {
        let Some((mut ring, _s)) = ring_with(2, SendOp::SendZc) else {
            return no_ring();
        };
        // Request 0: result first, then the notification (copied).
        assert!(feed(&mut ring, 0, 1000, RESULT_MORE).is_empty());
        let back = feed(
            &mut ring,
            0,
            abi::IORING_NOTIF_USAGE_ZC_COPIED as i32,
            NOTIF,
        );
        assert_eq!(back.len(), 1);
        assert_eq!(
            (back[0].buf[0], back[0].sent, back[0].copied),
            (0, 1000, Some(true))
        );
        // Request 1: the notification first (not copied), then the result.
        assert!(feed(&mut ring, 1, 0, NOTIF).is_empty());
        assert_eq!(ring.in_flight(), 1);
        let back = feed(&mut ring, 1, 1000, RESULT_MORE);
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].buf[0], back[0].copied), (1, Some(false)));
        assert!(back[0].error.is_none() && back[0].zero_copy);
        assert_eq!(ring.in_flight(), 0);
        // A late duplicate for a finished slot hands nothing back twice.
        assert!(feed(&mut ring, 1, 0, NOTIF).is_empty());
    }

    #[test]
    fn failed_request_with_a_notification_waits_for_it() {
        let Some((mut ring, _s)) = ring_with(2, SendOp::SendZc) else {
            return no_ring();
        };
        // Failed, but F_MORE: the buffer is still the kernel's until the notification.
        assert!(feed(&mut ring, 0, -libc::ECONNREFUSED, RESULT_MORE).is_empty());
        let back = feed(&mut ring, 0, 0, NOTIF);
        assert_eq!(back.len(), 1);
        assert_eq!(
            back[0].error.as_ref().unwrap().raw_os_error(),
            Some(libc::ECONNREFUSED)
        );
        assert_eq!(back[0].sent, 0);
        // Failed without F_MORE: back at once.
        let back = feed(&mut ring, 1, -libc::EPIPE, 0);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].copied, None);
    }

    #[test]
    fn copy_request_comes_back_at_its_result() {
        let Some((mut ring, _s)) = ring_with(1, SendOp::Send) else {
            return no_ring();
        };
        let back = feed(&mut ring, 0, 1000, 0);
        assert_eq!(back.len(), 1);
        assert!(!back[0].zero_copy);
        assert_eq!(back[0].copied, None);
    }

    #[test]
    fn short_stream_result_is_resubmitted_and_the_buffer_comes_back_once() {
        let Some((mut ring, _s)) = ring_with(1, SendOp::SendZc) else {
            return no_ring();
        };
        // 400 of 1000 bytes, with a notification to come: the rest is queued again.
        assert!(feed(&mut ring, 0, 400, RESULT_MORE).is_empty());
        assert!(feed(&mut ring, 0, 0, NOTIF).is_empty());
        // The second request sends the remaining 600 and is notified too.
        assert!(feed(&mut ring, 0, 600, RESULT_MORE).is_empty());
        let back = feed(&mut ring, 0, 0, NOTIF);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].sent, 1000);
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn report_usage_refused_is_retried_without_it() {
        let Some((mut ring, _s)) = ring_with(1, SendOp::SendZc) else {
            return no_ring();
        };
        // A pre-6.2 kernel: EINVAL for the REPORT_USAGE flag, no notification.
        assert!(feed(&mut ring, 0, -libc::EINVAL, 0).is_empty());
        let back = feed(&mut ring, 0, 1000, RESULT_MORE);
        assert!(back.is_empty());
        assert!(ring.usage_refused());
        let back = feed(&mut ring, 0, 0, NOTIF);
        assert_eq!((back[0].sent, back[0].copied), (1000, None));
    }

    #[test]
    fn pool_hands_out_each_buffer_once_in_fifo_order() {
        let pool = Pool::new(3, 5000).unwrap();
        assert_eq!(pool.region_len(), 16384);
        let mut a = pool.acquire().unwrap();
        let b = pool.acquire().unwrap();
        let c = pool.acquire().unwrap();
        assert!(pool.acquire().is_none());
        assert_eq!((a.index(), b.index(), c.index()), (0, 1, 2));
        a.fill(0xab);
        a.set_len(10);
        assert_eq!(&a[..], &[0xab; 10]);
        assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 5000);
        drop(b);
        drop(a);
        assert_eq!(pool.available(), 2);
        assert_eq!(pool.acquire().unwrap().index(), 1);
    }

    fn no_ring() {
        netlab::skip::skip("io_uring_setup is not allowed here");
    }
}
