//! Completion: the CQEs read, each request's state advanced, and a buffer handed back (or sent
//! again from its slot) once the kernel is done with it.

use super::*;

impl<B: OwnedBuf> SendRing<B> {
    /// Reads every CQE there is (until `out` is [full](Finish::full)) and hands each buffer the
    /// kernel is done with to `out`, in the order they finished. On a datagram ring a buffer whose request finished whole and that
    /// `out` keeps ([`Finish::again`]) goes again from its slot, as pushed the first time (the
    /// same op, flags and destination; its bytes read anew): its SQE waits for the next
    /// submission, and `out` hears of it by [`Finish::resent`]. One that cannot go as it is now
    /// (over 4 GiB, or a fixed send whose bytes left the registered pool) comes back to
    /// [`Finish::finish`] with `EINVAL`.
    pub fn complete(&mut self, out: &mut impl Finish<B>) -> io::Result<()> {
        if !self.done.is_empty() {
            self.hand_done(out);
        }
        self.take_cqes(out)
    }

    /// Hands out the buffers that finished while a stream's next chain was launched.
    #[cold]
    fn hand_done(&mut self, out: &mut impl Finish<B>) {
        for f in self.done.drain(..) {
            out.finish(f);
        }
    }

    /// Reads every CQE there is, handing the buffers the kernel is done with to `out`.
    pub(super) fn take_cqes(&mut self, out: &mut impl Finish<B>) -> io::Result<()> {
        // The CQEs there are now; those a resubmission below brings wait for the next call.
        // Each is consumed (its slot the kernel's again) before it is handled: a resubmission
        // that has to enter the kernel finds the completion queue as empty as it can be.
        let mut result = Ok(());
        // Whether the ring keeps a stream's order is set before the first push: read once.
        let linked = self.order.is_some();
        for _ in 0..self.cq.ready() {
            if out.full() {
                break;
            }
            let Some(c) = self.cq.pop() else { break };
            let (key, generation) = key_generation(c.user_data);
            // A whole result or its notification, as nearly every CQE is: decided here. A
            // stream's results go the general way, which tells its order.
            if (!linked || c.flags & abi::IORING_CQE_F_NOTIF != 0)
                && let Some(held) = self.held.get_mut(key as usize)
                && held.buf.is_some()
            {
                let req = Request {
                    len: held.len as usize,
                    zero_copy: held.op.zero_copy(),
                    report_usage: held.report_usage,
                    linked,
                };
                match held
                    .state
                    .on_cqe_common(req, generation, c.res, c.flags, self.usage_refused)
                {
                    Some(Step::Done) => {
                        self.finish_held(key, linked, out);
                        continue;
                    }
                    Some(_) => continue,
                    None => {}
                }
            }
            if let Err(e) = self.on_cqe(key, generation, c.res, c.flags, out) {
                result = result.and(Err(e));
            }
        }
        result
    }

    pub(super) fn on_cqe(
        &mut self,
        key: u32,
        generation: u32,
        res: i32,
        flags: u32,
        out: &mut impl Finish<B>,
    ) -> io::Result<()> {
        let k = key as usize;
        if self.held.get(k).is_none_or(|h| h.buf.is_none()) {
            // Not ours: a CQE for a slot already finished would be a kernel or bookkeeping bug;
            // dropping it is the only safe thing (no buffer is freed by it).
            return Ok(());
        }
        // The request is worked on where it lies: most CQEs leave it there (a result waiting
        // for its notification).
        let held = &mut self.held[k];
        let req = Request {
            len: held.len as usize,
            zero_copy: held.op.zero_copy(),
            report_usage: held.report_usage,
            linked: self.order.is_some(),
        };
        let step = held
            .state
            .on_cqe(req, generation, res, flags, &mut self.usage_refused);
        if self.order.is_none() {
            // Requests on their own (a datagram socket): nothing else depends on this one.
            return match step {
                Step::Resubmit => self.push_request(key).inspect_err(|e| {
                    // No SQE went in: the result it was due will never come. The request
                    // ends with the submission's error, its buffer back once the
                    // notifications already announced have come.
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    if self.held[k].state.not_resubmitted(errno) == Step::Done {
                        self.finish(key, out);
                    }
                }),
                Step::Done => {
                    self.finish(key, out);
                    Ok(())
                }
                Step::Wait => Ok(()),
            };
        }
        let mut abandon = std::mem::take(&mut self.keys);
        abandon.clear();
        if let Some(order) = &mut self.order
            && flags & abi::IORING_CQE_F_NOTIF == 0
        {
            // A request that ends short of its buffer, with an error or without one, leaves a
            // gap that nothing after it may cross.
            let failed = (step != Step::Resubmit && held.state.sent() < req.len)
                .then(|| held.state.error().unwrap_or(libc::EIO));
            order.on_result(key, step == Step::Resubmit, failed, &mut abandon);
        }
        match step {
            // In stream order the rest goes when its chain is launched again.
            Step::Resubmit | Step::Wait => {}
            Step::Done => self.finish(key, out),
        }
        let errno = self.order.as_ref().and_then(Order::broken);
        for &k in &abandon {
            debug_assert!(
                self.held[k as usize].buf.is_some(),
                "an abandoned request has a buffer"
            );
            if self.held[k as usize]
                .state
                .abandon(errno.unwrap_or(libc::EIO))
                == Step::Done
            {
                self.finish(k, out);
            }
        }
        self.keys = abandon;
        Ok(())
    }

