//! What an auto sender decided at its start, and per send.

use std::fmt;
use std::os::fd::AsFd;

use serde::Serialize;

use super::{Route, SendPath, Threshold, active};

/// Sends by copy after a completion flagged "copied", before zero copy is tried again.
pub const BACKOFF_SENDS: u64 = 1024;

/// What a `Mode::Auto` sender decided at its start: the threshold for its path and route, and
/// where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The path.
    pub path: SendPath,
    /// The socket's route (`Device` when it is not connected).
    pub route: Route,
    /// The threshold used.
    pub threshold: Threshold,
    /// The profile it came from ([`Profile::origin`](super::Profile::origin)).
    pub origin: String,
}

impl Choice {
    /// The choice for `path` on `socket` from the [`active`] profile.
    pub fn for_socket(path: SendPath, socket: &impl AsFd) -> Choice {
        let route = Route::of(socket).unwrap_or(Route::Device);
        let profile = active();
        Choice {
            path,
            route,
            threshold: profile.entry(path, route).threshold,
            origin: profile.origin(),
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "auto: {} on a {} route: zero copy {} ({})",
            self.path.name(),
            self.route.name(),
            self.threshold,
            self.origin
        )
    }
}

/// Why an auto sender sent a message by copy, counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AutoCounters {
    /// Sends by zero copy.
    pub zero_copy_calls: u64,
    /// Their bytes.
    pub zero_copy_bytes: u64,
    /// Sends by copy because the message was below the threshold.
    pub small_calls: u64,
    /// Their bytes.
    pub small_bytes: u64,
    /// Sends by copy because completions had said the kernel copied (backing off).
    pub backoff_calls: u64,
    /// Their bytes.
    pub backoff_bytes: u64,
}

/// The per-send decision of an auto sender: the threshold, and a back-off after copied
/// completions.
#[derive(Clone, Debug)]
pub(crate) struct Decider {
    pub(crate) choice: Choice,
    copy_for: u64,
    pub(crate) counters: AutoCounters,
}

impl Decider {
    pub(crate) fn new(choice: Choice) -> Decider {
        Decider {
            choice,
            copy_for: 0,
            counters: AutoCounters::default(),
        }
    }

    /// Whether a message of `len` bytes goes by zero copy; counts the decision.
    pub(crate) fn zero_copy(&mut self, len: usize) -> bool {
        let c = &mut self.counters;
        let len64 = len as u64;
        if !self.choice.threshold.zero_copy(len) {
            c.small_calls += 1;
            c.small_bytes += len64;
            false
        } else if self.copy_for > 0 {
            self.copy_for -= 1;
            c.backoff_calls += 1;
            c.backoff_bytes += len64;
            false
        } else {
            c.zero_copy_calls += 1;
            c.zero_copy_bytes += len64;
            true
        }
    }

    /// A completion said the kernel copied: copy the next [`BACKOFF_SENDS`] messages.
    pub(crate) fn copied(&mut self) {
        self.copy_for = BACKOFF_SENDS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decider_counts_each_reason() {
        let mut d = Decider::new(Choice {
            path: SendPath::UringZc,
            route: Route::Device,
            threshold: Threshold::From(1000),
            origin: String::new(),
        });
        assert!(!d.zero_copy(999));
        assert!(d.zero_copy(1000));
        d.copied();
        assert!(!d.zero_copy(5000));
        let c = d.counters;
        assert_eq!(
            (c.small_calls, c.zero_copy_calls, c.backoff_calls),
            (1, 1, 1)
        );
        assert_eq!(
            (c.small_bytes, c.zero_copy_bytes, c.backoff_bytes),
            (999, 1000, 5000)
        );
        for _ in 1..BACKOFF_SENDS {
            assert!(!d.zero_copy(5000));
        }
        assert!(
            d.zero_copy(5000),
            "zero copy is tried again after the back-off"
        );
    }
}
