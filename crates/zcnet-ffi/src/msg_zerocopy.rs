//! `zcnet_zc_*`: a MSG_ZEROCOPY sender on a connected TCP or UDP socket, loaning C memory to the
//! kernel until its completion.

use std::collections::VecDeque;
use std::ffi::c_int;

use zc::ZeroCopyCounters as _;
use zc::loan::AssumeExclusive;
use zc::msg_zerocopy::{self, SendFlags, ZeroCopyError, ZeroCopySender};

use super::error::{Fail, guard};
use super::handle::{Fd, ZcnetMode, arg, fd, free_handle, read_counters};
use super::loan::{
    CBuf, ZcnetAutoCounters, ZcnetCompletion, auto_counters, c_buf, drain_for, lend, lender,
    read_auto, reap_into, refused, set_stall,
};

/// What a MSG_ZEROCOPY sender did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetZcCounters {
    /// Send calls with `MSG_ZEROCOPY`.
    pub loaned_calls: u64,
    /// Their bytes.
    pub loaned_bytes: u64,
    /// Send calls by copy.
    pub copy_calls: u64,
    /// Their bytes.
    pub copy_bytes: u64,
    /// Zero-copy calls completed.
    pub completed_calls: u64,
    /// Of those, flagged copied by the kernel.
    pub copied_calls: u64,
    /// `ENOBUFS` answers sent again by copy.
    pub enobufs_fallbacks: u64,
    /// Bytes that really went without a copy.
    pub zero_copy_bytes: u64,
}

/// A MSG_ZEROCOPY sender on a connected TCP or UDP socket (opaque).
pub struct ZcnetZcSender {
    inner: ZeroCopySender<AssumeExclusive<Fd>, CBuf>,
    ready: VecDeque<ZcnetCompletion>,
}

lender!(ZcnetZcSender);

/// Makes a MSG_ZEROCOPY sender on the connected socket `fd` (Linux 4.14 TCP, 5.0 UDP;
/// `send(2)`, `Documentation/networking/msg_zerocopy.rst`). `mode` is a `ZcnetMode` (another
/// value is `-EINVAL`): `ZCNET_MODE_ZERO_COPY` loans every
/// buffer of at least 16 KiB (smaller ones are copied), whatever the completions say;
/// `ZCNET_MODE_AUTO` zero-copies where it pays, learned per message size on this socket from
/// the `zcnet tune` profile (or the built-in one) as the start, and backs off where the kernel
/// copies (`zcnet_zc_auto` says what it learned). Where the kernel refuses `SO_ZEROCOPY` it sends by copy (the
/// counters show it).
///
/// The socket is the sender's alone until `zcnet_zc_sender_free`: the kernel numbers its
/// MSG_ZEROCOPY sends with one counter per socket, so a second sender (or any other
/// MSG_ZEROCOPY send, or a read of its error queue) would take this sender's completions and
/// a buffer could come back while the kernel still reads it. `-EBUSY` when another sender of
/// this process holds the same socket (through any descriptor of it) or `SO_ZEROCOPY` is on
/// already (another sender, here or in another process, or the caller turned it on).
/// A constructor that fails leaves the socket as it found it (`SO_ZEROCOPY` and `UDP_SEGMENT`
/// as they were); `-ENOTSOCK` for a descriptor that is not a socket.
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_zc_sender_free`. While
/// the sender lives, nothing else sends with `MSG_ZEROCOPY` on the socket, reads its error
/// queue or turns `SO_ZEROCOPY` off, through `fd` or any other descriptor of the same socket
/// (a `dup`, one inherited across `fork` or passed to another process).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_new(
    fd_raw: c_int,
    mode: c_int,
    out: *mut *mut ZcnetZcSender,
) -> c_int {
    // SAFETY: the caller's contract, the same.
    unsafe { zc_sender_new(fd_raw, mode, None, out) }
}

/// `zcnet_zc_sender_new` on a UDP socket that sends each buffer as a GSO train of datagrams of
/// `segment` bytes (`UDP_SEGMENT`, Linux 4.18; the last datagram shorter), at most 64 of them:
/// a longer buffer is refused at `zcnet_zc_send` with `-EINVAL` before the kernel sees it. The
/// loan and the completion are per train. `-EINVAL` for `segment` 0 or over 65507, `-EOPNOTSUPP`
/// for a socket that is not UDP or a kernel without `UDP_SEGMENT` (`zcnet_last_error` says
/// which).
///
/// # Safety
/// As `zcnet_zc_sender_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_new_gso(
    fd_raw: c_int,
    mode: c_int,
    segment: u16,
    out: *mut *mut ZcnetZcSender,
) -> c_int {
    // SAFETY: the caller's contract, the same.
    unsafe { zc_sender_new(fd_raw, mode, Some(segment), out) }
}

