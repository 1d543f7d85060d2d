//! [`Order`] keeps the bytes of a stream socket in send order. io_uring does not order requests
//! on one socket: a request that met a full socket waits for poll while a later one, issued
//! inline, goes first; and a request sent again for its rest goes after requests queued since.
//! So a stream has one chain of requests in the kernel at a time, linked with `IOSQE_IO_LINK`
//! (the kernel starts each only after the one before it completed); requests queued meanwhile
//! wait in user space and form the next chain once every result of this one is in. A request
//! that ends short or fails breaks the chain: the kernel cancels the rest (`-ECANCELED`, with a
//! notification still to come for a zero-copy one), and they are sent again, in order, after
//! the rest of the broken one. A request that fails for good (the peer reset, the socket shut)
//! breaks the stream: nothing after it is sent, every later buffer comes back with an error, as
//! the bytes after a gap would corrupt the stream.

/// The send order of a stream socket's requests (see the module docs): which requests go to the
/// kernel as the next chain, and what a chain's results mean for the requests after them.
/// Requests are named by keys (the ring's slots); the per-request CQE logic stays in
/// [`State`](super::state::State).
#[derive(Debug, Default)]
pub(crate) struct Order {
    /// Requests not yet in the kernel, in send order.
    pending: std::collections::VecDeque<u32>,
    /// The chain in the kernel, in send order (empty: none).
    chain: Vec<u32>,
    /// Results of `chain` still to come.
    due: usize,
    /// Requests of `chain` to send again once its results are in.
    again: Vec<u32>,
    /// The errno of the request that broke the stream, if one did.
    broken: Option<i32>,
}

impl Order {
    /// Queues a new request behind every other.
    pub fn push(&mut self, key: u32) {
        self.pending.push_back(key);
    }

    /// The errno of the request that broke the stream: later requests are not sent.
    pub fn broken(&self) -> Option<i32> {
        self.broken
    }

    /// Whether requests wait in user space for the chain in the kernel to end (or for
    /// [`Order::launch`]).
    #[cfg(test)]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a chain is in the kernel.
    #[cfg(test)]
    pub fn in_kernel(&self) -> bool {
        !self.chain.is_empty()
    }

    /// With no chain in the kernel, makes the next one of at most `room` waiting requests and
    /// returns them in order: each is to be submitted linked to the next (`IOSQE_IO_LINK`), the
    /// last unlinked, all in one `io_uring_enter` (a chain cannot span two). Returns nothing
    /// while a chain is in the kernel or the stream is broken.
    pub fn launch(&mut self, room: usize) -> &[u32] {
        if !self.chain.is_empty() || self.broken.is_some() {
            return &[];
        }
        let n = room.min(self.pending.len());
        self.chain.extend(self.pending.drain(..n));
        self.due = n;
        &self.chain
    }

    /// A result CQE of `key`, a request of the chain: `resubmit` when its [`State`](super::state::State) asks to send
    /// it again (a short result, a refused flag, a cancelled link), `failed` with the errno when
    /// it ended in an error that stands. When that was the chain's last result, the chain ends:
    /// the requests to send again go first in the queue, in order; on a broken stream they and
    /// every waiting request are appended to `abandon` instead, to be given up
    /// ([`State::abandon`](super::state::State::abandon)).
    pub fn on_result(
        &mut self,
        key: u32,
        resubmit: bool,
        failed: Option<i32>,
        abandon: &mut Vec<u32>,
    ) {
        debug_assert!(
            self.chain.contains(&key),
            "a result of the chain in the kernel"
        );
        if resubmit {
            self.again.push(key);
        }
        if let Some(errno) = failed {
            self.broken.get_or_insert(errno);
        }
        self.due = self.due.saturating_sub(1);
        if self.due > 0 {
            return;
        }
        // The chain is over. Its requests to send again keep their order in it (their CQEs
        // may have come in any order), and go before everything queued since.
        let again = std::mem::take(&mut self.again);
        for &k in self.chain.iter().rev() {
            if again.contains(&k) {
                self.pending.push_front(k);
            }
        }
        self.chain.clear();
        if self.broken.is_some() {
            abandon.extend(self.pending.drain(..));
        }
    }
}

#[cfg(test)]
mod tests {
    //! [`Order`] with [`State`], glued as the ring glues them, against a model kernel that runs a
    //! linked chain in order (a request that ends short or fails cancels the rest of its chain),
    //! posts result and notification CQEs that are then delivered in any order, and appends what
    //! each request sent to one stream. A cancelled zero-copy request's result has `F_MORE` or
    //! not (older kernels and 6.18), and a notification follows either way.

