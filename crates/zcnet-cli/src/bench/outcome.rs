//! What a bench measured and how it is shown: its [`Outcome`] (the report and its rows of the
//! suite's summary) printed as JSON or as tables, and drawn as a page where `--report` asks;
//! the summary table, and the verdict of an `auto` mode against the others.

use serde::Serialize;

use super::common::Common;
use super::verdict::{Decision, Goal, Verdict};
use crate::measure::{Metric, Report, ResultSet, ratio_pairs};

/// One row of the suite's summary: a seed experiment, copy vs zero-copy, and its verdict with
/// the 95 % interval it was judged on ([`Verdict`]).
#[derive(Clone, Debug, Serialize)]
pub struct SummaryRow {
    /// The experiment (`tcp-rx loopback ipv6 mtu 61512`, ...).
    pub experiment: String,
    /// The metric compared.
    pub metric: String,
    /// Copy-mode median.
    pub copy: f64,
    /// Zero-copy-mode median.
    pub zero_copy: f64,
    /// Median of the pairwise zc/copy ratios.
    pub ratio: f64,
    /// Share really zero-copied (median).
    pub zero_copy_share: Option<f64>,
    /// The verdict, as the report carries it (flattened: `verdict`, its text; `decision`, its
    /// word; `goal`; `ratio_low` and `ratio_high`, the interval; `runs`; `runs_to_decide`: see
    /// [`Verdict`]'s `Serialize`).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Where other processes or the hypervisor took a large share of the CPU during the
    /// bench's runs ([`crate::measure::Competing`]), what they took.
    pub load: Option<String>,
}

impl SummaryRow {
    /// A row of `experiment`, judged by `verdict` (whose interval gives the ratio).
    pub fn new(
        experiment: String,
        metric: &str,
        (copy, zero_copy): (f64, f64),
        zero_copy_share: Option<f64>,
        verdict: &Verdict,
    ) -> SummaryRow {
        SummaryRow {
            experiment,
            metric: metric.to_owned(),
            copy,
            zero_copy,
            ratio: verdict.ratio(),
            zero_copy_share,
            verdict: verdict.clone(),
            load: None,
        }
    }
}

/// What one bench invocation measured: its report and its rows of the suite's summary.
pub struct Outcome {
    /// The JSON report.
    pub report: Report,
    /// Rows for the summary table.
    pub summary: Vec<SummaryRow>,
}

impl Outcome {
    /// The outcome of a bench whose runs are over: the report's host block closes its window
    /// ([`Report::seal`]: what others took of the CPU meanwhile), and where that was a large
    /// share, each summary row says so beside its verdict.
    pub fn new(mut report: Report, mut summary: Vec<SummaryRow>) -> Outcome {
        report.seal();
        if let Some(load) = report.host.competing.as_ref().and_then(|c| c.busy_note()) {
            for row in &mut summary {
                row.load = Some(load.clone());
            }
        }
        Outcome { report, summary }
    }

    /// Prints the report (see [`Outcome::print`]) and writes its page where `--report` asks.
    pub fn finish(&self, common: &Common) -> anyhow::Result<()> {
        self.print(common.json)?;
        finish_document(self.document()?, common)
    }

    /// The JSON document: the report, with its rows of the summary (`summary`, as the suite's:
    /// each verdict with its 95 % interval and goal), so that `bench X --json` carries what
    /// its text says (issue 63).
    pub fn document(&self) -> anyhow::Result<serde_json::Value> {
        let mut doc = serde_json::to_value(&self.report)?;
        if let Some(o) = doc.as_object_mut() {
            o.insert("summary".into(), serde_json::to_value(&self.summary)?);
        }
        Ok(doc)
    }

    /// Prints the report as JSON (with its summary rows), or as the human table followed by
    /// the summary.
    pub fn print(&self, json: bool) -> anyhow::Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(&self.document()?)?);
        } else {
            println!("\n{}", crate::measure::render(&self.report));
            println!("{}", render_summary(&self.summary));
        }
        Ok(())
    }
}

