//! libzcnet: zcnet's C ABI. The header is `include/zcnet.h`, generated from this file by
//! cbindgen (the test `header_is_current` fails when it is stale; `ZCNET_BLESS=1` rewrites it).
//!
//! Every function returns 0 or a negative errno (`-EINVAL` for a NULL pointer, a bad length or a
//! mode none of its enum's constants has, the kernel's errno otherwise); `zcnet_last_error()` gives the message of the calling thread's
//! last failure. No Rust panic crosses the boundary: one is caught and becomes `-EFAULT` with its
//! message. Descriptors are borrowed: the caller keeps each one open while a handle uses it and
//! closes it afterwards.
//!
//! The loan contract of the senders: memory passed to `zcnet_zc_send` stays valid and unmodified
//! until `zcnet_zc_reap` returns its `user_data`; the kernel may read it until then. A
//! MSG_ZEROCOPY sender's socket is its own while it lives (the kernel numbers completions per
//! socket): `zcnet_zc_sender_new` refuses a socket another sender holds or on which
//! `SO_ZEROCOPY` is on already (`-EBUSY`), and the caller promises the rest.
//!
//! All the `unsafe` of the C boundary is in this file, each block with its reason.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char, c_int};
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use zc::ZeroCopyCounters as _;
use zc::loan::{AssumeExclusive, OwnedBuf, Returned};
use zc::msg_zerocopy::{self, SendFlags, ZerocopyError, ZerocopySender};
use zc::tcp_rx::{self, TcpZerocopyReceiver};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure on its way to C: the negative errno returned, and the message kept for
/// `zcnet_last_error`.
struct Fail {
    errno: c_int,
    message: String,
}

impl Fail {
    fn invalid(message: impl Into<String>) -> Fail {
        Fail {
            errno: libc::EINVAL,
            message: message.into(),
        }
    }

    /// An error and its causes on one line; the errno of the first `io::Error` in the chain,
    /// else `EINVAL`.
    fn from_error(e: &(dyn std::error::Error + 'static)) -> Fail {
        let chain = || std::iter::successors(Some(e), |c| c.source());
        let message: Vec<String> = chain().map(ToString::to_string).collect();
        let errno = chain()
            .find_map(|c| c.downcast_ref::<io::Error>())
            .and_then(errno_of);
        Fail {
            // Without a kernel errno in the chain the failure is about the arguments (a
            // configuration the library refuses).
            errno: errno.unwrap_or(libc::EINVAL),
            message: message.join(": "),
        }
    }
}

/// The errno `e` stands for: the kernel's, or, for an error the library made itself, the one of
/// its kind that C expects (a drain that runs out of time is `TimedOut` without an errno, and
/// zcnet.h promises `-ETIMEDOUT`).
fn errno_of(e: &io::Error) -> Option<c_int> {
    e.raw_os_error().or(match e.kind() {
        io::ErrorKind::TimedOut => Some(libc::ETIMEDOUT),
        io::ErrorKind::WouldBlock => Some(libc::EAGAIN),
        io::ErrorKind::Interrupted => Some(libc::EINTR),
        _ => None,
    })
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Fail {
        Fail::from_error(&e)
    }
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning its error or a panic into a negative errno and the thread's last error.
fn guard(f: impl FnOnce() -> Result<(), Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            -fail.errno
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown");
            set_last_error(&format!("internal error (a Rust panic, caught): {what}"));
            -libc::EFAULT
        }
    }
}

/// `Some(&mut *p)` for a non-NULL pointer, else the `EINVAL` failure naming `what`.
///
/// # Safety
/// A non-NULL `p` points at a valid, exclusively usable `T`.
unsafe fn arg<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's contract; NULL is refused here.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::invalid(format!("{what} is NULL")))
}

