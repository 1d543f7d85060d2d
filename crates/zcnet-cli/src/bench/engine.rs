//! The engine of the sending benches (`udp-tx`, `tcp-tx`, `uring-tx`, `udp-gso`, `packet-tx`):
//! what they share, so that each keeps only what is its own (how one run sends, its lab, its
//! extra settings, its verdict rules).
//!
//! - [`Plan`]: the labs, the sizes and the modes to alternate (the first the baseline), the runs
//!   and their seconds;
//! - [`Settings`]: the settings every sending bench reports, typed, with the bench's own
//!   flattened beside them (and [`InLab`] for those that run in [`super::sweep`]'s labs);
//! - [`Session`]: the bench under way: its report, its progress, this thread pinned away from
//!   the sender, each lab in turn (or the `--remote` host), each size step alternated
//!   ([`SizeStep`]: mirrored rounds, or repeated ones) and collected into result sets;
//! - [`rows_against_base`]: the summary rows of each mode against the baseline.

use std::time::Duration;

use anyhow::Context;
use netlab::Family;
use serde::Serialize;
use serde_json::json;

use super::common::{Common, FamilyArg, Rounds};
use super::outcome::{Outcome, SummaryRow};
use super::sweep::{Lab, Proto};
use super::verdict::Verdict;
use crate::measure::{
    self, Comparison, Metric, Pinned, Progress, Report, ResultSet, Run, ratio_pairs,
};
use crate::remote::Remote;

/// What a sending bench alternates, where, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'a, M> {
    /// Lab names (the bench says which it knows).
    pub labs: &'a [&'a str],
    /// Address family.
    pub family: Family,
    /// Message sizes in bytes (`udp-gso`: segment sizes).
    pub sizes: &'a [usize],
    /// Modes to alternate; the first is the baseline of the comparisons.
    pub modes: &'a [M],
    /// Runs, their seconds, and whether to print as they go.
    pub rounds: Rounds,
}

/// The modes of a bench that sweeps sizes, and what its `--size` and `--mode` say.
pub trait Flags: clap::ValueEnum + Clone + Send + Sync + std::fmt::Debug + 'static {
    /// `--size`'s help.
    const SIZE_HELP: &'static str;
    /// The sizes `--size` takes, in bytes.
    const SIZES: std::ops::RangeInclusive<u64>;
    /// `--mode`'s help.
    const MODE_HELP: &'static str;
}

/// `--size`'s help in the benches of frames (`packet`, `packet-tx`).
pub const FRAME_SIZE_HELP: &str =
    "Frame size in bytes, Ethernet header through payload (repeatable; default 64, 512 and 1500)";

/// The flags of a bench that sweeps sizes and alternates modes: every bench's ([`Common`]),
/// the sizes and the modes (the first the baseline).
#[derive(Debug, clap::Args)]
pub struct Sweep<M: Flags> {
    #[command(flatten)]
    pub common: Common,
    #[arg(long = "size", value_name = "BYTES", help = M::SIZE_HELP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(M::SIZES))]
    pub sizes: Vec<usize>,
    #[arg(long = "mode", value_enum, help = M::MODE_HELP)]
    pub modes: Vec<M>,
}

/// [`Sweep`] and the address family: the flags of a bench in [`super::sweep`]'s labs.
#[derive(Debug, clap::Args)]
pub struct SendFlags<M: Flags> {
    #[command(flatten)]
    pub sweep: Sweep<M>,
    /// Address family. Default: IPv4.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: FamilyArg,
}

impl<M: Flags> Sweep<M> {
    /// The sizes asked for, else `default`.
    pub fn sizes_or(&self, default: &[usize]) -> Vec<usize> {
        asked_or(&self.sizes, default)
    }

    /// The modes asked for, else `default`.
    pub fn modes_or(&self, default: &[M]) -> Vec<M> {
        asked_or(&self.modes, default)
    }
}

/// What a repeatable flag asked for, else the bench's `default`.
pub fn asked_or<T: Clone>(asked: &[T], default: &[T]) -> Vec<T> {
    if asked.is_empty() {
        default.to_vec()
    } else {
        asked.to_vec()
    }
}

