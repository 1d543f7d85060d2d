//! The errors of relaying a connection ([`RelayError`]).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::peek;

/// Errors of relaying a connection.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// A call failed.
    #[error("{call} failed")]
    Io {
        /// The call, named as in C (or what it did).
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The destination failed and no target is left that was not given up on already (each
    /// takes a connection's stream at most once). The source was reset.
    #[error(
        "destination {target} failed ({why}) with {acknowledged} bytes acknowledged, and no \
         other destination is left: the source was reset"
    )]
    DestinationFailed {
        /// The destination that failed last.
        target: SocketAddr,
        /// Its error, or the silence it was given up for.
        why: String,
        /// Stream bytes acknowledged by the destinations: the source's bytes after these were
        /// not delivered.
        acknowledged: u64,
    },
    /// The source's connection ended without its FIN (a reset, a timeout). Every byte its TCP
    /// had taken was relayed and acknowledged, then the destination was reset too.
    #[error(
        "the source's connection ended without its FIN after {relayed} bytes: they were \
         relayed, then the destination was reset"
    )]
    SourceReset {
        /// Stream bytes relayed and acknowledged.
        relayed: u64,
        /// How it ended.
        #[source]
        source: io::Error,
    },
    /// The source's stream was relayed and acknowledged whole, and the destination's reply
    /// ended without its FIN (a reset): the source was reset too, so that the part of the reply
    /// it got does not pass for the whole.
    #[error(
        "destination {target} ended its reply without its FIN ({why}) after the source's {relayed} \
         bytes were acknowledged: the source was reset"
    )]
    ReplyCut {
        /// The destination.
        target: SocketAddr,
        /// Its error.
        why: String,
        /// Stream bytes relayed and acknowledged.
        relayed: u64,
    },
    /// No destination accepted a connection in time.
    #[error("no destination accepted within {timeout:?} ({errors})")]
    NoDestination {
        /// [`Config::connect_timeout`](super::Config::connect_timeout).
        timeout: Duration,
        /// The last error of each target, `; `-separated.
        errors: String,
    },
    /// The peek cursor refused an operation (a bug if it happens: the relay keeps within
    /// the cursor's rules).
    #[error(transparent)]
    Peek(#[from] peek::PeekError),
    /// The configuration cannot work (no targets, a zero bound).
    #[error("invalid relay configuration: {0}")]
    Config(&'static str),
}

pub(super) fn io_err(call: &'static str) -> impl FnOnce(io::Error) -> RelayError {
    move |source| RelayError::Io { call, source }
}