/// A descriptor the C caller owns and keeps open while a handle uses it.
#[derive(Debug, Clone, Copy)]
struct Fd(RawFd);

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the C caller keeps the descriptor open while the handle exists (zcnet.h); it
        // was checked to be non-negative when the handle was made.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

fn fd(raw: c_int, what: &str) -> Result<Fd, Fail> {
    if raw < 0 {
        return Err(Fail {
            errno: libc::EBADF,
            message: format!("{what} {raw} is not a descriptor"),
        });
    }
    Ok(Fd(raw))
}

/// Converts a C enum as it crosses the boundary. C may pass any `int` where a header names an
/// enum, and a Rust enum holding a value none of its variants has is undefined behaviour (the
/// `match` on `zcnet_send_file`'s mode jumped through a table with a mode of 5, and crashed): so
/// functions take their enums as `c_int`, and this checked conversion turns an unknown value
/// into `-EINVAL` naming the values there are. The C names are cbindgen's
/// (`QualifiedScreamingSnakeCase`); `tests/enums.rs` checks them against the header.
macro_rules! c_enum {
    ($ty:ident { $($variant:ident = $c_name:literal),+ $(,)? }) => {
        impl From<$ty> for c_int {
            fn from(v: $ty) -> c_int {
                v as c_int
            }
        }

        impl TryFrom<c_int> for $ty {
            type Error = NotAConstant;

            fn try_from(value: c_int) -> Result<$ty, NotAConstant> {
                const ALL: &[($ty, &str)] = &[$(($ty::$variant, $c_name)),+];
                ALL.iter()
                    .find(|&&(v, _)| c_int::from(v) == value)
                    .map(|&(v, _)| v)
                    .ok_or_else(|| NotAConstant {
                        value,
                        name: stringify!($ty),
                        constants: ALL
                            .iter()
                            .map(|&(v, c)| format!("{c} ({})", c_int::from(v)))
                            .collect(),
                    })
            }
        }
    };
}

/// A value C passed for an enum that none of its constants has.
#[derive(Debug)]
pub struct NotAConstant {
    value: c_int,
    name: &'static str,
    /// The constants there are, with their values.
    constants: Vec<String>,
}

impl From<NotAConstant> for Fail {
    fn from(e: NotAConstant) -> Fail {
        Fail::invalid(format!(
            "mode {} is not a {}: give one of {}",
            e.value,
            e.name,
            e.constants.join(", ")
        ))
    }
}

/// The message of the calling thread's last failed call ("" when none failed). Valid until
/// the thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn zcnet_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Which way a handle sends or receives. Functions take it as an `int`: any other value is
/// `-EINVAL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZcnetMode {
    /// Zero copy (`MSG_ZEROCOPY`, `TCP_ZEROCOPY_RECEIVE`), falling back to copy with a reason
    /// where the kernel refuses it.
    ZeroCopy = 0,
    /// Copy: the copying twin, through the same calls.
    Copy = 1,
    /// Zero copy only where the profile of `zcnet tune` says it pays (senders; a receiver
    /// takes it as zero copy).
    Auto = 2,
}

c_enum!(ZcnetMode {
    ZeroCopy = "ZCNET_MODE_ZERO_COPY",
    Copy = "ZCNET_MODE_COPY",
    Auto = "ZCNET_MODE_AUTO",
});

/// What `zcnet_probe_json` reports: the probe of every mechanism as one JSON document
/// (docs/probe.md). Free it with `zcnet_string_free`.
///
/// # Safety
/// `out` points at a writable `char *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_probe_json(out: *mut *mut c_char) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let json = serde_json::to_string(zc::probe::features())
            .map_err(|e| Fail::invalid(format!("probe report: {e}")))?;
        *out = CString::new(json)
            .map_err(|e| Fail::invalid(e.to_string()))?
            .into_raw();
        Ok(())
    })
}