/// How the order of mirrored rounds is named in the settings.
pub const MIRRORED: &str = "mirrored rounds: A B C, then C B A, ...; an auto mode runs between \
                            the baseline and the last fixed mode, the ways it is judged against";

/// The order in which a step runs its arms, as indices into `names` (the listing order, the
/// baseline first): the listing order, except that an auto arm (`auto`, `gso-auto`) runs
/// between the baseline and the last fixed arm (neither auto nor adaptive), so that each of
/// its pairs against either runs side by side, and the other arms run before them.
///
/// Why: on these VMs one run's deviation from its mode's median follows the run before it
/// (a correlation of 0.51 at one run apart, 0.18 at three, over the 2,970 neighbouring runs of
/// issue 63's 36 sending benches), so a ratio of neighbours spreads less (a standard deviation
/// of its logarithm 0.084 against 0.107 three runs apart). Mirrored rounds keep the neighbours
/// in both directions.
pub fn run_order(names: &[&str]) -> Vec<usize> {
    let identity: Vec<usize> = (0..names.len()).collect();
    let is_auto = |n: &str| n == "auto" || n.ends_with("-auto");
    let Some(auto) = (1..names.len()).find(|&i| is_auto(names[i])) else {
        return identity;
    };
    let twin = (1..names.len())
        .rev()
        .find(|&i| i != auto && !is_auto(names[i]) && !names[i].contains("adaptive"));
    let mut order: Vec<usize> = identity
        .into_iter()
        .filter(|&i| i != 0 && i != auto && Some(i) != twin)
        .collect();
    order.extend([0, auto]);
    order.extend(twin);
    order
}

/// The settings every sending bench reports, with the bench's own (`own`, flattened: one JSON
/// object).
#[derive(Debug, Serialize)]
pub struct Settings<E> {
    /// Alternations per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// The modes, in their order.
    pub modes: Vec<&'static str>,
    /// The bench's own settings.
    #[serde(flatten)]
    pub own: E,
}

/// The settings of a bench that runs in [`super::sweep`]'s labs: the sender on CPU 0, the
/// receiver on CPU 1, the profile the `auto` modes use, mirrored rounds.
#[derive(Debug, Serialize)]
pub struct InLab {
    /// The sender's CPU.
    pub sender_cpu: usize,
    /// The receiver's CPU.
    pub receiver_cpu: usize,
    /// Where the `auto` modes' profile comes from.
    pub auto_profile: String,
    /// The order of the runs.
    pub order: &'static str,
}

impl Default for InLab {
    /// The settings of every bench in [`super::sweep`]'s labs.
    fn default() -> InLab {
        InLab {
            sender_cpu: 0,
            receiver_cpu: 1,
            auto_profile: zcnet::auto::active().origin(),
            order: MIRRORED,
        }
    }
}

impl<'a, M> Plan<'a, M> {
    /// A plan over IPv4: the suite's family, and the frame benches' only one.
    pub fn ipv4(
        labs: &'a [&'a str],
        sizes: &'a [usize],
        modes: &'a [M],
        rounds: Rounds,
    ) -> Plan<'a, M> {
        Plan {
            labs,
            family: Family::V4,
            sizes,
            modes,
            rounds,
        }
    }
}

