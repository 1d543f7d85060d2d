//! Which buffers a range of completed `MSG_ZEROCOPY` ids frees.
//!
//! Each successful send call on a socket with `SO_ZEROCOPY` takes the next 32-bit id, wrapping at
//! `u32::MAX`. A buffer may span several ids (a TCP send that went out in parts); it is free only
//! when every one of them has completed. Completions arrive as inclusive ranges, coalesced and
//! possibly out of order. The tracker unwraps ids onto a 64-bit sequence (fewer than 2^31 calls
//! are ever in flight) and keeps the buffers in flight by their first sequence number.

use std::collections::BTreeMap;

use crate::errqueue::Completion;

/// A buffer freed by the tracker: the kernel no longer reads it.
#[derive(Debug)]
pub struct Freed<B> {
    /// The buffer.
    pub buf: B,
    /// Whether it went out with `MSG_ZEROCOPY` (false: sent by copy, returned at once).
    pub zero_copy: bool,
    /// Whether the kernel reported copying any of its calls (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied: bool,
}

#[derive(Debug)]
struct Entry<B> {
    buf: B,
    last: u64,
    remaining: u64,
    copied: bool,
}

/// Buffers in flight and the ids they wait for.
#[derive(Debug)]
pub struct Tracker<B> {
    next: u64,
    inflight: BTreeMap<u64, Entry<B>>,
    /// Calls whose id was assigned but not yet given to a buffer (a buffer in the middle of a
    /// multi-call send), so a completion for them is counted when the buffer is registered.
    early: BTreeMap<u64, bool>,
}

impl<B> Default for Tracker<B> {
    fn default() -> Self {
        Tracker::starting_at(0)
    }
}

impl<B> Tracker<B> {
    /// A tracker whose next id is `id`: 0 on a fresh socket; where an earlier sender of the
    /// crate left the socket's count (the file sender's next mmap window); other values for
    /// tests.
    pub fn starting_at(id: u32) -> Tracker<B> {
        Tracker {
            next: u64::from(id),
            inflight: BTreeMap::new(),
            early: BTreeMap::new(),
        }
    }

    /// Buffers in flight.
    pub fn len(&self) -> usize {
        self.inflight.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.inflight.is_empty() && self.early.is_empty()
    }

    /// The kernel id the next successful zero-copy call will take.
    pub fn next_id(&self) -> u32 {
        self.next as u32
    }

    /// Records that `calls` successful zero-copy send calls carried `buf` (their ids are the
    /// next `calls` ids). With `calls == 0` the buffer is returned at once.
    pub fn push(&mut self, buf: B, calls: u64, out: &mut Vec<Freed<B>>) {
        if calls == 0 {
            out.push(Freed {
                buf,
                zero_copy: false,
                copied: false,
            });
            return;
        }
        let first = self.next;
        let last = first + calls - 1;
        self.next += calls;
        // Completions that arrived for these ids before the buffer was registered.
        let mut remaining = calls;
        let mut copied = false;
        let early: Vec<u64> = self.early.range(first..=last).map(|(&s, _)| s).collect();
        for seq in early {
            copied |= self.early.remove(&seq).unwrap_or(false);
            remaining -= 1;
        }
        if remaining == 0 {
            out.push(Freed {
                buf,
                zero_copy: true,
                copied,
            });
        } else {
            self.inflight.insert(
                first,
                Entry {
                    buf,
                    last,
                    remaining,
                    copied,
                },
            );
        }
    }

    /// Maps a kernel id onto the sequence: the sequence number nearest to `next`, before it
    /// (registered calls) or at and after it (calls of a send still in progress, whose
    /// completions can arrive while it goes on, as under an async sender). Fewer than 2^31 calls
    /// are ever in flight, so the nearer side is the right one.
    fn unwrap(&self, id: u32) -> u64 {
        let ahead = id.wrapping_sub(self.next as u32);
        if ahead < 1 << 31 {
            self.next + u64::from(ahead)
        } else {
            let back = u64::from(ahead.wrapping_neg());
            // Ids from before the tracker's start cannot be ours; they map below it.
            self.next.saturating_sub(back)
        }
    }

