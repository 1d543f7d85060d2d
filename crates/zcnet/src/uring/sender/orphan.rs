//! What is left when a sender drops with buffers still loaned: handed to a thread that frees
//! each at its completion, or counted as leaked where no other thread may drive the ring.

use super::ring::{Ring, open_ring};
use super::*;

/// An async twin's sender, dropped with loans out: the reaper thread drives its ring (which has
/// no single issuer: `tokio::UringSender` sets it up so) until every buffer is back.
#[cfg(feature = "tokio")]
impl<S: ExclusiveSocket, B: OwnedBuf> crate::loan::orphans::Orphan for UringSender<S, B> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    fn events(&self) -> i16 {
        libc::POLLIN
    }

    fn collect(&mut self) -> io::Result<usize> {
        self.reap()?;
        // The buffers the kernel is done with are freed here.
        self.returned.clear();
        Ok(self.in_flight())
    }

    fn abandon(mut self: Box<Self>) {
        // The drop then waits for nothing, and counts what the ring still holds.
        self.closed = true;
    }

    fn wait_all(&mut self, timeout: Duration) -> bool {
        let _ = self.drain(timeout);
        self.returned.clear();
        true
    }
}

impl<S: ExclusiveSocket, B: OwnedBuf> Drop for UringSender<S, B> {
    fn drop(&mut self) {
        if self.ring.in_flight() == 0 {
            return;
        }
        // At most DROP_WAIT, and not at all on an async runtime's thread (crate::loan's rule)
        // or after `close`, which waited already.
        let wait = crate::loan::drop_wait();
        if !wait.is_zero() && !self.closed {
            let _ = self.drain(wait);
        }
        if self.ring.in_flight() == 0 {
            return;
        }
        // Still loaned (issue 62, the adversarial pass: the ring closed here, the kernel
        // cancelled its requests, and a stream's peer saw a clean end part-way). A ring that
        // any thread may drive goes, with the socket's claim, to a thread that drives it until
        // every buffer is back; the ring holds the socket (a registered file) until then, so
        // the stream ends whole. The swap costs an `io_uring_setup` of one entry, here only.
        // Only where the socket is the ring's registered file: a request of a stream's chain
        // still to be launched names it so, not by the descriptor that closes with the sender.
        let granted = self.ring.setup();
        if !self.closed
            && !granted.single_issuer
            && !granted.defer_taskrun
            && granted.registered_file
            && let Ok(empty) = open_ring::<B>(1, RingSetup::default())
        {
            let ring = std::mem::replace(&mut self.ring, empty);
            crate::loan::orphans::adopt_waiting(Box::new(RingOrphan {
                ring,
                _claim: self._claim.take(),
                kick: crate::loan::DeferredKick::default(),
                completed: 0,
            }));
            return;
        }
        // A ring bound to this thread: what it still holds the ring leaks, not frees, counted;
        // a stream whose requests the close cancels is reset, so that its peer sees it cut.
        if self.stream {
            let _ = sys::sockopt::set_linger_zero(self.socket.as_fd());
        }
        crate::loan::note_leaked(self.ring.in_flight());
    }
}

/// The ring of a dropped synchronous sender, with loans out, for a thread of its own
/// ([`crate::loan::orphans::adopt_waiting`]): driven until every buffer is back, each freed as
/// it comes.
struct RingOrphan<B: OwnedBuf> {
    ring: Ring<B>,
    /// The socket stays this sender's until the ring is done with it.
    _claim: Option<Claim>,
    kick: crate::loan::DeferredKick,
    completed: u64,
}

/// Frees what the ring hands back.
struct Discard(u64);

impl<B> Finish<B> for Discard {
    fn finish(&mut self, f: Finished<B>) {
        self.0 += 1;
        drop(f);
    }
}

impl<B: OwnedBuf> crate::loan::orphans::Orphan for RingOrphan<B> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    fn events(&self) -> i16 {
        libc::POLLIN
    }

    fn collect(&mut self) -> io::Result<usize> {
        let mut d = Discard(0);
        self.ring.complete(&mut d)?;
        self.completed += d.0;
        Ok(self.ring.in_flight())
    }

    fn abandon(self: Box<Self>) {
        // The ring's drop leaves what it holds to the kernel.
        crate::loan::note_leaked(self.ring.in_flight());
    }

    fn wait_all(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.collect().is_ok_and(|n| n > 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(crate::loan::DeferredKick::STALL);
            if left.is_zero() || self.ring.wait(step).is_err() {
                break;
            }
            self.kick.kick_if_stalled(self.completed);
        }
        true
    }
}
