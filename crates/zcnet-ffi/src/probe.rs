//! `zcnet_probe_json`: what this kernel, these limits and these privileges allow, as the JSON
//! document of docs/probe.md, and `zcnet_string_free` for the strings libzcnet returns.

use std::ffi::{CString, c_char, c_int};

use super::error::{Fail, guard};
use super::handle::arg;

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

/// Buffers this process's senders left to the kernel when they were closed or freed while it
/// still held them (the library's `zcnet::loan::leaked_buffers`): their memory was never freed
/// by libzcnet and must not be by the caller while the socket lives.
#[unsafe(no_mangle)]
pub extern "C" fn zcnet_leaked_buffers() -> u64 {
    zc::loan::leaked_buffers()
}