/// The body of both constructors; `segment` `None`: no GSO.
///
/// # Safety
/// As `zcnet_zc_sender_new`.
unsafe fn zc_sender_new(
    fd_raw: c_int,
    mode: c_int,
    segment: Option<u16>,
    out: *mut *mut ZcnetZcSender,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let segment = gso_segment(segment)?;
        let mode = ZcnetMode::try_from(mode)?;
        // Zero copy as asked: every buffer of at least 16 KiB, even where completions say the
        // kernel copied (a loopback peer receiving by TCP_ZEROCOPY_RECEIVE needs exactly that);
        // Auto is the library's adaptive mode.
        let config = match mode {
            ZcnetMode::ZeroCopy => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::ZeroCopy,
                policy: msg_zerocopy::CopiedPolicy::Keep,
                segment,
                ..Default::default()
            },
            ZcnetMode::Copy => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::Copy,
                segment,
                ..Default::default()
            },
            ZcnetMode::Auto => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::Auto,
                segment,
                ..Default::default()
            },
        };
        // SAFETY: zcnet.h's contract of zcnet_zc_sender_new: the socket is this sender's alone
        // until zcnet_zc_sender_free (no other MSG_ZEROCOPY send, error-queue read or
        // SO_ZEROCOPY change through any descriptor of it) and `fd` stays open until then; what
        // can be checked (another sender here, SO_ZEROCOPY on already) `new` checks.
        let socket = unsafe { AssumeExclusive::new(fd(fd_raw, "fd")?) };
        let inner = ZeroCopySender::new(socket, config).map_err(|e| {
            let in_use = matches!(e.error, ZeroCopyError::SocketInUse { .. });
            let no_gso = matches!(
                e.error,
                ZeroCopyError::Unsupported {
                    feature: "UDP_SEGMENT",
                    ..
                }
            );
            refused(&e.error, in_use, no_gso)
        })?;
        *out = Box::into_raw(Box::new(ZcnetZcSender {
            inner,
            ready: VecDeque::new(),
        }));
        Ok(())
    })
}

/// Sends `len` bytes at `ptr`, loaned to the kernel: they must stay valid and unmodified until
/// `zcnet_zc_reap` returns `user_data`. On a blocking socket it waits for room at most the
/// stall timeout (`zcnet_zc_set_stall_timeout`, then `-ETIMEDOUT`); on a non-blocking one with
/// no room it is `-EAGAIN`. On an error return nothing of the buffer was loaned (it is the
/// caller's again at once); an error after part of it was loaned comes back with its
/// completion instead, and the next send reports it.
///
/// # Safety
/// `s` is a live sender; `ptr` points at `len` readable bytes kept as described.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_send(
    s: *mut ZcnetZcSender,
    ptr: *const u8,
    len: usize,
    user_data: u64,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { lend(s, ptr, len, user_data) }
}

/// `zcnet_zc_send` with extra `send(2)` flags on every call for this buffer: `MSG_EOR` (ends a
/// record: the next buffer starts a new TCP segment, so a header does not share segments with
/// the page-aligned payload after it), `MSG_MORE` (more follows), `MSG_CONFIRM`, or 0. Any
/// other bit is refused with `-EINVAL` and nothing is sent: `MSG_ZEROCOPY` is the sender's own
/// to set (one from the caller would loan a buffer the sender gives back at once and take a
/// completion id it never counted), `MSG_DONTWAIT` is the socket's mode, `MSG_OOB` would cut
/// the stream.
///
/// # Safety
/// As `zcnet_zc_send`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_send_flags(
    s: *mut ZcnetZcSender,
    ptr: *const u8,
    len: usize,
    user_data: u64,
    flags: c_int,
) -> c_int {
    guard(|| {
        let flags = send_flags(flags)?;
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        let buf = c_buf(ptr, len, user_data)?;
        s.inner
            .send_with(buf, flags)
            .map_err(|e| Fail::from(e.error))
    })
}