impl<M: Copy> Plan<'_, M> {
    /// The shared settings of this plan (its modes named by `name`), with `own` beside them.
    pub fn settings<E>(&self, name: impl Fn(M) -> &'static str, own: E) -> Settings<E> {
        Settings {
            runs: self.rounds.runs,
            seconds: self.rounds.seconds,
            modes: self.modes.iter().map(|&m| name(m)).collect(),
            own,
        }
    }

    /// Runs of a bench that alternates `arms` arms at every size in every lab.
    pub fn steps(&self, arms: usize) -> usize {
        self.labs.len() * self.sizes.len() * self.rounds.runs * arms
    }

    /// Starts bench `bench` ([`Rounds::start`]): `steps` runs of the plan's seconds and
    /// `extra` more each.
    ///
    /// # Errors
    /// The settings cannot be made JSON.
    pub fn start<E: Serialize>(
        &self,
        bench: &'static str,
        settings: &Settings<E>,
        steps: usize,
        extra: f64,
    ) -> anyhow::Result<Session> {
        let per_run = self.rounds.seconds + extra;
        self.rounds.start(bench, settings, steps, per_run)
    }

    /// The step of `size` in `lab` of a bench in [`super::sweep`]'s labs: mirrored rounds, each
    /// run's line by [`sender_line`].
    pub fn step<'s>(
        &self,
        lab: &'s str,
        family: Family,
        proto: Proto,
        size: usize,
    ) -> SizeStep<'s> {
        SizeStep {
            lab,
            family,
            proto: Some(proto),
            size,
            runs: self.rounds.runs,
            quiet: self.rounds.quiet,
            // What a run leaves behind falls on every mode alike: on loopback TCP, auto ran
            // 0.94 of copy right after zc and 1.21 right after copy (issue 30).
            mirrored: true,
            line: sender_line,
        }
    }
}

impl Rounds {
    /// Starts bench `bench`: its report with `settings`, a progress bar of `steps` runs of
    /// about `per_run` seconds each, this thread on CPU 1 (off the sender's or the capture's
    /// CPU 0) until the [`Session`] is over.
    ///
    /// # Errors
    /// The settings cannot be made JSON.
    pub fn start(
        &self,
        bench: &'static str,
        settings: &impl Serialize,
        steps: usize,
        per_run: f64,
    ) -> anyhow::Result<Session> {
        let mut report = Report::new(bench);
        report.settings = serde_json::to_value(settings).context("the bench's settings")?;
        let progress = Progress::new(
            bench,
            steps as u64,
            Duration::from_secs_f64(per_run * steps as f64),
        );
        Ok(Session {
            report,
            summary: Vec::new(),
            progress,
            _pinned: Pinned::to(1),
        })
    }
}

/// A bench under way: its report and summary rows, its progress, and this thread
/// pinned to CPU 1 until it is over.
pub struct Session {
    /// The JSON report.
    pub report: Report,
    /// Rows for the summary table.
    pub summary: Vec<SummaryRow>,
    progress: Progress,
    _pinned: Pinned,
}

impl Session {
    /// Runs `step` in each lab of `plan` in turn, built by `build`; with a `--remote` session,
    /// once, in the lab `remote` (the far host and its address recorded in the report, the
    /// family the remote's).
    ///
    /// # Errors
    /// A lab cannot be built; what `step` returns.
    pub(crate) fn each_lab<M>(
        &mut self,
        remote: Option<Remote>,
        plan: &Plan<'_, M>,
        build: impl Fn(&str) -> anyhow::Result<Lab>,
        mut step: impl FnMut(&mut Session, &str, Family, Lab) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (family, labs) =
            super::labs::remote_labs(&mut self.report, remote.as_ref(), plan.family, plan.labs);
        let mut remote = remote.map(std::sync::Mutex::new);
        for &name in &labs {
            let lab = match remote.take() {
                Some(r) => Lab::Remote(r),
                None => build(name)?,
            };
            step(self, name, family, lab)?;
        }
        Ok(())
    }

    /// Alternates `arms` in `step` (`step.runs` rounds), printing each run unless quiet;
    /// returns one result set per arm, in their order.
    ///
    /// # Errors
    /// A run failed: the error says which lab, size, arm and run.
    pub fn measure<A: Copy>(
        &self,
        step: &SizeStep<'_>,
        arms: &[A],
        name: impl Fn(A) -> &'static str,
        mut one: impl FnMut(A) -> anyhow::Result<Run>,
    ) -> anyhow::Result<Vec<ResultSet>> {
        let (lab, size) = (step.lab, step.size);
        let one_run = |arm, i| {
            let run =
                one(arm).with_context(|| format!("{lab} {size} B {} run {}", name(arm), i + 1))?;
            if !step.quiet {
                println!("{}", (step.line)(step, name(arm), &run));
            }
            anyhow::Ok(run)
        };
        let per_arm = if step.mirrored {
            let order = run_order(&arms.iter().map(|&a| name(a)).collect::<Vec<_>>());
            let ordered: Vec<A> = order.iter().map(|&i| arms[i]).collect();
            let mut ran = measure::alternate_abba(&ordered, step.runs, &self.progress, one_run)?
                .0
                .into_iter()
                .zip(&order)
                .collect::<Vec<_>>();
            ran.sort_by_key(|&(_, &i)| i);
            ran.into_iter().map(|(runs, _)| runs).collect()
        } else {
            measure::alternate(arms, step.runs, &self.progress, one_run)?
        };
        let (congestion, params) = match step.proto {
            Some(Proto::Tcp) => (
                super::labs::congestion(lab),
                json!({"size": size, "proto": "tcp"}),
            ),
            Some(Proto::Udp) => (None, json!({"size": size, "proto": "udp"})),
            None => (None, json!({"size": size})),
        };
        let condition = (lab, step.family.name(), congestion.as_deref());
        Ok(sets_of(arms, name, per_arm, condition, &params))
    }

