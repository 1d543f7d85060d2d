//! What an auto sender decided at its start, and per send: the prior, the online learner per
//! size class, and the back-off after completions flagged "copied".

use std::fmt;
use std::os::fd::AsFd;

use serde::Serialize;

use super::learn::{
    CLASSES, Class, HYSTERESIS, Learned, Prior, Reading, SOFTWARE_GSO_MARGIN, SizeClass, Turn,
    class_of, class_range, count_thread_send, read_clock,
};
use super::{Route, SendPath, Threshold, Trains, active};

/// Sends by copy after a completion flagged "copied", before zero copy is tried again; each
/// back-off in a row doubles it, up to [`BACKOFF_MAX`](super::Learning::backoff_sends); a completion not flagged copied starts
/// it over.
pub(crate) const BACKOFF_SENDS: u64 = 1024;
/// The longest back-off, sends.
pub(crate) const BACKOFF_MAX: u64 = 256 * BACKOFF_SENDS;

/// What a `Mode::Auto` sender starts from (the profile's threshold for its path and route, and
/// where it came from) and what it has learned since, per size class.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The path.
    pub path: SendPath,
    /// The socket's route (`Device` when it is not connected).
    pub route: Route,
    /// The prior: the profile's threshold, where a size class that never sent starts.
    pub threshold: Threshold,
    /// Whether the profile says the kernel copies on this route (a local socket: loopback
    /// delivery copies): the first completion flagged "copied" then backs off for
    /// [`BACKOFF_MAX`](super::Learning::backoff_sends) sends at once, rather than from [`BACKOFF_SENDS`](super::Learning::backoff_sends) up.
    pub copies: bool,
    /// The profile it came from ([`Profile::origin`](super::Profile::origin)).
    pub origin: String,
    /// For a sender of GSO trains, what its route's device does with them: where the device
    /// cuts them in software, a train's class starts at copy and needs zero copy
    /// [`SOFTWARE_GSO_MARGIN`](super::Learning::software_gso_margin) cheaper to change.
    pub trains: Option<Trains>,
    /// What each size class that sent has learned, smallest first.
    pub classes: Vec<SizeClass>,
}

impl Choice {
    /// The choice for `path` on `socket` from the [`active`] profile; `segment`, the size in
    /// bytes of a GSO train's segments where the socket sends trains ([`Trains::of`]).
    pub fn for_socket(path: SendPath, socket: &impl AsFd, segment: Option<usize>) -> Choice {
        let route = Route::of(socket).unwrap_or(Route::Device);
        let profile = active();
        let entry = profile.entry(path, route);
        Choice {
            path,
            route,
            threshold: entry.threshold,
            copies: entry.copies,
            origin: profile.origin(),
            trains: segment.map(|s| Trains::of(socket, s)),
            classes: Vec::new(),
        }
    }

    /// The same socket's choice for another `path`: the [`active`] profile's threshold for it,
    /// the route and trains kept (not looked up again).
    pub fn for_path(self, path: SendPath) -> Choice {
        let profile = active();
        let entry = profile.entry(path, self.route);
        Choice {
            path,
            threshold: entry.threshold,
            copies: entry.copies,
            origin: profile.origin(),
            classes: Vec::new(),
            ..self
        }
    }

    /// The threshold the classes that sent make: zero copy from the smallest class of the run
    /// of zero-copy classes at the top, `Never` when the largest class that sent copies,
    /// `Always` when every class from the smallest does zero copy; `None` before any class
    /// sent. Classes still on their prior count with their prior's way (`SizeClass::learned`
    /// tells them apart), and classes that never sent are skipped.
    pub fn learned_threshold(&self) -> Option<Threshold> {
        let last = self.classes.last()?;
        if !last.zero_copy {
            return Some(Threshold::Never);
        }
        let from = self
            .classes
            .iter()
            .rev()
            .take_while(|c| c.zero_copy)
            .last()
            .map_or(0, |c| c.from);
        Some(if from == 0 {
            Threshold::Always
        } else {
            Threshold::From(from)
        })
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on a {} route: zero copy {} ({})",
            self.path.name(),
            self.route.name(),
            self.threshold,
            self.origin
        )?;
        if let Some(t) = &self.trains {
            write!(f, "; {t}")?;
        }
        if self.classes.is_empty() {
            return Ok(());
        }
        f.write_str("; learned:")?;
        for (i, c) in self.classes.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            let way = if c.zero_copy { "zero copy" } else { "copy" };
            write!(f, "{sep}{} {way}", size_range(c.from, c.to))?;
            match (c.learned, c.zero_copy_over_copy, c.spread) {
                (true, Some(m), Some([lo, hi])) => write!(
                    f,
                    " (zc/copy CPU per byte {m:.2}, {lo:.2}-{hi:.2} in {} pairs)",
                    c.pairs
                )?,
                _ => f.write_str(" (prior)")?,
            }
        }
        Ok(())
    }
}

/// `<1 KiB`, `4-8 KiB`, `>=1 MiB`.
fn size_range(from: usize, to: Option<usize>) -> String {
    let unit = |b: usize| {
        if b >= 1 << 20 {
            format!("{} MiB", b >> 20)
        } else {
            format!("{} KiB", b >> 10)
        }
    };
    match (from, to) {
        (0, Some(t)) => format!("<{}", unit(t)),
        (f, None) => format!(">={}", unit(f)),
        (f, Some(t)) => {
            let (a, b) = (unit(f), unit(t));
            match (a.split_once(' '), b.split_once(' ')) {
                (Some((x, u1)), Some((y, u2))) if u1 == u2 => format!("{x}-{y} {u1}"),
                _ => format!("{a}-{b}"),
            }
        }
    }
}

