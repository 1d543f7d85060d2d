//! A sender's ring, and when this process last closed one: under a tight `RLIMIT_MEMLOCK` a ring
//! set up right after another closed may be refused for pages the kernel is about to give back.

use std::time::{Duration, Instant};

use crate::loan::OwnedBuf;
use crate::uring::config::RingSetup;
use crate::uring::engine::SendRing;
use crate::uring::error::{UringError, setup_error};

/// How long after this process closed a ring the kernel may still count the ring's pages as
/// locked memory: it frees a closed ring in a worker, once its last requests are done.
const RING_TEARDOWN: Duration = Duration::from_secs(1);

/// `io_uring_setup(2)` for a sender. Under a tight `RLIMIT_MEMLOCK` the pages of a ring this
/// process has just closed may still be counted (the kernel frees it later, in a worker): an
/// `ENOMEM` within [`RING_TEARDOWN`] of a close is tried again until then, so that a program
/// that replaces one ring by another (a bench run after run) is not refused at random.
pub(super) fn open_ring<B: OwnedBuf>(
    entries: u32,
    setup: RingSetup,
) -> Result<Ring<B>, UringError> {
    loop {
        match SendRing::new(entries, setup.raw()) {
            Err(e)
                if e.raw_os_error() == Some(libc::ENOMEM)
                    && last_close().is_some_and(|t| t.elapsed() < RING_TEARDOWN) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r.map(Ring).map_err(setup_error),
        }
    }
}

/// A sender's ring, whose close this process remembers ([`last_close`]).
pub(super) struct Ring<B: OwnedBuf>(SendRing<B>);

impl<B: OwnedBuf> std::ops::Deref for Ring<B> {
    type Target = SendRing<B>;
    fn deref(&self) -> &SendRing<B> {
        &self.0
    }
}

impl<B: OwnedBuf> std::ops::DerefMut for Ring<B> {
    fn deref_mut(&mut self) -> &mut SendRing<B> {
        &mut self.0
    }
}

impl<B: OwnedBuf> Drop for Ring<B> {
    fn drop(&mut self) {
        // The ring's fd closes right after, when the field drops.
        *LAST_CLOSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// When this process last closed a sender's ring (see [`last_close`]).
static LAST_CLOSE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// When this process last closed a sender's ring. The kernel frees a closed ring, and takes its
/// pages off the user's locked memory (`RLIMIT_MEMLOCK`), later, in a worker: a ring set up
/// right after may be refused (`ENOMEM`) for memory that is about to come back.
fn last_close() -> Option<Instant> {
    *LAST_CLOSE.lock().unwrap_or_else(|e| e.into_inner())
}
