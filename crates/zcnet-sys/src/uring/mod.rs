//! io_uring's raw calls and memory: `io_uring_setup(2)`, the opcode probe, the registrations
//! and `io_uring_enter(2)` through a registered ring fd; the queues mapped from the ring
//! (`queue.rs`, with the `unsafe fn push` whose contract the engine keeps); the registered-buffer
//! pool's memory (`pool.rs`); and the one-shot send the support check uses. What a request's
//! buffer is owed and when it is free is the engine's (`crate::uring::engine`), above this.

mod pool;
pub mod queue;

pub use pool::{Slab, Slot};

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};

use super::abi;

/// The ring's set-up flags and registrations to try (the public face is `uring::RingSetup`,
/// which names the kernel version of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// `IORING_SETUP_COOP_TASKRUN`.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SINGLE_ISSUER`.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (with `IORING_SETUP_TASKRUN_FLAG`); only with
    /// `single_issuer`.
    pub defer_taskrun: bool,
    /// `IORING_REGISTER_RING_FDS`.
    pub registered_ring_fd: bool,
    /// `IORING_REGISTER_FILES`.
    pub registered_file: bool,
}

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

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// `struct io_uring_getevents_arg`.
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// `IORING_REGISTER_BUFFERS` (5.1) of one region, `(address, length)`.
///
/// # Safety
/// The region is memory of this process, mapped, that nothing else reuses while a request may
/// name it: the kernel pins its pages when it registers them (they stay pinned until the
/// buffers are unregistered or the ring is destroyed) and reads them for every request that
/// names the registered buffer.
pub unsafe fn register_buffers(ring: &IoUring, region: (usize, usize)) -> io::Result<()> {
    let iov = libc::iovec {
        iov_base: region.0 as *mut libc::c_void,
        iov_len: region.1,
    };
    // SAFETY: the caller keeps the region mapped while the ring lives (this function's
    // contract); `iov` is read during the call only.
    unsafe { ring.submitter().register_buffers(&[iov]) }
}

/// `IORING_REGISTER_RING_FDS` (5.18): registers `ring` in the calling thread's io_uring
/// context. The index it got, or the error.
pub fn register_ring_fd(ring: BorrowedFd<'_>) -> io::Result<u32> {
    let mut up = RsrcUpdate {
        offset: u32::MAX,
        resv: 0,
        data: ring.as_raw_fd() as u64,
    };
    // SAFETY: `up` is a valid io_uring_rsrc_update for the duration of the call; the kernel
    // writes the allocated index into `offset`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            abi::IORING_REGISTER_RING_FDS,
            &mut up as *mut RsrcUpdate,
            1,
        )
    };
    match r {
        1 => Ok(up.offset),
        r if r < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::other(
            "IORING_REGISTER_RING_FDS registered no fd",
        )),
    }
}

/// `IORING_UNREGISTER_RING_FDS`: takes `index` (this thread's, for `ring`) out of the calling
/// thread's io_uring context.
pub fn unregister_ring_fd(ring: BorrowedFd<'_>, index: u32) -> io::Result<()> {
    let mut up = RsrcUpdate {
        offset: index,
        resv: 0,
        data: 0,
    };
    // SAFETY: `up` is a valid io_uring_rsrc_update for the duration of the call; the kernel
    // only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            abi::IORING_UNREGISTER_RING_FDS,
            &mut up as *mut RsrcUpdate,
            1,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `io_uring_enter(2)` through the registered ring `index` (`IORING_ENTER_REGISTERED_RING`):
/// submits `to_submit` SQEs; with `timeout`, waits for one CQE at most that long
/// (`IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG`); without, asks for events only when
/// `getevents` (deferred task work runs only in an enter that does).
pub fn enter_registered(
    index: u32,
    to_submit: u32,
    timeout: Option<Duration>,
    getevents: bool,
) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let arg = GeteventsArg {
        sigmask: 0,
        sigmask_sz: 8,
        min_wait_usec: 0,
        ts: ts.as_ref().map_or(0, |t| t as *const libc::timespec as u64),
    };
    let (min_complete, flags) = match timeout {
        Some(_) => (1, abi::IORING_ENTER_GETEVENTS | abi::IORING_ENTER_EXT_ARG),
        None if getevents => (0, abi::IORING_ENTER_GETEVENTS),
        None => (0, 0),
    };
    // SAFETY: `arg` and the timespec it points at live across the call; the kernel reads
    // `size_of::<GeteventsArg>()` bytes of `arg` only with EXT_ARG.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            index,
            to_submit,
            min_complete,
            flags | abi::IORING_ENTER_REGISTERED_RING,
            &arg as *const GeteventsArg,
            std::mem::size_of::<GeteventsArg>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