    /// Applies one completion range, returning every buffer it frees.
    pub fn complete(&mut self, c: Completion, out: &mut Vec<Freed<B>>) {
        let last = self.unwrap(c.last);
        let first = last.saturating_sub(c.count() - 1);
        // Ids at or past `next` belong to calls not yet registered (a send in progress).
        if last >= self.next {
            for seq in self.next.max(first)..=last {
                self.early.insert(seq, c.copied);
            }
        }
        let last = last.min(self.next.saturating_sub(1));
        if first > last || self.next == 0 {
            return;
        }
        // The entry holding `first` starts at or before it.
        let start = self
            .inflight
            .range(..=first)
            .next_back()
            .map_or(first, |(&k, _)| k);
        let keys: Vec<u64> = self.inflight.range(start..=last).map(|(&k, _)| k).collect();
        for k in keys {
            let e = self.inflight.get_mut(&k).expect("key just listed");
            if e.last < first {
                continue;
            }
            let overlap = e.last.min(last) - k.max(first) + 1;
            e.remaining = e.remaining.saturating_sub(overlap);
            e.copied |= c.copied;
            if e.remaining == 0 {
                let e = self.inflight.remove(&k).expect("key just listed");
                out.push(Freed {
                    buf: e.buf,
                    zero_copy: true,
                    copied: e.copied,
                });
            }
        }
    }