/// Frees a string libzcnet returned. NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string from libzcnet, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in this library (the caller's contract).
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Memory the C caller loans to a sender until its completion.
#[derive(Debug)]
struct CBuf {
    ptr: *const u8,
    len: usize,
    user_data: u64,
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

/// What a MSG_ZEROCOPY sender did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetZcCounters {
    /// Send calls with `MSG_ZEROCOPY`.
    pub zerocopy_calls: u64,
    /// Their bytes.
    pub zerocopy_bytes: u64,
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
    inner: ZerocopySender<AssumeExclusive<Fd>, CBuf>,
    ready: VecDeque<ZcnetCompletion>,
}

/// Makes a MSG_ZEROCOPY sender on the connected socket `fd` (Linux 4.14 TCP, 5.0 UDP;
/// `send(2)`, `Documentation/networking/msg_zerocopy.rst`). `mode` is a `ZcnetMode` (another
/// value is `-EINVAL`): `ZCNET_MODE_ZERO_COPY` loans every
/// buffer of at least 16 KiB (smaller ones are copied), whatever the completions say;
/// `ZCNET_MODE_AUTO` zero-copies only where the `zcnet tune` profile says it pays and backs off
/// where the kernel copies. Where the kernel refuses `SO_ZEROCOPY` it sends by copy (the
/// counters show it).
///
/// The socket is the sender's alone until `zcnet_zc_sender_free`: the kernel numbers its
/// MSG_ZEROCOPY sends with one counter per socket, so a second sender (or any other
/// MSG_ZEROCOPY send, or a read of its error queue) would take this sender's completions and
/// a buffer could come back while the kernel still reads it. `-EBUSY` when another sender of
/// this process holds the same socket (through any descriptor of it) or `SO_ZEROCOPY` is on
/// already (another sender, here or in another process, or the caller turned it on).
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
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let mode = ZcnetMode::try_from(mode)?;
        // Zero copy as asked: every buffer of at least 16 KiB, even where completions say the
        // kernel copied (a loopback peer receiving by TCP_ZEROCOPY_RECEIVE needs exactly that);
        // Auto is the library's adaptive mode.
        let config = match mode {
            ZcnetMode::ZeroCopy => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::ZeroCopy,
                policy: msg_zerocopy::CopiedPolicy::Keep,
                ..Default::default()
            },
            ZcnetMode::Copy => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::Copy,
                ..Default::default()
            },
            ZcnetMode::Auto => msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::Auto,
                ..Default::default()
            },
        };
        // SAFETY: zcnet.h's contract of zcnet_zc_sender_new: the socket is this sender's alone
        // until zcnet_zc_sender_free (no other MSG_ZEROCOPY send, error-queue read or
        // SO_ZEROCOPY change through any descriptor of it) and `fd` stays open until then; what
        // can be checked (another sender here, SO_ZEROCOPY on already) `new` checks.
        let socket = unsafe { AssumeExclusive::new(fd(fd_raw, "fd")?) };
        let inner = ZerocopySender::new(socket, config).map_err(|e| match e {
            ZerocopyError::SocketInUse { .. } => Fail {
                errno: libc::EBUSY,
                message: e.to_string(),
            },
            e => Fail::from_error(&e),
        })?;
        *out = Box::into_raw(Box::new(ZcnetZcSender {
            inner,
            ready: VecDeque::new(),
        }));
        Ok(())
    })
}

/// Sends `len` bytes at `ptr`, loaned to the kernel: they must stay valid and unmodified until
/// `zcnet_zc_reap` returns `user_data`. Blocks as the socket does. On an error return nothing of
/// the buffer was loaned (it is the caller's again at once); an error after part of it was
/// loaned comes back with its completion instead, and the next send reports it.
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
                zerocopy_calls: c.zerocopy_calls,
                zerocopy_bytes: c.zerocopy_bytes,
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

