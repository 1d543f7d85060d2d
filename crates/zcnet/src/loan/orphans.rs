//! Loans whose sender went away: one thread of the crate holds them until the kernel gives each
//! back, then frees it (issue 62 item 3: a tokio sender dropped microseconds before its
//! completions leaked every buffer it had out, for good).
//!
//! A dropped sender hands what the kernel still holds to [`adopt`] as an [`Orphan`]: the
//! descriptor to wait on and the bookkeeping that frees each buffer when its completion comes.
//! The reaper thread (`zcnet-orphans`, started at the first orphan) waits on all of them with
//! one `poll(2)`, collects without blocking, frees what came back, and drops an orphan once
//! nothing of it is loaned (closing the socket or ring it kept open). An orphan still holding
//! loans after [`ORPHAN_WAIT`] is given up: what it holds is left to the kernel, never freed,
//! and counted in [`super::leaked_buffers`], which so counts only what the kernel did not give
//! back in that time.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::sys;

/// How long an orphan's loans are awaited before what is left is given up to the kernel.
pub const ORPHAN_WAIT: Duration = Duration::from_secs(60);

/// What a dropped sender leaves: loans the kernel still holds, and how to collect them.
pub(crate) trait Orphan: Send {
    /// The descriptor whose readiness means completions may be there.
    fn fd(&self) -> BorrowedFd<'_>;
    /// The `poll` events to wait for on it (`POLLERR` is always reported).
    fn events(&self) -> i16;
    /// Collects, without blocking, what the kernel gave back, and frees it; how many loans
    /// remain (0: done; the orphan may be dropped).
    ///
    /// # Errors
    /// Collecting failed: the orphan is given up.
    fn collect(&mut self) -> io::Result<usize>;
    /// Gives up: what remains is left to the kernel, never freed, and counted.
    fn abandon(self: Box<Self>);
    /// Waits up to `timeout` until nothing is loaned, blocking, where the orphan has a wait of
    /// its own that a shared `poll(2)` cannot stand in for; `false` where it has none.
    #[cfg(feature = "uring")]
    fn wait_all(&mut self, _timeout: Duration) -> bool {
        false
    }
}

#[cfg(feature = "uring")]
/// Most orphans drained by a thread of their own at once; past that they join the shared
/// reaper, which collects them at least every [`super::DeferredKick::STALL`].
const OWN_THREADS: usize = 64;

/// Hands `orphan`, which has a wait of its own ([`Orphan::wait_all`]), to a short-lived thread
/// that waits in it: an io_uring ring whose requests that thread submits (the rest of a short
/// send, the next of a stream's chain) completes through task work run only by that thread,
/// which a `poll(2)` on the ring's descriptor does not wake for (`IORING_SETUP_COOP_TASKRUN`),
/// while `io_uring_enter(GETEVENTS)` does. Past [`OWN_THREADS`], or without a thread, it joins
/// the shared reaper.
#[cfg(feature = "uring")]
pub(crate) fn adopt_waiting(orphan: Box<dyn Orphan>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    if LIVE.fetch_add(1, Ordering::AcqRel) >= OWN_THREADS {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        adopt(orphan);
        return;
    }
    // The orphan comes back from a spawn that failed, to go to the shared reaper.
    let slot = std::sync::Arc::new(Mutex::new(Some(orphan)));
    let mine = std::sync::Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name("zcnet-orphan".into())
        .spawn(move || {
            let taken = mine.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(mut orphan) = taken {
                orphan.wait_all(ORPHAN_WAIT);
                match orphan.collect() {
                    Ok(0) => drop(orphan),
                    _ => orphan.abandon(),
                }
            }
            LIVE.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        if let Some(orphan) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            adopt(orphan);
        }
    }
}

/// Hands `orphan` to the reaper thread. Where the thread cannot be started (no memory for it),
/// the orphan is given up at once.
pub(crate) fn adopt(orphan: Box<dyn Orphan>) {
    /// The way to the reaper thread; `None` where it could not be started.
    type Way = Option<Mutex<Sender<Box<dyn Orphan>>>>;
    static REAPER: OnceLock<Way> = OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("zcnet-orphans".into())
            .spawn(move || reap(&rx))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let Some(tx) = reaper else {
        orphan.abandon();
        return;
    };
    let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(mpsc::SendError(orphan)) = tx.send(orphan) {
        orphan.abandon();
    }
}

/// An orphan and when it is given up.
struct Held {
    orphan: Box<dyn Orphan>,
    until: Instant,
}

/// The reaper thread: waits on every orphan, frees what comes back, drops what is done.
fn reap(rx: &Receiver<Box<dyn Orphan>>) {
    let mut held: Vec<Held> = Vec::new();
    let mut kick = super::DeferredKick::default();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        // Idle: sleep until an orphan comes. Busy: look at the channel between waits.
        let first = if held.is_empty() {
            match rx.recv() {
                Ok(o) => Some(o),
                Err(_) => return,
            }
        } else {
            match rx.recv_timeout(Duration::ZERO) {
                Ok(o) => Some(o),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        for orphan in first.into_iter().chain(rx.try_iter()) {
            held.push(Held {
                orphan,
                until: Instant::now() + ORPHAN_WAIT,
            });
        }
        // Collect first (completions may be queued already), then wait.
        let now = Instant::now();
        let mut remaining = 0u64;
        let mut i = 0;
        while i < held.len() {
            match held[i].orphan.collect() {
                Ok(0) => {
                    held.swap_remove(i);
                }
                Ok(_) if held[i].until <= now => held.swap_remove(i).orphan.abandon(),
                Ok(left) => {
                    remaining += left as u64;
                    i += 1;
                }
                Err(_) => held.swap_remove(i).orphan.abandon(),
            }
        }
        if held.is_empty() {
            continue;
        }
        // A receiver on this host may leave completions waiting for another CPU's softirq:
        // kicked as a sender's own wait does, when nothing moved for a while.
        kick.kick_if_stalled(remaining);
        fds.clear();
        fds.extend(held.iter().map(|h| libc::pollfd {
            fd: h.orphan.fd().as_raw_fd(),
            events: h.orphan.events(),
            revents: 0,
        }));
        // New orphans wait at most this long to be looked at; so does a kick.
        if sys::event::poll_all(&mut fds, super::DeferredKick::STALL).is_err() {
            std::thread::sleep(super::DeferredKick::STALL);
        }
    }
}
