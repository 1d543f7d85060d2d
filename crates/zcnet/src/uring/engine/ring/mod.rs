//! A ring whose send requests own their buffers until the kernel is done with them.

use std::io;

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use std::time::Duration;

use io_uring::{IoUring, types};

use super::order::Order;
pub use super::request::{Finish, Finished, Resent, SendOp, SendRequest, Way};
use super::request::{
    Held, MsgStorage, PlainSend, SendEntry, broken_stream, fill, key_generation, user_data,
};
use super::state::{Request, State, Step};
use crate::loan::OwnedBuf;
use crate::sys::abi;
use crate::sys::uring::queue::{Cq, Sq, Sqe};
use crate::sys::uring::{OpcodeSupport, Setup, Slab, probe_opcodes};

mod complete;

/// A ring whose send requests own their buffers: each buffer stays in the ring until its result
/// CQE and, when `IORING_CQE_F_MORE` announced one, its notification CQE have both been seen (in
/// either order), and only then is it handed back. Sends the kernel cut short are resubmitted
/// for the rest, and the buffer comes back once, after the last of them.
///
/// On a stream socket ([`SendRing::keep_order`]) requests go in send order, one linked chain in
/// the kernel at a time ([`Order`]); elsewhere each request goes on its own.
pub struct SendRing<B: OwnedBuf> {
    pub(super) ring: IoUring,
    /// Its submission queue, written in place.
    pub(super) sq: Sq,
    /// Its completion queue, read in place.
    pub(super) cq: Cq,
    /// Per slot, its request and buffer.
    pub(super) held: Vec<Held<B>>,
    /// Stream order, where asked for.
    pub(super) order: Option<Order>,
    /// Buffers finished while the ring looked at CQEs on its own (before launching a chain),
    /// handed out by the next [`SendRing::complete`].
    pub(super) done: Vec<Finished<B>>,
    /// Scratch: the keys of a chain being launched, or of requests being given up.
    pub(super) keys: Vec<u32>,
    pub(super) free: Vec<u32>,
    pub(super) in_flight: usize,
    /// The registered pool; declared after `ring`, `sq` and `cq` so that it drops after them.
    pub(super) registered: Option<Slab>,
    /// Its region (start, length), kept here: every fixed send is checked against it, and the
    /// pool's shared record would be a cache miss a send.
    pub(super) region: (usize, usize),
    pub(super) usage_refused: bool,
    /// What the set-up asked for, and what the kernel granted so far.
    pub(super) want: Setup,
    pub(super) granted: Setup,
    /// `IORING_SETUP_R_DISABLED` (with `SINGLE_ISSUER`) until the first submission: the thread
    /// that submits first becomes the ring's one issuer.
    pub(super) enabled: bool,
    /// The registered ring fd's index, where it was granted.
    pub(super) ring_index: Option<u32>,
    /// The socket registered as fixed file 0.
    pub(super) file: Option<RawFd>,
    /// The thread the ring is bound to (single issuer, registered ring fd), once it is.
    pub(super) issuer: Option<std::thread::ThreadId>,
}

