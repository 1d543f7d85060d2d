//! libzcnet: zcnet's C ABI. The header is `include/zcnet.h`, generated from this file by
//! cbindgen (the test `header_is_current` fails when it is stale; `ZCNET_BLESS=1` rewrites it).
//!
//! Every function returns 0 or a negative errno (`-EINVAL` for a NULL pointer or a bad length,
//! the kernel's errno otherwise); `zcnet_last_error()` gives the message of the calling thread's
//! last failure. No Rust panic crosses the boundary: one is caught and becomes `-EFAULT` with its
//! message. Descriptors are borrowed: the caller keeps each one open while a handle uses it and
//! closes it afterwards.
//!
//! The loan contract of the senders: memory passed to `zcnet_zc_send` stays valid and unmodified
//! until `zcnet_zc_reap` returns its `user_data`; the kernel may read it until then.
//!
//! All the `unsafe` of the C boundary is in this file, each block with its reason.
#![allow(clippy::missing_safety_doc)] // each function's "# Safety" is in its doc comment

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
use zc::loan::{OwnedBuf, Returned};
use zc::msg_zerocopy::{self, ZerocopySender};
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
        let mut message = e.to_string();
        let mut errno = None;
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cur {
            if errno.is_none() {
                errno = c.downcast_ref::<io::Error>().map(|io| io.raw_os_error());
            }
            if !std::ptr::eq(c, e) {
                message.push_str(": ");
                message.push_str(&c.to_string());
            }
            cur = c.source();
        }
        Fail {
            // Without a kernel errno in the chain the failure is about the arguments (a
            // configuration the library refuses).
            errno: errno.flatten().unwrap_or(libc::EINVAL),
            message,
        }
    }
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

/// The message of the calling thread's last failed call ("" when none failed). Valid until
/// the thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn zcnet_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Which way a handle sends or receives.
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
    inner: ZerocopySender<Fd, CBuf>,
    ready: VecDeque<ZcnetCompletion>,
}

/// Makes a MSG_ZEROCOPY sender on the connected socket `fd` (Linux 4.14 TCP, 5.0 UDP;
/// `send(2)`, `Documentation/networking/msg_zerocopy.rst`). `ZCNET_MODE_ZERO_COPY` loans every
/// buffer of at least 16 KiB (smaller ones are copied), whatever the completions say;
/// `ZCNET_MODE_AUTO` zero-copies only where the `zcnet tune` profile says it pays and backs off
/// where the kernel copies. Where the kernel refuses `SO_ZEROCOPY` it sends by copy (the
/// counters show it).
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_zc_sender_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_new(
    fd_raw: c_int,
    mode: ZcnetMode,
    out: *mut *mut ZcnetZcSender,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
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
        let inner =
            ZerocopySender::new(fd(fd_raw, "fd")?, config).map_err(|e| Fail::from_error(&e))?;
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
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        if ptr.is_null() && len > 0 {
            return Err(Fail::invalid("ptr is NULL with a length above 0"));
        }
        if len > isize::MAX as usize {
            return Err(Fail::invalid(format!("length {len} is too large")));
        }
        s.inner
            .send(CBuf {
                ptr,
                len,
                user_data,
            })
            .map_err(|e| Fail::from(e.error))
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
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        // SAFETY: as above.
        let n = unsafe { arg(n, "n") }?;
        *n = 0;
        if out.is_null() && cap > 0 {
            return Err(Fail::invalid("out is NULL with a capacity above 0"));
        }
        s.inner.reap()?;
        s.ready
            .extend(s.inner.returned().map(|r| ZcnetCompletion::from(&r)));
        let take = cap.min(s.ready.len());
        for (i, c) in s.ready.drain(..take).enumerate() {
            // SAFETY: `out` has room for `cap` entries (the caller's contract) and i < cap.
            unsafe { out.add(i).write(c) };
        }
        *n = take;
        Ok(())
    })
}

