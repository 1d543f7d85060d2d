//! Accepting connections and relaying each on its own thread ([`serve`]): the connection limit,
//! the descriptors `RLIMIT_NOFILE` leaves, and the back-off of failed `accept(2)`s.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::session::reset;
use super::{Config, RelayError, Report, io_err, relay};
use crate::sys;

/// How [`serve`] (and `zcnet::tokio::relay::serve`) takes connections.
#[derive(Clone, Debug)]
pub struct Serve {
    /// Connections relayed at once, each counted until both its directions ended; a newcomer
    /// beyond them is refused (closed at once, [`Event::Refused`]).
    pub max_connections: usize,
    /// Relay this many connections (refused ones do not count), then stop accepting and return
    /// once they ended; `None`: until stopped.
    pub count: Option<u64>,
}

impl Serve {
    /// Up to `max_connections` at once, for as long as it runs.
    pub fn new(max_connections: usize) -> Serve {
        Serve {
            max_connections,
            count: None,
        }
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
    /// The drain after a stop ran out of time: these connections were reset.
    DrainTimedOut {
        /// Connections reset.
        live: usize,
    },
}

/// Descriptors a relayed connection holds at most: the source, the destination and the epoll
/// set (a failover closes the destination that failed before it connects the next).
pub const DESCRIPTORS_PER_CONNECTION: u64 = 3;

/// Descriptors kept free for everything else a process does (the listener, a runtime, logs).
const DESCRIPTORS_SPARE: u64 = 32;

/// How many connections the descriptors `RLIMIT_NOFILE` leaves can hold, beyond those open now
/// (read once, when a serve starts: counting them at each accept would cost as much as the
/// descriptors open), and the limit; `None` without a limit to read or none set.
pub(crate) fn descriptor_room() -> Option<(usize, u64)> {
    let (Some(soft), _) = sys::process::nofile_limit().ok()? else {
        return None;
    };
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let room = soft.saturating_sub(open + DESCRIPTORS_SPARE) / DESCRIPTORS_PER_CONNECTION;
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

/// What [`serve`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Connections relayed (accepted and not refused).
    pub relayed: u64,
    /// Connections closed at once because [`Serve::max_connections`] were being relayed.
    pub refused: u64,
    /// Connections that ended in an error.
    pub failed: u64,
    /// Connections reset because the drain after a stop ran out of time (async relay only).
    pub reset_at_drain: u64,
    /// Failed accepts for want of descriptors or memory (each burst told by
    /// [`Event::AcceptStalled`]).
    pub accept_failures: u64,
}

/// Accepts connections on `listener` and relays each on its own thread (both directions, to
/// their ends), as [`Serve`] says; `event` is told of each connection's end and of trouble
/// accepting. Out of descriptors or memory it keeps every live connection and backs off
/// ([`Event::AcceptStalled`]); it accepts no more connections at once than `RLIMIT_NOFILE`
/// leaves descriptors for ([`DESCRIPTORS_PER_CONNECTION`] each; raise the soft limit to the hard
/// one first, as `zcnet relay` does), so that every connection it takes it can relay whole.
/// Returns once [`Serve::count`] connections were relayed and ended (it waits for each, however
/// long: the async relay's serve bounds that with a drain timeout).
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails for another reason than a lost newcomer or a want
/// of resources, [`RelayError::Config`] for `max_connections` 0.
pub fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    how: &Serve,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    check_max_connections(how.max_connections)?;
    let event = Arc::new(event);
    let live = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut handles: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut served = Served::default();
    let mut backoff = Backoff::new();
    let mut full = false;
    let room = descriptor_room();
    while how.count.is_none_or(|c| served.relayed < c) {
        // Room for one more in the descriptors: else the newcomer waits in the listen queue.
        if let Some((room, limit)) = room
            && live.load(Ordering::SeqCst) >= room
        {
            if !full {
                event(Event::DescriptorsFull {
                    live: live.load(Ordering::SeqCst),
                    limit,
                });
                full = true;
            }
            std::thread::sleep(Duration::from_millis(10));
            handles.retain(|h| !h.is_finished());
            continue;
        }
        full = false;
        let (src, from) = match listener.accept() {
            Ok(a) => a,
            Err(e) if out_of_resources(&e) => {
                served.accept_failures += 1;
                let (pause, first) = backoff.failed();
                if first {
                    let live = live.load(Ordering::SeqCst);
                    event(Event::AcceptStalled { error: e, live });
                }
                std::thread::sleep(pause);
                continue;
            }
            Err(e) if lost_newcomer(&e) => continue,
            Err(e) => return Err(io_err("accept")(e)),
        };
        if let Some(resumed) = backoff.worked() {
            event(resumed);
        }
        if live.load(Ordering::SeqCst) >= how.max_connections {
            served.refused += 1;
            reset(&src);
            event(Event::Refused { from });
            continue;
        }
        served.relayed += 1;
        live.fetch_add(1, Ordering::SeqCst);
        let (config, live, failed, event) =
            (config.clone(), live.clone(), failed.clone(), event.clone());
        handles.push(std::thread::spawn(move || {
            let result = relay(src, Config::clone(&config));
            live.fetch_sub(1, Ordering::SeqCst);
            if result.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            event(Event::Ended { from, result });
        }));
        handles.retain(|h| !h.is_finished());
    }
    for h in handles {
        let _ = h.join();
    }
    served.failed = failed.load(Ordering::SeqCst);
    Ok(served)
}
