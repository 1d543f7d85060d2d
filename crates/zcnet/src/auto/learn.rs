//! The online learner: what a byte costs each way on this sender's own socket and traffic.
//!
//! Sends are cut per size class into *rounds* of one way (copy or zero copy), about
//! [`ROUND_BYTES`](super::Learning::round_bytes) each. A round's cost is the sending thread's CPU time from its first send to
//! the first send of the class's next round (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, one read
//! per round), over the round's bytes: the send calls, the completions reaped meanwhile and
//! whatever else the thread did, which both ways share. Now and then a round goes the way not
//! chosen (*exploring*); its cost over the mean of the rounds just before and after it is one
//! *pair*, so that a drift of the machine's load cancels. The median of the last [`PAIRS_KEPT`](super::Learning::pairs_kept)
//! pairs, zero copy's cost over copy's, decides: zero copy below `1 - HYSTERESIS`, copy above
//! `1 + HYSTERESIS`, the current way in between.
//!
//! A round is not measured when its edges were read on two threads, or when other auto senders
//! sent on its thread meanwhile (their work is in the thread's CPU too); a round explores only
//! after a measured one, so senders that share a thread keep their prior.
//!
//! A class starts from the prior: the profile's threshold, unless a neighbour class has already
//! learned (zero copy that pays for smaller messages pays for larger ones; copy that wins for
//! larger ones wins for smaller ones). Its first [`FIRST_PAIRS`](super::Learning::first_pairs) pairs are measured back to back;
//! then one round in `every` explores, where `every` keeps the exploring cost near
//! [`EXPLORE_COST`]: the other way costs `gap` more per byte, so exploring one round in
//! `gap / EXPLORE_COST` costs that share, within [`EVERY_MIN`](super::Learning::explore_every)..=[`EVERY_MAX`](super::Learning::explore_every) rounds.

use std::thread::ThreadId;

use serde::Serialize;

/// Bytes in a round, about: long enough that the sends queued at its edges (an io_uring batch)
/// are a small part of it, and the one clock read a negligible one.
pub(crate) const ROUND_BYTES: usize = 4 << 20;
/// Sends in a round, at least and at most.
pub(crate) const ROUND_SENDS: (u32, u32) = (16, 1024);
/// Pairs measured back to back when a class starts.
pub(crate) const FIRST_PAIRS: usize = 3;
/// Pairs whose median decides.
pub(crate) const PAIRS_KEPT: usize = 8;
/// The median must be this far from 1 to change the way a class sends.
pub(crate) const HYSTERESIS: f64 = 0.03;
/// How much cheaper zero copy must measure (the median of the pairs) before trains that the
/// route's device cuts in software (`tx-udp-segmentation` off) go by zero copy. There the
/// kernel segments each train by hand and the copy it saves is a small part of the cost: the
/// kernel's `udpgso_bench_tx` measured zero copy 0.92x the bytes per CPU second of copy (the
/// issue's figures) and zcnet 1.06x the cost (1.00-1.11), within this VM's spread of pairs, so
/// with the usual [`HYSTERESIS`](super::Learning::hysteresis) a sender flipped from run to run. A device fact raises the bar
/// instead of fixing the way: a machine where zero copy does pay there by more still learns it.
pub(crate) const SOFTWARE_GSO_MARGIN: f64 = 0.15;
/// A pair is kept only when the rounds on either side of its exploring round cost within this
/// much of each other (`|after - before|` over their mean): where they do not, the machine's
/// load changed across the pair, and the exploring round may have seen either load. The mean of
/// the two cancels a load that drifts; a step does not cancel (another process on the CPU for a
/// few rounds made a class flap four times in 3 million sends of a test before), so such a
/// pair is dropped and counted ([`AutoCounters::discarded_pairs`](super::AutoCounters)).
pub(crate) const DRIFT_MAX: f64 = 0.25;
/// The share of CPU the exploring aims to cost at steady state.
pub(crate) const EXPLORE_COST: f64 = 0.0025;
/// Explore one round in at least this many...
pub(crate) const EVERY_MIN: u32 = 32;
/// ...and at most this many: with a gap up to 2.56 (the other way costing 3.56 times as much,
/// as copy does beside io_uring's registered buffers at 64000 B) exploring still costs
/// [`EXPLORE_COST`](super::Learning::explore_cost). At 256 it cost 0.7-0.8 % of the CPU there (measured by the pairs,
/// issue 47). The price: a class that learned a wide gap needs about `5 * every` rounds to
/// follow a change, 10-20 s of a sender that keeps the link busy.
pub(crate) const EVERY_MAX: u32 = 1024;
/// Size classes: below 1 KiB, then one per power of two, up to 1 MiB and more.
pub(crate) const CLASSES: usize = 12;

