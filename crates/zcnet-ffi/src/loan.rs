//! The loan part the two senders share (MSG_ZEROCOPY and io_uring): memory the C caller loans
//! until its completion ([`CBuf`]), the completions handed back ([`ZcnetCompletion`]), and
//! `zcnet_*_send`, `_reap` and `_drain` written once over both ([`Lender`]).

use std::collections::VecDeque;
use std::ffi::c_int;
use std::io;
use std::time::Duration;

use zc::loan::{OwnedBuf, Returned};

use super::error::{Fail, guard};
use super::handle::arg;

/// Memory the C caller loans to a sender until its completion.
#[derive(Debug)]
pub(super) struct CBuf {
    pub(super) ptr: *const u8,
    pub(super) len: usize,
    pub(super) user_data: u64,
}

// SAFETY: the pointer is only read, by whichever thread uses the sender; the C caller does not
// write the memory while it is loaned (zcnet.h).
unsafe impl Send for CBuf {}

// SAFETY: zcnet.h states the contract of zcnet_zc_send: `ptr..ptr+len` stays valid and unmodified
// until zcnet_zc_reap returns its user_data, which happens only once the kernel is done with it;
// `ptr` was checked non-NULL for a non-zero length.
unsafe impl OwnedBuf for CBuf {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A buffer the kernel is done with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetCompletion {
    /// The `user_data` given to `zcnet_zc_send`.
    pub user_data: u64,
    /// Bytes of it sent.
    pub sent: usize,
    /// 0, or the errno that ended its send part-way.
    pub error: c_int,
    /// 1 when zero copy was asked for (`MSG_ZEROCOPY`), 0 when it went by copy.
    pub zero_copy: c_int,
    /// 1 the kernel copied after all, 0 it did not, -1 unknown (not zero copy).
    pub copied: c_int,
}

impl From<&Returned<CBuf>> for ZcnetCompletion {
    fn from(r: &Returned<CBuf>) -> ZcnetCompletion {
        ZcnetCompletion {
            user_data: r.buf.user_data,
            sent: r.sent,
            error: r
                .error
                .as_ref()
                .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO)),
            zero_copy: c_int::from(r.zero_copy),
            copied: r.copied.map_or(-1, c_int::from),
        }
    }
}

/// A loaned buffer from C arguments: NULL only with length 0, a length a slice can have.
pub(super) fn c_buf(ptr: *const u8, len: usize, user_data: u64) -> Result<CBuf, Fail> {
    if ptr.is_null() && len > 0 {
        return Err(Fail::invalid("ptr is NULL with a length above 0"));
    }
    if len > isize::MAX as usize {
        return Err(Fail::invalid(format!("length {len} is too large")));
    }
    Ok(CBuf {
        ptr,
        len,
        user_data,
    })
}

/// Moves up to `cap` completions from `ready` into `out`; returns how many.
///
/// # Safety
/// `out` has room for `cap` completions (NULL only with `cap` 0).
pub(super) unsafe fn hand_out(
    ready: &mut VecDeque<ZcnetCompletion>,
    out: *mut ZcnetCompletion,
    cap: usize,
) -> Result<usize, Fail> {
    if out.is_null() && cap > 0 {
        return Err(Fail::invalid("out is NULL with a capacity above 0"));
    }
    let take = cap.min(ready.len());
    for (i, c) in ready.drain(..take).enumerate() {
        // SAFETY: `out` has room for `cap` entries (the caller's contract) and i < cap.
        unsafe { out.add(i).write(c) };
    }
    Ok(take)
}

/// A sender that loans C memory: the MSG_ZEROCOPY and the io_uring one.
pub(super) trait Lender {
    /// Loans `buf` to the kernel.
    fn lend(&mut self, buf: CBuf) -> Result<(), Fail>;
    /// Collects what the kernel gave back into the ready queue, without blocking.
    fn collect(&mut self) -> io::Result<()>;
    /// Waits until everything loaned is back, at most `timeout`.
    fn wait_all(&mut self, timeout: Duration) -> io::Result<()>;
    /// Sets how long one send may wait for room (the sender's `Config::stall_timeout`).
    fn set_stall_timeout(&mut self, timeout: Duration);
    /// Completions collected but not yet handed to C.
    fn ready(&mut self) -> &mut VecDeque<ZcnetCompletion>;
    /// Ends the sender at once: the completions that came back and were not handed out, and
    /// how many buffers the kernel still holds (left to it, counted in
    /// `zcnet_leaked_buffers`).
    fn close_now(self: Box<Self>) -> (VecDeque<ZcnetCompletion>, usize);
}