/// The flags of `zcnet_zc_send_flags`, or the failure naming the bits refused.
fn send_flags(flags: c_int) -> Result<SendFlags, Fail> {
    SendFlags::from_bits(flags).ok_or_else(|| {
        let bad = flags & !SendFlags::all().bits();
        let named: Vec<&str> = [
            (
                libc::MSG_ZEROCOPY,
                "MSG_ZEROCOPY (the sender sets it on the calls it loans)",
            ),
            (
                libc::MSG_DONTWAIT,
                "MSG_DONTWAIT (make the socket non-blocking instead)",
            ),
            (libc::MSG_OOB, "MSG_OOB"),
        ]
        .into_iter()
        .filter(|(bit, _)| bad & bit != 0)
        .map(|(_, name)| name)
        .collect();
        let which = if named.is_empty() {
            String::new()
        } else {
            format!(": {}", named.join(", "))
        };
        Fail::invalid(format!(
            "flags {flags:#x}: bits {bad:#x} are not allowed{which}; only MSG_EOR, MSG_MORE and \
             MSG_CONFIRM are"
        ))
    })
}

/// Copies up to `cap` completions into `out` without blocking and stores how many in `*n`;
/// the memory of each is the caller's again. Call it when `poll` reports `POLLERR` on the
/// socket, or now and then.
///
/// # Safety
/// `s` is a live sender; `out` has room for `cap` completions; `n` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_reap(
    s: *mut ZcnetZcSender,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { reap_into(s, out, cap, n) }
}

/// Waits up to `timeout_ms` until every loaned buffer has completed (then reap them).
/// `-ETIMEDOUT` when some are still loaned.
///
/// # Safety
/// `s` is a live sender.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_drain(s: *mut ZcnetZcSender, timeout_ms: u32) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { drain_for(s, timeout_ms) }
}

/// Sets how long one `zcnet_zc_send` waits for room in the socket, in all, before it fails
/// with `-ETIMEDOUT` (default 10000 ms): a peer that stops reading never holds the caller
/// longer. On a non-blocking socket (`O_NONBLOCK`) with no room, a send fails at once with
/// `-EAGAIN` instead and nothing of the buffer is loaned; a TCP buffer of which the kernel took
/// a part is finished within this bound or fails (a retry would repeat that part).
///
/// # Safety
/// `s` is a live sender.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_set_stall_timeout(
    s: *mut ZcnetZcSender,
    timeout_ms: u32,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { set_stall(s, timeout_ms) }
}

/// The sender's counters.
///
/// # Safety
/// `s` is a live sender; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_counters(
    s: *mut ZcnetZcSender,
    out: *mut ZcnetZcCounters,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe {
        read_counters(s, out, "sender", |h| {
            let c = h.inner.counters();
            ZcnetZcCounters {
                loaned_calls: c.loaned_calls,
                loaned_bytes: c.loaned_bytes,
                copy_calls: c.copy_calls,
                copy_bytes: c.copy_bytes,
                completed_calls: c.completed_calls,
                copied_calls: c.copied_calls,
                enobufs_fallbacks: c.enobufs_fallbacks,
                zero_copy_bytes: c.zero_copy_bytes(),
            }
        })
    }
}

/// What the sender in `ZCNET_MODE_AUTO` did and learned: its sends each way, the exploring,
/// the back-offs, and the threshold its size classes learned on this socket (from the
/// `zcnet tune` profile, or the built-in one, as the start). `-EINVAL` in another mode.
///
/// # Safety
/// `s` is a live sender; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_auto(
    s: *mut ZcnetZcSender,
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
pub unsafe extern "C" fn zcnet_zc_sender_close(
    s: *mut ZcnetZcSender,
    timeout_ms: u32,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { super::loan::close(s, timeout_ms, out, cap, n) }
}

/// Frees the sender: `zcnet_zc_sender_close` with 500 ms to wait and no list. Buffers the kernel
/// still holds then must stay valid (never free memory the kernel may read); they are counted
/// in `zcnet_leaked_buffers`, and `zcnet_zc_sender_close` says how many and, by what it lists,
/// which. NULL is ignored.
///
/// # Safety
/// `s` is NULL or a live sender, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_free(s: *mut ZcnetZcSender) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(s) }
}

/// A C caller's segment size, checked: `None` for a sender without GSO.
pub(super) fn gso_segment(segment: Option<u16>) -> Result<Option<zc::udp_gso::Segment>, Fail> {
    let Some(segment) = segment else {
        return Ok(None);
    };
    zc::udp_gso::Segment::new(usize::from(segment))
        .map(Some)
        .map_err(|e| Fail {
            errno: libc::EINVAL,
            message: format!("segment {segment}: {e}"),
        })
}