/// Waits up to `timeout_ms` until every loaned buffer has completed (then reap them).
/// `-ETIMEDOUT` when some are still loaned.
///
/// # Safety
/// `s` is a live sender.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_drain(s: *mut ZcnetZcSender, timeout_ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        s.inner
            .drain(Duration::from_millis(u64::from(timeout_ms)))
            .map_err(Fail::from)
    })
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
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let s = unsafe { arg(s, "sender") }?;
        // SAFETY: as above.
        let out = unsafe { arg(out, "out") }?;
        let c = s.inner.counters();
        *out = ZcnetZcCounters {
            zerocopy_calls: c.zerocopy_calls,
            zerocopy_bytes: c.zerocopy_bytes,
            copy_calls: c.copy_calls,
            copy_bytes: c.copy_bytes,
            completed_calls: c.completed_calls,
            copied_calls: c.copied_calls,
            enobufs_fallbacks: c.enobufs_fallbacks,
            zero_copy_bytes: c.zero_copy_bytes(),
        };
        Ok(())
    })
}

/// Frees the sender. Buffers still loaned are waited for briefly; any the kernel still holds
/// then stay the caller's responsibility (never free memory the kernel may read). NULL is
/// ignored.
///
/// # Safety
/// `s` is NULL or a live sender, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_zc_sender_free(s: *mut ZcnetZcSender) {
    if !s.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `s` came from Box::into_raw in zcnet_zc_sender_new (the caller's contract).
            drop(unsafe { Box::from_raw(s) });
        }));
    }
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
/// `tcp(7)`) maps whole received pages into this process, the rest is copied. `window` bytes
/// are mapped at most per call (0: 512 KiB).
///
/// # Safety
/// `out` points at a writable pointer; `fd` stays open until `zcnet_rx_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_new(
    fd_raw: c_int,
    mode: ZcnetMode,
    window: usize,
    out: *mut *mut ZcnetRx,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let out = unsafe { arg(out, "out") }?;
        let config = tcp_rx::Config {
            mode: if mode == ZcnetMode::Copy {
                tcp_rx::Mode::Copy
            } else {
                tcp_rx::Mode::ZeroCopy
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
    guard(|| {
        // SAFETY: the caller's contract; NULL refused.
        let rx = unsafe { arg(rx, "receiver") }?;
        // SAFETY: as above.
        let out = unsafe { arg(out, "out") }?;
        let c = rx.inner.counters();
        *out = ZcnetRxCounters {
            bytes_mapped: c.bytes_mapped,
            bytes_copied: c.bytes_copied,
            pages_mapped: c.pages_mapped,
            zc_calls: c.zc_calls,
            recv_calls: c.recv_calls,
        };
        Ok(())
    })
}

/// Frees the receiver (the pages it mapped are released). NULL is ignored.
///
/// # Safety
/// `rx` is NULL or a live receiver, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_rx_free(rx: *mut ZcnetRx) {
    if !rx.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `rx` came from Box::into_raw in zcnet_rx_new (the caller's contract).
            drop(unsafe { Box::from_raw(rx) });
        }));
    }
}

/// How `zcnet_send_file` sends.
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
/// (`sendfile(2)`, `splice(2)`). On an error `*result` still says what went out before it.
///
/// # Safety
/// `result` is writable; both descriptors are open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_send_file(
    sock_fd: c_int,
    file_fd: c_int,
    offset: u64,
    len: u64,
    mode: ZcnetFileMode,
    result: *mut ZcnetFileResult,
) -> c_int {
    guard(|| {
        use zc::file::{self, FileSender, Mode};
        // SAFETY: the caller's contract; NULL refused.
        let result = unsafe { arg(result, "result") }?;
        *result = ZcnetFileResult::default();
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
        sent.map(drop).map_err(|e| Fail::from_error(&e))
    })
}

/// The message of a libzcnet error code, for C callers that keep codes (`strerror`-like).
/// Same as `strerror(-code)` for errno values.
#[unsafe(no_mangle)]
pub extern "C" fn zcnet_strerror(code: c_int) -> *const c_char {
    // SAFETY: strerror returns a pointer to a static or thread-local string.
    let s = unsafe { CStr::from_ptr(libc::strerror(code.saturating_abs())) };
    s.as_ptr()
}