/// The two senders have the same loan API (`zcnet::loan`) over different kernel paths. Expanded
/// in each sender's module; it imports what it uses itself, by `super::` (every module here is
/// a child of the library's root).
macro_rules! lender {
    ($handle:ty) => {
        const _: () = {
            use std::collections::VecDeque;
            use std::io;
            use std::time::Duration;

            use super::error::Fail;
            use super::loan::{CBuf, Lender, ZcnetCompletion};

            impl Lender for $handle {
                fn lend(&mut self, buf: CBuf) -> Result<(), Fail> {
                    self.inner.send(buf).map_err(|e| Fail::from(e.error))
                }
                fn collect(&mut self) -> io::Result<()> {
                    self.inner.reap()?;
                    let done = self.inner.returned().map(|r| ZcnetCompletion::from(&r));
                    self.ready.extend(done);
                    Ok(())
                }
                fn wait_all(&mut self, timeout: Duration) -> io::Result<()> {
                    self.inner.drain(timeout)
                }
                fn set_stall_timeout(&mut self, timeout: Duration) {
                    self.inner.set_stall_timeout(timeout);
                }
                fn ready(&mut self) -> &mut VecDeque<ZcnetCompletion> {
                    &mut self.ready
                }
                fn close_now(self: Box<Self>) -> (VecDeque<ZcnetCompletion>, usize) {
                    let this = *self;
                    let mut ready = this.ready;
                    let closed = this.inner.close(Duration::ZERO);
                    ready.extend(closed.returned.iter().map(ZcnetCompletion::from));
                    (ready, closed.still_loaned)
                }
            }
        };
    };
}

pub(super) use lender;

/// `zcnet_*_send`.
///
/// # Safety
/// As `zcnet_zc_send`.
pub(super) unsafe fn lend<L: Lender>(
    s: *mut L,
    ptr: *const u8,
    len: usize,
    user_data: u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        s.lend(c_buf(ptr, len, user_data)?)
    })
}

/// `zcnet_*_reap`.
///
/// # Safety
/// As `zcnet_zc_reap`.
pub(super) unsafe fn reap_into<L: Lender>(
    s: *mut L,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        // SAFETY: as above.
        let n = unsafe { arg(n, "n") }?;
        *n = 0;
        if out.is_null() && cap > 0 {
            return Err(Fail::invalid("out is NULL with a capacity above 0"));
        }
        s.collect()?;
        // SAFETY: `out` has room for `cap` entries (the caller's contract).
        *n = unsafe { hand_out(s.ready(), out, cap) }?;
        Ok(())
    })
}

/// `zcnet_*_set_stall_timeout`.
///
/// # Safety
/// As `zcnet_zc_set_stall_timeout`.
pub(super) unsafe fn set_stall<L: Lender>(s: *mut L, timeout_ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        s.set_stall_timeout(Duration::from_millis(u64::from(timeout_ms)));
        Ok(())
    })
}

/// `zcnet_*_drain`.
///
/// # Safety
/// As `zcnet_zc_drain`.
pub(super) unsafe fn drain_for<L: Lender>(s: *mut L, timeout_ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        s.wait_all(Duration::from_millis(u64::from(timeout_ms)))
            .map_err(Fail::from)
    })
}

