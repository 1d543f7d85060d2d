//! `zcnet_peek_*`: a `SO_PEEK_OFF` cursor on a connected TCP socket, reading queued bytes
//! without taking them until they are consumed.

use std::ffi::c_int;

use super::error::{Fail, guard};
use super::handle::{Fd, arg, fd, free_handle};

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
        *n = p.inner.peek(out).map_err(std::io::Error::from)?;
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
