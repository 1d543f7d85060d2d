//! `zcnet_uring_*`: an io_uring `SEND_ZC` sender on a connected socket, loaning C memory until
//! its notification.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

use zc::loan::AssumeExclusive;

use super::error::{Fail, guard};
use super::handle::{Fd, ZcnetMode, arg, fd, free_handle, read_counters};
use super::loan::{
    CBuf, ZcnetAutoCounters, ZcnetCompletion, auto_counters, drain_for, lend, lender, read_auto,
    reap_into, set_stall,
};

/// What an io_uring sender did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetUringCounters {
    /// Requests queued.
    pub requests: u64,
    /// Of those, `SEND_ZC`/`SENDMSG_ZC`.
    pub zero_copy_requests: u64,
    /// Buffers returned.
    pub returned: u64,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Zero-copy buffers whose notification said "copied".
    pub copied: u64,
    /// Zero-copy buffers whose notification said "not copied".
    pub not_copied: u64,
    /// Bytes that really went without a copy.
    pub not_copied_bytes: u64,
    /// Buffers whose request failed.
    pub errors: u64,
    /// Zero-copy requests sent again by copy for want of locked memory.
    pub memlock_fallbacks: u64,
}

/// An io_uring `SEND_ZC` sender on a connected socket (opaque).
pub struct ZcnetUringSender {
    inner: zc::uring::UringSender<AssumeExclusive<Fd>, CBuf>,
    ready: VecDeque<ZcnetCompletion>,
}

lender!(ZcnetUringSender);

/// Makes an io_uring sender on the connected socket `fd`: `IORING_OP_SEND_ZC` (Linux 6.0,
/// `io_uring_prep_send_zc(3)`), each buffer back after its notification CQE, with the kernel's
/// word on whether it copied (6.2). `mode` is a `ZcnetMode` (another value is `-EINVAL`);
/// `ZCNET_MODE_AUTO` sends by zero copy where it pays, learned per message size on this socket
/// from the `zcnet tune` profile (or the built-in one) as the start (`zcnet_uring_auto`). Where
/// the kernel lacks `SEND_ZC` it sends by copy. On a stream socket the peer gets the bytes of
/// `zcnet_uring_send` calls in call order; after a send fails for good, every later buffer
/// comes back unsent with an error. Returns `-EBUSY` when another zcnet sender of this process
/// holds the same socket.
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_uring_sender_free`, and
/// nothing else sends on that socket meanwhile (through any descriptor of it): its bytes would
/// land between this sender's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_sender_new(
    fd_raw: c_int,
    mode: c_int,
    out: *mut *mut ZcnetUringSender,
) -> c_int {
    // SAFETY: the caller's contract, the same.
    unsafe { uring_sender_new(fd_raw, mode, None, out) }
}

/// `zcnet_uring_sender_new` on a UDP socket that sends each buffer as a GSO train of datagrams
/// of `segment` bytes (`UDP_SEGMENT`), as `zcnet_zc_sender_new_gso`: at most 64 segments,
/// `-EINVAL` for `segment` 0 or over 65507, `-EOPNOTSUPP` for a socket that is not UDP.
///
/// # Safety
/// As `zcnet_uring_sender_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_sender_new_gso(
    fd_raw: c_int,
    mode: c_int,
    segment: u16,
    out: *mut *mut ZcnetUringSender,
) -> c_int {
    // SAFETY: the caller's contract, the same.
    unsafe { uring_sender_new(fd_raw, mode, Some(segment), out) }
}

/// The body of both constructors; `segment` `None`: no GSO.
///
/// # Safety
/// As `zcnet_uring_sender_new`.
unsafe fn uring_sender_new(
    fd_raw: c_int,
    mode: c_int,
    segment: Option<u16>,
    out: *mut *mut ZcnetUringSender,
) -> c_int {
    guard(|| {
        use zc::uring::{Config, Mode, UringSender};
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let segment = super::msg_zerocopy::gso_segment(segment)?;
        let mode = match ZcnetMode::try_from(mode)? {
            ZcnetMode::ZeroCopy => Mode::ZeroCopy,
            ZcnetMode::Copy => Mode::Copy,
            ZcnetMode::Auto => Mode::Auto,
        };
        let config = Config {
            mode,
            segment,
            ..Config::default()
        };
        // SAFETY: the caller's contract above: the socket is this sender's alone until
        // zcnet_uring_sender_free; another sender of this process on it is refused by `new`.
        let socket = unsafe { AssumeExclusive::new(fd(fd_raw, "fd")?) };
        let inner = UringSender::new(socket, config).map_err(|e| {
            use zc::uring::UringError;
            let in_use = matches!(e.error, UringError::SocketInUse { .. });
            let no_gso = matches!(
                e.error,
                UringError::Unsupported {
                    feature: "UDP_SEGMENT",
                    ..
                }
            );
            super::loan::refused(&e.error, in_use, no_gso)
        })?;
        *out = Box::into_raw(Box::new(ZcnetUringSender {
            inner,
            ready: VecDeque::new(),
        }));
        Ok(())
    })
}

/// Queues `len` bytes at `ptr` (submitted in batches; `zcnet_uring_reap` submits the rest),
/// loaned until `zcnet_uring_reap` returns `user_data`, as for `zcnet_zc_send`.
///
/// # Safety
/// `s` is a live sender; `ptr` points at `len` readable bytes kept valid and unmodified until
/// their completion.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_send(
    s: *mut ZcnetUringSender,
    ptr: *const u8,
    len: usize,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { lend(s, ptr, len, user_data) }
}

/// Submits what is queued and copies up to `cap` completions into `out` without blocking;
/// `*n` says how many.
///
/// # Safety
/// `s` is a live sender; `out` has room for `cap` completions; `n` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_reap(
    s: *mut ZcnetUringSender,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { reap_into(s, out, cap, n) }
}