/// `zcnet_*_sender_close`.
///
/// # Safety
/// As `zcnet_zc_sender_close`.
pub(super) unsafe fn close<L: Lender>(
    s: *mut L,
    timeout_ms: u32,
    out: *mut ZcnetCompletion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    let mut held = 0usize;
    let r = guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let n = unsafe { arg(n, "n") }?;
        *n = 0;
        if s.is_null() {
            return Err(Fail::invalid("sender is NULL"));
        }
        if out.is_null() && cap > 0 {
            return Err(Fail::invalid("out is NULL with a capacity above 0"));
        }
        {
            // SAFETY: the caller's contract: a live sender.
            let l = unsafe { &mut *s };
            // Out of time is no failure here: what is still loaned is counted below.
            let _ = l.wait_all(Duration::from_millis(u64::from(timeout_ms)));
            l.collect()?;
            let ready = l.ready().len();
            if ready > cap {
                return Err(Fail {
                    errno: libc::ENOBUFS,
                    message: format!(
                        "{ready} completions to hand back and room for {cap}: reap them \
                         (zcnet_*_reap) and close again; the sender is still open"
                    ),
                });
            }
        }
        // SAFETY: the caller's contract: a live sender from Box::into_raw, not used afterwards
        // (this call is its end).
        let l = unsafe { Box::from_raw(s) };
        let (mut ready, still_loaned) = l.close_now();
        // What came back between the wait and the close and finds no room is counted with what
        // the kernel still holds: its memory stays untouched, which is safe, if wasteful.
        let overflow = ready.len().saturating_sub(cap);
        // SAFETY: `out` has room for `cap` entries (the caller's contract).
        *n = unsafe { hand_out(&mut ready, out, cap) }?;
        held = still_loaned + overflow;
        Ok(())
    });
    if r < 0 {
        return r;
    }
    c_int::try_from(held).unwrap_or(c_int::MAX)
}

/// What a sender in `ZCNET_MODE_AUTO` did and learned (`zcnet_zc_auto`, `zcnet_uring_auto`;
/// the library's `zcnet::auto`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetAutoCounters {
    /// Sends by zero copy (exploring ones included).
    pub zero_copy_calls: u64,
    /// Their bytes.
    pub zero_copy_bytes: u64,
    /// Sends by copy because copy is the way of their size class (learned, or the profile's).
    pub copy_calls: u64,
    /// Their bytes.
    pub copy_bytes: u64,
    /// Sends by copy during a back-off after completions said the kernel copied.
    pub backoff_calls: u64,
    /// Sends spent exploring the way not chosen, either way.
    pub explore_calls: u64,
    /// Times a size class changed its way.
    pub switches: u64,
    /// Back-offs begun.
    pub backoffs: u64,
    /// Where zero copy starts, as the size classes learned it: from this many bytes; 0 for
    /// every size; -1 for none; -2 before anything was sent.
    pub learned_threshold: i64,
}

/// The C form of an auto sender's counters and choice; `Fail` (`-EINVAL`) when the sender is
/// not in auto mode.
pub(super) fn auto_counters(
    choice: Option<zc::auto::Choice>,
    c: zc::auto::AutoCounters,
) -> Result<ZcnetAutoCounters, Fail> {
    use zc::auto::Threshold;
    let choice = choice.ok_or_else(|| Fail::invalid("the sender is not in ZCNET_MODE_AUTO"))?;
    Ok(ZcnetAutoCounters {
        zero_copy_calls: c.zero_copy_calls,
        zero_copy_bytes: c.zero_copy_bytes,
        copy_calls: c.copy_calls,
        copy_bytes: c.copy_bytes,
        backoff_calls: c.backoff_calls,
        explore_calls: c.explore_calls,
        switches: c.switches,
        backoffs: c.backoffs,
        learned_threshold: match choice.learned_threshold() {
            None => -2,
            Some(Threshold::Never) => -1,
            Some(Threshold::Always) => 0,
            Some(Threshold::From(n)) => i64::try_from(n).unwrap_or(i64::MAX),
        },
    })
}

/// `zcnet_*_auto`: the handle's auto counters, written to `out`.
///
/// # Safety
/// `h` is a live handle of this type; `out` is writable.
pub(super) unsafe fn read_auto<H>(
    h: *mut H,
    out: *mut ZcnetAutoCounters,
    f: impl FnOnce(&H) -> Result<ZcnetAutoCounters, Fail>,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let h = unsafe { arg(h, "sender") }?;
        // SAFETY: as above.
        let out = unsafe { arg(out, "out") }?;
        *out = f(h)?;
        Ok(())
    })
}

/// Why a loaning sender's constructor refused, as C reads it: `EBUSY` when another sender of
/// this process holds the socket (`in_use`), `EOPNOTSUPP` for GSO trains the kernel lacks
/// (`no_gso`: `UDP_SEGMENT`), else as [`Fail::from_error`].
pub(super) fn refused(e: &(dyn std::error::Error + 'static), in_use: bool, no_gso: bool) -> Fail {
    let errno = match (in_use, no_gso) {
        (true, _) => libc::EBUSY,
        (false, true) => libc::EOPNOTSUPP,
        (false, false) => return Fail::from_error(e),
    };
    Fail {
        errno,
        message: e.to_string(),
    }
}
