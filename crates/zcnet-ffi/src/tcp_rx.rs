//! `zcnet_rx_*`: a TCP zero-copy receiver (`TCP_ZEROCOPY_RECEIVE`) on a connected socket.

use std::collections::VecDeque;
use std::ffi::c_int;

use zc::tcp_rx::{self, TcpZeroCopyReceiver};

use super::error::{Fail, guard};
use super::handle::{Fd, ZcnetMode, arg, fd, free_handle, read_counters};

/// What a zero-copy receiver did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetRxCounters {
    /// Bytes received by mapping the kernel's pages.
    pub mapped_bytes: u64,
    /// Bytes received by copy.
    pub copied_bytes: u64,
    /// Pages mapped.
    pub mapped_pages: u64,
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)` calls.
    pub zero_copy_calls: u64,
    /// `recv(2)` calls.
    pub recv_calls: u64,
}

/// A TCP zero-copy receiver on a connected socket (opaque).
pub struct ZcnetRx {
    inner: TcpZeroCopyReceiver<Fd>,
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
        // The receiver checks the socket's kind (docs/c.md: the errno of each).
        let inner = TcpZeroCopyReceiver::new(sock, config).map_err(|e| Fail::from_error(&e))?;
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
                mapped_bytes: c.mapped_bytes,
                copied_bytes: c.copied_bytes,
                mapped_pages: c.mapped_pages,
                zero_copy_calls: c.zero_copy_calls,
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
