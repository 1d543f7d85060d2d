//! Sending what came back again: [`UringSender::resend_returned`], in place from the ring's slot
//! where it can, else through [`UringSender::send`].

use super::collect::Collect;
use super::*;

impl<S: ExclusiveSocket, B: OwnedBuf> UringSender<S, B> {
    /// [`UringSender::collect`] of at most `limit` buffers, sending again from its slot each that
    /// finished whole and that `again` keeps (see [`UringSender::resend_returned`]); how many
    /// came back, and how many of them went again.
    #[inline(always)]
    pub(super) fn collect_again(
        &mut self,
        limit: usize,
        again: impl FnMut(&mut B) -> bool,
    ) -> io::Result<(usize, usize)> {
        if self.returned.is_empty() {
            // Back to its first entries: a caller that takes each buffer as it comes back keeps
            // the queue short, and its entries then stay the same few cache lines instead of
            // walking the whole capacity (a line the kernel's work evicted, a miss a buffer).
            self.returned.clear();
        }
        let before = self.counters.returned;
        let mut back = Collect {
            counters: &mut self.counters,
            auto: self.auto.as_deref_mut(),
            returned: &mut self.returned,
            elsewhere: &mut self.elsewhere,
            defer_next: false,
            can_defer: !self.sent_to,
            fixed: self.fixed,
            again,
            resent: 0,
            taken: 0,
            limit,
        };
        let done = self.ring.complete(&mut back);
        let resent = back.resent;
        // Its counts go in as it ends.
        drop(back);
        // Their SQEs wait for the next submission, as those of `send` do.
        self.queued += resent;
        done?;
        Ok(((self.counters.returned - before) as usize, resent))
    }