/// What a bench or the suite does with its printed `document` (a report or the suite, as
/// `--json` prints it): against `--baseline`, what changed, on stderr (stdout keeps the one JSON
/// document); the `--report` page; then `--fail-on-regression`'s verdict.
///
/// # Errors
/// The page cannot be drawn or written; [`crate::report::Regressed`].
pub(super) fn finish_document(document: serde_json::Value, common: &Common) -> anyhow::Result<()> {
    let mut input = crate::report::input::parse_value(document)
        .map_err(|e| anyhow::anyhow!("reading back the report: {e}"))?;
    if input.label.is_empty() {
        input.label = "this machine".into();
    }
    let base = common.baseline_input();
    let noise = common.noise / 100.0;
    let changes = match &base {
        Some(b) => {
            let changes = crate::report::compare::compare(b, &input, noise);
            eprint!("{}", crate::report::compare::lines(&changes, noise));
            changes
        }
        None => Vec::new(),
    };
    if let Some(path) = &common.report {
        let mut inputs: Vec<crate::report::input::Input> = base.into_iter().collect();
        inputs.push(input);
        write_page(path, &inputs, common)?;
    }
    crate::report::fail_on_regression(&changes, common.fail_on_regression)
}

/// Draws `inputs` (a baseline first, where there is one) as the page of `zcnet report` at
/// `path`.
fn write_page(
    path: &std::path::Path,
    inputs: &[crate::report::input::Input],
    common: &Common,
) -> anyhow::Result<()> {
    // The break-even marks: the profile the auto modes used, where it was measured.
    let profile = match &common.profile {
        Some(p) => zcnet::auto::Profile::load(p).ok(),
        None => crate::report::tuned_profile(),
    };
    let (page, _) = crate::report::page_compared(inputs, profile.as_ref(), common.noise / 100.0)?;
    let out = match common.take_page() {
        Some(out) => out,
        None => crate::report::open_page(path)?,
    };
    crate::report::write(out, path, &page)?;
    eprintln!("zcnet bench: the page is {}", path.display());
    Ok(())
}

/// The verdict of an `auto` result set (issue 17): its throughput against the mode with the best
/// median among the others in the same alternation, pair by pair; it must reach 0.97 of it.
pub fn auto_verdict(auto: &ResultSet, sets: &[ResultSet]) -> Verdict {
    let best = sets
        .iter()
        .filter(|s| s.mode != "auto" && s.mode != "zc-adaptive" && s.mode != auto.mode)
        .filter_map(|s| Some((s.median_of(Metric::RequestsPerS)?, s)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, best)) => {
            let pairs = ratio_pairs(&auto.runs, &best.runs, Metric::RequestsPerS);
            Verdict::judge(&pairs, Some(Goal::AtLeast(0.97)))
                .note(format!("of {}", best.mode))
                .note(auto_learned(auto))
        }
        None => Verdict::info(&[], &auto_learned(auto)),
    }
}

