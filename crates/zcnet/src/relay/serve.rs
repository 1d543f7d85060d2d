//! What serving connections takes ([`serve`](super::serve) runs the loops): the connection limit,
//! the descriptors `RLIMIT_NOFILE` leaves, the back-off of failed `accept(2)`s, and the stop
//! and its drain ([`Stop`]).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{RelayError, Report};
use crate::sys;

/// How [`serve`](super::serve) (and `zcnet::tokio::relay::serve`) takes connections.
#[derive(Clone, Debug)]
pub struct Serve {
    /// Connections relayed at once, each counted until both its directions ended; a newcomer
    /// beyond them is refused (closed at once, [`Event::Refused`]).
    pub max_connections: usize,
    /// Relay this many connections (refused ones do not count), then stop accepting and return
    /// once they ended; `None`: until stopped.
    pub count: Option<u64>,
    /// Event loops of [`serve`](super::serve) (threads, each with one epoll set for its connections); 0: one
    /// per CPU the process may run on (`sched_getaffinity(2)`, as
    /// `std::thread::available_parallelism` reads it). The tokio relay runs on its runtime.
    pub threads: usize,
    /// After a [`Stop`], how long the live connections of [`serve`](super::serve) have to end, both
    /// directions, before they are reset (the tokio relay's serve takes its own).
    pub drain_timeout: Duration,
}

impl Serve {
    /// Up to `max_connections` at once, for as long as it runs, on a loop per CPU, 10 s of
    /// drain after a stop.
    pub fn new(max_connections: usize) -> Serve {
        Serve {
            max_connections,
            count: None,
            threads: 0,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Stops a running [`serve`](super::serve) from another thread (a signal handler's watcher, say): it accepts
/// no more, lets the live connections end for [`Serve::drain_timeout`], resets what is left,
/// and returns. Clones stop the same serve; an `eventfd(2)` wakes its loops.
#[derive(Clone, Debug)]
pub struct Stop(Arc<StopInner>);

#[derive(Debug)]
struct StopInner {
    stopped: AtomicBool,
    wake: OwnedFd,
}

impl Stop {
    /// A stop not yet asked for.
    ///
    /// # Errors
    /// `eventfd(2)`'s.
    pub fn new() -> io::Result<Stop> {
        Ok(Stop(Arc::new(StopInner {
            stopped: AtomicBool::new(false),
            wake: sys::event::eventfd()?,
        })))
    }

    /// Asks the serve to stop (again: nothing more).
    pub fn stop(&self) {
        if !self.0.stopped.swap(true, Ordering::SeqCst) {
            let _ = sys::event::eventfd_write(self.0.wake.as_fd());
        }
    }

    /// Whether a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.0.wake.as_fd()
    }
}

/// What a serving relay tells as it goes.
#[derive(Debug)]
pub enum Event {
    /// A connection ended: its report, or why it was cut.
    Ended {
        /// The source's address.
        from: SocketAddr,
        /// What the relay did.
        result: Result<Report, RelayError>,
    },
    /// A connection was refused: [`Serve::max_connections`] were being relayed.
    Refused {
        /// The source's address.
        from: SocketAddr,
    },
    /// `accept` failed for want of descriptors or memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`): the first failure of a burst. Live connections go on; newcomers wait in the
    /// listen queue while the relay retries, backing off from 5 ms to 1 s (as Go's `net/http`
    /// does), and sooner when a connection ends.
    AcceptStalled {
        /// The error.
        error: io::Error,
        /// Connections live at the time.
        live: usize,
    },
    /// `accept` works again after a burst of failures.
    AcceptResumed {
        /// Failed accepts in the burst.
        failures: u64,
        /// How long it lasted.
        waited: Duration,
    },
    /// Newcomers wait in the listen queue: the connections live use every descriptor
    /// `RLIMIT_NOFILE` leaves (each needs [`DESCRIPTORS_PER_CONNECTION`]), so one more could not
    /// be relayed whole. Told once per time it happens.
    DescriptorsFull {
        /// Connections live.
        live: usize,
        /// The soft `RLIMIT_NOFILE`.
        limit: u64,
    },
    /// The drain after a stop ran out of time: these connections were reset (told once, with
    /// every loop's).
    DrainTimedOut {
        /// Connections reset.
        live: usize,
    },
}

/// Descriptors a connection of [`serve`](super::serve) holds at most: the source and the destination (a
/// failover closes the destination that failed before it connects the next; the epoll sets are
/// the loops'). The blocking [`relay`](super::relay) of one connection and the tokio relay add
/// an epoll set each.
pub const DESCRIPTORS_PER_CONNECTION: u64 = 2;

/// Descriptors kept free for everything else a process does (the listener, a runtime, logs).
const DESCRIPTORS_SPARE: u64 = 32;

/// How many connections the descriptors `RLIMIT_NOFILE` leaves can hold, beyond those open now
/// (read once, when a serve starts: counting them at each accept would cost as much as the
/// descriptors open), and the limit; `None` without a limit to read or none set.
pub(crate) fn descriptor_room(per_connection: u64) -> Option<(usize, u64)> {
    let (Some(soft), _) = sys::process::nofile_limit().ok()? else {
        return None;
    };
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let room = soft.saturating_sub(open + DESCRIPTORS_SPARE) / per_connection;
    Some((usize::try_from(room).unwrap_or(usize::MAX), soft))
}

/// Whether a failed `accept` is for want of resources, which pass (`EMFILE`, `ENFILE`,
/// `ENOMEM`, `ENOBUFS`), rather than an error of the listener.
pub(crate) fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
    )
}

/// Whether a failed `accept` concerns only the connection it would have returned (reset or
/// aborted before it was taken, refused by a filter): take the next.
pub(crate) fn lost_newcomer(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPERM | libc::EPROTO | libc::EINTR)
    )
}

/// The back-off of a burst of failed accepts: 5 ms, doubling, at most 1 s.
pub(crate) struct Backoff {
    failures: u64,
    since: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            failures: 0,
            since: None,
        }
    }

    /// One more failure: the pause before the next try, and whether it starts a burst.
    pub(crate) fn failed(&mut self) -> (Duration, bool) {
        let first = self.since.is_none();
        self.since.get_or_insert_with(Instant::now);
        self.failures += 1;
        let ms = 5u64 << (self.failures - 1).min(8);
        (Duration::from_millis(ms.min(1000)), first)
    }

    /// An accept worked: the burst it ends, if there was one.
    pub(crate) fn worked(&mut self) -> Option<Event> {
        let since = self.since.take()?;
        let failures = std::mem::take(&mut self.failures);
        Some(Event::AcceptResumed {
            failures,
            waited: since.elapsed(),
        })
    }
}

/// [`RelayError::Config`] for a `serve` that could relay nothing.
pub(crate) fn check_max_connections(max_connections: usize) -> Result<(), RelayError> {
    if max_connections == 0 {
        return Err(RelayError::Config(
            "max_connections is 0: every connection would be refused",
        ));
    }
    Ok(())
}

/// What [`serve`](super::serve) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Connections relayed (accepted and not refused).
    pub relayed: u64,
    /// Connections closed at once because [`Serve::max_connections`] were being relayed.
    pub refused: u64,
    /// Connections that ended in an error.
    pub failed: u64,
    /// Connections reset because the drain after a stop ran out of time.
    pub reset_at_drain: u64,
    /// Failed accepts for want of descriptors or memory (each burst told by
    /// [`Event::AcceptStalled`]).
    pub accept_failures: u64,
}
