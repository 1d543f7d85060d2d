//! Completions: read from the error queue (`recvmsg(MSG_ERRQUEUE)`), the buffers they free
//! given back, waits for them, and what `close` and drop leave to the kernel.

use std::io;
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use super::{
    Closed, CopiedPolicy, ExclusiveSocket, Freed, OwnedBuf, Returned, Slot, Tracker, ZeroCopySender,
};
use crate::errqueue::{self, Entry};
use crate::sys;

impl<S: ExclusiveSocket, B: OwnedBuf> ZeroCopySender<S, B> {
    /// Moves freed slots to where their owners find them.
    pub(super) fn settle(&mut self, freed: Vec<Freed<Slot<B>>>) {
        for r in freed {
            match r.buf {
                Slot::Owned(buf, failed) => {
                    let (error, sent) = match failed {
                        Some((e, sent)) => (Some(e), sent),
                        None => (None, buf.bytes().len()),
                    };
                    self.ready.push_back(Returned {
                        buf,
                        sent,
                        error,
                        zero_copy: r.zero_copy,
                        copied: r.zero_copy.then_some(r.copied),
                    })
                }
                Slot::Borrowed(token) => self.borrowed_done.push(token),
            }
        }
    }

    /// Reads every completion now queued, without blocking; returns how many buffers it freed
    /// (take them with [`returned`](Self::returned)).
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub fn reap(&mut self) -> io::Result<usize> {
        let mut freed = Vec::new();
        let mut control = [0u8; 256];
        // One read usually holds every completion: the kernel merges consecutive ranges while
        // they wait in the queue. A completion that reaches the last id sent means nothing more
        // can be queued for this sender, so the read that would only say EAGAIN is skipped, as
        // msg_zerocopy.c skips it (issue 17: our sends cost 14-21 % more per byte than its; that
        // read was one syscall in every 16 sends). Other queued errors wait for the next reap.
        while let Some((len, _)) = sys::net::recv_errqueue(self.socket.as_fd(), &mut control)? {
            let entries = errqueue::parse(&control[..len])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut caught_up = false;
            for entry in entries {
                match entry {
                    Entry::Zerocopy(c) => {
                        self.counters.completed_calls += c.count();
                        if c.copied {
                            self.counters.copied_calls += c.count();
                            self.on_copied();
                        } else if let Some(d) = &mut self.auto {
                            d.not_copied();
                        }
                        caught_up |= c.last.wrapping_add(1) == self.tracker.next_id();
                        self.tracker.complete(c, &mut freed);
                    }
                    Entry::Other { .. } => self.counters.queued_errors += 1,
                }
            }
            if caught_up {
                break;
            }
        }
        let n = freed.len();
        self.settle(freed);
        Ok(n)
    }

    fn on_copied(&mut self) {
        if let Some(d) = &mut self.auto {
            d.copied();
            return;
        }
        match self.config.policy {
            CopiedPolicy::Keep => {}
            CopiedPolicy::Disable => {
                if self.disabled.is_none() {
                    self.counters.policy_disables += 1;
                    self.disabled =
                        Some("the kernel copied zero-copy sends (policy: disable)".into());
                }
            }
            CopiedPolicy::RetryAfter(n) => {
                if self.copy_for == 0 {
                    self.counters.policy_disables += 1;
                }
                self.copy_for = n;
            }
        }
    }

    /// Sets how long one send waits for room in the socket ([`Config::stall_timeout`](super::Config::stall_timeout)).
    pub fn set_stall_timeout(&mut self, timeout: Duration) {
        self.config.stall_timeout = timeout;
        let tv = super::sender::timeval(timeout);
        let _ = sys::sockopt::set_send_timeout(self.socket.as_fd(), &tv);
    }

