//! `zcnet_ring_*`: a `TPACKET_V3` receive ring on one interface, its frames lent to a callback
//! block by block.

use std::ffi::{CStr, c_char, c_int};
use std::time::Duration;

use super::error::{Fail, guard};
use super::handle::{arg, free_handle};

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
        let inner = zc::packet::RxRing::new(name, config).map_err(|e| match e {
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
