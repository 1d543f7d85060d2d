//! `MSG_ZEROCOPY` sends (Linux 4.14 TCP, 5.0 UDP): the kernel pins the sender's pages instead of
//! copying them and reports on the socket error queue when they may be reused.
//!
//! [`ZeroCopySender`] takes ownership of each buffer it sends and gives it back with the
//! completion that frees it ([`Returned`]), tracking ids across wrap-around and calls that carry
//! part of a buffer. Small buffers go by copy (below a threshold), `ENOBUFS` falls back to a
//! copying send, and a policy decides what to do when the kernel reports it copied anyway.
//!
//! Two things would let a buffer come back while the kernel still reads it, and the types rule
//! both out: the caller's `send(2)` flags are a [`SendFlags`], which has no `MSG_ZEROCOPY` (the
//! sender decides which calls loan and counts them), and the sender owns its socket, an
//! [`ExclusiveSocket`] (the kernel numbers completions per socket, so a second sender on it
//! would take the first one's).
//!
//! # References
//! - `send(2)`, `socket(7)` (`SO_ZEROCOPY`)
//! - the kernel's `Documentation/networking/msg_zerocopy.rst`

use std::io;

use crate::loan::Claim;

mod borrowed;
mod calls;
mod config;
mod counters;
mod error;
mod flags;
mod once;
mod reap;
mod send;
pub(crate) mod sender;
mod socket;
mod support;
mod tracker;

pub use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
pub(crate) use calls::Blocking;
use calls::InProgress;
pub use config::{Config, CopiedPolicy, DEFAULT_STALL_TIMEOUT, DEFAULT_THRESHOLD, Mode};
pub use counters::Counters;
pub use error::ZeroCopyError;
pub use flags::SendFlags;
pub(crate) use once::send_once;
pub use once::udp_send_once;
pub use socket::enable;
pub use support::{Support, support};
pub(crate) use tracker::{Freed, Tracker};

/// Identifies a borrowed send ([`ZeroCopySender::send_borrowed`]) until its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BorrowToken(pub u64);

/// What the tracker holds for a send: an owned buffer, or the token of a borrowed one.
#[derive(Debug)]
enum Slot<B> {
    /// The caller's buffer, and the error that ended its send part-way with the bytes sent.
    Owned(B, Option<(io::Error, usize)>),
    Borrowed(BorrowToken),
}

/// A sender that loans owned buffers to the kernel with `MSG_ZEROCOPY` and gives each back
/// with the completion that frees it.
///
/// Sends block as the socket does (a non-blocking socket is waited on with `poll`). Reaping is
/// never blocking: call [`reap`](Self::reap) from an event loop when the socket reports
/// `POLLERR` (always reported, no need to ask for it), or [`drain`](Self::drain) to wait for
/// everything in flight.
///
/// The sender owns its socket ([`ExclusiveSocket`]) and must be the only one counting its
/// completions: `new` refuses a socket that another sender of this process holds or on which
/// `SO_ZEROCOPY` is on already ([`ZeroCopyError::SocketInUse`]).
///
/// Dropping the sender with buffers still in flight waits briefly for their completions and then
/// leaks what remains rather than free memory the kernel may still read.
#[derive(Debug)]
#[doc(alias("MSG_ZEROCOPY", "SO_ZEROCOPY"))]
pub struct ZeroCopySender<S: ExclusiveSocket, B: OwnedBuf> {
    socket: S,
    /// The socket, held in this process's list of sockets with a sender.
    _claim: Claim,
    /// Whether this sender turned `SO_ZEROCOPY` on, and not in copy mode: where
    /// `MSG_ZEROCOPY` takes a completion id (without `SO_ZEROCOPY` the kernel copies and
    /// takes none).
    zerocopy_on: bool,
    tracker: Tracker<Slot<B>>,
    ready: std::collections::VecDeque<Returned<B>>,
    borrowed_done: Vec<BorrowToken>,
    next_token: u64,
    config: Config,
    /// Why zero-copy is off for good, if it is.
    disabled: Option<String>,
    copy_for: u64,
    counters: Counters,
    /// An error that ended a partly loaned send, reported again by the next send.
    pending_error: Option<io::Error>,
    /// The stream was cut part-way through a buffer: every later send is refused, since its
    /// bytes would follow the cut as if nothing were missing.
    cut: bool,
    /// [`Mode::Auto`]'s decisions, boxed: their tables (about 4 KB) would put the fields every
    /// send reads kilobytes apart.
    auto: Option<Box<crate::auto::Decider>>,
    /// The buffer whose calls are being made: always `None` between synchronous calls; an async
    /// send that would block leaves it here, owned by the sender, to be finished first.
    current: Option<InProgress<B>>,
    /// When a stalled wait for completions kicks the kernel's deferred frees.
    kick: crate::loan::DeferredKick,
    /// The socket's `SO_SNDTIMEO` before this sender set it to its stall timeout, put back at
    /// the drop.
    sndtimeo_before: Option<libc::timeval>,
}