    /// Waits up to `timeout` until every buffer has come back. When none comes back for 100 ms
    /// it runs every CPU's deferred frees, at most once a second
    /// ([`crate::loan::kick_deferred_frees`], counted in `deferred_kicks`): a receiver on this
    /// host that read a datagram on another CPU leaves its completion waiting for that CPU's
    /// next network softirq, for minutes on an idle host.
    ///
    /// # Errors
    /// `TimedOut` with the count still in flight (they stay loaned), or the `poll`/`recvmsg`
    /// error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap()?;
            if self.tracker.is_empty() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} buffers still loaned to the kernel", self.tracker.len()),
                ));
            }
            sys::event::poll(
                self.socket.as_fd(),
                0,
                Some(left.min(crate::loan::DeferredKick::STALL)),
            )?;
            self.kick_if_stalled();
        }
    }

    /// Ends the sender: waits up to `timeout` for what the kernel still holds, and returns every
    /// buffer that came back and was not taken, with how many the kernel still held at the end
    /// (left to it, never freed: [`crate::loan::leaked_buffers`]). Unlike a drop, it waits as
    /// long as asked and says what it left.
    pub fn close(mut self, timeout: Duration) -> Closed<B> {
        let _ = self.drain(timeout);
        let returned = self.ready.drain(..).collect();
        let still_loaned = self.tracker.len();
        // The drop that follows leaves what is still loaned to the kernel, counted, at once.
        let mut left = 0;
        for slot in self.tracker.abandon() {
            std::mem::forget(slot);
            left += 1;
        }
        crate::loan::note_leaked(left);
        Closed {
            returned,
            still_loaned,
        }
    }

    /// Waits up to `timeout` for a loaned buffer to come back and returns the oldest one that
    /// has (at once when one already has): what a fixed pool of buffers recycles with (take one
    /// back, fill it, send it). `Ok(None)` when none came in time, or when nothing is loaned
    /// (none will). Waits on the error queue (`poll(2)` for `POLLERR`), running the deferred
    /// frees when completions stall, as [`drain`](Self::drain) does.
    ///
    /// # Errors
    /// Reading the error queue or `poll` failed.
    pub fn wait_returned(&mut self, timeout: Duration) -> io::Result<Option<Returned<B>>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Ok(Some(r));
            }
            self.reap()?;
            if let Some(r) = self.ready.pop_front() {
                return Ok(Some(r));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if self.tracker.is_empty() || left.is_zero() {
                return Ok(None);
            }
            sys::event::poll(
                self.socket.as_fd(),
                0,
                Some(left.min(crate::loan::DeferredKick::STALL)),
            )?;
            self.kick_if_stalled();
        }
    }

    /// Runs every CPU's deferred frees when completions have stalled (see
    /// [`crate::loan::kick_deferred_frees`]): a receiver on this host may have read what is
    /// still loaned on another CPU, which frees it only at its next network softirq.
    pub(crate) fn kick_if_stalled(&mut self) {
        if !self.tracker.is_empty() && self.kick.kick_if_stalled(self.counters.completed_calls) {
            self.counters.deferred_kicks += 1;
        }
    }
}

impl<S: ExclusiveSocket, B: OwnedBuf> Drop for ZeroCopySender<S, B> {
    fn drop(&mut self) {
        // The socket's own send timeout again, for whoever has it next (a C caller's).
        if let Some(tv) = self.sndtimeo_before.take() {
            let _ = sys::sockopt::set_send_timeout(self.socket.as_fd(), &tv);
        }
        // A buffer left part-way (an async send dropped, then the sender): what was loaned of it
        // is tracked like any other loan, the rest was never given to the kernel. On a stream
        // that cuts it: the connection is reset at its last close, so that the peer sees it
        // cut, not a clean end part-way through a buffer (issue 62, the adversarial pass).
        if let Some(cur) = self.current.take() {
            let cut = cur.calls.off > 0 && cur.calls.off < cur.buf.bytes().len();
            if cut
                && sys::sockopt::socket_type(self.socket.as_fd())
                    .is_ok_and(|t| t == libc::SOCK_STREAM)
            {
                let _ = sys::sockopt::set_linger_zero(self.socket.as_fd());
            }
            if cur.calls.zc_calls > 0 {
                let mut freed = Vec::new();
                self.tracker
                    .push(Slot::Owned(cur.buf, None), cur.calls.zc_calls, &mut freed);
                self.settle(freed);
            }
        }
        if self.tracker.is_empty() {
            return;
        }
        // At most DROP_WAIT, and not at all on an async runtime's thread (crate::loan's rule).
        let wait = crate::loan::drop_wait();
        if !wait.is_zero() {
            let _ = self.drain(wait);
        }
        if self.tracker.is_empty() {
            return;
        }
        // What the kernel still holds goes to the reaper thread with a descriptor of the socket
        // (its error queue), which frees each buffer as its completion comes.
        let tracker = std::mem::take(&mut self.tracker);
        match self.socket.as_fd().try_clone_to_owned() {
            Ok(fd) => crate::loan::orphans::adopt(Box::new(Orphaned { fd, tracker })),
            Err(_) => abandon(tracker),
        }
    }
}

/// Leaves what `tracker` holds to the kernel (never freed: it may still read it), counted.
/// Borrowed memory is the caller's, under the contract of `send_borrowed`.
fn abandon<B>(mut tracker: Tracker<Slot<B>>) {
    let mut left = 0;
    for slot in tracker.abandon() {
        std::mem::forget(slot);
        left += 1;
    }
    crate::loan::note_leaked(left);
}

/// The loans of a dropped sender, with a descriptor of its socket, for the reaper thread.
struct Orphaned<B> {
    fd: std::os::fd::OwnedFd,
    tracker: Tracker<Slot<B>>,
}

impl<B: OwnedBuf> crate::loan::orphans::Orphan for Orphaned<B> {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn events(&self) -> i16 {
        // POLLERR, always reported: a completion on the error queue.
        0
    }

    fn collect(&mut self) -> io::Result<usize> {
        let mut control = [0u8; 256];
        let mut freed = Vec::new();
        while let Some((len, _)) = sys::net::recv_errqueue(self.fd.as_fd(), &mut control)? {
            let entries = errqueue::parse(&control[..len])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            for entry in entries {
                if let Entry::Zerocopy(c) = entry {
                    self.tracker.complete(c, &mut freed);
                }
            }
            // The buffers the kernel is done with are freed here.
            freed.clear();
        }
        Ok(self.tracker.len())
    }

    fn abandon(self: Box<Self>) {
        abandon(self.tracker);
    }
}
