//! What can go wrong.

use std::io;
use std::time::Duration;

/// Errors of setting up or running a receiver.
#[derive(Debug, thiserror::Error)]
pub enum RxError {
    /// A configuration the receiver cannot use (a window over [`MAX_WINDOW`](super::MAX_WINDOW)).
    #[error("{0}")]
    Config(String),
    /// A setup call failed (`SO_RCVLOWAT`, ...).
    #[error("{call} failed")]
    Io {
        /// The call.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// The connection failed while receiving (reset, ...). Everything returned before was
    /// really received.
    #[error("receive failed after {received} bytes")]
    Receive {
        /// Bytes received and handed out before the error.
        received: u64,
        /// The kernel's error (`ConnectionReset`, ...).
        #[source]
        source: io::Error,
    },
    /// Nothing arrived within the configured timeout.
    #[error("no data for {0:?}")]
    TimedOut(Duration),
    /// Bytes are queued, but fewer than [`Config::rcvlowat`](super::Config::rcvlowat), and no more
    /// came within the configured timeout: the receiver waits for the low-water mark (issue 62:
    /// this said "no data").
    #[error(
        "{queued} bytes queued for {waited:?}, fewer than the receiver waits for \
         (SO_RCVLOWAT, Config::rcvlowat)"
    )]
    BelowLowWater {
        /// Bytes queued.
        queued: usize,
        /// The timeout.
        waited: Duration,
    },
    /// Writing received data out failed
    /// ([`TcpZeroCopyReceiver::copy_to`](super::TcpZeroCopyReceiver::copy_to)).
    #[error("writing received data")]
    Write(#[source] io::Error),
}