    use super::super::state::{Request, State, Step};
    use super::*;
    use crate::sys::abi;
    use proptest::prelude::*;

    const MORE: u32 = abi::IORING_CQE_F_MORE;
    const NOTIF: u32 = abi::IORING_CQE_F_NOTIF;

    /// What the model kernel does with the next request it runs.
    #[derive(Clone, Copy, Debug)]
    enum Fate {
        /// Sends all of it.
        Whole,
        /// Sends this share (in 1/256) of the rest, then the link fails.
        Short(u8),
        /// Cannot pin the pages: `-ENOMEM` (zero-copy only, as the kernel does).
        NoMemory,
        /// The connection is reset: `-ECONNRESET` now, `-EPIPE` for everything after.
        Reset,
    }

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            8 => Just(Fate::Whole),
            2 => any::<u8>().prop_map(Fate::Short),
            1 => Just(Fate::NoMemory),
            1 => Just(Fate::Reset),
        ]
    }

    /// One step of the driver.
    #[derive(Clone, Copy, Debug)]
    enum Op {
        /// The user queues the next request.
        Push,
        /// The ring launches a chain into a queue with this much room.
        Launch(u8),
        /// One outstanding CQE (picked by this number) is delivered.
        Deliver(u16),
        /// A CQE of a finished request is delivered again (the ring must ignore it).
        Duplicate(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Push),
            2 => (1u8..6).prop_map(Op::Launch),
            6 => any::<u16>().prop_map(Op::Deliver),
            1 => any::<u16>().prop_map(Op::Duplicate),
        ]
    }

    #[derive(Debug)]
    struct Back {
        sent: usize,
        error: Option<i32>,
        abandoned: Option<i32>,
    }

    /// A CQE the model kernel posted.
    #[derive(Clone, Copy, Debug)]
    struct Cqe {
        key: u32,
        generation: u32,
        res: i32,
        flags: u32,
        /// A notification of a submission that ran: until it is delivered the kernel may still
        /// read the buffer.
        holds: bool,
    }

    struct Sim {
        zero_copy: bool,
        /// Cancelled requests' results carry no `F_MORE` (Linux 6.18).
        bare_cancel: bool,
        lens: Vec<usize>,
        /// Where each request's bytes start in the stream the calls make.
        starts: Vec<usize>,
        states: Vec<State>,
        order: Order,
        back: Vec<Option<Back>>,
        pushed: usize,
        /// CQEs posted and not yet delivered.
        cqes: Vec<Cqe>,
        /// CQEs delivered, for duplicates.
        seen: Vec<Cqe>,
        /// What the peer received: positions in the calls' stream.
        stream: Vec<usize>,
        reset: bool,
        fates: Vec<Fate>,
        next_fate: usize,
    }

    impl Sim {
        fn new(lens: Vec<usize>, zero_copy: bool, fates: Vec<Fate>) -> Sim {
            Sim::with_cancel(lens, zero_copy, fates, true)
        }

        fn with_cancel(
            lens: Vec<usize>,
            zero_copy: bool,
            fates: Vec<Fate>,
            bare_cancel: bool,
        ) -> Sim {
            let mut starts = Vec::new();
            let mut at = 0;
            for &l in &lens {
                starts.push(at);
                at += l;
            }
            Sim {
                zero_copy,
                bare_cancel,
                states: vec![State::new(0); lens.len()],
                back: lens.iter().map(|_| None).collect(),
                lens,
                starts,
                order: Order::default(),
                pushed: 0,
                cqes: Vec::new(),
                seen: Vec::new(),
                stream: Vec::new(),
                reset: false,
                fates,
                next_fate: 0,
            }
        }

        fn fate(&mut self) -> Fate {
            let f = self.fates[self.next_fate % self.fates.len()];
            self.next_fate += 1;
            f
        }

        fn request(&self, key: u32) -> Request {
            Request {
                len: self.lens[key as usize],
                zero_copy: self.zero_copy,
                report_usage: false,
                linked: true,
            }
        }

        fn push(&mut self) {
            if self.pushed < self.lens.len() && self.order.broken().is_none() {
                self.order.push(self.pushed as u32);
                self.pushed += 1;
            }
        }

        /// The kernel runs a chain: in order, each after the one before, the rest cancelled
        /// once one ends short or fails.
        fn launch(&mut self, room: usize) {
            let chain = self.order.launch(room).to_vec();
            let mut cancelled = false;
            for key in chain {
                let k = key as usize;
                let st = &self.states[k];
                let (generation, sent) = (st.generation(), st.sent());
                // A zero-copy request sent again by copy has no notification.
                let zc = self.zero_copy && !st.copy_retry();
                let more = if zc { MORE } else { 0 };
                // (result, announced notification, a notification at all, it ran)
                let (res, announced, notif, ran) = if cancelled {
                    (-libc::ECANCELED, zc && !self.bare_cancel, zc, false)
                } else if self.reset {
                    (-libc::EPIPE, zc, zc, true)
                } else {
                    let rest = self.lens[k] - sent;
                    match self.fate() {
                        // The pages were not pinned: nothing held, but announced.
                        Fate::NoMemory if zc && sent == 0 => (-libc::ENOMEM, true, true, false),
                        Fate::Reset => {
                            self.reset = true;
                            (-libc::ECONNRESET, zc, zc, true)
                        }
                        Fate::Short(share) if rest > 1 => {
                            let n = (rest * share as usize / 256).clamp(1, rest - 1);
                            let at = self.starts[k] + sent;
                            self.stream.extend(at..at + n);
                            (n as i32, zc, zc, true)
                        }
                        _ => {
                            let at = self.starts[k] + sent;
                            self.stream.extend(at..at + rest);
                            self.cqes.push(Cqe {
                                key,
                                generation,
                                res: rest as i32,
                                flags: more,
                                holds: false,
                            });
                            if zc {
                                self.cqes.push(Cqe {
                                    key,
                                    generation,
                                    res: 0,
                                    flags: NOTIF,
                                    holds: true,
                                });
                            }
                            continue;
                        }
                    }
                };
                cancelled = true;
                let flags = if announced { MORE } else { 0 };
                self.cqes.push(Cqe {
                    key,
                    generation,
                    res,
                    flags,
                    holds: false,
                });
                if notif {
                    self.cqes.push(Cqe {
                        key,
                        generation,
                        res: 0,
                        flags: NOTIF,
                        holds: ran,
                    });
                }
            }
        }

        /// Delivers one CQE as the ring does.
        fn deliver(&mut self, c: Cqe) {
            let (key, res, flags) = (c.key, c.res, c.flags);
            let k = key as usize;
            if self.back[k].is_some() {
                // The ring finds no slot for it and drops it.
                return;
            }
            self.seen.push(c);
            let req = self.request(key);
            let step = self.states[k].on_cqe(req, c.generation, res, flags, &mut false);
            let mut abandon = Vec::new();
            if flags & NOTIF == 0 {
                let failed = (step != Step::Resubmit && self.states[k].sent() < req.len)
                    .then(|| self.states[k].error().unwrap_or(libc::EIO));
                self.order
                    .on_result(key, step == Step::Resubmit, failed, &mut abandon);
            }
            if step == Step::Done {
                self.finish(key);
            }
            let errno = self.order.broken().unwrap_or(libc::EIO);
            for a in abandon {
                if self.states[a as usize].abandon(errno) == Step::Done {
                    self.finish(a);
                }
            }
        }

        fn finish(&mut self, key: u32) {
            let k = key as usize;
            assert!(self.back[k].is_none(), "request {k} came back twice");
            // Never while a submission that ran may still read it, nor before a result.
            assert!(
                !self
                    .cqes
                    .iter()
                    .any(|c| c.key == key && (c.holds || c.flags & NOTIF == 0)),
                "request {k} came back with a CQE still due: {:?}",
                self.cqes
            );
            assert!(self.states[k].settled());
            let st = &self.states[k];
            self.back[k] = Some(Back {
                sent: st.sent(),
                error: st.error(),
                abandoned: st.abandoned(),
            });
        }

        fn step(&mut self, op: Op) {
            match op {
                Op::Push => self.push(),
                Op::Launch(room) => self.launch(room as usize),
                Op::Deliver(i) if !self.cqes.is_empty() => {
                    let c = self.cqes.remove(i as usize % self.cqes.len());
                    self.deliver(c);
                }
                Op::Duplicate(i) if !self.seen.is_empty() => {
                    let c = self.seen[i as usize % self.seen.len()];
                    if self.back[c.key as usize].is_some() {
                        self.deliver(c);
                    }
                }
                _ => {}
            }
        }

        /// Runs to the end: everything pushed, launched and delivered.
        fn finish_all(&mut self) {
            // A kernel that sends one byte a submission (fates of `Short(0)` only) needs, per
            // byte, a result and a cancelled result for every request linked behind it: the
            // bound follows bytes times requests (a flat 100 000 steps did not settle 15
            // requests of 28 KB, nor 8 steps a byte 5 requests of 7.5 KB; proptest found both).
            let total: usize = self.lens.iter().sum();
            for _ in 0..4 * (total + 1) * (self.lens.len() + 1) + 1000 {
                if let Some(c) = self.cqes.pop() {
                    self.deliver(c);
                } else if self.pushed < self.lens.len() && self.order.broken().is_none() {
                    self.push();
                } else if self.order.has_pending() && !self.order.in_kernel() {
                    self.launch(4);
                } else {
                    return;
                }
            }
            panic!("the model does not settle");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Each request comes back once, never before its last CQE, and the peer receives the
        /// calls' bytes in call order, whole, up to a reset and nothing after it.
        #[test]
        fn stream_order_holds_whatever_the_kernel_does(
            lens in proptest::collection::vec(1usize..5000, 1..24),
            zero_copy in any::<bool>(),
            bare_cancel in any::<bool>(),
            fates in proptest::collection::vec(fate(), 1..16),
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut sim = Sim::with_cancel(lens, zero_copy, fates, bare_cancel);
            for op in ops {
                sim.step(op);
            }
            sim.finish_all();
            // In order, no byte twice, none skipped.
            let want: Vec<usize> = (0..sim.stream.len()).collect();
            prop_assert_eq!(&sim.stream, &want);
            let total: usize = sim.lens.iter().sum();
            if !sim.reset {
                prop_assert_eq!(sim.stream.len(), total);
            }
            let mut sent_by_reports = 0;
            for (k, back) in sim.back.iter().enumerate() {
                if k >= sim.pushed {
                    // Refused at push after the reset: never queued.
                    prop_assert!(sim.reset && back.is_none());
                    continue;
                }
                let back = back.as_ref().expect("every pushed request comes back");
                if back.error.is_none() && back.abandoned.is_none() {
                    prop_assert_eq!(back.sent, sim.lens[k]);
                } else {
                    prop_assert!(sim.reset, "an error without a reset: {:?}", back);
                }
                sent_by_reports += back.sent;
            }
            // What the buffers say was sent is what the peer got.
            prop_assert_eq!(sent_by_reports, sim.stream.len());
        }
    }

    #[test]
    fn a_chain_broken_by_a_short_send_goes_again_in_order_before_later_requests() {
        let mut sim = Sim::new(vec![1000, 1000, 1000, 1000], true, vec![Fate::Whole]);
        for _ in 0..3 {
            sim.push();
        }
        sim.fates = vec![Fate::Short(128), Fate::Whole];
        sim.launch(8);
        // 0 sent 500 and broke the link: 1 and 2 cancelled; 3 queued meanwhile waits.
        sim.push();
        assert_eq!(sim.stream.len(), 500);
        // Deliver the cancellations first, then the short result.
        let mut cqes = std::mem::take(&mut sim.cqes);
        cqes.sort_by_key(|c| std::cmp::Reverse(c.key));
        for c in cqes {
            sim.deliver(c);
        }
        assert!(!sim.order.in_kernel());
        sim.fates = vec![Fate::Whole];
        sim.launch(8);
        sim.finish_all();
        assert_eq!(sim.stream, (0..4000).collect::<Vec<_>>());
        assert!(sim.back.iter().all(|b| b.as_ref().unwrap().sent == 1000));
    }

    #[test]
    fn after_a_reset_nothing_later_is_sent_and_every_buffer_says_why() {
        let mut sim = Sim::new(vec![100; 5], false, vec![Fate::Whole, Fate::Reset]);
        for _ in 0..5 {
            sim.push();
        }
        sim.launch(8);
        sim.finish_all();
        assert_eq!(sim.stream, (0..100).collect::<Vec<_>>());
        let b = |k: usize| sim.back[k].as_ref().unwrap();
        assert_eq!((b(0).sent, b(0).error), (100, None));
        assert_eq!(b(1).error, Some(libc::ECONNRESET));
        for k in 2..5 {
            assert_eq!((b(k).sent, b(k).abandoned), (0, Some(libc::ECONNRESET)));
        }
        assert_eq!(sim.order.broken(), Some(libc::ECONNRESET));
    }
}