/// The class of a message of `len` bytes.
#[inline]
pub(crate) fn class_of(len: usize) -> usize {
    if len < 1024 {
        0
    } else {
        ((usize::BITS - 1 - len.leading_zeros()) as usize - 9).min(CLASSES - 1)
    }
}

/// The bytes of class `i`: `[from, to)`, `to` `None` for the last.
pub(crate) fn class_range(i: usize) -> (usize, Option<usize>) {
    match i {
        0 => (0, Some(1024)),
        i if i == CLASSES - 1 => (1 << (i + 9), None),
        i => (1 << (i + 9), Some(1 << (i + 10))),
    }
}

fn round_sends(len: usize) -> u32 {
    let n = ROUND_BYTES / len.max(1);
    (n.min(u32::MAX as usize) as u32).clamp(ROUND_SENDS.0, ROUND_SENDS.1)
}

/// A reading of the sending thread's CPU clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) cpu_ns: u64,
    pub(crate) thread: ThreadId,
    /// The auto sends this thread had decided for other senders than the one reading
    /// ([`thread_sends`] less its own, wrapping): a round whose edges differ here shared its
    /// thread's CPU with them.
    pub(crate) others: u64,
}

thread_local! {
    /// Sends decided on this thread by every auto sender. A round whose thread also ran another
    /// auto sender's sends (many connections on one runtime thread) cannot say what its own
    /// bytes cost: the thread's CPU over it is theirs too.
    static SENDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The auto sends decided on this thread so far.
#[inline]
pub(crate) fn thread_sends() -> u64 {
    SENDS.with(std::cell::Cell::get)
}

/// Counts one auto send decided on this thread (after its round's edge read the clock).
#[inline]
pub(crate) fn count_thread_send() {
    SENDS.with(|n| n.set(n.get().wrapping_add(1)));
}

/// The calling thread's CPU clock now; `others` counts every auto send on the thread (the
/// sender subtracts its own).
pub(crate) fn read_clock() -> Option<Reading> {
    crate::sys::process::thread_cpu_ns().map(|cpu_ns| Reading {
        cpu_ns,
        thread: std::thread::current().id(),
        others: thread_sends(),
    })
}

/// What one size class of an auto sender has learned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeClass {
    /// The smallest message of the class, bytes.
    pub from: usize,
    /// The first size beyond it (`None` for the last class, 1 MiB and more).
    pub to: Option<usize>,
    /// Whether its messages go by zero copy now (what it learned, or the prior).
    pub zero_copy: bool,
    /// Whether that is learned (at least [`FIRST_PAIRS`](super::Learning::first_pairs) pairs) rather than the prior.
    pub learned: bool,
    /// Sends of this class, every way: its rounds' and its back-off sends.
    pub sends: u64,
    /// Of which spent exploring the way not chosen.
    pub explore_sends: u64,
    /// Of which by copy because completions had said the kernel copied (backing off).
    pub backoff_sends: u64,
    /// Sends of this class before its first learned choice.
    pub decided_after: Option<u64>,
    /// Zero copy's CPU per byte over copy's: the median of the pairs kept.
    pub zero_copy_over_copy: Option<f64>,
    /// The least and greatest of those pairs.
    pub spread: Option<[f64; 2]>,
    /// Pairs kept (at most [`PAIRS_KEPT`](super::Learning::pairs_kept)).
    pub pairs: usize,
    /// Times the class changed its way.
    pub switches: u64,
    /// One round in this many explores now.
    pub explore_every: u32,
    /// How far below 1 the median must be for the class to choose zero copy:
    /// [`HYSTERESIS`](super::Learning::hysteresis), or [`SOFTWARE_GSO_MARGIN`](super::Learning::software_gso_margin) for trains the route's device cuts in
    /// software.
    pub margin: f64,
    /// Whether it started from what an earlier sender of this process learned for the same
    /// path, route and class (its way and pairs), rather than from the prior.
    pub resumed: bool,
}

