//! The shared handle part: what C passes in, checked as it crosses (pointers against NULL,
//! descriptors against negative numbers, enums against the constants there are, as `int`), the
//! handles made by `Box::into_raw` and freed, and [`ZcnetMode`], which every sender and the
//! receiver take.

use std::ffi::c_int;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::error::{Fail, guard};

/// `Some(&mut *p)` for a non-NULL pointer, else the `EINVAL` failure naming `what`.
///
/// # Safety
/// A non-NULL `p` points at a valid, exclusively usable `T`.
pub(super) unsafe fn arg<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's contract; NULL is refused here.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::invalid(format!("{what} is NULL")))
}

/// A descriptor the C caller owns and keeps open while a handle uses it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fd(RawFd);

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the C caller keeps the descriptor open while the handle exists (zcnet.h); it
        // was checked to be non-negative when the handle was made.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

pub(super) fn fd(raw: c_int, what: &str) -> Result<Fd, Fail> {
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
///
/// It imports what it uses itself, by `super::`: it expands in a child of the library's root,
/// as every module here is.
macro_rules! c_enum {
    ($ty:ident { $($variant:ident = $c_name:literal),+ $(,)? }) => {
        const _: () = {
            use std::ffi::c_int;

            use super::handle::NotAConstant;

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
    };
}

pub(super) use c_enum;

/// A value C passed for an enum that none of its constants has.
#[derive(Debug)]
pub struct NotAConstant {
    pub(super) value: c_int,
    pub(super) name: &'static str,
    /// The constants there are, with their values.
    pub(super) constants: Vec<String>,
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
    /// Zero copy where it pays, learned per message size on the socket from the profile of
    /// `zcnet tune` (or the built-in one) as the start (senders; a receiver takes it as zero
    /// copy).
    Auto = 2,
}

c_enum!(ZcnetMode {
    ZeroCopy = "ZCNET_MODE_ZERO_COPY",
    Copy = "ZCNET_MODE_COPY",
    Auto = "ZCNET_MODE_AUTO",
});

/// Frees a handle made by `Box::into_raw`; NULL is ignored; a panic in its drop stays here.
///
/// # Safety
/// `p` is NULL or a live handle of this type, not used afterwards.
pub(super) unsafe fn free_handle<T>(p: *mut T) {
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
pub(super) unsafe fn read_counters<H, C>(
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