impl<B: OwnedBuf> SendRing<B> {
    /// `io_uring_setup(2)` with `entries` submission entries and twice as many completion
    /// entries (two CQEs per zero-copy request).
    ///
    /// `want` names the set-up flags to try, as liburing's examples set them
    /// (`IORING_SETUP_COOP_TASKRUN`, 5.19; `IORING_SETUP_SINGLE_ISSUER`, 6.0;
    /// `IORING_SETUP_DEFER_TASKRUN`, 6.1, only with a single issuer): a kernel that refuses them
    /// (`EINVAL`) gets a ring without, and [`SendRing::setup`] says what was granted. The ring
    /// fd is registered at the first submission when asked.
    ///
    /// With `DEFER_TASKRUN` the kernel posts the completions that wait on task work (every
    /// `SEND_ZC` notification) only when the issuer enters with `IORING_ENTER_GETEVENTS`: every
    /// submission here asks for it ([`SendRing::submit`]), so a submission also brings in the
    /// notifications that came meanwhile, in one batch.
    pub fn new(entries: u32, want: Setup) -> io::Result<SendRing<B>> {
        let defer = want.single_issuer && want.defer_taskrun;
        let mut tries = vec![(want.coop_taskrun, want.single_issuer, defer)];
        tries.push((want.coop_taskrun, want.single_issuer, false));
        tries.push((want.coop_taskrun, false, false));
        tries.push((false, false, false));
        tries.dedup();
        let mut last = None;
        for (coop, single, defer) in tries {
            let mut b = IoUring::builder();
            b.setup_cqsize(entries.saturating_mul(2));
            if coop {
                b.setup_coop_taskrun();
            }
            if single {
                b.setup_single_issuer().setup_r_disabled();
            }
            if defer {
                // The flag makes the kernel say (IORING_SQ_TASKRUN) when deferred work waits,
                // which io-uring's own submit reads to add GETEVENTS.
                b.setup_defer_taskrun().setup_taskrun_flag();
            }
            match b.build(entries) {
                Ok(ring) => {
                    return Ok(SendRing {
                        sq: Sq::map(&ring)?,
                        cq: Cq::map(&ring)?,
                        ring,
                        held: Vec::new(),
                        order: None,
                        done: Vec::new(),
                        keys: Vec::new(),
                        free: Vec::new(),
                        in_flight: 0,
                        registered: None,
                        region: (0, 0),
                        usage_refused: false,
                        want,
                        granted: Setup {
                            coop_taskrun: coop,
                            single_issuer: single,
                            defer_taskrun: defer,
                            registered_ring_fd: false,
                            registered_file: false,
                        },
                        enabled: !single,
                        ring_index: None,
                        file: None,
                        issuer: None,
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && (coop || single || defer) => {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("io_uring_setup failed")))
    }

    /// Sends on a stream socket: from now on the peer gets the bytes of the pushed buffers in
    /// push order, whatever the kernel does with each request (see [`Order`]). Call before the
    /// first push.
    pub fn keep_order(&mut self) {
        debug_assert!(self.in_flight == 0, "keep_order before the first push");
        self.order.get_or_insert_with(Order::default);
    }

    /// The set-up the kernel granted: flags, and whether the ring fd and the socket are
    /// registered.
    pub fn setup(&self) -> Setup {
        self.granted
    }

    /// The ring's descriptor (`poll(2)` says `POLLIN` while completions wait).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the `IoUring` owns this descriptor and closes it only when dropped, after
        // the borrow of `self` this one lives in.
        unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) }
    }

    /// Registers `fd`, an eventfd, to be signalled at every CQE posted
    /// (`IORING_REGISTER_EVENTFD`, Linux 5.2). The kernel holds its own reference to it.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn register_eventfd(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ring.submitter().register_eventfd(fd.as_raw_fd())
    }

    /// Opcodes of this kernel (`IORING_REGISTER_PROBE`).
    pub fn probe(&self) -> io::Result<OpcodeSupport> {
        probe_opcodes(&self.ring)
    }