    /// Sends each buffer again as it comes back, without handing it out: what a loop that
    /// sends every buffer again (refilled or not) does with [`UringSender::pop_returned`] and
    /// [`UringSender::send`], with a buffer's trip through the queue of returned buffers, the
    /// free slots and the checks of `send` left out.
    ///
    /// Collects up to a batch ([`Config::batch`](super::Config::batch)) of the buffers that
    /// came back (entering the kernel for them when none are in, and then waiting up to `wait`
    /// for the first while buffers are loaned), offers `again` each that came back whole (no
    /// error), in completion order, and submits the requests of those it keeps before it
    /// returns: `true` sends the buffer again as [`UringSender::send`] or
    /// [`UringSender::send_to`] sent it the last time (the same destination; its bytes as
    /// `again` left them). The kernel is done with a buffer before `again` sees it: it may
    /// write it. Returns how many went again.
    ///
    /// Buffers already in [`UringSender::returned`] when it is called (back from an earlier
    /// [`UringSender::reap`], say) are offered first, in their order, and those kept go through
    /// [`UringSender::send`] (issue 62 item 7: they were skipped, and a loop built on this call
    /// alone let them pile up).
    ///
    /// The rest stay in [`UringSender::returned`]: those `again` declines, those that came back
    /// with an error, one that cannot go as `again` left it (over 4 GiB, or a fixed send's
    /// bytes out of the registered pool: it comes back with `EINVAL`, counted in `errors`, its
    /// `sent` that of the send before), and those that came back while the kept ones went
    /// through `send` (below), which the next call offers.
    ///
    /// On a datagram socket without trains ([`Config::segment`](super::Config::segment)), a
    /// kept buffer goes again from the ring's slot, in every mode: [`Mode::Auto`](super::Mode::Auto)
    /// decides per buffer there, zero copy (from the registered pool where the bytes lie in it)
    /// or copy, as `send` would (issue 63), and at the edge of a round a pair measures sends it
    /// through `send`, which takes the completions queued first. With trains and on a stream
    /// socket a kept buffer goes through [`UringSender::send`] (the train's check, the stream's
    /// order): the same result, without the saving; there a sender that has used
    /// [`UringSender::send_to`] is not offered its buffers (`send` would not know where they
    /// go): they stay in [`UringSender::returned`].
    ///
    /// Should `again` panic, the buffers being handed back at that moment are dropped (the
    /// kernel was done with them) or stay loaned (counted by [`crate::loan::leaked_buffers`]
    /// when the sender drops), never freed while the kernel might read them.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn resend_returned(
        &mut self,
        wait: Duration,
        mut again: impl FnMut(&mut B) -> bool,
    ) -> io::Result<usize> {
        let in_place = self.config.segment.is_none() && !self.stream;
        let via_send = !in_place && !self.sent_to;
        let mut resent = 0;
        // What came back before this call: out of its slot, it goes as any buffer does (none
        // is there in a loop built on this call alone, which pays one check).
        if !self.returned.is_empty() && !self.sent_to {
            resent += self.resend_taken(0, &mut again);
        }
        let mut entered = false;
        let mut deadline = None;
        loop {
            // A batch at a time, counting what is queued already: one submission takes it.
            let limit = self.config.batch.saturating_sub(self.queued).max(1);
            let back = if in_place {
                let (back, n) = self.collect_again(limit, &mut again)?;
                resent += n;
                if !self.elsewhere.is_empty() {
                    resent += self.resend_elsewhere();
                }
                back
            } else {
                let before = self.returned.len();
                let (back, _) = self.collect_again(limit, |_: &mut B| false)?;
                if via_send {
                    resent += self.resend_taken(before, &mut again);
                }
                back
            };
            if back > 0 || self.ring.in_flight() == 0 {
                break;
            }
            if !entered {
                // With `DEFER_TASKRUN` what completed is posted only when this thread enters
                // the kernel for events, as a submission does.
                self.flush()?;
                entered = true;
                continue;
            }
            if wait.is_zero() {
                break;
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + wait);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.queued = 0;
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        if self.queued > 0 {
            self.flush()?;
        }
        Ok(resent)
    }

    /// The buffers `again` kept and the collection sent elsewhere ([`Mode::Auto`]'s edges):
    /// through [`UringSender::send`] (never those of a sender that used `send_to`). How many
    /// went again.
    #[cold]
    fn resend_elsewhere(&mut self) -> usize {
        let mut resent = 0;
        let mut list = std::mem::take(&mut self.elsewhere);
        for r in list.drain(..) {
            match self.send(r.buf) {
                Ok(()) => resent += 1,
                Err(e) => self.returned.push_back(Returned {
                    buf: e.buf,
                    sent: 0,
                    error: Some(e.error),
                    zero_copy: false,
                    copied: None,
                }),
            }
        }
        // The allocation stays for the next time.
        self.elsewhere = list;
        resent
    }

    /// [`UringSender::resend_returned`]'s way through [`UringSender::send`]: each buffer in
    /// [`UringSender::returned`] from index `from` on (those before it are left as they are)
    /// that came back whole and that `again` keeps goes through `send`; the rest stay, in their
    /// order. How many went again.
    fn resend_taken(&mut self, from: usize, again: &mut impl FnMut(&mut B) -> bool) -> usize {
        // The queue is taken whole (what comes back while sending goes into the spare one):
        // those that stay go back to its end as it is walked, in their order, and end up before
        // the newcomers.
        let mut old = std::mem::replace(&mut self.returned, std::mem::take(&mut self.spare));
        let mut resent = 0;
        for i in 0..old.len() {
            let Some(mut r) = old.pop_front() else { break };
            // Only where it can go without waiting: a wait would collect the buffers that come
            // back meanwhile past `again`.
            if i < from
                || r.error.is_some()
                || self.ring.in_flight() >= self.config.window
                || !again(&mut r.buf)
            {
                old.push_back(r);
                continue;
            }
            match self.send(r.buf) {
                Ok(()) => resent += 1,
                Err(e) => old.push_back(Returned {
                    buf: e.buf,
                    sent: 0,
                    error: Some(e.error),
                    zero_copy: false,
                    copied: None,
                }),
            }
        }
        old.append(&mut self.returned);
        // Both queues keep their allocations for the next call.
        self.spare = std::mem::replace(&mut self.returned, old);
        resent
    }
}