/// Frees the sender. Buffers still loaned are waited for briefly; any the kernel still holds
/// then stay the caller's responsibility (never free memory the kernel may read). NULL is
/// ignored.
///
/// # Safety
/// `s` is NULL or a live sender, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_free(s: *mut ZcnetZcSender) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(s) }
}

/// What a zero-copy receiver did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetRxCounters {
    /// Bytes received by mapping the kernel's pages.
    pub bytes_mapped: u64,
    /// Bytes received by copy.
    pub bytes_copied: u64,
    /// Pages mapped.
    pub pages_mapped: u64,
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)` calls.
    pub zc_calls: u64,
    /// `recv(2)` calls.
    pub recv_calls: u64,
}

/// A TCP zero-copy receiver on a connected socket (opaque).
pub struct ZcnetRx {
    inner: TcpZerocopyReceiver<Fd>,
    /// Parts of the last receive not yet handed out: valid until the next receive.
    parts: VecDeque<(*const u8, usize)>,
}

/// Makes a receiver on the connected TCP socket `fd`: `TCP_ZEROCOPY_RECEIVE` (Linux 4.18,
/// `tcp(7)`) maps whole received pages into this process, the rest is copied. `mode` is a
/// `ZcnetMode` (`ZCNET_MODE_AUTO` receives by zero copy; another value is `-EINVAL`). `window`
/// bytes are mapped at most per call (0: 512 KiB).
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_rx_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_new(
    fd_raw: c_int,
    mode: c_int,
    window: usize,
    out: *mut *mut ZcnetRx,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let config = tcp_rx::Config {
            mode: match ZcnetMode::try_from(mode)? {
                ZcnetMode::Copy => tcp_rx::Mode::Copy,
                ZcnetMode::ZeroCopy | ZcnetMode::Auto => tcp_rx::Mode::ZeroCopy,
            },
            window: if window == 0 {
                tcp_rx::DEFAULT_WINDOW
            } else {
                window
            },
            ..Default::default()
        };
        let sock = fd(fd_raw, "fd")?;
        // The Rust receiver reads any socket by copy; from C a non-TCP descriptor is a mistake.
        zc::tcp_info::tcp_info(&sock).map_err(|e| Fail {
            errno: libc::EINVAL,
            message: format!("fd {fd_raw} is not a TCP socket ({e})"),
        })?;
        let inner = TcpZerocopyReceiver::new(sock, config).map_err(|e| Fail::from_error(&e))?;
        *out = Box::into_raw(Box::new(ZcnetRx {
            inner,
            parts: VecDeque::new(),
        }));
        Ok(())
    })
}

/// The next chunk of the stream: `*ptr` and `*len`, read-only, valid until the next call on
/// this receiver. `*len == 0` (and `*ptr == NULL`) at the end of the stream. Blocks until data
/// arrives.
///
/// # Safety
/// `rx` is a live receiver; `ptr` and `len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_recv(
    rx: *mut ZcnetRx,
    ptr: *mut *const u8,
    len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let rx = unsafe { arg(rx, "receiver") }?;
        // SAFETY: as above.
        let ptr = unsafe { arg(ptr, "ptr") }?;
        // SAFETY: as above.
        let len = unsafe { arg(len, "len") }?;
        (*ptr, *len) = (std::ptr::null(), 0);
        if rx.parts.is_empty() {
            match rx.inner.recv().map_err(|e| Fail::from_error(&e))? {
                None => return Ok(()),
                Some(r) => rx.parts.extend(
                    r.parts()
                        .into_iter()
                        .filter(|p| !p.is_empty())
                        .map(|p| (p.as_ptr(), p.len())),
                ),
            }
        }
        if let Some((p, n)) = rx.parts.pop_front() {
            (*ptr, *len) = (p, n);
        }
        Ok(())
    })
}