/// What auto learned over a set's runs: `learned zero copy from 4096 B in 1049 sends (zc/copy
/// 0.62), 0.6 % exploring, from the built-in prior`.
pub fn auto_learned(auto: &ResultSet) -> String {
    let runs = &auto.runs;
    let f = |get: fn(&crate::measure::Run) -> Option<f64>| {
        crate::measure::stats::median(&runs.iter().filter_map(get).collect::<Vec<_>>())
    };
    // The distinct texts of a field over the runs.
    let distinct = |get: fn(&crate::measure::Run) -> Option<&str>| {
        let mut v: Vec<&str> = runs.iter().filter_map(get).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let ways = distinct(|r| r.auto_learned.as_deref());
    let decided = f(|r| r.auto_decided_after.map(|n| n as f64));
    // A class that never decided (too few sends, or backed off where the kernel copies) sends
    // its prior's way: say so rather than call it learned.
    let verb = if decided.is_some() {
        "learned"
    } else {
        "not learned (the prior, or a back-off where the kernel copies):"
    };
    let mut out = match ways.as_slice() {
        [] => "nothing sent".to_owned(),
        [one] => format!("{verb} zero copy {one}"),
        many => format!("{verb} zero copy {} (runs differ)", many.join(" / ")),
    };
    if let Some(n) = decided {
        out += &format!(" in {n:.0} sends");
    }
    if let Some(m) = f(|r| r.auto_zc_over_copy) {
        out += &format!(" (zc/copy CPU per byte {m:.2})");
    }
    if let Some(e) = f(|r| r.auto_explore_share) {
        out += &format!(", {:.1} % exploring", e * 100.0);
    }
    if let Some(e) = f(|r| r.auto_explore_cost) {
        out += &format!(" ({:.2} % of the CPU)", e * 100.0);
    }
    // Where it started: a profile of this machine, or the kernel documents' thresholds.
    out += if zcnet::auto::active().source.is_none() {
        ", from the built-in prior"
    } else {
        ", from the profile"
    };
    // Why, where a device fact set the start (trains cut in software).
    for t in distinct(|r| r.auto_trains.as_deref()) {
        out += "; ";
        out += t;
    }
    out
}

/// The suite's closing table.
pub fn render_summary(rows: &[SummaryRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "summary (copy vs zero-copy, medians of alternating runs; verdicts on the 95 % interval \
         of the ratio: ok and MISS when it lies wholly on one side of the goal, unsure when it \
         straddles it)\n",
    );
    let _ = writeln!(
        out,
        "{:<52} {:<16} {:>10} {:>10} {:>7} {:>7}  verdict",
        "experiment", "metric", "copy", "zc", "ratio", "zc %"
    );
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "(nothing to compare: the modes run hold no copy and zero-copy pair)"
        );
    }
    for r in rows {
        let _ = writeln!(
            out,
            "{:<52} {:<16} {:>10.1} {:>10.1} {:>7.3} {:>7}  {}{}",
            r.experiment,
            r.metric,
            r.copy,
            r.zero_copy,
            r.ratio,
            r.zero_copy_share
                .map_or_else(|| "-".into(), |s| format!("{:.2}", s * 100.0)),
            r.verdict.text(),
            r.load
                .as_ref()
                .map_or_else(String::new, |l| format!(" [busy: {l}]"))
        );
    }
    let count = |d: Decision| rows.iter().filter(|r| r.verdict.decision == d).count();
    let _ = writeln!(
        out,
        "{} ok, {} MISS, {} unsure, {} info{}",
        count(Decision::Ok),
        count(Decision::Miss),
        count(Decision::Unsure),
        count(Decision::Info),
        match count(Decision::Fail) {
            0 => String::new(),
            n => format!(", {n} FAIL"),
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Run;

    fn auto_set(decided: Option<u64>, learned: &str) -> ResultSet {
        let run = Run {
            auto_learned: Some(learned.into()),
            auto_decided_after: decided,
            auto_zc_over_copy: decided.map(|_| 0.62),
            auto_explore_share: Some(0.006),
            ..Default::default()
        };
        let json = serde_json::json!({"size": 8000});
        ResultSet::new("sink", "ipv4", None, json, "auto", vec![run.clone(), run])
    }

    #[test]
    fn a_row_carries_its_verdict_flat_in_the_report_order() {
        let verdict = Verdict::judge(&[1.7, 1.8, 1.9], Some(Goal::AtLeast(1.6)));
        let row = SummaryRow::new("x".into(), "req/s", (1.0, 1.8), Some(1.0), &verdict);
        let text = serde_json::to_string(&row).unwrap();
        let keys = [
            "experiment",
            "metric",
            "copy",
            "zero_copy",
            "ratio",
            "zero_copy_share",
            "verdict",
            "decision",
            "goal",
            "ratio_low",
            "ratio_high",
            "runs",
            "runs_to_decide",
            "load",
        ];
        let at: Vec<usize> = keys
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), keys.len(), "{text}");
        assert_eq!(v["verdict"], verdict.text());
        assert_eq!(
            (v["decision"].as_str(), v["goal"].as_str()),
            (Some("ok"), Some(">= 1.6"))
        );
        let i = verdict.interval.unwrap();
        assert_eq!(
            (v["ratio_low"].as_f64(), v["ratio_high"].as_f64()),
            (Some(i.low), Some(i.high))
        );
        assert_eq!(v["runs"], 3);
        // One run: no interval to show.
        let one = Verdict::judge(&[1.7], Some(Goal::AtLeast(1.6)));
        let v = serde_json::to_value(SummaryRow::new("x".into(), "m", (1.0, 1.7), None, &one));
        assert_eq!(v.unwrap()["ratio_low"], serde_json::Value::Null);
    }

    #[test]
    fn the_auto_verdict_says_learned_only_when_a_class_decided() {
        let text = auto_learned(&auto_set(Some(3668), "from 4096 B"));
        assert!(
            text.starts_with("learned zero copy from 4096 B in 3668 sends (zc/copy CPU per byte 0.62), 0.6 % exploring"),
            "{text}"
        );
        let text = auto_learned(&auto_set(None, "never"));
        assert!(
            text.starts_with("not learned (the prior, or a back-off where the kernel copies): zero copy never, 0.6 % exploring"),
            "{text}"
        );
    }
}
