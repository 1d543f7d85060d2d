//! What can go wrong making or running an io_uring sender: [`UringError`], and the memlock
//! checks made before trying (`RLIMIT_MEMLOCK`, `CAP_IPC_LOCK`).

use crate::loan::NewError;
use crate::sys::{self};
use std::io;

/// Errors of setting up a [`UringSender`](super::UringSender).
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// The descriptor is not a socket this sender can take (not a socket: `ENOTSOCK`; not UDP
    /// for GSO trains: `EOPNOTSUPP`).
    #[error("{what}")]
    Socket {
        /// What is wrong with it.
        what: &'static str,
        /// The kernel's error, or the one that says so.
        #[source]
        source: io::Error,
    },
    /// io_uring cannot be used here: `io_uring_setup` failed (no io_uring,
    /// `kernel.io_uring_disabled`, seccomp, ...).
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// `io_uring`.
        feature: &'static str,
        /// The kernel's error and what would enable it.
        reason: String,
    },
    /// `io_uring_setup` had no memory for the ring (`ENOMEM`): without `CAP_IPC_LOCK` the
    /// ring's own pages count against `RLIMIT_MEMLOCK`.
    #[error("io_uring_setup could not allocate the ring: {reason}")]
    RingMemory {
        /// The limit, and what would allow it.
        reason: String,
        /// The kernel's error (`ENOMEM`).
        #[source]
        source: io::Error,
    },
    /// Registering the pool would exceed `RLIMIT_MEMLOCK`.
    #[error(
        "registering {need} bytes of send buffers needs RLIMIT_MEMLOCK >= {need} bytes, but the \
         limit is {limit} bytes: raise it (`ulimit -l {need_kib}`, limits.conf) or run with \
         CAP_IPC_LOCK"
    )]
    Memlock {
        /// Bytes the registration pins.
        need: u64,
        /// `need` in KiB, as `ulimit -l` takes it.
        need_kib: u64,
        /// The soft limit.
        limit: u64,
    },
    /// A call failed (the buffer registration, with the bytes it would have pinned).
    #[error("{call} of {bytes} bytes failed")]
    Io {
        /// The call.
        call: &'static str,
        /// Bytes registered.
        bytes: usize,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Setting up the completion eventfd of the async sender (`zcnet::tokio::UringSender`)
    /// failed: `eventfd`, its registration with the ring or with the reactor.
    #[error("{call} failed")]
    Eventfd {
        /// The call.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Another sender of this process holds the same socket (through another descriptor of it):
    /// two senders on one stream would mix their bytes.
    #[error("this socket is not this sender's alone: {reason}")]
    SocketInUse {
        /// What holds it.
        reason: &'static str,
    },
    /// `fstat` of the socket failed.
    #[error("fstat of the socket failed")]
    Fstat(#[source] io::Error),
    /// [`Mode::ZeroCopyFixed`](super::Mode::ZeroCopyFixed) without a pool.
    #[error("zc-fixed sends need a registered pool: build the sender with UringSender::with_pool")]
    NoPool,
    /// The window does not fit the ring.
    #[error("window {window} must be between 1 and the ring's {entries} entries")]
    Window {
        /// The window asked for.
        window: usize,
        /// The ring's entries.
        entries: u32,
    },
}

impl<S> From<NewError<S, UringError>> for UringError {
    /// The error alone, the socket dropped.
    fn from(e: NewError<S, UringError>) -> UringError {
        e.error
    }
}

/// The error of an `io_uring_setup(2)` that failed: `ENOMEM` names the memlock limit (the ring's
/// pages count against it without `CAP_IPC_LOCK`), anything else says io_uring is not usable.
pub(super) fn setup_error(e: io::Error) -> UringError {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        let reason = match (
            sys::process::has_cap_ipc_lock(),
            sys::process::memlock_limit(),
        ) {
            (false, Ok((Some(limit), _))) => format!(
                "its pages count against RLIMIT_MEMLOCK, {limit} bytes here (no CAP_IPC_LOCK): \
                 raise it (`ulimit -l`, limits.conf), run with CAP_IPC_LOCK, or ask for fewer \
                 entries"
            ),
            _ => "the kernel is out of memory for it".to_owned(),
        };
        return UringError::RingMemory { reason, source: e };
    }
    UringError::Unsupported {
        feature: "io_uring",
        reason: format!(
            "io_uring_setup: {e} (io_uring needs Linux 5.6+ and kernel.io_uring_disabled = 0)"
        ),
    }
}

/// Checks that `need` bytes of registered buffers fit under `RLIMIT_MEMLOCK`.
///
/// # Errors
/// [`UringError::Memlock`] with the limit and the `ulimit -l` that would allow it.
pub fn memlock_check(need: u64) -> Result<(), UringError> {
    if sys::process::has_cap_ipc_lock() {
        return Ok(());
    }
    match sys::process::memlock_limit() {
        Ok((Some(limit), _)) if need > limit => Err(UringError::Memlock {
            need,
            need_kib: need.div_ceil(1024),
            limit,
        }),
        _ => Ok(()),
    }
}

/// The kernel said ENOMEM although the up-front check passed (memory already locked by this
/// user elsewhere counts too): the same message, with the limit as it stands.
pub(super) fn memlock_check_failed(need: u64) -> UringError {
    let limit = sys::process::memlock_limit()
        .ok()
        .and_then(|l| l.0)
        .unwrap_or(0);
    UringError::Memlock {
        need,
        need_kib: need.div_ceil(1024),
        limit,
    }
}