/// What `zcnet_uring_resend` asks of each buffer that came back whole: `user_data`, its memory
/// at `ptr` and its length in `*len`. Return 1 to send it again at once (the callback may have
/// rewritten its bytes, and may make `*len` smaller; never larger), 0 to leave it for
/// `zcnet_uring_reap`. The kernel is done with the memory when it is called.
pub type ZcnetAgain = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        user_data: u64,
        ptr: *const u8,
        len: *mut usize,
    ) -> c_int,
>;

/// Sends buffers again as they come back, without handing them out (the Rust
/// `UringSender::resend_returned`, issue 63): collects up to a batch of the buffers that came
/// back (waiting up to `wait_ms` for the first while buffers are loaned), calls `again` for
/// each that came back whole, submits those it keeps, and stores in `*resent` how many went
/// again. The rest wait for `zcnet_uring_reap`, as do buffers already reaped. On a datagram
/// socket in a mode other than `ZCNET_MODE_AUTO` a kept buffer goes again from the ring's slot,
/// the cheapest way; otherwise as `zcnet_uring_send` sends. `-EINVAL` for a NULL `again`.
///
/// # Safety
/// `s` is a live sender; `again` is a function as `ZcnetAgain` says, called on this thread
/// only, with `ctx`; `resent` is writable. A buffer kept goes on loaned, under the contract of
/// `zcnet_uring_send`, with the length the callback left.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_resend(
    s: *mut ZcnetUringSender,
    wait_ms: u32,
    again: ZcnetAgain,
    ctx: *mut c_void,
    resent: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        // SAFETY: as above.
        let resent = unsafe { arg(resent, "resent") }?;
        let again = again.ok_or_else(|| Fail::invalid("again is NULL"))?;
        *resent = 0;
        let wait = std::time::Duration::from_millis(u64::from(wait_ms));
        let n = s
            .inner
            .resend_returned(wait, |b: &mut CBuf| {
                let mut len = b.len;
                // SAFETY: `again` is the caller's function (this function's contract); it gets
                // the buffer's own pointer and a writable length.
                let keep = unsafe { again(ctx, b.user_data, b.ptr, &mut len) } != 0;
                if keep {
                    // Never longer than what the caller loaned first.
                    b.len = len.min(b.len);
                }
                keep
            })
            .map_err(Fail::from)?;
        *resent = n;
        Ok(())
    })
}

/// Submits everything and waits up to `timeout_ms` until every buffer is back (then reap
/// them). `-ETIMEDOUT` when some are still loaned.
///
/// # Safety
/// `s` is a live sender.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_drain(s: *mut ZcnetUringSender, timeout_ms: u32) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { drain_for(s, timeout_ms) }
}

/// Sets how long one `zcnet_uring_send` waits for room in the window of requests in flight
/// before it fails with `-ETIMEDOUT` (default 10000 ms), as `zcnet_zc_set_stall_timeout`.
///
/// # Safety
/// `s` is a live sender.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_set_stall_timeout(
    s: *mut ZcnetUringSender,
    timeout_ms: u32,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { set_stall(s, timeout_ms) }
}

/// The io_uring sender's counters.
///
/// # Safety
/// `s` is a live sender; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_counters(
    s: *mut ZcnetUringSender,
    out: *mut ZcnetUringCounters,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe {
        read_counters(s, out, "sender", |h| {
            let c = h.inner.counters();
            ZcnetUringCounters {
                requests: c.requests,
                zero_copy_requests: c.zero_copy_requests,
                returned: c.returned,
                bytes: c.bytes,
                copied: c.copied,
                not_copied: c.not_copied,
                not_copied_bytes: c.not_copied_bytes,
                errors: c.errors,
                memlock_fallbacks: c.memlock_fallbacks,
            }
        })
    }
}

/// What the io_uring sender in `ZCNET_MODE_AUTO` did and learned: its sends each way, the
/// exploring, the back-offs, and the threshold its size classes learned on this socket.
/// `-EINVAL` in another mode.
///
/// # Safety
/// `s` is a live sender; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_auto(
    s: *mut ZcnetUringSender,
    out: *mut ZcnetAutoCounters,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe {
        read_auto(s, out, |h| {
            auto_counters(h.inner.auto_choice(), h.inner.counters().auto)
        })
    }
}

/// Ends the sender: waits up to `timeout_ms` for the kernel to give back every loaned buffer,
/// writes the completions that came back and were not reaped into `out` (up to `cap`; how many
/// in `*n`), frees the sender and returns how many buffers the kernel still held (0 when all
/// came back). Those are the ones neither reaped before nor listed: their memory must stay
/// valid and unmodified for as long as the socket lives, since the kernel may still read it
/// (`zcnet_leaked_buffers` counts them). Every other buffer is the caller's again.
/// `-ENOBUFS` when more completions are waiting than `cap`: nothing is freed, reap them and
/// close again. `-EINVAL` for a NULL sender or `n`.
///
/// # Safety
/// `s` is a live sender, not used after a return of 0 or more; `out` has room for `cap`
/// completions (NULL only with `cap` 0); `n` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_sender_close(
    s: *mut ZcnetUringSender,
    timeout_ms: u32,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { super::loan::close(s, timeout_ms, out, cap, n) }
}

/// Frees the io_uring sender: `zcnet_uring_sender_close` with 500 ms to wait and no list;
/// buffers the kernel may still read are never freed by it (see `zcnet_zc_sender_free`). NULL
/// is ignored.
///
/// # Safety
/// `s` is NULL or a live sender, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_sender_free(s: *mut ZcnetUringSender) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(s) }
}