    /// Hands back the buffer of a request whose every CQE was seen.
    fn finish(&mut self, key: u32, out: &mut impl Finish<B>) {
        self.finish_inline(key, out);
    }

    /// [`SendRing::finish`], inlined where nearly every buffer finishes.
    #[inline(always)]
    fn finish_inline(&mut self, key: u32, out: &mut impl Finish<B>) {
        if self.held.get(key as usize).is_none_or(|h| h.buf.is_none()) {
            debug_assert!(false, "a finished request has its buffer");
            return;
        }
        self.finish_held(key, self.order.is_some(), out);
    }

    /// [`SendRing::finish_inline`] of slot `key`, which holds a buffer (checked by the caller);
    /// `linked`: the ring keeps a stream's order.
    #[inline(always)]
    fn finish_held(&mut self, key: u32, linked: bool, out: &mut impl Finish<B>) {
        if !linked && self.go_again(key, out) {
            return;
        }
        let held = &mut self.held[key as usize];
        self.in_flight -= 1;
        // Before the buffer is taken: a push that may grow is a call, across which a buffer
        // already taken would be kept on the stack and read back wider than it was written (a
        // store-forwarding stall per buffer, issue 51).
        self.free.push(key);
        let done = outcome(held);
        let Some(buf) = held.buf.take() else {
            unreachable!("the caller checked");
        };
        out.finish(Finished {
            buf,
            sent: done.sent,
            error: done.error,
            zero_copy: done.zero_copy,
            memlock_fallback: done.memlock_fallback,
            copied: done.copied,
        });
    }
}

impl<B: OwnedBuf> SendRing<B> {
    /// Sends the buffer of slot `key` (a datagram request that just finished) again from its
    /// slot when it finished whole and `out` keeps it ([`Finish::again`]); whether it did. The
    /// slot's next submission follows the finished one's generation, as a push would.
    #[inline(always)]
    fn go_again(&mut self, key: u32, out: &mut impl Finish<B>) -> bool {
        let region = self.region;
        let held = &mut self.held[key as usize];
        let state = &held.state;
        if state.error().is_some() || state.abandoned().is_some() {
            return false;
        }
        let Some(buf) = held.buf.as_mut() else {
            return false;
        };
        if !out.again(buf) {
            return false;
        }
        let bytes = buf.bytes();
        let (at, len) = (bytes.as_ptr(), bytes.len());
        let way = out.way(len);
        if way == Way::Elsewhere {
            return false;
        }
        let (op, fixed) = match way {
            Way::ZeroCopy { fixed } => {
                let op = held.op.by(true);
                (
                    op,
                    fixed && op == SendOp::SendZc && in_region(region, at, len),
                )
            }
            Way::Copy => (held.op.by(false), false),
            Way::AsBefore | Way::Elsewhere => (held.op, held.fixed),
        };
        if len > u32::MAX as usize || (fixed && !in_region(region, at, len)) {
            // As `push` refuses it: the buffer comes back, saying why.
            held.state.fail(libc::EINVAL);
            return false;
        }
        let mut done = outcome_whole(held);
        // What the next request is: the finished one's report is in `done` already.
        (held.op, held.fixed) = (op, fixed);
        (done.op, done.fixed) = (op, fixed);
        held.len = len as u32;
        held.state.reset(held.state.generation().wrapping_add(1));
        let req = SendRequest {
            op,
            fixed,
            dest: None,
            flags: held.flags,
            report_usage: held.report_usage,
        };
        let (generation, fd) = (held.state.generation(), held.fd);
        let queued = self.queue_new(key, generation, fd, at, len as u32, &req);
        if !queued {
            // Every SQE queued and not yet submitted is a request in flight other than this
            // one, and no more than `entries` are in flight: there is room. Were there none,
            // nothing went in, and the buffer comes back with an error.
            debug_assert!(false, "an SQE queued for every request in flight, and room");
            held_not_resubmitted(&mut self.held[key as usize].state);
            return false;
        }
        out.resent(done);
        true
    }
}

/// What the settled request of `held` did, as its buffer comes back.
#[inline(always)]
fn outcome<B>(held: &Held<B>) -> Finished<()> {
    let state = &held.state;
    let whole = outcome_whole(held);
    Finished {
        buf: (),
        sent: whole.sent,
        error: match (state.error(), state.abandoned()) {
            (Some(errno), _) => Some(io::Error::from_raw_os_error(errno)),
            (None, Some(errno)) => Some(broken_stream(errno)),
            (None, None) => None,
        },
        // What was really done: a copy retry is not zero-copy.
        zero_copy: held.op.zero_copy() && !whole.memlock_fallback,
        memlock_fallback: whole.memlock_fallback,
        copied: whole.copied,
    }
}

/// [`outcome`] without the error, for a request known to have ended without one, as one that
/// goes again has ([`Finish::resent`]; its op and registered buffer are the slot's, which the
/// next request keeps).
#[inline(always)]
fn outcome_whole<B>(held: &Held<B>) -> Resent {
    let state = &held.state;
    let copy_retry = state.copy_retry();
    Resent {
        sent: state.sent(),
        memlock_fallback: copy_retry,
        // A notification of the refused zero-copy attempt says nothing about the copy that sent
        // the bytes: no usage report for it.
        copied: state.copied().filter(|_| !copy_retry),
        op: held.op,
        fixed: held.fixed,
    }
}

#[cold]
fn held_not_resubmitted(state: &mut State) {
    let step = state.not_resubmitted(libc::EIO);
    debug_assert_eq!(
        step,
        Step::Done,
        "a datagram request that finished owes nothing older"
    );
}