/// The receiver's counters.
///
/// # Safety
/// `rx` is a live receiver; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_counters(rx: *mut ZcnetRx, out: *mut ZcnetRxCounters) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe {
        read_counters(rx, out, "receiver", |h| {
            let c = h.inner.counters();
            ZcnetRxCounters {
                bytes_mapped: c.bytes_mapped,
                bytes_copied: c.bytes_copied,
                pages_mapped: c.pages_mapped,
                zc_calls: c.zc_calls,
                recv_calls: c.recv_calls,
            }
        })
    }
}

/// Frees the receiver (the pages it mapped are released). NULL is ignored.
///
/// # Safety
/// `rx` is NULL or a live receiver, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_free(rx: *mut ZcnetRx) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(rx) }
}

/// How `zcnet_send_file` sends. It takes it as an `int`: any other value is `-EINVAL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZcnetFileMode {
    /// The best available: sendfile, else splice, else copy.
    Auto = 0,
    /// `sendfile(2)`.
    Sendfile = 1,
    /// `splice(2)` through a pipe.
    Splice = 2,
    /// An mmap window sent with `MSG_ZEROCOPY`, unmapped after its completions.
    MmapZerocopy = 3,
    /// `read(2)` + `send(2)`.
    Copy = 4,
}

c_enum!(ZcnetFileMode {
    Auto = "ZCNET_FILE_MODE_AUTO",
    Sendfile = "ZCNET_FILE_MODE_SENDFILE",
    Splice = "ZCNET_FILE_MODE_SPLICE",
    MmapZerocopy = "ZCNET_FILE_MODE_MMAP_ZEROCOPY",
    Copy = "ZCNET_FILE_MODE_COPY",
});

/// What `zcnet_send_file` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetFileResult {
    /// Bytes sent.
    pub sent: u64,
    /// Of those, without a user-space copy.
    pub zero_copy_bytes: u64,
}

/// Sends `len` bytes of the file `file_fd` from `offset` on the connected TCP socket `sock_fd`
/// (`sendfile(2)`, `splice(2)`), as `mode`, a `ZcnetFileMode`, says (another value is `-EINVAL`
/// and nothing is sent). On an error `*result` still says what went out before it.
///
/// `ZCNET_FILE_MODE_MMAP_ZEROCOPY` counts the socket's MSG_ZEROCOPY completions itself, from
/// the socket's first: once per socket. A socket on which `SO_ZEROCOPY` is on already (an
/// earlier mmap-zc call, a `ZcnetZcSender`) is refused with `-EBUSY`.
///
/// # Safety
/// `result` is writable; both descriptors are open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_send_file(
    sock_fd: c_int,
    file_fd: c_int,
    offset: u64,
    len: u64,
    mode: c_int,
    result: *mut ZcnetFileResult,
) -> c_int {
    guard(|| {
        use zc::file::{self, FileSender, Mode};
        // SAFETY: the caller's contract; NULL refused.
        let result = unsafe { arg(result, "result") }?;
        *result = ZcnetFileResult::default();
        let mode = ZcnetFileMode::try_from(mode)?;
        let sock = fd(sock_fd, "sock_fd")?;
        fd(file_fd, "file_fd")?;
        // SAFETY: `file_fd` is an open descriptor the caller keeps; ManuallyDrop never closes it.
        let f = ManuallyDrop::new(unsafe { File::from_raw_fd(file_fd) });
        let mode = match mode {
            ZcnetFileMode::Auto => Mode::Auto,
            ZcnetFileMode::Sendfile => Mode::Sendfile,
            ZcnetFileMode::Splice => Mode::Splice,
            ZcnetFileMode::MmapZerocopy => Mode::MmapZerocopy,
            ZcnetFileMode::Copy => Mode::Copy,
        };
        let mut tx = FileSender::new(
            sock,
            file::Config {
                mode,
                ..Default::default()
            },
        )
        .map_err(|e| Fail::from_error(&e))?;
        let sent = tx.send_file(&f, offset, len);
        let c = tx.counters();
        *result = ZcnetFileResult {
            sent: c.bytes,
            zero_copy_bytes: c.zero_copy_bytes(),
        };
        sent.map(drop).map_err(|e| {
            let mut fail = Fail::from_error(&e);
            let in_use = match &e {
                file::FileError::Io { source, .. } => source
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<ZerocopyError>())
                    .is_some_and(|z| matches!(z, ZerocopyError::SocketInUse { .. })),
                _ => false,
            };
            if in_use {
                fail.errno = libc::EBUSY;
            }
            fail
        })
    })
}

