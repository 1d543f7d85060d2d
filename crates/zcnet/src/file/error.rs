//! A failed file send ([`FileError`]): the mode, the call and the bytes sent before it.

use std::io;

/// A failed file send.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A call failed.
    #[error("{call} failed after {sent} bytes{}", of_mode(call, mode))]
    Io {
        /// The call that failed.
        call: &'static str,
        /// The mode used (`sendfile`, ...).
        mode: &'static str,
        /// Bytes of this send that went out before it.
        sent: u64,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The socket is not a stream this sender can send a file on: not a socket (`ENOTSOCK`),
    /// or not TCP (a datagram socket would take a file as one datagram, or refuse it).
    #[error("{what}")]
    Socket {
        /// What is wrong with it.
        what: &'static str,
        /// The error that says so.
        #[source]
        source: io::Error,
    },
    /// A mode the kernel lacks was asked for explicitly.
    #[error("{feature} is not supported here: {reason}")]
    Unsupported {
        /// `sendfile`, `splice`.
        feature: &'static str,
        /// The probe's one-line reason.
        reason: String,
    },
}

/// The mode in a [`FileError::Io`] message, unless the call already names it ("sendfile failed
/// after 23 bytes", but "read failed after 0 bytes (copy)").
fn of_mode(call: &str, mode: &str) -> String {
    if call.starts_with(mode) {
        String::new()
    } else {
        format!(" ({mode})")
    }
}

impl FileError {
    /// A constructor for `map_err`: `call` of `mode` failed after `sent` bytes.
    pub(crate) fn at(
        mode: &'static str,
        call: &'static str,
        sent: u64,
    ) -> impl FnOnce(io::Error) -> FileError {
        move |source| FileError::Io {
            call,
            mode,
            sent,
            source,
        }
    }

    /// Bytes of the failed send that went out before the error.
    pub fn sent(&self) -> u64 {
        match self {
            FileError::Io { sent, .. } => *sent,
            FileError::Unsupported { .. } | FileError::Socket { .. } => 0,
        }
    }
}