/// Why an auto sender sent a message the way it did, counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AutoCounters {
    /// Sends by zero copy (exploring ones included).
    pub zero_copy_calls: u64,
    /// Their bytes.
    pub zero_copy_bytes: u64,
    /// Sends by copy because copy is the way for their size class, whatever their size: the
    /// prior (the profile's threshold, "never" on a route where the kernel copies) or what the
    /// class learned (exploring ones included). Called `small_calls` before issue 62: it
    /// counted 64000-byte sends too.
    pub copy_calls: u64,
    /// Their bytes.
    pub copy_bytes: u64,
    /// Sends by copy because completions had said the kernel copied (backing off).
    pub backoff_calls: u64,
    /// Their bytes.
    pub backoff_bytes: u64,
    /// Sends spent exploring the way not chosen, either way.
    pub explore_calls: u64,
    /// Their bytes.
    pub explore_bytes: u64,
    /// Times a size class changed its way from what it learned.
    pub switches: u64,
    /// Rounds not measured: a back-off cut them short, the sender moved to another thread (a
    /// tokio task on another worker) between their edges, or other auto senders sent on its
    /// thread meanwhile (many connections on one runtime thread: the thread's CPU was theirs
    /// too). A sender explores only after a measured round, so one whose rounds are never
    /// measured keeps its prior and explores nothing.
    pub unmeasured_rounds: u64,
    /// Back-offs begun.
    pub backoffs: u64,
    /// CPU (ns) the exploring rounds spent beyond what the chosen way would have cost for their
    /// bytes, as their pairs measured it: the throughput exploring cost.
    pub explore_extra_ns: u64,
    /// CPU (ns) of the sending thread over the rounds measured, every way: once a class has
    /// chosen, only the rounds its pairs use are timed (the clock is a system call).
    pub measured_ns: u64,
    /// The bytes of those rounds.
    pub measured_bytes: u64,
    /// Size classes that started from what an earlier sender of this process learned for the
    /// same path and route ([`forget`] clears it) rather than from the prior.
    pub resumed_classes: u64,
    /// Pairs dropped because the load changed across them ([`Learning::drift_max`]).
    ///
    /// [`Learning::drift_max`]: super::Learning::drift_max
    pub discarded_pairs: u64,
}

impl AutoCounters {
    /// The share of sends spent exploring.
    pub fn explore_share(&self) -> Option<f64> {
        let all = self.zero_copy_calls + self.copy_calls + self.backoff_calls;
        (all > 0).then(|| self.explore_calls as f64 / all as f64)
    }

    /// The share of the sending CPU that exploring cost beyond the chosen way: what learning
    /// takes from throughput once a class has chosen, measured by its own pairs, over every
    /// byte sent at the measured rounds' CPU per byte (`None` before a round was measured).
    pub fn explore_cost_share(&self) -> Option<f64> {
        let all = self.zero_copy_bytes + self.copy_bytes + self.backoff_bytes;
        (self.measured_ns > 0 && self.measured_bytes > 0).then(|| {
            let per_byte = self.measured_ns as f64 / self.measured_bytes as f64;
            self.explore_extra_ns as f64 / (per_byte * all.max(self.measured_bytes) as f64)
        })
    }
}

/// What the size classes of this process's auto senders learned, per path, route and class
/// (and the bar zero copy had to clear): a new sender's class starts from it instead of the
/// prior, already decided, and explores at the learned cadence. A server of many short
/// connections, or a bench with a sender per run, then pays the [`FIRST_PAIRS`](super::Learning::first_pairs) pairs of
/// learning once per class, not once per sender.
///
/// [`FIRST_PAIRS`]: super::Learning::first_pairs
type MemoryKey = (SendPath, Route, usize, u64);
static MEMORY: std::sync::Mutex<Option<std::collections::HashMap<MemoryKey, Learned>>> =
    std::sync::Mutex::new(None);