/// What an io_uring sender did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetUringCounters {
    /// Requests queued.
    pub requests: u64,
    /// Of those, `SEND_ZC`/`SENDMSG_ZC`.
    pub zc_requests: u64,
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

/// Makes an io_uring sender on the connected socket `fd`: `IORING_OP_SEND_ZC` (Linux 6.0,
/// `io_uring_prep_send_zc(3)`), each buffer back after its notification CQE, with the kernel's
/// word on whether it copied (6.2). `mode` is a `ZcnetMode` (another value is `-EINVAL`);
/// `ZCNET_MODE_AUTO` sends by zero copy only where the `zcnet tune` profile says it pays. Where
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
    guard(|| {
        use zc::uring::{Config, Mode, UringSender};
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let mode = match ZcnetMode::try_from(mode)? {
            ZcnetMode::ZeroCopy => Mode::ZeroCopy,
            ZcnetMode::Copy => Mode::Copy,
            ZcnetMode::Auto => Mode::Auto,
        };
        let config = Config {
            mode,
            ..Config::default()
        };
        // SAFETY: the caller's contract above: the socket is this sender's alone until
        // zcnet_uring_sender_free; another sender of this process on it is refused by `new`.
        let socket = unsafe { AssumeExclusive::new(fd(fd_raw, "fd")?) };
        let inner = UringSender::new(socket, config).map_err(|e| match e {
            zc::uring::UringError::SocketInUse { .. } => Fail {
                errno: libc::EBUSY,
                message: e.to_string(),
            },
            e => Fail::from_error(&e),
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
                zc_requests: c.zc_requests,
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

/// Frees the io_uring sender; buffers the kernel may still read are never freed by it (see
/// `zcnet_zc_sender_free`). NULL is ignored.
///
/// # Safety
/// `s` is NULL or a live sender, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_uring_sender_free(s: *mut ZcnetUringSender) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(s) }
}

/// A captured frame, valid during the callback that receives it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ZcnetFrame {
    /// The bytes captured, from the link-layer header on (in the ring: no copy).
    pub data: *const u8,
    /// How many were captured.
    pub caplen: usize,
    /// The packet's length on the wire.
    pub wire_len: u32,
    /// Receive time, nanoseconds since the epoch.
    pub ts_ns: u64,
}

/// Called for each frame of a block; a non-zero return skips the rest of the block.
pub type ZcnetFrameFn =
    Option<unsafe extern "C" fn(ctx: *mut libc::c_void, frame: *const ZcnetFrame) -> c_int>;

/// A `TPACKET_V3` receive ring on one interface (opaque).
pub struct ZcnetRing {
    inner: zc::packet::RxRing,
}

/// Opens a `TPACKET_V3` receive ring (`packet(7)`, `Documentation/networking/packet_mmap.rst`)
/// on `iface` capturing every protocol: `blocks` blocks of `block_kib` KiB (0, 0: 32 of 1 MiB).
/// Needs `CAP_NET_RAW`.
///
/// # Safety
/// `iface` is a NUL-terminated string; `out` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_ring_open(
    iface: *const c_char,
    block_kib: u32,
    blocks: u32,
    out: *mut *mut ZcnetRing,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        if iface.is_null() {
            return Err(Fail::invalid("iface is NULL"));
        }
        // SAFETY: a NUL-terminated string (the caller's contract).
        let name = unsafe { CStr::from_ptr(iface) }
            .to_str()
            .map_err(|_| Fail::invalid("iface is not UTF-8"))?;
        let mut config = zc::packet::RxConfig::default();
        if block_kib > 0 {
            config.block_size = block_kib as usize * 1024;
        }
        if blocks > 0 {
            config.block_count = blocks as usize;
        }
        let inner = zc::packet::RxRing::open(name, &config).map_err(|e| match e {
            zc::packet::PacketError::NoPrivilege => Fail {
                errno: libc::EPERM,
                message: e.to_string(),
            },
            zc::packet::PacketError::NoInterface(_) => Fail {
                errno: libc::ENODEV,
                message: e.to_string(),
            },
            e => Fail::from_error(&e),
        })?;
        *out = Box::into_raw(Box::new(ZcnetRing { inner }));
        Ok(())
    })
}