    /// Gives up every buffer still in flight, for leaking: the caller must not free them.
    pub fn abandon(&mut self) -> Vec<B> {
        self.early.clear();
        std::mem::take(&mut self.inflight)
            .into_values()
            .map(|e| e.buf)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errqueue::{self, Entry as Q, tests::cmsg};
    use crate::sys::abi;

    /// Completions as the kernel writes them, parsed back: ranges `(first, last, copied)`.
    fn fixture(ranges: &[(u32, u32, bool)]) -> Vec<Completion> {
        let mut bytes = Vec::new();
        for &(a, b, copied) in ranges {
            bytes.extend(cmsg(
                abi::SOL_IP,
                abi::IP_RECVERR,
                0,
                abi::SO_EE_ORIGIN_ZEROCOPY,
                copied as u8,
                a,
                b,
            ));
        }
        errqueue::parse(&bytes)
            .unwrap()
            .into_iter()
            .map(|e| match e {
                Q::Zerocopy(c) => c,
                Q::Other { .. } => panic!("not a completion"),
            })
            .collect()
    }

    fn run(
        start: u32,
        calls: &[u64],
        ranges: &[(u32, u32, bool)],
    ) -> (Vec<(u32, bool, bool)>, Tracker<u32>) {
        let mut t = Tracker::starting_at(start);
        let mut out = Vec::new();
        for (i, &n) in calls.iter().enumerate() {
            t.push(i as u32, n, &mut out);
        }
        for c in fixture(ranges) {
            t.complete(c, &mut out);
        }
        (
            out.into_iter()
                .map(|r| (r.buf, r.zero_copy, r.copied))
                .collect(),
            t,
        )
    }

    #[test]
    fn coalesced_range_frees_every_buffer_once() {
        let (got, t) = run(0, &[1, 1, 1, 1], &[(0, 3, false)]);
        assert_eq!(
            got,
            vec![
                (0, true, false),
                (1, true, false),
                (2, true, false),
                (3, true, false)
            ]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn buffer_of_several_calls_waits_for_all_of_them() {
        // Buffer 0 went out in 3 calls (ids 0-2), buffer 1 in 1 (id 3).
        let (got, t) = run(0, &[3, 1], &[(0, 1, false), (3, 3, true)]);
        assert_eq!(got, vec![(1, true, true)], "buffer 0 still waits for id 2");
        assert_eq!(t.len(), 1);
        let (got, t) = run(0, &[3, 1], &[(0, 1, false), (3, 3, true), (2, 2, false)]);
        assert_eq!(got, vec![(1, true, true), (0, true, false)]);
        assert!(t.is_empty());
    }

    #[test]
    fn out_of_order_ranges() {
        let (got, t) = run(0, &[1, 2, 1], &[(3, 3, false), (1, 2, true), (0, 0, false)]);
        assert_eq!(
            got,
            vec![(2, true, false), (1, true, true), (0, true, false)]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn ids_wrap_around_u32() {
        // Start 2 ids before the wrap: ids MAX-1, MAX, 0, 1, 2.
        let start = u32::MAX - 1;
        let (got, t) = run(start, &[2, 2, 1], &[(u32::MAX - 1, 1, false)]);
        assert_eq!(got, vec![(0, true, false), (1, true, false)]);
        assert_eq!(t.len(), 1);
        let (got, t) = run(
            start,
            &[2, 2, 1],
            &[(0, 2, false), (u32::MAX - 1, u32::MAX, true)],
        );
        assert_eq!(
            got,
            vec![(1, true, false), (2, true, false), (0, true, true)]
        );
        assert!(t.is_empty());
        assert_eq!(t.next_id(), 3);
    }

    #[test]
    fn copy_sends_return_at_once() {
        let (got, t) = run(0, &[0, 1, 0], &[]);
        assert_eq!(got, vec![(0, false, false), (2, false, false)]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn completion_before_registration_is_kept() {
        // A completion for id 0 arrives while the buffer's multi-call send is still in progress.
        let mut t: Tracker<u32> = Tracker::default();
        let mut out = Vec::new();
        for c in fixture(&[(0, 0, true)]) {
            t.complete(c, &mut out);
        }
        assert!(out.is_empty());
        t.push(7, 2, &mut out);
        assert!(out.is_empty(), "id 1 still outstanding");
        for c in fixture(&[(1, 1, false)]) {
            t.complete(c, &mut out);
        }
        assert_eq!(out.len(), 1);
        assert!(out[0].copied);
        assert!(t.is_empty());
    }

    #[test]
    fn completion_ahead_of_the_registered_ids_is_kept() {
        // Buffers 0 and 1 took ids 5 and 6; buffer 2 is sending (ids 7, 8) when a completion
        // for 5-8 arrives: it frees 0 and 1 and is kept for 2 (the id maps ahead, not 2^32 back).
        let mut t: Tracker<u32> = Tracker::starting_at(5);
        let mut out = Vec::new();
        t.push(0, 1, &mut out);
        t.push(1, 1, &mut out);
        for c in fixture(&[(5, 8, false)]) {
            t.complete(c, &mut out);
        }
        assert_eq!(out.iter().map(|f| f.buf).collect::<Vec<_>>(), [0, 1]);
        t.push(2, 3, &mut out);
        assert_eq!(out.len(), 2, "id 9 of buffer 2 still outstanding");
        for c in fixture(&[(9, 9, false)]) {
            t.complete(c, &mut out);
        }
        assert_eq!(out.iter().map(|f| f.buf).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(t.is_empty());
    }

    #[test]
    fn every_buffer_back_exactly_once_under_random_ranges() {
        // 2000 buffers of 1-3 calls across the wrap; completions in shuffled, coalesced chunks.
        let mut rng = 0x853c_49e6_748f_ea9bu64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let start = u32::MAX - 1000;
        let mut t = Tracker::starting_at(start);
        let mut out = Vec::new();
        let mut total_calls = 0u64;
        for i in 0..2000u32 {
            let calls = 1 + next(3);
            total_calls += calls;
            t.push(i, calls, &mut out);
        }
        let mut chunks = Vec::new();
        let mut s = 0u64;
        while s < total_calls {
            let n = (1 + next(7)).min(total_calls - s);
            chunks.push((
                start.wrapping_add(s as u32),
                start.wrapping_add((s + n - 1) as u32),
            ));
            s += n;
        }
        for i in (1..chunks.len()).rev() {
            chunks.swap(i, next(i as u64 + 1) as usize);
        }
        let ranges: Vec<(u32, u32, bool)> =
            chunks.into_iter().map(|(a, b)| (a, b, false)).collect();
        for c in fixture(&ranges) {
            t.complete(c, &mut out);
        }
        let mut ids: Vec<u32> = out.iter().map(|r| r.buf).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..2000).collect::<Vec<_>>());
        assert!(t.is_empty());
    }
}

#[cfg(test)]
mod model {
    //! The tracker against a model kernel: each send call takes the next id (from any start,
    //! wrapping at 2^32), the kernel completes every id once and reports completed ids as
    //! ranges it coalesces across buffers, read in any order, some before the buffer whose calls
    //! they belong to is registered (an async send part-way), and late duplicates of ranges
    //! whose buffers are already back.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Copy, Debug)]
    enum Op {
        /// A buffer sent in this many calls, with this many deliveries between its calls and
        /// its registration.
        Send(u8, u8),
        /// Deliver a range around the completed id picked by this number, up to this long.
        Deliver(u16, u8, bool),
        /// Deliver again a range already delivered whose buffers are back.
        Duplicate(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..5, 0u8..3).prop_map(|(c, d)| Op::Send(c, d)),
            4 => (any::<u16>(), 1u8..40, any::<bool>()).prop_map(|(p, l, c)| Op::Deliver(p, l, c)),
            1 => any::<u16>().prop_map(Op::Duplicate),
        ]
    }

    struct Sim {
        start: u64,
        tracker: Tracker<usize>,
        /// Per buffer: its sequence numbers (first, count), whether back.
        bufs: Vec<((u64, u64), bool)>,
        next: u64,
        /// Completed ids not yet read, as sequence numbers.
        undelivered: BTreeSet<u64>,
        /// Ids read, with their copied flag.
        delivered: std::collections::BTreeMap<u64, bool>,
        /// Ranges read, for duplicates: (first, last, copied) as sequence numbers.
        ranges: Vec<(u64, u64, bool)>,
    }

    impl Sim {
        fn deliver(&mut self, pick: u16, len: u8, copied: bool) {
            let Some(&at) = self
                .undelivered
                .iter()
                .nth(pick as usize % self.undelivered.len().max(1))
            else {
                return;
            };
            let (mut lo, mut hi) = (at, at);
            while hi - lo + 1 < u64::from(len) && self.undelivered.contains(&(hi + 1)) {
                hi += 1;
            }
            while hi - lo + 1 < u64::from(len) && lo > 0 && self.undelivered.contains(&(lo - 1)) {
                lo -= 1;
            }
            for seq in lo..=hi {
                self.undelivered.remove(&seq);
                self.delivered.insert(seq, copied);
            }
            self.ranges.push((lo, hi, copied));
            self.read(lo, hi, copied);
        }

        fn read(&mut self, lo: u64, hi: u64, copied: bool) {
            let c = Completion {
                first: (self.start + lo) as u32,
                last: (self.start + hi) as u32,
                copied,
            };
            let mut out = Vec::new();
            self.tracker.complete(c, &mut out);
            self.back(out);
        }

        fn back(&mut self, out: Vec<Freed<usize>>) {
            for f in out {
                let ((first, count), ref mut was_back) = self.bufs[f.buf];
                assert!(!*was_back, "buffer {} came back twice", f.buf);
                *was_back = true;
                assert_eq!(f.zero_copy, count > 0, "buffer {}", f.buf);
                let mut copied = false;
                for seq in first..first + count {
                    let c = self.delivered.get(&seq);
                    assert!(
                        c.is_some(),
                        "buffer {} back before id {seq} completed",
                        f.buf
                    );
                    copied |= *c.unwrap();
                }
                assert_eq!(f.copied, copied, "buffer {}", f.buf);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn every_buffer_back_once_and_only_after_its_ids(
            start in prop_oneof![Just(0u32), Just(u32::MAX - 20), any::<u32>()],
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let mut sim = Sim {
                start: u64::from(start),
                tracker: Tracker::starting_at(start),
                bufs: Vec::new(),
                next: 0,
                undelivered: BTreeSet::new(),
                delivered: Default::default(),
                ranges: Vec::new(),
            };
            for op in ops {
                match op {
                    Op::Send(calls, early) => {
                        let first = sim.next;
                        sim.next += u64::from(calls);
                        sim.undelivered.extend(first..sim.next);
                        // Completions read while the buffer is part-way (an async send).
                        for i in 0..early {
                            sim.deliver(u16::from(i) * 7, 3, i % 2 == 0);
                        }
                        let mut out = Vec::new();
                        sim.bufs.push(((first, u64::from(calls)), false));
                        sim.tracker.push(sim.bufs.len() - 1, u64::from(calls), &mut out);
                        sim.back(out);
                    }
                    Op::Deliver(pick, len, copied) => sim.deliver(pick, len, copied),
                    Op::Duplicate(pick) if !sim.ranges.is_empty() => {
                        let (lo, hi, copied) = sim.ranges[pick as usize % sim.ranges.len()];
                        // Only ranges whose buffers are all back: the kernel never repeats an
                        // id, and a repeat of one still awaited cannot be told from the first.
                        let all_back = sim.bufs.iter().all(|&((f, n), back)| {
                            back || f + n <= lo || f > hi
                        });
                        if all_back && hi < sim.next {
                            sim.read(lo, hi, copied);
                        }
                    }
                    Op::Duplicate(_) => {}
                }
            }
            while !sim.undelivered.is_empty() {
                sim.deliver(0, 16, false);
            }
            for (i, &(_, back)) in sim.bufs.iter().enumerate() {
                prop_assert!(back, "buffer {} never came back", i);
            }
            prop_assert!(sim.tracker.is_empty());
        }
    }
}