/// The sends and bytes of a class's rounds, per way: added up once a round, when it ends, not
/// once a send (the auto sender's per-send work is a few instructions, issue 47).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) zero_copy_calls: u64,
    pub(crate) zero_copy_bytes: u64,
    pub(crate) copy_calls: u64,
    pub(crate) copy_bytes: u64,
    pub(crate) explore_calls: u64,
    pub(crate) explore_bytes: u64,
}

impl Tally {
    fn add(&mut self, r: &Round) {
        let (calls, bytes) = (u64::from(r.sends), r.bytes);
        if r.zero_copy {
            self.zero_copy_calls += calls;
            self.zero_copy_bytes += bytes;
        } else {
            self.copy_calls += calls;
            self.copy_bytes += bytes;
        }
        if r.explore {
            self.explore_calls += calls;
            self.explore_bytes += bytes;
        }
    }

    fn calls(&self) -> u64 {
        self.zero_copy_calls + self.copy_calls
    }
}

#[derive(Clone, Debug)]
struct Round {
    zero_copy: bool,
    explore: bool,
    /// Whether its first edge read the clock: only rounds a pair may use are timed.
    timed: bool,
    start: Option<Reading>,
    sends: u32,
    target: u32,
    bytes: u64,
}

/// An explore round's cost, waiting for the round after it.
#[derive(Clone, Copy, Debug)]
struct Pending {
    zero_copy: bool,
    cost: f64,
    before: f64,
    /// The exploring round's bytes.
    bytes: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Class {
    started: bool,
    zero_copy: bool,
    margin: f64,
    decided_after: Option<u64>,
    /// The rounds that ended.
    tally: Tally,
    switches: u64,
    round: Option<Round>,
    /// Cost per byte (ns) of the last exploit round, if it was measured and the way has not
    /// changed since.
    before: Option<f64>,
    pending: Option<Pending>,
    ratios: [f64; PAIRS_KEPT],
    kept: usize,
    next: usize,
    since_explore: u32,
    every: u32,
    /// Whether the class started from another sender's [`Learned`].
    resumed: bool,
}

impl Default for Class {
    fn default() -> Class {
        Class {
            started: false,
            zero_copy: false,
            margin: HYSTERESIS,
            decided_after: None,
            tally: Tally::default(),
            switches: 0,
            round: None,
            before: None,
            pending: None,
            ratios: [0.0; PAIRS_KEPT],
            kept: 0,
            next: 0,
            since_explore: 0,
            every: EVERY_MIN,
            resumed: false,
        }
    }
}

/// Where a class starts: its way, and how much cheaper zero copy must measure to be chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Prior {
    pub(crate) zero_copy: bool,
    pub(crate) margin: f64,
}

impl Prior {
    /// `zero_copy`, decided with the usual [`HYSTERESIS`](super::Learning::hysteresis).
    pub(crate) fn way(zero_copy: bool) -> Prior {
        Prior {
            zero_copy,
            margin: HYSTERESIS,
        }
    }
}

/// What a round that ended changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Turn {
    pub(crate) unmeasured: bool,
    pub(crate) switched: bool,
    /// A pair was recorded: what the class learned changed (a sender shares it, [`Learned`]).
    pub(crate) recorded: bool,
    /// A pair was dropped: the load changed across it ([`DRIFT_MAX`](super::Learning::drift_max)).
    pub(crate) discarded: bool,
    /// CPU (ns) the exploring round of that pair spent beyond what the chosen way would have
    /// cost for its bytes (0 where exploring was the cheaper way).
    pub(crate) explore_extra_ns: u64,
    /// CPU (ns) of the round that ended, where it was measured...
    pub(crate) measured_ns: u64,
    /// ...and its bytes.
    pub(crate) measured_bytes: u64,
}