/// Waits up to `timeout_ms` (-1: forever) for the next block of the ring, calls `each` for
/// every frame in it, then hands the block back to the kernel. `*frames` says how many frames
/// the block held (0 when the time ran out).
///
/// # Safety
/// `ring` is a live ring; `frames` is writable; `each` may be NULL (frames only counted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_ring_next(
    ring: *mut ZcnetRing,
    timeout_ms: c_int,
    each: ZcnetFrameFn,
    ctx: *mut libc::c_void,
    frames: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let ring = unsafe { arg(ring, "ring") }?;
        // SAFETY: as above.
        let frames = unsafe { arg(frames, "frames") }?;
        *frames = 0;
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let Some(block) = ring
            .inner
            .next_block(timeout)
            .map_err(|e| Fail::from_error(&e))?
        else {
            return Ok(());
        };
        for f in block.frames() {
            *frames += 1;
            let Some(cb) = each else { continue };
            let frame = ZcnetFrame {
                data: f.data.as_ptr(),
                caplen: f.data.len(),
                wire_len: f.len,
                ts_ns: u64::from(f.sec) * 1_000_000_000 + u64::from(f.nsec),
            };
            // SAFETY: the callback's contract (zcnet.h): `frame` and its data are valid during
            // the call; the block is held until the loop ends.
            if unsafe { cb(ctx, &frame) } != 0 {
                break;
            }
        }
        Ok(())
    })
}

/// Frees the ring. NULL is ignored.
///
/// # Safety
/// `ring` is NULL or a live ring, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_ring_free(ring: *mut ZcnetRing) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(ring) }
}

/// A `SO_PEEK_OFF` cursor on a connected TCP socket (opaque): read queued bytes without taking
/// them, take them once acknowledged.
pub struct ZcnetPeek {
    inner: zc::peek::PeekCursor<Fd>,
}

/// Makes a peek cursor on the connected TCP socket `fd` (`SO_PEEK_OFF`, `socket(7)`; TCP since
/// Linux 4.4), falling back to re-reading through a discard buffer where it is missing.
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_peek_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_peek_new(fd_raw: c_int, out: *mut *mut ZcnetPeek) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let inner = zc::peek::PeekCursor::new(fd(fd_raw, "fd")?, Default::default())
            .map_err(|e| Fail::from_error(&e))?;
        *out = Box::into_raw(Box::new(ZcnetPeek { inner }));
        Ok(())
    })
}

/// Copies the next queued bytes, after those already peeked, into `buf` without taking them
/// from the socket; `*n` says how many (0 at the end of the stream). Blocks as the socket does.
///
/// # Safety
/// `p` is a live cursor; `buf` has room for `len` bytes; `n` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_peek_read(
    p: *mut ZcnetPeek,
    buf: *mut u8,
    len: usize,
    n: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let p = unsafe { arg(p, "cursor") }?;
        // SAFETY: as above.
        let n = unsafe { arg(n, "n") }?;
        *n = 0;
        if buf.is_null() {
            return Err(Fail::invalid("buf is NULL"));
        }
        if len > isize::MAX as usize {
            return Err(Fail::invalid(format!("length {len} is too large")));
        }
        // SAFETY: `buf` has room for `len` bytes, exclusively ours during the call.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        *n = p.inner.peek(out)?;
        Ok(())
    })
}