    /// Registers `pool`'s mapping as buffer index 0 (`IORING_REGISTER_BUFFERS`); the ring keeps
    /// the pool alive while registered. Pins its pages: counted against `RLIMIT_MEMLOCK` unless
    /// the caller has `CAP_IPC_LOCK`.
    pub fn register(&mut self, pool: &Slab) -> io::Result<()> {
        if self.registered.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a pool is registered",
            ));
        }
        // SAFETY: the region is the pool's own memory, reused only through its slots, each of
        // which comes back to the pool only with its request's last CQE (or is leaked with a
        // request still in flight); `self.registered` holds the pool for as long as the ring
        // lives (declared after `ring`, `sq` and `cq`, it drops after them), and the kernel
        // keeps the pages pinned until it drops the registration.
        unsafe { crate::sys::uring::register_buffers(&self.ring, pool.region())? };
        self.registered = Some(pool.clone());
        self.region = pool.region();
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

    /// Queues a send of `buf` on `fd` (a socket the caller keeps open while the request is in
    /// flight: a raw descriptor, as the SQE carries it); submitted by the next
    /// [`SendRing::submit`] or [`SendRing::wait`] (or now, when the submission queue is full).
    ///
    /// # Errors
    /// The buffer comes back with `InvalidInput` for a fixed send outside the registered pool or
    /// a buffer over 4 GiB, or with the error of a submission that failed.
    #[inline(always)]
    pub fn push(&mut self, fd: RawFd, buf: B, req: SendRequest) -> Result<(), (B, io::Error)> {
        let bytes = buf.bytes();
        let (at, len) = (bytes.as_ptr(), bytes.len());
        if len > u32::MAX as usize {
            return Err((
                buf,
                io::Error::new(io::ErrorKind::InvalidInput, "buffer over 4 GiB"),
            ));
        }
        if req.fixed && !(req.op == SendOp::SendZc && self.in_registered(at, len)) {
            let what = "a fixed-buffer send needs SEND_ZC and a buffer inside the registered pool";
            return Err((buf, io::Error::new(io::ErrorKind::InvalidInput, what)));
        }
        if let Some(errno) = self.order.as_ref().and_then(Order::broken) {
            return Err((buf, broken_stream(errno)));
        }
        let key = match self.free.pop() {
            Some(k) => k,
            None => {
                self.held.push(Held {
                    buf: None,
                    len: 0,
                    op: SendOp::Send,
                    fixed: false,
                    flags: 0,
                    report_usage: false,
                    fd: -1,
                    msg: None,
                    // Its first request follows it: generation 0.
                    state: State::new(u32::MAX),
                });
                (self.held.len() - 1) as u32
            }
        };
        let k = key as usize;
        let held = &mut self.held[k];
        held.len = len as u32;
        held.op = req.op;
        held.fixed = req.fixed;
        held.flags = req.flags;
        held.report_usage = req.report_usage;
        held.fd = fd;
        held.state.reset(held.state.generation().wrapping_add(1));
        if matches!(req.op, SendOp::SendMsg | SendOp::SendMsgZc) {
            let msg = held.msg.get_or_insert_with(|| {
                // SAFETY: all-zero is a valid msghdr, iovec and sockaddr_storage.
                Box::new(unsafe { std::mem::zeroed::<MsgStorage>() })
            });
            match req.dest {
                Some(dest) => {
                    let (storage, alen) = crate::sys::net::sockaddr(&dest);
                    msg.addr = storage;
                    msg.hdr.msg_name = (&mut msg.addr as *mut libc::sockaddr_storage).cast();
                    msg.hdr.msg_namelen = alen;
                }
                None => {
                    msg.hdr.msg_name = std::ptr::null_mut();
                    msg.hdr.msg_namelen = 0;
                }
            }
        }
        let generation = held.state.generation();
        held.buf = Some(buf);
        self.in_flight += 1;
        if let Some(order) = &mut self.order {
            // Its SQE is made when its chain is launched, at the next submission.
            order.push(key);
            return Ok(());
        }
        let queued = self.queue_new(key, generation, fd, at, len as u32, &req);
        if queued {
            return Ok(());
        }
        if let Err(e) = self.push_when_full(key) {
            let buf = self.held[k].buf.take().expect("just stored");
            self.free.push(key);
            self.in_flight -= 1;
            return Err((buf, e));
        }
        Ok(())
    }

    /// Queues the SQE of slot `key`'s new request `req` (submission `generation`, `len` bytes at
    /// `at` on `fd`), the slot already holding it: a plain send is written from what is at hand
    /// (what `fill` would read back from the slot), the others by `fill`. `false` when the
    /// queue is full.
    #[inline(always)]
    fn queue_new(
        &mut self,
        key: u32,
        generation: u32,
        fd: RawFd,
        at: *const u8,
        len: u32,
        req: &SendRequest,
    ) -> bool {
        match req.op {
            SendOp::Send | SendOp::SendZc => {
                let report_usage = req.report_usage && !self.usage_refused;
                let send = PlainSend {
                    zero_copy: req.op == SendOp::SendZc,
                    fixed_buf: req.fixed,
                    zc_flags: if report_usage {
                        abi::IORING_SEND_ZC_REPORT_USAGE
                    } else {
                        0
                    },
                    fd,
                    ptr: at,
                    len,
                    msg_flags: req.flags,
                    user_data: user_data(key, generation),
                };
                let entry = SendEntry {
                    send,
                    file: self.file,
                };
                // SAFETY: as in `queue_sqe`: the buffer is the slot's, held until its request's
                // last CQE (leaked if the ring goes first).
                unsafe { self.sq.push(entry) }
            }
            _ => self.queue_sqe(key, false),
        }
    }

    fn in_registered(&self, at: *const u8, len: usize) -> bool {
        in_region(self.region, at, len)
    }

    /// Queues the request of slot `key` (which holds a buffer): its SQE, for the unsent rest of
    /// the buffer, written into the submission queue in place ([`Sq`]). `link` chains the next
    /// SQE to it (`IOSQE_IO_LINK`). `false` when the queue is full.
    #[inline]
    fn queue_sqe(&mut self, key: u32, link: bool) -> bool {
        let (held, file, usage_refused) =
            (&mut self.held[key as usize], self.file, self.usage_refused);
        // SAFETY: everything the SQE points at (the buffer, and for SENDMSG the boxed msghdr,
        // iovec and address) is owned by a slot of this ring, which keeps it until the request's
        // last CQE has been seen, and leaks it if the ring goes away first.
        unsafe {
            self.sq
                .push(|sqe: &mut Sqe| fill(sqe, held, file, usage_refused, key, link))
        }
    }

    /// Puts the SQE of slot `key`'s request in the submission queue, submitting first when the
    /// queue is full.
    #[inline]
    fn push_request(&mut self, key: u32) -> io::Result<()> {
        if self.queue_sqe(key, false) {
            return Ok(());
        }
        self.push_when_full(key)
    }

    #[cold]
    fn push_when_full(&mut self, key: u32) -> io::Result<()> {
        self.submit()?;
        if self.queue_sqe(key, false) {
            return Ok(());
        }
        Err(io::Error::other("io_uring submission queue stays full"))
    }

    /// Stream order: takes in the CQEs there are (the chain in the kernel may have ended) and
    /// launches the next chain when none is in the kernel. Returns whether buffers finished.
    fn advance_order(&mut self) -> io::Result<bool> {
        if self.order.is_none() {
            return Ok(false);
        }
        let mut done = std::mem::take(&mut self.done);
        let got = self.take_cqes(&mut done);
        self.done = done;
        got?;
        self.launch();
        Ok(!self.done.is_empty())
    }

    /// Puts the next chain of a stream in the submission queue: its requests linked in order
    /// (`IOSQE_IO_LINK`), the last unlinked, no more than the queue has room for, so that one
    /// `io_uring_enter` takes all of it (a chain cannot span two).
    fn launch(&mut self) {
        let Some(order) = &mut self.order else {
            return;
        };
        let room = self.sq.capacity() - self.sq.len();
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        keys.extend_from_slice(order.launch(room));
        for (i, &key) in keys.iter().enumerate() {
            // There is room: `room` was counted above and nothing else is pushed in between.
            let pushed = self.queue_sqe(key, i + 1 < keys.len());
            debug_assert!(pushed, "room was counted");
        }
        self.keys = keys;
    }

    /// `io_uring_enter(2)`: submits what is queued without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.ready()?;
        self.advance_order()?;
        loop {
            let r = match self.ring_index {
                Some(i) => self.enter_registered(i, None),
                None => self.ring.submit(),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                r => return r,
            }
        }
    }

    /// Submits what is queued and waits for at least one CQE, at most `timeout` (not at all
    /// when buffers finished already, found while launching a stream's next chain).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.ready()?;
        if self.advance_order()? {
            return self.submit().map(drop);
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        let r = match self.ring_index {
            Some(i) => self.enter_registered(i, Some(timeout)),
            None => self.ring.submitter().submit_with_args(1, &args),
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Whether `len` bytes at `at` lie inside `region` (start, length), the registered pool; an
/// empty region (none registered) holds no buffer.
#[inline(always)]
fn in_region(region: (usize, usize), at: *const u8, len: usize) -> bool {
    let (start, size) = region;
    let at = at as usize;
    size > 0 && at >= start && at + len <= start + size
}

impl<B: OwnedBuf> Drop for SendRing<B> {
    fn drop(&mut self) {
        // Buffers still loaned must not be freed while the kernel may read them.
        for held in &mut self.held {
            if let Some(buf) = held.buf.take() {
                std::mem::forget(buf);
                // A SENDMSG request's header may still be read by the kernel too.
                if let Some(msg) = held.msg.take() {
                    Box::leak(msg);
                }
            }
        }
        self.unregister_ring_fd();
    }
}

#[cfg(test)]
mod tests {
    //! The completion state machine on fabricated CQEs: requests are queued but never submitted,
    //! so the kernel never sees them and only the CQEs below exist.

    use super::*;
    use crate::sys::uring::queue::Sqe;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    const RESULT_MORE: u32 = abi::IORING_CQE_F_MORE;
    const NOTIF: u32 = abi::IORING_CQE_F_NOTIF;

    fn ring_with(n: usize, op: SendOp) -> Option<(SendRing<Vec<u8>>, UdpSocket)> {
        let mut ring = SendRing::new(
            64,
            Setup {
                coop_taskrun: true,
                single_issuer: false,
                defer_taskrun: false,
                registered_ring_fd: false,
                registered_file: true,
            },
        )
        .ok()?;
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..n {
            let req = SendRequest {
                op,
                fixed: false,
                dest: None,
                flags: 0,
                report_usage: true,
            };
            ring.push(sock.as_raw_fd(), vec![i as u8; 1000], req)
                .map_err(|(_, e)| e)
                .unwrap();
        }
        Some((ring, sock))
    }

    /// One CQE of `key`'s submission `generation`.
    fn feed_gen(
        ring: &mut SendRing<Vec<u8>>,
        key: u32,
        generation: u32,
        res: i32,
        flags: u32,
    ) -> Vec<Finished<Vec<u8>>> {
        let mut out = Vec::new();
        ring.on_cqe(key, generation, res, flags, &mut out).unwrap();
        out
    }

    /// One CQE of `key`'s first submission.
    fn feed(
        ring: &mut SendRing<Vec<u8>>,
        key: u32,
        res: i32,
        flags: u32,
    ) -> Vec<Finished<Vec<u8>>> {
        feed_gen(ring, key, 0, res, flags)
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
        assert!(feed_gen(&mut ring, 0, 1, 600, RESULT_MORE).is_empty());
        let back = feed_gen(&mut ring, 0, 1, 0, NOTIF);
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
        let back = feed_gen(&mut ring, 0, 1, 1000, RESULT_MORE);
        assert!(back.is_empty());
        assert!(ring.usage_refused());
        let back = feed_gen(&mut ring, 0, 1, 0, NOTIF);
        assert_eq!((back[0].sent, back[0].copied), (1000, None));
    }

    #[test]
    fn pool_hands_out_each_buffer_once_in_fifo_order() {
        let pool = Slab::new(3, 5000).unwrap();
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

    /// A plain send's first SQE is written by `push` from the request at hand, not by `fill`
    /// from the slot: both must say the same to the kernel (`fill` itself is checked against the
    /// io-uring crate's encoder in `request`'s tests).
    #[test]
    fn push_writes_the_sqe_fill_writes_for_the_slot() {
        // Three buffers in one allocation, which a fixed send takes for the registered region
        // (nothing is submitted: the kernel never sees these SQEs).
        let bytes: &'static [u8] = Box::leak(vec![7u8; 3 * 1024].into_boxed_slice());
        for (op, report_usage, refused, file, fixed) in [
            (SendOp::Send, true, false, false, false),
            (SendOp::SendZc, true, false, false, false),
            (SendOp::SendZc, true, true, false, false),
            (SendOp::SendZc, false, false, true, false),
            (SendOp::SendZc, true, false, true, true),
        ] {
            let setup = Setup {
                coop_taskrun: true,
                single_issuer: false,
                defer_taskrun: false,
                registered_ring_fd: false,
                registered_file: false,
            };
            let Ok(mut ring) = SendRing::<&'static [u8]>::new(64, setup) else {
                return no_ring();
            };
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            if file {
                ring.file = Some(sock.as_raw_fd());
            }
            ring.usage_refused = refused;
            ring.region = (bytes.as_ptr() as usize, bytes.len());
            let req = SendRequest {
                op,
                fixed,
                dest: None,
                flags: libc::MSG_WAITALL,
                report_usage,
            };
            for i in 0..3 {
                let buf = &bytes[i * 1024..i * 1024 + 1000 + i];
                ring.push(sock.as_raw_fd(), buf, req)
                    .map_err(|(_, e)| e)
                    .unwrap();
            }
            for key in 0..3u32 {
                let pushed = ring.sq.entry(key).fields();
                // SAFETY: all-zero is a valid `Sqe` (integers only).
                let mut want: Sqe = unsafe { std::mem::zeroed() };
                let (file, refused) = (ring.file, ring.usage_refused);
                fill(
                    &mut want,
                    &mut ring.held[key as usize],
                    file,
                    refused,
                    key,
                    false,
                );
                assert_eq!(
                    pushed,
                    want.fields(),
                    "{op:?}, usage {report_usage}, refused {refused}, file {file:?}, fixed {fixed}"
                );
            }
        }
    }

    /// What a ring hands back, and asks, in the tests of sending again from a slot.
    #[derive(Default)]
    struct Again {
        /// `again`'s answers, in turn; `false` once they run out.
        keep: Vec<bool>,
        asked: usize,
        resent: Vec<(usize, Option<bool>, SendOp, bool)>,
        finished: Vec<Finished<Vec<u8>>>,
    }

    impl Finish<Vec<u8>> for Again {
        fn finish(&mut self, f: Finished<Vec<u8>>) {
            self.finished.push(f);
        }
        fn again(&mut self, buf: &mut Vec<u8>) -> bool {
            self.asked += 1;
            let keep = self.keep.get(self.asked - 1).copied().unwrap_or(false);
            if keep {
                // Refilled, shorter: the next SQE sends what the buffer is now.
                buf.truncate(buf.len() - 10);
            }
            keep
        }
        fn resent(&mut self, r: Resent) {
            self.resent.push((r.sent, r.copied, r.op, r.fixed));
        }
    }

    /// Issue 51: a datagram request that finished whole goes again from its slot when `again`
    /// keeps it: a new SQE for the slot's next generation (as `fill` writes it), the buffer and
    /// the count in flight stay, a late CQE of the finished submission changes nothing, and the
    /// buffer comes back after the new submission's own CQEs. A failed request is not offered.
    #[test]
    fn a_kept_buffer_goes_again_from_its_slot_as_its_next_generation() {
        let Some((mut ring, _s)) = ring_with(2, SendOp::SendZc) else {
            return no_ring();
        };
        let mut out = Again {
            keep: vec![true],
            ..Again::default()
        };
        ring.on_cqe(0, 0, 1000, RESULT_MORE, &mut out).unwrap();
        ring.on_cqe(0, 0, 0, NOTIF, &mut out).unwrap();
        assert_eq!((out.asked, out.finished.len()), (1, 0));
        assert_eq!(out.resent, vec![(1000, Some(false), SendOp::SendZc, false)]);
        assert_eq!(ring.in_flight(), 2);
        assert_eq!(ring.held[0].len, 990);
        // The SQE after the two pushed: slot 0's generation 1, for the 990 bytes left.
        let queued = ring.sq.entry(2).fields();
        // SAFETY: all-zero is a valid `Sqe` (integers only).
        let mut want: Sqe = unsafe { std::mem::zeroed() };
        let (file, refused) = (ring.file, ring.usage_refused);
        fill(&mut want, &mut ring.held[0], file, refused, 0, false);
        assert_eq!(queued, want.fields());
        assert_eq!(key_generation(want.user_data), (0, 1));
        // A stray notification of generation 0 frees nothing.
        ring.on_cqe(0, 0, 0, NOTIF, &mut out).unwrap();
        assert!(out.finished.is_empty());
        // Generation 1's own CQEs: offered again, declined, handed back.
        ring.on_cqe(0, 1, 990, RESULT_MORE, &mut out).unwrap();
        ring.on_cqe(0, 1, 0, NOTIF, &mut out).unwrap();
        assert_eq!((out.asked, out.finished.len()), (2, 1));
        assert_eq!(
            (out.finished[0].sent, out.finished[0].buf.len()),
            (990, 990)
        );
        assert_eq!(ring.in_flight(), 1);
        // A failed request comes back with its error, without being offered.
        ring.on_cqe(1, 0, -libc::EPIPE, 0, &mut out).unwrap();
        assert_eq!((out.asked, out.finished.len()), (2, 2));
        assert!(out.finished[1].error.is_some());
    }

    /// A kept buffer that cannot go as it is now (a fixed send whose bytes are not in the
    /// registered region) comes back with `EINVAL` instead, its slot free.
    #[test]
    fn a_kept_buffer_that_cannot_go_comes_back_with_einval() {
        let Some((mut ring, _s)) = ring_with(1, SendOp::SendZc) else {
            return no_ring();
        };
        // Made a fixed send after the fact; no region is registered, so none is inside it.
        ring.held[0].fixed = true;
        let mut out = Again {
            keep: vec![true],
            ..Again::default()
        };
        ring.on_cqe(0, 0, 1000, RESULT_MORE, &mut out).unwrap();
        ring.on_cqe(0, 0, 0, NOTIF, &mut out).unwrap();
        assert!(out.resent.is_empty());
        assert_eq!(out.finished.len(), 1);
        let e = out.finished[0].error.as_ref().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(ring.in_flight(), 0);
    }

    fn no_ring() {
        netlab::skip::skip("io_uring_setup is not allowed here");
    }
}
