//! Accepting connections and relaying them on event loops ([`serve`]): the connection limit,
//! the descriptors `RLIMIT_NOFILE` leaves, the back-off of failed `accept(2)`s, and the stop
//! and its drain ([`Stop`]).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::event_loop::{self, Shared};
use super::{Config, RelayError, Report, io_err};
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
    /// Event loops of [`serve`] (threads, each with one epoll set for its connections); 0: one
    /// per CPU the process may run on (`sched_getaffinity(2)`, as
    /// `std::thread::available_parallelism` reads it). The tokio relay runs on its runtime.
    pub threads: usize,
    /// After a [`Stop`], how long the live connections of [`serve`] have to end, both
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

/// Stops a running [`serve`] from another thread (a signal handler's watcher, say): it accepts
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

/// Descriptors a connection of [`serve`] holds at most: the source and the destination (a
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

/// What [`serve`] did.
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

/// Accepts connections on `listener` and relays them on [`Serve::threads`] event loops (both
/// directions, to their ends), as [`Serve`] says; `event` is told of each connection's end and
/// of trouble accepting. Each loop is a thread with one epoll set for the listener (watched
/// with `EPOLLEXCLUSIVE`: a newcomer wakes one loop) and for every connection it took: two
/// descriptors a connection ([`DESCRIPTORS_PER_CONNECTION`]), no thread, timer or buffer of its
/// own while idle. Out of descriptors or memory it keeps every live connection and backs off
/// ([`Event::AcceptStalled`]); it accepts no more connections at once than `RLIMIT_NOFILE`
/// leaves descriptors for (raise the soft limit to the hard one first, as `zcnet relay` does),
/// so that every connection it takes it can relay whole. Returns once [`Serve::count`]
/// connections were relayed and ended (however long they take), or after a [`Stop`] and its
/// drain. `listener` is made non-blocking, and a stop shuts it (`connect(2)` to `AF_UNSPEC`):
/// newcomers are refused rather than left in its queue.
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails for another reason than a lost newcomer or a want
/// of resources (the other loops end too, their connections reset), [`RelayError::Config`] for
/// `max_connections` 0.
pub fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    how: &Serve,
    stop: &Stop,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    check_max_connections(how.max_connections)?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("fcntl(O_NONBLOCK)"))?;
    let threads = match how.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let shared = Shared {
        config: &config,
        how,
        stop,
        event: &event,
        room: descriptor_room(DESCRIPTORS_PER_CONNECTION),
        live: AtomicUsize::new(0),
        relayed: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        accept_failures: AtomicU64::new(0),
        reset_at_drain: AtomicU64::new(0),
        full_told: AtomicBool::new(false),
        backoff: Mutex::new(Backoff::new()),
        counted: sys::event::eventfd().map_err(io_err("eventfd"))?,
    };
    // A loop that fails stops the others: they drain as after a stop.
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for i in 0..threads {
            let (shared, failure) = (&shared, &failure);
            std::thread::Builder::new()
                .name(format!("zcnet-relay-{i}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = event_loop::run(shared, listener) {
                        failure.lock().unwrap().get_or_insert(e);
                        shared.stop.stop();
                    }
                })
                .expect("spawning an event loop");
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    let reset_at_drain = shared.reset_at_drain.load(Ordering::SeqCst);
    if reset_at_drain > 0 {
        event(Event::DrainTimedOut {
            live: reset_at_drain as usize,
        });
    }
    Ok(Served {
        relayed: shared.relayed.load(Ordering::SeqCst),
        refused: shared.refused.load(Ordering::SeqCst),
        failed: shared.failed.load(Ordering::SeqCst),
        reset_at_drain,
        accept_failures: shared.accept_failures.load(Ordering::SeqCst),
    })
}