/// Takes `count` peeked bytes off the socket (they were delivered: their acknowledgement came).
///
/// # Safety
/// `p` is a live cursor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_peek_consume(p: *mut ZcnetPeek, count: u64) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let p = unsafe { arg(p, "cursor") }?;
        p.inner.consume(count).map_err(|e| Fail::from_error(&e))
    })
}

/// Rewinds the cursor to stream offset `to` (at least what was consumed): the bytes after it
/// are peeked again, for a new destination after a failover.
///
/// # Safety
/// `p` is a live cursor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_peek_rewind(p: *mut ZcnetPeek, to: u64) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let p = unsafe { arg(p, "cursor") }?;
        p.inner.rewind(to).map_err(|e| Fail::from_error(&e))
    })
}

/// Frees the cursor (the socket keeps what was not consumed). NULL is ignored.
///
/// # Safety
/// `p` is NULL or a live cursor, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_peek_free(p: *mut ZcnetPeek) {
    // SAFETY: the caller's contract, forwarded.
    unsafe { free_handle(p) }
}

/// A loaned buffer from C arguments: NULL only with length 0, a length a slice can have.
fn c_buf(ptr: *const u8, len: usize, user_data: u64) -> Result<CBuf, Fail> {
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
unsafe fn hand_out(
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
trait Lender {
    /// Loans `buf` to the kernel.
    fn lend(&mut self, buf: CBuf) -> Result<(), Fail>;
    /// Collects what the kernel gave back into the ready queue, without blocking.
    fn collect(&mut self) -> io::Result<()>;
    /// Waits until everything loaned is back, at most `timeout`.
    fn wait_all(&mut self, timeout: Duration) -> io::Result<()>;
    /// Completions collected but not yet handed to C.
    fn ready(&mut self) -> &mut VecDeque<ZcnetCompletion>;
}

/// The two senders have the same loan API (`zcnet::loan`) over different kernel paths.
macro_rules! lender {
    ($handle:ty) => {
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
            fn ready(&mut self) -> &mut VecDeque<ZcnetCompletion> {
                &mut self.ready
            }
        }
    };
}

lender!(ZcnetZcSender);
lender!(ZcnetUringSender);

/// `zcnet_*_send`.
///
/// # Safety
/// As `zcnet_zc_send`.
unsafe fn lend<L: Lender>(s: *mut L, ptr: *const u8, len: usize, user_data: u64) -> c_int {
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
unsafe fn reap_into<L: Lender>(
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

/// `zcnet_*_drain`.
///
/// # Safety
/// As `zcnet_zc_drain`.
unsafe fn drain_for<L: Lender>(s: *mut L, timeout_ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        s.wait_all(Duration::from_millis(u64::from(timeout_ms)))
            .map_err(Fail::from)
    })
}

/// Frees a handle made by `Box::into_raw`; NULL is ignored; a panic in its drop stays here.
///
/// # Safety
/// `p` is NULL or a live handle of this type, not used afterwards.
unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `p` came from Box::into_raw in the matching constructor.
            drop(unsafe { Box::from_raw(p) });
        }));
    }
}

/// `zcnet_*_counters`: `f` of the handle, written to `out`.
///
/// # Safety
/// `h` is a live handle of this type; `out` is writable.
unsafe fn read_counters<H, C>(
    h: *mut H,
    out: *mut C,
    what: &str,
    f: impl FnOnce(&H) -> C,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let h = unsafe { arg(h, what) }?;
        // SAFETY: as above.
        let out = unsafe { arg(out, "out") }?;
        *out = f(h);
        Ok(())
    })
}
