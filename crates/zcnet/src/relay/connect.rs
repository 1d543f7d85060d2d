//! Connecting a destination (`connect(2)`): [`Config::targets`] in turn until the connect
//! timeout, with the bookkeeping both relays share.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::{Config, RelayError};

/// Connects to `targets` (indices into [`Config::targets`]) in turn, for at most
/// `connect_timeout`; returns the stream and its target's index.
pub(super) fn connect(s: &Config, targets: &[usize]) -> Result<(TcpStream, usize), RelayError> {
    let mut attempts = Attempts::new(s, targets.to_vec());
    while let Some((k, target, left)) = attempts.next() {
        match TcpStream::connect_timeout(&target, left) {
            Ok(stream) => return Ok((stream, k)),
            Err(e) => attempts.failed(k, &e),
        }
        if let Some(pause) = attempts.pause() {
            std::thread::sleep(pause);
        }
    }
    Err(attempts.no_destination())
}

/// The targets a connect tries, in turn until the connect timeout, and what each said: the
/// bookkeeping of both relays' connects.
pub(crate) struct Attempts<'a> {
    s: &'a Config,
    targets: Vec<usize>,
    tried: usize,
    deadline: Instant,
    /// The last error of each target, in [`Config::targets`] order.
    errors: Vec<Option<String>>,
}

impl<'a> Attempts<'a> {
    pub(crate) fn new(s: &'a Config, targets: Vec<usize>) -> Self {
        Attempts {
            s,
            targets,
            tried: 0,
            deadline: Instant::now() + s.connect_timeout,
            errors: vec![None; s.targets.len()],
        }
    }

    /// The next target to try (its index and address) and the time for it, until the deadline
    /// passed after at least one try. Each try gets its share of the connect timeout (a
    /// target's fraction of it), at most what is left: a target that does not answer at all (a
    /// host down, SYNs dropped) leaves time for the next (issue 62, the adversarial pass: the
    /// first target took the whole timeout and `--fallback` was never tried).
    pub(crate) fn next(&mut self) -> Option<(usize, SocketAddr, Duration)> {
        if self.targets.is_empty() || (self.tried > 0 && Instant::now() >= self.deadline) {
            return None;
        }
        let k = self.targets[self.tried % self.targets.len()];
        self.tried += 1;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let share = self.s.connect_timeout / self.targets.len() as u32;
        Some((
            k,
            self.s.targets[k],
            left.min(share).max(Duration::from_millis(10)),
        ))
    }

    /// Target `k` refused or did not answer.
    pub(crate) fn failed(&mut self, k: usize, e: &dyn std::fmt::Display) {
        self.errors[k] = Some(format!("{}: {e}", self.s.targets[k]));
    }

    /// After each round over the targets, a pause: a refusing target answers at once.
    pub(crate) fn pause(&self) -> Option<Duration> {
        (self.tried % self.targets.len() == 0 && Instant::now() < self.deadline)
            .then_some(Duration::from_millis(100))
    }

    /// [`RelayError::NoDestination`] with the last error of each target.
    pub(crate) fn no_destination(self) -> RelayError {
        RelayError::NoDestination {
            timeout: self.s.connect_timeout,
            errors: self
                .errors
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}
