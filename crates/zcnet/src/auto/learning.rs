//! The learner's parameters in one value, as `zcnet tune --json` reports them.

use serde::Serialize;

use super::decider::{BACKOFF_MAX, BACKOFF_SENDS};
use super::learn::{
    CLASSES, DRIFT_MAX, EVERY_MAX, EVERY_MIN, EXPLORE_COST, FIRST_PAIRS, HYSTERESIS, PAIRS_KEPT,
    ROUND_BYTES, ROUND_SENDS, SOFTWARE_GSO_MARGIN,
};

/// How `Mode::Auto` learns where zero copy pays: the sizes of its rounds, how many pairs of
/// rounds decide, how far a median must move, what exploring may cost, how long it backs off
/// after a completion flagged copied. One value, so that a report can say what the senders did
/// and a test can check a run against the rule rather than against one machine's figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Learning {
    /// Bytes in a round, about: long enough that the sends queued at its edges (an io_uring
    /// batch) are a small part of it, and the one clock read a negligible one.
    pub round_bytes: usize,
    /// Sends in a round, at least and at most.
    pub round_sends: (u32, u32),
    /// Pairs of rounds (one each way) measured back to back when a size class starts.
    pub first_pairs: usize,
    /// Pairs whose median decides.
    pub pairs_kept: usize,
    /// The median must be this far from 1 to change the way a class sends.
    pub hysteresis: f64,
    /// How much cheaper zero copy must measure before GSO trains that the route's device cuts
    /// in software (`tx-udp-segmentation` off) go by zero copy.
    pub software_gso_margin: f64,
    /// A pair is kept only when the rounds on either side of its exploring round cost within
    /// this much of each other (the machine's load changed across the pair otherwise).
    pub drift_max: f64,
    /// The share of CPU the exploring aims to cost at steady state.
    pub explore_cost: f64,
    /// Explore one round in at least the first and at most the second many.
    pub explore_every: (u32, u32),
    /// Sends by copy after a completion flagged "copied" before zero copy is tried again, and
    /// the longest such back-off (each in a row doubles it).
    pub backoff_sends: (u64, u64),
    /// Size classes: below 1 KiB, then one per power of two, up to 1 MiB and more.
    pub classes: usize,
}

/// What this build's `Mode::Auto` does.
pub const LEARNING: Learning = Learning {
    round_bytes: ROUND_BYTES,
    round_sends: ROUND_SENDS,
    first_pairs: FIRST_PAIRS,
    pairs_kept: PAIRS_KEPT,
    hysteresis: HYSTERESIS,
    software_gso_margin: SOFTWARE_GSO_MARGIN,
    drift_max: DRIFT_MAX,
    explore_cost: EXPLORE_COST,
    explore_every: (EVERY_MIN, EVERY_MAX),
    backoff_sends: (BACKOFF_SENDS, BACKOFF_MAX),
    classes: CLASSES,
};
