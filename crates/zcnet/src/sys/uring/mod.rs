//! io_uring calls that need `unsafe`: registering buffers and submitting sends whose buffer the
//! kernel reads after submission. The functions here keep the buffer alive until the kernel says
//! it is done with it (the notification CQE), or leak it when that never comes in time.

//!
//! `mod.rs`: setup, the opcode probe and the one-shot send the support check uses; `pool.rs`:
//! the registered-buffer pool; `ring.rs`: the ring whose requests own their buffers (its
//! completion logic is the pure state machine of `state`).

mod pool;
mod queue;
mod register;
mod request;
mod ring;
pub mod state;

pub use pool::{Slab, Slot};
pub use ring::{Finish, Finished, Resent, SendOp, SendRequest, SendRing, Way};

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