/// What a size class learned, as another sender of the same path and route starts from it: its
/// way, the bar zero copy had to clear, and the pairs behind it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Learned {
    zero_copy: bool,
    margin: f64,
    ratios: [f64; PAIRS_KEPT],
    kept: usize,
}

impl Class {
    /// Whether the next send of this class starts a round (and reads the clock).
    #[inline]
    pub(crate) fn at_edge(&self) -> bool {
        self.round.as_ref().is_none_or(|r| r.sends >= r.target)
    }

    /// Whether the next send of this class is an edge of a round a pair will use: the start or
    /// end of the round before an exploring one, of the exploring one, or of the round after.
    /// There a sender submits what it queued and takes the completions already there, so that
    /// the work of a round's sends counts in it, not in a neighbour of the other way. Edges
    /// between two rounds of the same way, away from exploring, need no such care.
    #[inline]
    pub(crate) fn edge_is_measured(&self) -> bool {
        match &self.round {
            Some(r) if r.sends >= r.target => {
                r.explore
                    || self.pending.is_some()
                    || self.decided_after.is_none()
                    // This round may be the one before an exploring round, or the next may.
                    || self.since_explore.saturating_add(2) >= self.every
            }
            _ => false,
        }
    }

    /// Whether the round that begins at the edge due now is timed: every round while the class
    /// learns; once it has chosen, only the rounds a pair may use (the one before an exploring
    /// round, the exploring one, the one after). The thread's CPU clock is a system call (about
    /// 0.5 µs on a KVM guest): read at every edge it cost about 8 ns a send at 64000 B, a third
    /// of the auto sender's overhead over its chosen way (issue 47). The edge reads the clock
    /// when that round is timed or the round it closes was.
    #[inline]
    fn next_timed(&self) -> bool {
        match &self.round {
            None => true,
            Some(r) => {
                self.decided_after.is_none()
                    || r.explore
                    // After this round the count is `since_explore + 1`; the round that
                    // closes with `every - 1` is the one before an exploring round.
                    || self.since_explore.saturating_add(3) >= self.every
            }
        }
    }

    /// Starts a class that never sent from `prior`.
    #[cold]
    pub(crate) fn start(&mut self, prior: Prior) {
        debug_assert!(!self.started, "a class starts once");
        self.started = true;
        self.zero_copy = prior.zero_copy;
        self.margin = prior.margin;
    }

    /// Starts a class that never sent from what the same class of another sender learned: its
    /// way and pairs, already decided, so that it explores at the learned cadence instead of
    /// measuring [`FIRST_PAIRS`](super::Learning::first_pairs) pairs back to back (a server's short connections, a bench's
    /// sender per run).
    #[cold]
    pub(crate) fn resume(&mut self, learned: &Learned) {
        debug_assert!(!self.started, "a class starts once");
        self.started = true;
        self.resumed = true;
        self.zero_copy = learned.zero_copy;
        self.margin = learned.margin;
        self.ratios = learned.ratios;
        self.kept = learned.kept;
        self.next = learned.kept % PAIRS_KEPT;
        self.decided_after = Some(0);
        if let Some(m) = self.median() {
            self.set_cadence(m);
        }
    }

    /// What this class has learned, for other senders; `None` before it decided.
    pub(crate) fn learned_state(&self) -> Option<Learned> {
        self.decided_after.map(|_| Learned {
            zero_copy: self.zero_copy,
            margin: self.margin,
            ratios: self.ratios,
            kept: self.kept,
        })
    }

    /// The way for the next send of `len` bytes when it falls inside the round in progress (no
    /// edge): the path of almost every send, two additions. `None` at an edge, or before the
    /// class started: [`Class::send`] then.
    #[inline]
    pub(crate) fn send_within(&mut self, len: usize) -> Option<bool> {
        match &mut self.round {
            Some(r) if r.sends < r.target => {
                r.sends += 1;
                r.bytes += len as u64;
                Some(r.zero_copy)
            }
            _ => None,
        }
    }