fn memory() -> std::sync::MutexGuard<'static, Option<std::collections::HashMap<MemoryKey, Learned>>>
{
    MEMORY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Forgets what this process's auto senders learned: the senders made after it start each size
/// class from the profile's threshold again, as the first sender of a process does.
pub fn forget() {
    *memory() = None;
}

/// The per-send decision of an auto sender: the size class's learned way (from the prior
/// first), and a back-off after copied completions.
#[derive(Clone, Debug)]
pub(crate) struct Decider {
    choice: Choice,
    classes: [Class; CLASSES],
    copy_for: u64,
    /// Sends decided, every way (wrapping).
    sends: u64,
    backoff: u64,
    /// What is counted per event (back-offs, switches, rounds): the per-way sends and bytes
    /// are each class's tally, added in [`Decider::counters`].
    counted: AutoCounters,
    /// Back-off sends per class (they bypass the class's rounds), for its report.
    backoff_sends: [u64; CLASSES],
    /// Whether it starts classes from, and tells, what other senders learned ([`MEMORY`]).
    shares: bool,
}

impl Decider {
    /// A decider that starts each class from what other senders of the process learned for the
    /// same path and route, and tells them what it learns.
    pub(crate) fn new(choice: Choice) -> Decider {
        Decider {
            shares: true,
            ..Decider::alone(choice)
        }
    }

    /// A decider that learns on its own only.
    pub(crate) fn alone(choice: Choice) -> Decider {
        // Where the profile says the kernel copies, even a sparse zero-copy send costs more than
        // its share: on loopback TCP at 64000 B, one send in 170 by zero copy cost about 7 %
        // more CPU per MB than none (library level, 8 alternations). So the probe that
        // confirms it is the only one for a long while.
        let backoff = if choice.copies {
            BACKOFF_MAX
        } else {
            BACKOFF_SENDS
        };
        Decider {
            copy_for: 0,
            sends: 0,
            backoff,
            classes: Default::default(),
            counted: AutoCounters::default(),
            backoff_sends: [0; CLASSES],
            choice,
            shares: false,
        }
    }

    /// The prior, and what every class that sent has learned.
    pub(crate) fn choice(&self) -> Choice {
        let mut c = self.choice.clone();
        // Back-off sends are the class's sends too (issue 62 item 6: on routes where the kernel
        // copies, `sends` left them out, 1,281 reported against 223,696 sent).
        c.classes = (0..CLASSES)
            .filter(|&i| self.classes[i].started() || self.backoff_sends[i] > 0)
            .map(|i| {
                let mut r = self.classes[i].report(i);
                r.backoff_sends = self.backoff_sends[i];
                r.sends += r.backoff_sends;
                r
            })
            .collect();
        c
    }

    /// Whether the next message of `len` bytes ends a round whose cost a pair uses: a sender
    /// that queues sends submits them first, so that they count in the round that chose them.
    #[inline]
    pub(crate) fn edge_is_measured(&self, len: usize) -> bool {
        self.copy_for == 0 && self.classes[class_of(len)].edge_is_measured()
    }

    /// Whether a message of `len` bytes goes by zero copy; counts the decision.
    #[inline]
    pub(crate) fn zero_copy(&mut self, len: usize) -> bool {
        self.zero_copy_with(len, read_clock)
    }

    #[inline]
    pub(crate) fn zero_copy_with(
        &mut self,
        len: usize,
        clock: impl FnOnce() -> Option<Reading>,
    ) -> bool {
        // Every send this sender decided, counted with the thread's (which counts every
        // sender's), so that a round sees whether other senders sent on its thread.
        let own = self.sends;
        self.sends = self.sends.wrapping_add(1);
        count_thread_send();
        if self.copy_for > 0 {
            self.copy_for -= 1;
            self.counted.backoff_calls += 1;
            self.counted.backoff_bytes += len as u64;
            self.backoff_sends[class_of(len)] += 1;
            return false;
        }
        let i = class_of(len);
        match self.classes[i].send_within(len) {
            Some(zero_copy) => zero_copy,
            None => self.at_edge(i, len, own, clock),
        }
    }

    /// A send of class `i` at the edge of a round (or its class's first): once a round, off
    /// the path of every send.
    #[cold]
    #[inline(never)]
    fn at_edge(
        &mut self,
        i: usize,
        len: usize,
        own: u64,
        clock: impl FnOnce() -> Option<Reading>,
    ) -> bool {
        if !self.classes[i].started() {
            self.start_class(i, len);
        }
        let mut turn = Turn::default();
        // The thread's count was taken after this send's increment, as was `own + 1`.
        let clock = || {
            clock().map(|r| Reading {
                others: r.others.wrapping_sub(own.wrapping_add(1)),
                ..r
            })
        };
        let zero_copy = self.classes[i].send(len, clock, &mut turn);
        if turn.recorded {
            self.share(i);
        }
        let c = &mut self.counted;
        c.unmeasured_rounds += u64::from(turn.unmeasured);
        c.switches += u64::from(turn.switched);
        c.explore_extra_ns += turn.explore_extra_ns;
        c.measured_ns += turn.measured_ns;
        c.measured_bytes += turn.measured_bytes;
        c.discarded_pairs += u64::from(turn.discarded);
        zero_copy
    }

    /// A sender's auto counters: `d`'s, or none where the sender is not in auto mode.
    pub(crate) fn counters_of(d: Option<&Decider>) -> AutoCounters {
        d.map(Decider::counters).unwrap_or_default()
    }

    /// Why it sent each message the way it did: what it counted, and each class's sends and
    /// bytes per way.
    pub(crate) fn counters(&self) -> AutoCounters {
        let mut c = self.counted;
        for t in self.classes.iter().map(Class::tally) {
            c.zero_copy_calls += t.zero_copy_calls;
            c.zero_copy_bytes += t.zero_copy_bytes;
            c.copy_calls += t.copy_calls;
            c.copy_bytes += t.copy_bytes;
            c.explore_calls += t.explore_calls;
            c.explore_bytes += t.explore_bytes;
        }
        c
    }

    /// Starts class `i`, whose first message is `len` bytes: from what the same class of an
    /// earlier sender on the same path and route learned, else from its prior.
    #[cold]
    fn start_class(&mut self, i: usize, len: usize) {
        let prior = self.prior(i, len);
        let key = self.key(i, prior.margin);
        let learned = self
            .shares
            .then(|| memory().as_ref().and_then(|m| m.get(&key).copied()))
            .flatten();
        match learned {
            Some(l) => {
                self.classes[i].resume(&l);
                self.counted.resumed_classes += 1;
            }
            None => self.classes[i].start(prior),
        }
    }

    /// Tells later senders what class `i` learned.
    #[cold]
    fn share(&self, i: usize) {
        if !self.shares {
            return;
        }
        let c = &self.classes[i];
        if let Some(l) = c.learned_state() {
            let key = self.key(i, c.margin());
            memory().get_or_insert_with(Default::default).insert(key, l);
        }
    }

    fn key(&self, i: usize, margin: f64) -> MemoryKey {
        (self.choice.path, self.choice.route, i, margin.to_bits())
    }

    /// The way a class that never sent starts: copy, with a higher bar, for a class of trains
    /// the route's device cuts in software (a device fact outweighs what other sizes learned);
    /// else what a learned neighbour implies (zero copy that pays for smaller messages pays for
    /// larger; copy that wins for larger messages wins for smaller), else the profile's
    /// threshold.
    fn prior(&self, i: usize, len: usize) -> Prior {
        if self.software_trains(i) {
            return Prior {
                zero_copy: false,
                margin: SOFTWARE_GSO_MARGIN,
            };
        }
        Prior::way(self.way_of_neighbours(i, len))
    }

    /// Whether class `i` holds only trains (its smallest message is longer than one segment)
    /// that the route's device cuts in software. A class that holds single datagrams too (1-2
    /// KiB with 1472-byte segments) is not one: its bar cannot depend on which message came
    /// first.
    fn software_trains(&self, i: usize) -> bool {
        let from = class_range(i).0;
        self.choice
            .trains
            .as_ref()
            .is_some_and(|t| t.software() && t.is_train(from))
    }

    /// What the learned neighbours of class `i` imply, else the prior. Classes of trains cut in
    /// software learned under their own bar and say nothing of other sizes.
    fn way_of_neighbours(&self, i: usize, len: usize) -> bool {
        let usual = |c: &&Class| c.learned() && c.margin() == HYSTERESIS;
        let below = self.classes[..i].iter().rev().find(usual);
        let above = self.classes[i + 1..].iter().find(usual);
        match (below.map(Class::zero_copy), above.map(Class::zero_copy)) {
            (Some(true), Some(false)) | (None, None) => self.choice.threshold.zero_copy(len),
            (Some(true), _) => true,
            (_, Some(false)) => false,
            _ => self.choice.threshold.zero_copy(len),
        }
    }

    /// A completion said the kernel copied: copy the next messages (a back-off, twice as long
    /// as the one before it in a row, at most [`BACKOFF_MAX`](super::Learning::backoff_sends)); rounds in progress end
    /// unmeasured. Completions that arrive during a back-off do not lengthen it.
    pub(crate) fn copied(&mut self) {
        if self.copy_for > 0 {
            return;
        }
        self.copy_for = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        self.counted.backoffs += 1;
        for c in &mut self.classes {
            self.counted.unmeasured_rounds += u64::from(c.interrupt());
        }
    }

    /// A completion was not flagged copied: the next back-off starts short again.
    pub(crate) fn not_copied(&mut self) {
        self.backoff = BACKOFF_SENDS;
    }
}

#[cfg(test)]
mod tests {
    use super::super::learn::{
        EVERY_MIN, EXPLORE_COST, FIRST_PAIRS, PAIRS_KEPT, ROUND_BYTES, ROUND_SENDS, thread_sends,
    };
    use super::*;

    fn decider(threshold: Threshold) -> Decider {
        Decider::alone(Choice {
            path: SendPath::UringZc,
            route: Route::Device,
            threshold,
            copies: false,
            origin: String::new(),
            trains: None,
            classes: Vec::new(),
        })
    }

    /// A sender whose thread spends `cost(zero_copy)` ns per byte, with a deterministic jitter
    /// of up to `jitter` either way.
    struct Sim {
        cpu: u64,
        seed: u64,
        jitter: f64,
    }

    impl Sim {
        fn new(jitter: f64) -> Sim {
            Sim {
                cpu: 0,
                seed: 0x9e37_79b9_7f4a_7c15,
                jitter,
            }
        }

        /// Sends `n` messages of `len` bytes; returns how many went by zero copy.
        fn send(&mut self, d: &mut Decider, n: u64, len: usize, cost: impl Fn(bool) -> f64) -> u64 {
            let thread = std::thread::current().id();
            let mut zc = 0;
            for _ in 0..n {
                let cpu_ns = self.cpu;
                let z = d.zero_copy_with(len, || {
                    Some(Reading {
                        cpu_ns,
                        thread,
                        others: thread_sends(),
                    })
                });
                zc += u64::from(z);
                self.seed = self
                    .seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
                let noise = 1.0 + self.jitter * (2.0 * u - 1.0);
                self.cpu += (cost(z) * len as f64 * noise) as u64;
            }
            zc
        }
    }

    fn class(d: &Decider, len: usize) -> SizeClass {
        let c = d.choice();
        c.classes
            .into_iter()
            .find(|c| c.from <= len && c.to.is_none_or(|t| len < t))
            .expect("the class sent")
    }

    /// Sends a class needs at most to learn: the first pairs, each an exploit and an explore
    /// round, the exploit round that closes the last, and the send whose edge measures it.
    fn learning_bound(len: usize) -> u64 {
        let round = (ROUND_BYTES / len).clamp(ROUND_SENDS.0 as usize, ROUND_SENDS.1 as usize);
        ((2 * FIRST_PAIRS + 1) * round) as u64 + 1
    }

    /// The rule: exploring one round in `every` costs `gap / every`, aimed at `EXPLORE_COST`.
    fn every_for(gap: f64) -> u32 {
        ((gap / EXPLORE_COST).ceil() as u32).clamp(EVERY_MIN, super::super::learn::EVERY_MAX)
    }

    /// Sends 9000 B until one goes by zero copy; returns how many copied before it.
    fn copies_until_zero_copy(d: &mut Decider) -> u64 {
        let mut n = 0;
        while !d.zero_copy(9000) {
            n += 1;
        }
        n
    }

    #[test]
    fn the_decider_counts_each_reason() {
        let mut d = decider(Threshold::From(4096));
        assert!(!d.zero_copy(2000));
        assert!(d.zero_copy(5000));
        d.copied();
        assert!(!d.zero_copy(5000));
        let c = d.counters();
        assert_eq!(
            (c.copy_calls, c.zero_copy_calls, c.backoff_calls, c.backoffs),
            (1, 1, 1, 1)
        );
        assert_eq!(
            (c.copy_bytes, c.zero_copy_bytes, c.backoff_bytes),
            (2000, 5000, 5000)
        );
        for _ in 1..BACKOFF_SENDS {
            assert!(!d.zero_copy(5000));
        }
        assert!(
            d.zero_copy(5000),
            "zero copy is tried again after the back-off"
        );
    }

    /// The per-way sends and bytes are added up once a round (issue 47): read at any send, mid
    /// round or at an edge, exploring or backing off, they still equal the decisions made.
    #[test]
    fn counters_added_per_round_equal_the_decisions_at_every_send() {
        let mut d = decider(Threshold::From(4096));
        let mut sim = Sim::new(0.05);
        let mut want = AutoCounters::default();
        let sizes = [600, 5000, 64000, 5000];
        for n in 0..40_000u64 {
            let len = sizes[(n / 997) as usize % sizes.len()];
            let before = d.counters();
            let zc = sim.send(&mut d, 1, len, |zc| if zc { 0.5 } else { 1.0 }) == 1;
            if n % 9_000 == 4_500 {
                d.copied();
            }
            let after = d.counters();
            let (len, backoff) = (len as u64, after.backoff_calls > before.backoff_calls);
            if backoff {
                want.backoff_calls += 1;
                want.backoff_bytes += len;
            } else if zc {
                want.zero_copy_calls += 1;
                want.zero_copy_bytes += len;
            } else {
                want.copy_calls += 1;
                want.copy_bytes += len;
            }
            want.explore_calls += after.explore_calls - before.explore_calls;
            assert!(after.explore_calls - before.explore_calls <= 1);
            assert_eq!(
                (
                    after.zero_copy_calls,
                    after.zero_copy_bytes,
                    after.copy_calls,
                    after.copy_bytes,
                    after.backoff_calls,
                    after.backoff_bytes
                ),
                (
                    want.zero_copy_calls,
                    want.zero_copy_bytes,
                    want.copy_calls,
                    want.copy_bytes,
                    want.backoff_calls,
                    want.backoff_bytes
                ),
                "send {n}"
            );
        }
        let c = d.counters();
        assert!(c.explore_calls > 0 && c.backoffs > 0, "{c:?}");
        let classes = d.choice().classes;
        // Every send is one of its class's, back-off sends included (issue 62 item 6).
        let sends: u64 = classes.iter().map(|c| c.sends).sum();
        assert_eq!(sends, c.zero_copy_calls + c.copy_calls + c.backoff_calls);
        let backoff: u64 = classes.iter().map(|c| c.backoff_sends).sum();
        assert_eq!(backoff, c.backoff_calls);
        let explored: u64 = classes.iter().map(|c| c.explore_sends).sum();
        assert_eq!(explored, c.explore_calls);
    }

    #[test]
    fn back_offs_in_a_row_double_and_a_clean_completion_starts_over() {
        let mut d = decider(Threshold::Always);
        let mut lens = Vec::new();
        for _ in 0..4 {
            d.copied();
            // Completions during a back-off do not lengthen it.
            d.copied();
            lens.push(copies_until_zero_copy(&mut d));
        }
        assert_eq!(lens, [1, 2, 4, 8].map(|k| k * BACKOFF_SENDS));
        d.not_copied();
        d.copied();
        let n = copies_until_zero_copy(&mut d);
        assert_eq!(n, BACKOFF_SENDS);
        assert_eq!(d.counters().backoffs, 5);
        for _ in 0..20 {
            d.copied();
            copies_until_zero_copy(&mut d);
        }
        assert_eq!(d.backoff, BACKOFF_MAX);
    }

    #[test]
    fn where_the_profile_says_the_kernel_copies_the_first_back_off_is_the_longest() {
        let mut d = Decider::alone(Choice {
            copies: true,
            ..decider(Threshold::Always).choice
        });
        d.copied();
        let n = copies_until_zero_copy(&mut d);
        assert_eq!(n, BACKOFF_MAX);
        // A completion not flagged copied says the route changed: back-offs start short again.
        d.not_copied();
        d.copied();
        let n = copies_until_zero_copy(&mut d);
        assert_eq!(n, BACKOFF_SENDS);
    }

    #[test]
    fn a_class_learns_zero_copy_against_its_prior_and_explores_little_after() {
        // The prior says copy; zero copy costs 0.6 of copy, with +-20 % jitter per send.
        let mut d = decider(Threshold::Never);
        let mut sim = Sim::new(0.2);
        let cost = |zc: bool| if zc { 0.6 } else { 1.0 };
        let bound = learning_bound(8000);
        sim.send(&mut d, bound, 8000, cost);
        let c = class(&d, 8000);
        assert!(c.learned && c.zero_copy, "{c:?}");
        assert!(c.decided_after.unwrap() <= bound, "{c:?}");
        let m = c.zero_copy_over_copy.unwrap();
        assert!((0.5..0.7).contains(&m), "{c:?}");
        // At steady state one round in `every` explores, `every` = gap / EXPLORE_COST.
        assert_eq!(c.explore_every, every_for(1.0 / m - 1.0));
        let before = d.counters();
        let n = 2_000_000;
        let zc = sim.send(&mut d, n, 8000, cost);
        let explored = d.counters().explore_calls - before.explore_calls;
        let share = explored as f64 / n as f64;
        assert!(share < 2.0 / c.explore_every as f64, "explored {share}");
        assert_eq!(
            zc,
            n - explored,
            "every send but the exploring ones by zero copy"
        );
        assert_eq!(d.counters().switches, 1);
        let c = class(&d, 8000);
        assert_eq!(c.pairs, PAIRS_KEPT);
        let [lo, hi] = c.spread.unwrap();
        assert!(lo <= m && m <= hi);
        assert_eq!(d.choice().learned_threshold(), Some(Threshold::From(4096)));
    }

    /// Issue 47: a load that comes and goes (another process on the CPU doubling what every
    /// byte costs, both ways, for three rounds in seven) makes no class flap: the pairs compare
    /// an exploring round with the rounds on either side of it, so the drift cancels, and the
    /// median of the pairs outvotes the pairs a change of load split. Exploring costs about
    /// what it aims to, measured by the pairs themselves.
    #[test]
    fn a_load_that_comes_and_goes_makes_no_class_flap() {
        for (prior, zc_cost) in [(Threshold::Always, 0.8), (Threshold::Never, 1.25)] {
            let mut d = decider(prior);
            let mut sim = Sim::new(0.1);
            let sent = std::cell::Cell::new(0u64);
            let round = (ROUND_BYTES / 8000) as u64;
            let cost = |zc: bool| {
                sent.set(sent.get() + 1);
                let load = if (sent.get() / round) % 7 < 3 {
                    2.0
                } else {
                    1.0
                };
                load * if zc { zc_cost } else { 1.0 }
            };
            sim.send(&mut d, 3_000_000, 8000, cost);
            let c = class(&d, 8000);
            assert!(c.learned, "{c:?}");
            assert_eq!(c.zero_copy, zc_cost < 1.0, "{c:?}");
            assert_eq!(
                c.switches, 0,
                "a class flapped under a changing load: {c:?}"
            );
            let m = c.zero_copy_over_copy.unwrap();
            assert!(
                (m - zc_cost).abs() < 0.1,
                "the pairs cancel the load: {m} {c:?}"
            );
            let share = d.counters().explore_cost_share().unwrap();
            assert!(
                share > 0.0 && share < 2.0 * EXPLORE_COST,
                "exploring cost {share} of the CPU"
            );
        }
    }

    /// Issue 47: a new sender of the same path and route starts each class from what an earlier
    /// one learned, already decided, and explores at the learned cadence from its first round
    /// (its first pairs measured back to back, a sender per connection or per bench run, cost
    /// up to a few per cent of its traffic before); `forget` starts the next one from the prior.
    #[test]
    fn a_new_sender_starts_from_what_an_earlier_one_learned() {
        let shared = || Decider::new(decider(Threshold::Never).choice);
        forget();
        let cost = |zc: bool| if zc { 0.6 } else { 1.0 };
        let mut first = shared();
        Sim::new(0.1).send(&mut first, learning_bound(8000), 8000, cost);
        assert!(class(&first, 8000).zero_copy);
        let mut next = shared();
        let round = (ROUND_BYTES / 8000) as u64;
        let zc = Sim::new(0.1).send(&mut next, 10 * round, 8000, cost);
        let c = class(&next, 8000);
        assert!(c.resumed && c.learned && c.zero_copy, "{c:?}");
        assert_eq!(next.counters().resumed_classes, 1);
        assert!(
            next.counters().explore_calls <= round,
            "at most one exploring round in its first ten: {:?}",
            next.counters()
        );
        assert_eq!(zc, 10 * round - next.counters().explore_calls);
        forget();
        let mut after = shared();
        Sim::new(0.1).send(&mut after, 1, 8000, cost);
        assert!(!class(&after, 8000).resumed);
        assert!(!class(&after, 8000).zero_copy, "the prior again");
        forget();
    }

    #[test]
    fn a_class_learns_copy_against_its_prior() {
        let mut d = decider(Threshold::Always);
        let mut sim = Sim::new(0.2);
        let cost = |zc: bool| if zc { 1.3 } else { 1.0 };
        sim.send(&mut d, learning_bound(600), 600, cost);
        let c = class(&d, 600);
        assert!(c.learned && !c.zero_copy, "{c:?}");
        assert_eq!(d.choice().learned_threshold(), Some(Threshold::Never));
        // A smaller gap is explored more often: it costs less.
        let m = c.zero_copy_over_copy.unwrap();
        assert_eq!(c.explore_every, every_for(m - 1.0));
    }

    #[test]
    fn a_near_tie_keeps_its_way() {
        for prior in [Threshold::Never, Threshold::Always] {
            let mut d = decider(prior);
            let mut sim = Sim::new(0.1);
            sim.send(&mut d, 200_000, 8000, |zc| if zc { 1.01 } else { 1.0 });
            let c = class(&d, 8000);
            assert!(c.learned, "{c:?}");
            assert_eq!(c.zero_copy, prior == Threshold::Always, "{c:?}");
            assert_eq!(c.switches, 0, "{c:?}");
            assert_eq!(c.explore_every, EVERY_MIN);
        }
    }

    #[test]
    fn a_class_follows_when_conditions_change() {
        let mut d = decider(Threshold::Never);
        let mut sim = Sim::new(0.2);
        sim.send(&mut d, 100_000, 64000, |zc| if zc { 0.6 } else { 1.0 });
        assert!(class(&d, 64000).zero_copy);
        // Now zero copy costs more (say the route began to copy without saying so).
        let every = class(&d, 64000).explore_every as u64;
        let round = (ROUND_BYTES / 64000) as u64;
        // The median turns after half the pairs kept are new, one every `every` rounds.
        let bound = (PAIRS_KEPT as u64 / 2 + 1) * (every + 2) * round;
        sim.send(&mut d, bound, 64000, |zc| if zc { 1.5 } else { 1.0 });
        let c = class(&d, 64000);
        assert!(!c.zero_copy, "copy within {bound} sends: {c:?}");
        assert_eq!(c.switches, 2);
    }

    #[test]
    fn size_switches_use_what_each_class_learned() {
        let mut d = decider(Threshold::From(10_000));
        let mut sim = Sim::new(0.2);
        // Zero copy pays from 8 KiB here, not from 10 KB as the prior says.
        let cost = |len: usize| move |zc: bool| if zc == (len >= 8192) { 1.0 } else { 1.4 };
        sim.send(&mut d, 50_000, 600, cost(600));
        let small = class(&d, 600);
        assert!(small.learned && !small.zero_copy, "{small:?}");
        sim.send(&mut d, learning_bound(64000), 64000, cost(64000));
        let large = class(&d, 64000);
        assert!(large.learned && large.zero_copy, "{large:?}");
        // Back to 600 B: its class knows, and sends its way from the first message on.
        let zc = sim.send(&mut d, 1000, 600, cost(600));
        assert_eq!(zc, 0);
        assert_eq!(class(&d, 600).decided_after, small.decided_after);
        // A new class between them, copy learned below and zero copy above: the prior's
        // threshold decides (from 10 KB).
        assert!(d.zero_copy(12_000));
        assert!(!d.zero_copy(2000));
        // 200 KiB: a learned class below it chose zero copy, so it starts by zero copy.
        let mut d = decider(Threshold::Never);
        sim.send(&mut d, learning_bound(64000), 64000, cost(64000));
        assert!(class(&d, 64000).zero_copy);
        assert!(
            d.zero_copy(200_000),
            "zero copy that pays at 64 KB starts at 200 KB"
        );
    }

    #[test]
    fn only_the_edges_a_pair_uses_ask_for_a_submission() {
        let mut d = decider(Threshold::Never);
        let mut sim = Sim::new(0.2);
        let cost = |zc: bool| if zc { 0.5 } else { 1.0 };
        let round = (ROUND_BYTES / 64000) as u64;
        // Learning: every edge is measured.
        let mut edges = 0;
        for _ in 0..learning_bound(64000) - 1 {
            edges += u64::from(d.edge_is_measured(64000));
            sim.send(&mut d, 1, 64000, cost);
        }
        assert_eq!(edges, 2 * FIRST_PAIRS as u64);
        // At steady state: four edges (around the round before, the exploring one and the one
        // after) each time one round in about `every` explores; `every` moves a little as
        // pairs come in.
        sim.send(&mut d, 1, 64000, cost);
        let every = u64::from(class(&d, 64000).explore_every);
        let (mut edges, mut rounds) = (0, 0);
        for _ in 0..50 * every * round {
            edges += u64::from(d.edge_is_measured(64000));
            rounds += u64::from(d.classes[class_of(64000)].at_edge());
            sim.send(&mut d, 1, 64000, cost);
        }
        assert!(edges * every <= 5 * rounds, "{edges} of {rounds}");
        assert!(edges >= 3 * 49, "{edges} of {rounds}");
    }

    /// Issue 47: the thread's CPU clock is a system call; once a class has chosen, only the
    /// edges of rounds a pair uses read it (three or four each time one round in `every`
    /// explores), and the pairs still come in.
    #[test]
    fn once_chosen_the_clock_is_read_only_around_exploring() {
        let mut d = decider(Threshold::Never);
        let thread = std::thread::current().id();
        let (mut cpu, mut reads) = (0u64, 0u64);
        let mut send = |d: &mut Decider, reads: &mut u64| {
            let now = cpu;
            let zc = d.zero_copy_with(64000, || {
                *reads += 1;
                Some(Reading {
                    cpu_ns: now,
                    thread,
                    others: thread_sends(),
                })
            });
            cpu += if zc { 32_000 } else { 64_000 };
        };
        for _ in 0..learning_bound(64000) {
            send(&mut d, &mut reads);
        }
        let c = class(&d, 64000);
        assert!(c.learned && c.zero_copy, "{c:?}");
        let (every, pairs) = (u64::from(c.explore_every), d.counters().explore_calls);
        let round = (ROUND_BYTES / 64000) as u64;
        reads = 0;
        let rounds = 20 * every;
        for _ in 0..rounds * round {
            send(&mut d, &mut reads);
        }
        assert!(
            reads <= 5 * rounds / every,
            "{reads} clock reads in {rounds} rounds"
        );
        assert!(
            d.counters().explore_calls >= pairs + 19 * round,
            "exploring goes on: {:?}",
            d.counters()
        );
        assert_eq!(d.counters().unmeasured_rounds, 0, "{:?}", d.counters());
        let share = d.counters().explore_cost_share().unwrap();
        assert!(
            share > 0.0 && share < 2.0 * EXPLORE_COST,
            "exploring cost {share} of the CPU"
        );
    }

    #[test]
    fn senders_that_share_a_thread_explore_nothing_until_one_sends_alone() {
        // Two connections' senders on one thread, sends interleaved: the thread's CPU over a
        // round is both's, so no round is measured, no round explores, both keep the prior.
        let (mut a, mut b) = (decider(Threshold::Always), decider(Threshold::Always));
        let mut sim = Sim::new(0.0);
        let cost = |zc: bool| if zc { 1.0 } else { 0.5 };
        let bound = learning_bound(64000);
        for _ in 0..4 * bound {
            sim.send(&mut a, 1, 64000, cost);
            sim.send(&mut b, 1, 64000, cost);
        }
        for d in [&a, &b] {
            assert_eq!(d.counters().explore_calls, 0, "{:?}", d.counters());
            assert_eq!(
                d.counters().zero_copy_calls,
                4 * bound,
                "the prior, every send"
            );
            assert!(d.counters().unmeasured_rounds > 0, "{:?}", d.counters());
            assert!(!class(d, 64000).learned);
        }
        // Alone on the thread, a learns where copy pays as a sender that never shared, once
        // the round that began while b sent has ended.
        let before = a.counters().zero_copy_calls + a.counters().copy_calls;
        let round = (bound - 1) / (2 * FIRST_PAIRS as u64 + 1);
        sim.send(&mut a, round + bound, 64000, cost);
        let c = class(&a, 64000);
        assert!(c.learned && !c.zero_copy, "{c:?}");
        assert!(c.decided_after.unwrap() <= before + round + bound, "{c:?}");
    }

    #[test]
    fn one_sender_of_interleaved_sizes_measures_every_round() {
        // Its own sends of another class are in its rounds' span, not another sender's.
        let mut d = decider(Threshold::Always);
        let mut sim = Sim::new(0.0);
        let cost = |zc: bool| if zc { 1.0 } else { 0.5 };
        for _ in 0..2 * learning_bound(64000) {
            sim.send(&mut d, 1, 64000, cost);
            sim.send(&mut d, 1, 40000, cost);
        }
        assert_eq!(d.counters().unmeasured_rounds, 0, "{:?}", d.counters());
        for len in [64000, 40000] {
            let c = class(&d, len);
            assert!(c.learned && !c.zero_copy, "{c:?}");
        }
    }

    #[test]
    fn a_round_across_threads_is_not_measured() {
        let mut d = decider(Threshold::Never);
        let here = std::thread::current().id();
        let there = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        let round = (learning_bound(64000) - 1) / (2 * FIRST_PAIRS as u64 + 1);
        for i in 0..10 * round {
            let thread = if (i / round) % 2 == 0 { here } else { there };
            d.zero_copy_with(64000, || {
                Some(Reading {
                    cpu_ns: i * 1000,
                    thread,
                    others: thread_sends(),
                })
            });
        }
        assert!(d.counters().unmeasured_rounds >= 9, "{:?}", d.counters());
        assert!(!class(&d, 64000).learned);
        assert_eq!(d.counters().explore_calls, 0, "no pair could be made");
    }

    fn software_trains_decider() -> Decider {
        Decider::alone(Choice {
            trains: Some(Trains {
                segment: 1472,
                segmentation: super::super::Segmentation::Software {
                    device: "sink0".into(),
                },
            }),
            ..decider(Threshold::Always).choice
        })
    }

    #[test]
    fn trains_cut_in_software_need_zero_copy_fifteen_percent_cheaper() {
        let train = 42 * 1472;
        // Zero copy 10 % cheaper: enough with the usual bar, not with the device's.
        let mut d = software_trains_decider();
        let mut sim = Sim::new(0.0);
        sim.send(&mut d, 1, train, |_| 1.0);
        assert_eq!(d.counters().copy_calls, 1, "a train starts at copy");
        sim.send(&mut d, 3 * learning_bound(train), train, |zc| {
            if zc { 0.9 } else { 1.0 }
        });
        let c = class(&d, train);
        assert!(c.learned && !c.zero_copy, "{c:?}");
        assert_eq!(c.margin, SOFTWARE_GSO_MARGIN);
        assert!(
            c.zero_copy_over_copy
                .is_some_and(|m| (m - 0.9).abs() < 0.01),
            "{c:?}"
        );
        // The same traffic without the device fact goes zero copy.
        let mut plain = decider(Threshold::Never);
        sim.send(&mut plain, 3 * learning_bound(train), train, |zc| {
            if zc { 0.9 } else { 1.0 }
        });
        assert!(class(&plain, train).zero_copy);
        // What the trains learned under their bar says nothing of single datagrams: with the
        // profile's "always", the first 1000 B message goes zero copy.
        assert!(d.zero_copy(1000));
        assert_eq!(class(&d, 1000).margin, HYSTERESIS);
        // A class that holds single datagrams and trains (1-2 KiB, 1472 B segments) keeps the
        // usual bar and the prior, whichever message comes first.
        assert!(d.zero_copy(1600));
        assert_eq!(class(&d, 1600).margin, HYSTERESIS);
        // The first class of trains only (2-4 KiB) starts at copy.
        assert!(!d.zero_copy(3000));
        assert_eq!(class(&d, 3000).margin, SOFTWARE_GSO_MARGIN);

        // Zero copy 20 % cheaper: it clears the bar.
        let mut d = software_trains_decider();
        sim.send(&mut d, 3 * learning_bound(train), train, |zc| {
            if zc { 0.8 } else { 1.0 }
        });
        let c = class(&d, train);
        assert!(c.learned && c.zero_copy, "{c:?}");
        assert_eq!(c.switches, 1);
    }
}
