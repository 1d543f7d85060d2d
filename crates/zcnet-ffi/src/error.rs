//! The shared error part: a failure becomes a negative errno for the return value and a message
//! for `zcnet_last_error` (one per thread), and no Rust panic crosses the boundary ([`guard`]).

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure on its way to C: the negative errno returned, and the message kept for
/// `zcnet_last_error`.
pub(super) struct Fail {
    pub(super) errno: c_int,
    pub(super) message: String,
}

impl Fail {
    pub(super) fn invalid(message: impl Into<String>) -> Fail {
        Fail {
            errno: libc::EINVAL,
            message: message.into(),
        }
    }

    /// An error and its causes on one line; the errno of the first `io::Error` in the chain,
    /// else `EINVAL`.
    pub(super) fn from_error(e: &(dyn std::error::Error + 'static)) -> Fail {
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
pub(super) fn errno_of(e: &io::Error) -> Option<c_int> {
    e.raw_os_error().or(match e.kind() {
        io::ErrorKind::TimedOut => Some(libc::ETIMEDOUT),
        io::ErrorKind::WouldBlock => Some(libc::EAGAIN),
        io::ErrorKind::Interrupted => Some(libc::EINTR),
        // A socket of the wrong kind (the library's socket check, docs/c.md): another family
        // or protocol, or not connected where it must be.
        io::ErrorKind::Unsupported => Some(libc::EOPNOTSUPP),
        io::ErrorKind::NotConnected => Some(libc::ENOTCONN),
        // A stream a failed send cut part-way: later sends are refused.
        io::ErrorKind::BrokenPipe => Some(libc::EPIPE),
        _ => None,
    })
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Fail {
        Fail::from_error(&e)
    }
}

pub(super) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, turning its error or a panic into a negative errno and the thread's last error.
pub(super) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> c_int {
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

/// The message of the calling thread's last failed call ("" when none failed). Valid until
/// the thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn zcnet_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
