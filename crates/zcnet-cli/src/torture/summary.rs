//! The run's summary: counts over the rounds, what was skipped and why, the rounds that
//! failed (with the seed that replays them), as one line or one JSON document.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// Counts over the run.
#[derive(Default, Serialize)]
pub(super) struct Summary {
    pub(super) seed: u64,
    pub(super) seconds: f64,
    pub(super) rounds: u64,
    pub(super) bytes_checked: u64,
    pub(super) wrong: u64,
    pub(super) missing: u64,
    pub(super) faults: BTreeMap<String, u64>,
    pub(super) loans_out: u64,
    pub(super) loans_back: u64,
    pub(super) fds_leaked: u64,
    pub(super) rounds_by_mechanism: BTreeMap<String, u64>,
    pub(super) effects: BTreeMap<String, u64>,
    pub(super) skipped: Vec<Skip>,
    pub(super) failures: Vec<Failure>,
    /// The signal that ended the run before its time (`SIGINT`, `SIGTERM`, `SIGHUP`), if one did.
    pub(super) stopped_by: Option<String>,
    pub(super) ok: bool,
}

#[derive(Serialize)]
pub(super) struct Skip {
    pub(super) what: String,
    pub(super) reason: String,
}

#[derive(Serialize)]
pub(super) struct Failure {
    pub(super) round: u64,
    pub(super) seed: u64,
    pub(super) sender: String,
    pub(super) receiver: String,
    pub(super) plan: String,
    pub(super) what: String,
}

impl Summary {
    pub(super) fn line(&self) -> String {
        let f = |k: &str| self.faults.get(k).copied().unwrap_or(0);
        let mut s = format!(
            "torture: {} rounds, {} bytes checked, {} wrong, {} missing, faults: sndbuf={} \
             optmem={} memlock={} stall={} reset={} cancel={} dropped={}, loans: {} out {} \
             back, fds: {} leaked",
            self.rounds,
            self.bytes_checked,
            self.wrong,
            self.missing,
            f("sndbuf"),
            f("optmem"),
            f("memlock"),
            f("stall"),
            f("reset"),
            f("cancel"),
            f("dropped"),
            self.loans_out,
            self.loans_back,
            self.fds_leaked
        );
        let _ = write!(s, ", skipped: {}", self.skipped.len());
        if let Some(sig) = &self.stopped_by {
            let _ = write!(s, ", stopped by {sig}");
        }
        s.push_str(if self.ok { " -- ok" } else { " -- FAILED" });
        s
    }
}