    /// Adds `a` over `b` in each of `metrics` to the report's comparisons.
    pub fn compare(&mut self, a: &ResultSet, b: &ResultSet, metrics: &[Metric]) {
        for &metric in metrics {
            self.report
                .comparisons
                .extend(Comparison::new(a, b, metric));
        }
    }

    /// Adds every set after the first over the first in each of `metrics`.
    pub fn compare_to_first(&mut self, sets: &[ResultSet], metrics: &[Metric]) {
        if let Some((base, rest)) = sets.split_first() {
            for other in rest {
                self.compare(other, base, metrics);
            }
        }
    }

    /// The progress bar, for a bench that alternates its runs itself.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Keeps a step's result sets and summary rows.
    pub fn keep(&mut self, sets: Vec<ResultSet>, rows: Vec<SummaryRow>) {
        self.summary.extend(rows);
        self.report.results.extend(sets);
    }

    /// The bench is over: its [`Outcome`].
    pub fn finish(self) -> Outcome {
        Outcome::new(self.report, self.summary)
    }
}

/// The result sets of `arms` (named by `name`) from their runs (`per_arm`, in the same order),
/// all in one condition: (lab, family, congestion control) and `params`.
pub fn sets_of<A: Copy>(
    arms: &[A],
    name: impl Fn(A) -> &'static str,
    per_arm: Vec<Vec<Run>>,
    (lab, family, congestion): (&str, &str, Option<&str>),
    params: &serde_json::Value,
) -> Vec<ResultSet> {
    arms.iter()
        .zip(per_arm)
        .map(|(&a, runs)| ResultSet::new(lab, family, congestion, params.clone(), name(a), runs))
        .collect()
}

/// The modes of `asked` that can run where `fixed` must register `registered` bytes with
/// io_uring: registered buffers count against `RLIMIT_MEMLOCK` (8 MiB for an ordinary user), so
/// where they do not fit, `fixed` is left out, saying `what` with the limit and the way to raise
/// it, and the other modes run.
pub fn registrable<M: Copy + PartialEq>(
    asked: &[M],
    fixed: M,
    registered: u64,
    what: &str,
) -> Vec<M> {
    match zcnet::uring::memlock_check(registered) {
        Err(e) if asked.contains(&fixed) => {
            eprintln!("{what}: {}", crate::error_line::chain(&e));
            asked.iter().copied().filter(|&m| m != fixed).collect()
        }
        _ => asked.to_vec(),
    }
}

/// What a sender's run is compared by: requests/s and CPU µs per MB.
pub const SENDER_METRICS: [Metric; 2] = [Metric::RequestsPerS, Metric::CpuUsPerMb];

/// One size in one lab of a sending bench: the condition its runs share.
pub struct SizeStep<'a> {
    /// Lab name.
    pub lab: &'a str,
    /// Address family.
    pub family: Family,
    /// Transport (in the results' params); `None` for frames, which name none.
    pub proto: Option<Proto>,
    /// Bytes per send.
    pub size: usize,
    /// Alternations per mode.
    pub runs: usize,
    /// No per-run lines.
    pub quiet: bool,
    /// Mirrored rounds (A B C, C B A, ...: [`measure::alternate_abba`]) instead of repeated
    /// ones, so that no mode always runs right after the same other one.
    pub mirrored: bool,
    /// A run's line, from the step, the arm's name and the run.
    pub line: fn(&SizeStep<'_>, &str, &Run) -> String,
}

