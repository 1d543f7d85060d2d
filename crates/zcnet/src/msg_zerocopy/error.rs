//! The errors of enabling or using `MSG_ZEROCOPY` ([`ZeroCopyError`]).

use std::io;
use std::time::Duration;

use super::NewError;

/// Errors of enabling or using `MSG_ZEROCOPY`.
#[derive(Debug, thiserror::Error)]
pub enum ZeroCopyError {
    /// The socket is not of a kind this sender can take with its configuration (not UDP for GSO
    /// trains: `EOPNOTSUPP`).
    #[error("{what}")]
    Socket {
        /// What is wrong with it.
        what: &'static str,
        /// The error that says so.
        #[source]
        source: io::Error,
    },
    /// The kernel or this socket type does not support the feature.
    #[error("{feature} is not supported: {reason}")]
    Unsupported {
        /// The missing feature (`SO_ZEROCOPY`, ...).
        feature: &'static str,
        /// Why, as the kernel said it.
        reason: String,
    },
    /// The socket's completions may not be this sender's alone: another sender holds the same
    /// socket (through another descriptor of it: `try_clone`, `dup(2)`), or `SO_ZEROCOPY` is on
    /// already (another sender, in this process or another, or the caller turned it on), so
    /// the kernel's completion ids may not start at this sender's first send.
    #[error("this socket's MSG_ZEROCOPY completions would not be this sender's alone: {reason}")]
    SocketInUse {
        /// Which of the two.
        reason: &'static str,
    },
    /// No completion arrived in time; the buffer stays loaned to the kernel and was leaked.
    #[error("no MSG_ZEROCOPY completion within {0:?} (the buffer was leaked, not freed)")]
    Timeout(Duration),
    /// A system call failed.
    #[error("{call} failed")]
    Io {
        /// The call that failed.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

pub(super) fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> ZeroCopyError {
    move |source| ZeroCopyError::Io { call: op, source }
}

/// A [`crate::udp_gso::GsoError`] as this module's error.
pub(super) fn gso_error(e: crate::udp_gso::GsoError) -> ZeroCopyError {
    use crate::udp_gso::GsoError;
    match e {
        GsoError::Unsupported { feature, reason } => ZeroCopyError::Unsupported { feature, reason },
        GsoError::Io { call, source } => ZeroCopyError::Io { call, source },
        GsoError::NotUdp(_) => ZeroCopyError::Socket {
            what: "not a UDP socket: GSO trains (Config::segment) are UDP's",
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        },
        other => ZeroCopyError::Unsupported {
            feature: "UDP_SEGMENT",
            reason: other.to_string(),
        },
    }
}

impl<S> From<NewError<S, ZeroCopyError>> for ZeroCopyError {
    /// The error alone, the socket dropped.
    fn from(e: NewError<S, ZeroCopyError>) -> ZeroCopyError {
        e.error
    }
}