    /// The way for the next send of `len` bytes of a started class, its round ended and the
    /// next begun if due. Returns whether it goes by zero copy.
    pub(crate) fn send(
        &mut self,
        len: usize,
        clock: impl FnOnce() -> Option<Reading>,
        turn: &mut Turn,
    ) -> bool {
        debug_assert!(self.started, "a class starts before it sends");
        if self.at_edge() {
            let timed = self.next_timed();
            let read = timed || self.round.as_ref().is_some_and(|r| r.timed);
            *turn = self.turn(len, if read { clock() } else { None }, timed);
        }
        let r = self.round.as_mut().expect("a round was begun");
        r.sends += 1;
        r.bytes += len as u64;
        r.zero_copy
    }

    /// The sends and bytes of this class, per way: the rounds that ended and the one in
    /// progress.
    pub(crate) fn tally(&self) -> Tally {
        let mut t = self.tally;
        if let Some(r) = &self.round {
            t.add(r);
        }
        t
    }

    /// Ends the round in progress at `now` and begins the next: once a round, off the path of
    /// every send.
    #[cold]
    #[inline(never)]
    fn turn(&mut self, len: usize, now: Option<Reading>, timed: bool) -> Turn {
        let turn = match self.round.take() {
            Some(r) => {
                self.tally.add(&r);
                self.close(r, now)
            }
            None => Turn::default(),
        };
        // One round in `every` explores: `every - 1` rounds of the chosen way, then one.
        let explore = self.before.is_some()
            && (self.decided_after.is_none() || self.since_explore.saturating_add(1) >= self.every);
        if explore {
            self.since_explore = 0;
        }
        self.round = Some(Round {
            zero_copy: self.zero_copy ^ explore,
            explore,
            timed,
            start: now.filter(|_| timed),
            sends: 0,
            target: round_sends(len),
            bytes: 0,
        });
        turn
    }

    /// Ends the round in progress unmeasured (a back-off cut it short).
    pub(crate) fn interrupt(&mut self) -> bool {
        let round = self.round.take();
        if let Some(r) = &round {
            self.tally.add(r);
        }
        let had = round.is_some();
        self.before = None;
        self.pending = None;
        had
    }

    fn close(&mut self, r: Round, now: Option<Reading>) -> Turn {
        if !r.timed {
            // A round of the chosen way far from exploring: no pair uses its cost.
            self.since_explore = self.since_explore.saturating_add(u32::from(!r.explore));
            self.before = None;
            return Turn::default();
        }
        let cost = match (r.start, now) {
            (Some(a), Some(b))
                if a.thread == b.thread
                    && a.others == b.others
                    && r.bytes > 0
                    && b.cpu_ns >= a.cpu_ns =>
            {
                Some((b.cpu_ns - a.cpu_ns) as f64 / r.bytes as f64)
            }
            _ => None,
        };
        let mut turn = Turn {
            measured_ns: cost.map_or(0, |c| (c * r.bytes as f64) as u64),
            measured_bytes: if cost.is_some() { r.bytes } else { 0 },
            ..Turn::default()
        };
        let Some(cost) = cost else {
            // Another thread's clock, none, or a thread that sent for other auto senders too:
            // this round and the pair it belonged to are lost. As an exploring round follows
            // only a measured one, a sender that shares its thread with others explores little
            // or not at all, and keeps its prior.
            turn.unmeasured = true;
            self.before = None;
            self.pending = None;
            return turn;
        };
        if r.explore {
            // The round after it closes the pair (and explores nothing itself).
            self.pending = self.before.take().map(|before| Pending {
                zero_copy: r.zero_copy,
                cost,
                before,
                bytes: r.bytes,
            });
            return turn;
        }
        self.since_explore = self.since_explore.saturating_add(1);
        if let Some(p) = self.pending.take() {
            let chosen = (p.before + cost) / 2.0;
            let drift = (cost - p.before).abs() / chosen;
            if drift > DRIFT_MAX {
                turn.discarded = true;
            } else if chosen > 0.0 && p.cost > 0.0 {
                let ratio = if p.zero_copy {
                    p.cost / chosen
                } else {
                    chosen / p.cost
                };
                turn.switched = self.record(ratio);
                turn.recorded = true;
                turn.explore_extra_ns = ((p.cost - chosen) * p.bytes as f64).max(0.0) as u64;
            }
        }
        // A switch makes this round the other way's: it cannot open the next pair.
        self.before = (!turn.switched).then_some(cost);
        turn
    }