/// A sender's run: requests/s, Gbit/s, the sender's CPU per MB and the share zero-copied.
pub fn sender_line(step: &SizeStep<'_>, name: &str, run: &Run) -> String {
    format!(
        "[{} {} {} B] {:<12} {:>10.0} req/s {:>7.2} Gbit {:>7.1} us/MB sender, {:>6} % zero-copy{}",
        step.lab,
        step.family.name(),
        step.size,
        name,
        run.requests_per_s.unwrap_or(0.0),
        run.gbit,
        run.cpu_us_per_mb,
        run.zero_copy_share
            .map_or("-".to_owned(), |z| format!("{:.2}", 100.0 * z)),
        run.far_part()
    )
}

/// The summary rows of each set against the baseline (the first set) by `metric` (named
/// `unit`), medians and pairwise ratios: experiment `name(set)`, judged by `verdict(set,
/// pairs)`, with the share zero-copied where `share` asks. A set without pairs gets no row.
pub fn rows_against_base(
    sets: &[ResultSet],
    (unit, metric): (&str, Metric),
    share: bool,
    name: impl Fn(&ResultSet) -> String,
    verdict: impl Fn(&ResultSet, &[f64]) -> Verdict,
) -> Vec<SummaryRow> {
    let Some(base) = sets.first() else {
        return Vec::new();
    };
    let med = |s: &ResultSet| s.median_of(metric).unwrap_or(f64::NAN);
    sets.iter()
        .filter(|s| s.mode != base.mode)
        .filter_map(|s| {
            let pairs = ratio_pairs(&s.runs, &base.runs, metric);
            if pairs.is_empty() {
                return None;
            }
            Some(SummaryRow::new(
                name(s),
                unit,
                (med(base), med(s)),
                share.then(|| s.median_of(Metric::ZeroCopyShare)).flatten(),
                &verdict(s, &pairs),
            ))
        })
        .collect()
}

/// The tables a bench made, printed after its runs unless `quiet`.
pub fn print_tables(tables: &[String], quiet: bool) {
    if !quiet {
        for t in tables {
            println!("\n{t}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run_order;

    /// Names in the order `run_order` gives for `names`.
    fn ran(names: &[&'static str]) -> Vec<&'static str> {
        run_order(names).into_iter().map(|i| names[i]).collect()
    }

    #[test]
    fn auto_runs_between_the_baseline_and_the_last_fixed_mode() {
        assert_eq!(ran(&["copy", "zc", "auto"]), ["copy", "auto", "zc"]);
        assert_eq!(
            ran(&["copy", "zc", "zc-adaptive", "auto"]),
            ["zc-adaptive", "copy", "auto", "zc"]
        );
        assert_eq!(
            ran(&["copy", "zc", "zc-fixed", "auto"]),
            ["zc", "copy", "auto", "zc-fixed"]
        );
        assert_eq!(
            ran(&["gso-copy", "gso-zc", "gso-auto"]),
            ["gso-copy", "gso-auto", "gso-zc"]
        );
    }

    #[test]
    fn without_an_auto_arm_or_a_fixed_one_the_order_is_kept_or_auto_follows_the_baseline() {
        assert_eq!(ran(&["copy", "zc", "zc-fixed"]), ["copy", "zc", "zc-fixed"]);
        assert_eq!(ran(&["copy", "auto"]), ["copy", "auto"]);
        assert_eq!(
            ran(&["copy", "zc-adaptive", "auto"]),
            ["zc-adaptive", "copy", "auto"]
        );
        // The baseline itself is never moved away from the first place by being auto.
        assert_eq!(ran(&["auto", "copy"]), ["auto", "copy"]);
        assert_eq!(ran(&[]), Vec::<&str>::new());
    }

    #[test]
    fn every_arm_runs_once() {
        let names = ["copy", "zc", "zc-adaptive", "zc-fixed", "auto"];
        let mut order = run_order(&names);
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2, 3, 4]);
    }
}