    /// Keeps a pair's ratio and decides; returns whether the way changed.
    fn record(&mut self, ratio: f64) -> bool {
        self.ratios[self.next] = ratio;
        self.next = (self.next + 1) % PAIRS_KEPT;
        self.kept = (self.kept + 1).min(PAIRS_KEPT);
        if self.kept < FIRST_PAIRS {
            return false;
        }
        if self.decided_after.is_none() {
            self.decided_after = Some(self.tally.calls());
        }
        let m = self.median().expect("pairs are kept");
        let want = if m < 1.0 - self.margin {
            true
        } else if m > 1.0 + HYSTERESIS {
            false
        } else {
            self.zero_copy
        };
        let switched = want != self.zero_copy;
        if switched {
            self.zero_copy = want;
            self.switches += 1;
        }
        self.set_cadence(m);
        switched
    }

    /// One round in `every` explores, from `m`, the median of the pairs: what a round the other
    /// way costs over what this way costs.
    fn set_cadence(&mut self, m: f64) {
        let gap = if self.zero_copy {
            1.0 / m - 1.0
        } else {
            m - 1.0
        };
        self.every = if gap.is_finite() && gap > 0.0 {
            (gap / EXPLORE_COST)
                .ceil()
                .clamp(f64::from(EVERY_MIN), f64::from(EVERY_MAX)) as u32
        } else {
            EVERY_MIN
        };
    }

    fn kept_ratios(&self) -> Vec<f64> {
        let mut v = self.ratios[..self.kept].to_vec();
        v.sort_by(f64::total_cmp);
        v
    }

    fn median(&self) -> Option<f64> {
        let v = self.kept_ratios();
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }

    pub(crate) fn started(&self) -> bool {
        self.started
    }

    pub(crate) fn learned(&self) -> bool {
        self.decided_after.is_some()
    }

    pub(crate) fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    pub(crate) fn margin(&self) -> f64 {
        self.margin
    }

    pub(crate) fn report(&self, i: usize) -> SizeClass {
        let (from, to) = class_range(i);
        let v = self.kept_ratios();
        SizeClass {
            from,
            to,
            zero_copy: self.zero_copy,
            learned: self.learned(),
            sends: self.tally().calls(),
            explore_sends: self.tally().explore_calls,
            backoff_sends: 0,
            decided_after: self.decided_after,
            zero_copy_over_copy: self.median(),
            spread: (!v.is_empty()).then(|| [v[0], v[v.len() - 1]]),
            pairs: self.kept,
            switches: self.switches,
            explore_every: self.every,
            margin: self.margin,
            resumed: self.resumed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_once() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(1023), 0);
        assert_eq!(class_of(1024), 1);
        assert_eq!(class_of(8000), 3);
        assert_eq!(class_of(64000), 6);
        assert_eq!(class_of(65536), 7);
        assert_eq!(class_of(1 << 20), CLASSES - 1);
        assert_eq!(class_of(usize::MAX), CLASSES - 1);
        for len in [
            0,
            600,
            1024,
            4095,
            4096,
            8000,
            64000,
            1 << 19,
            (1 << 20) - 1,
            1 << 20,
            1 << 30,
        ] {
            let (from, to) = class_range(class_of(len));
            assert!(
                from <= len && to.is_none_or(|t| len < t),
                "{len} in [{from}, {to:?})"
            );
        }
        assert_eq!(round_sends(600), 1024);
        assert_eq!(round_sends(64000), 65);
        assert_eq!(round_sends(16 << 20), 16);
    }
}
