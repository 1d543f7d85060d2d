//! Two runs of the same benches, cell by cell (bench, condition, mode): the change of each
//! figure from the first file (the base) to the last, with a confidence interval, and a verdict
//! as criterion.rs gives one: improved, regressed, or within noise.
//!
//! The interval is a percentile bootstrap of the ratio of medians: both sides' runs resampled
//! with replacement, [`RESAMPLES`] times, from a fixed seed (the same files give the same
//! page). A change is a verdict only when its 95 % interval excludes no change at all *and* its
//! median moves by at least the noise floor (`--noise`, 5 % by default): this VM's runs move by
//! ±10 % between invocations, which no interval from within one run sees. With one run a side
//! there is no interval, and the floor alone decides.

use std::fmt::Write as _;

use serde::Serialize;

use super::input::{Input, Report, Run, Set};
use super::text::{condition, esc};
use crate::measure::interval;

/// Bootstrap resamples per change.
pub use crate::measure::interval::RESAMPLES;

/// Which way is better for a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// The figures compared: name, unit, which way is better, the value of a run.
type Figure = (&'static str, &'static str, Better, fn(&Run) -> Option<f64>);

const FIGURES: [Figure; 3] = [
    ("gbit", "Gbit/s", Better::Higher, |r| Some(r.gbit)),
    ("requests_per_s", "req/s", Better::Higher, |r| {
        r.requests_per_s
    }),
    ("cpu_us_per_mb", "CPU µs/MB", Better::Lower, |r| {
        Some(r.cpu_us_per_mb)
    }),
];

/// What a change is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Better beyond the interval and the floor.
    Improved,
    /// Worse beyond the interval and the floor.
    Regressed,
    /// Not told apart from no change.
    WithinNoise,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// One figure of one cell, base against new.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    /// The bench (`udp-tx`), with `#2` for its second report in a file.
    pub bench: String,
    /// Lab, family and parameters.
    pub condition: String,
    /// The mode.
    pub mode: String,
    /// The figure (`cpu_us_per_mb`).
    pub metric: &'static str,
    /// Medians of the base's and the new runs.
    pub base: f64,
    pub new: f64,
    /// `new / base - 1`, and its 95 % interval.
    pub change: f64,
    pub low: f64,
    pub high: f64,
    /// Runs a side.
    pub base_runs: usize,
    pub new_runs: usize,
    pub verdict: Verdict,
}

impl Change {
    /// How much worse, as a fraction (0 when better): for `--fail-on-regression`.
    pub fn worse_by(&self) -> f64 {
        let higher_better = FIGURES
            .iter()
            .find(|f| f.0 == self.metric)
            .is_some_and(|f| f.2 == Better::Higher);
        if higher_better {
            (-self.change).max(0.0)
        } else {
            self.change.max(0.0)
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The ratio of medians as a change, `new / base - 1`, and its 95 % percentile-bootstrap
/// interval ([`interval::ratio_of_medians`]); no change where the base has no median above 0.
fn interval(base: &[f64], new: &[f64]) -> (f64, f64, f64) {
    interval::ratio_of_medians(base, new).map_or((0.0, 0.0, 0.0), |i| {
        (i.point - 1.0, i.low - 1.0, i.high - 1.0)
    })
}

/// How many top-level scalar settings two reports share with the same value: which of the
/// base's reports of a bench (the suite runs some twice, a large and a small pool) a new one
/// was run like.
fn agreement(a: &Report, b: &Report) -> usize {
    let (Some(a), Some(b)) = (a.settings.as_object(), b.settings.as_object()) else {
        return 0;
    };
    a.iter()
        .filter(|(k, v)| !v.is_object() && !v.is_array() && b.get(*k) == Some(*v))
        .count()
}

/// Every figure of every cell the two inputs share, `noise` the floor (a fraction). A new
/// report is compared with the base's report of the same bench run most alike (the most equal
/// settings; the first on a tie), cell by cell (condition and mode).
pub fn compare(base: &Input, new: &Input, noise: f64) -> Vec<Change> {
    let mut out = Vec::new();
    let mut seen: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in &new.reports {
        let nth = seen.entry(r.bench.as_str()).or_default();
        *nth += 1;
        let bench = if *nth == 1 {
            r.bench.clone()
        } else {
            format!("{} #{nth}", r.bench)
        };
        let Some(b) =
            base.reports
                .iter()
                .filter(|b| b.bench == r.bench)
                .fold(None::<&Report>, |best, b| match best {
                    Some(x) if agreement(x, r) >= agreement(b, r) => Some(x),
                    _ => Some(b),
                })
        else {
            continue;
        };
        for n in &r.results {
            let cond = condition(n);
            let Some(bs) = b
                .results
                .iter()
                .find(|s| s.mode == n.mode && condition(s) == cond)
            else {
                continue;
            };
            out.extend(changes_of(&bench, &cond, bs, n, noise));
        }
    }
    out
}

/// The figures of one cell, base set `b` against new set `n`.
fn changes_of(bench: &str, cond: &str, b: &Set, n: &Set, noise: f64) -> Vec<Change> {
    let mut out = Vec::new();
    for (metric, _, better, get) in FIGURES {
        let bv: Vec<f64> = b
            .runs
            .iter()
            .filter_map(get)
            .filter(|x| x.is_finite())
            .collect();
        let nv: Vec<f64> = n
            .runs
            .iter()
            .filter_map(get)
            .filter(|x| x.is_finite())
            .collect();
        if bv.is_empty() || nv.is_empty() {
            continue;
        }
        let (base, new) = (median(&mut bv.clone()), median(&mut nv.clone()));
        // A base of zero has no ratio to measure against (issue 62 item 9: such cells were
        // left out, and a file of zeros against itself said that no cell of it was in the
        // base): zero again is no change; a figure that rose from zero rose without bound.
        let (change, low, high) = if base <= 0.0 {
            let c = if new <= 0.0 { 0.0 } else { f64::INFINITY };
            (c, c, c)
        } else {
            interval(&bv, &nv)
        };
        let beyond = (low > 0.0 || high < 0.0) && change.abs() >= noise;
        let verdict = match (beyond, change > 0.0, better) {
            (false, _, _) => Verdict::WithinNoise,
            (true, true, Better::Higher) | (true, false, Better::Lower) => Verdict::Improved,
            _ => Verdict::Regressed,
        };
        out.push(Change {
            bench: bench.to_owned(),
            condition: cond.to_owned(),
            mode: n.mode.clone(),
            metric,
            base,
            new,
            change,
            low,
            high,
            base_runs: bv.len(),
            new_runs: nv.len(),
            verdict,
        });
    }
    out
}

/// What changed, as lines for a terminal: a count, then each regression and improvement.
pub fn lines(changes: &[Change], noise: f64) -> String {
    if changes.is_empty() {
        return "against the baseline: nothing compared: no cell (bench, condition, mode) of this \
                run is in it\n"
            .to_owned();
    }
    let count = |v: Verdict| changes.iter().filter(|c| c.verdict == v).count();
    let mut out = format!(
        "against the baseline: {} regressed, {} improved, {} within noise (95 % bootstrap \
         interval, floor {:.0} %)\n",
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::WithinNoise),
        noise * 100.0
    );
    for v in [Verdict::Regressed, Verdict::Improved] {
        for c in changes.iter().filter(|c| c.verdict == v) {
            let _ = writeln!(
                out,
                "  {}: {} {} {} {}: {:+.1} % ({:+.1} to {:+.1})",
                c.verdict.word(),
                c.bench,
                c.condition,
                c.mode,
                c.metric,
                100.0 * c.change,
                100.0 * c.low,
                100.0 * c.high
            );
        }
    }
    out
}

/// The page's section: regressions first, then improvements, then a count of the rest.
pub fn section(base: &str, new: &str, changes: &[Change], noise: f64) -> String {
    let mut h = String::new();
    let count = |v: Verdict| changes.iter().filter(|c| c.verdict == v).count();
    let _ = write!(
        h,
        "<h2 id=\"changes\">Changes: {} → {}</h2>\n<p class=\"verdicts\">{} regressed, {} \
         improved, {} within noise (95 % bootstrap interval of the ratio of medians, {} \
         resamples; a verdict also needs a change of at least {:.0} %).</p>\n",
        esc(base),
        esc(new),
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::WithinNoise),
        RESAMPLES,
        noise * 100.0
    );
    if changes.is_empty() {
        h.push_str(
            "<p>Nothing compared: no cell (bench, condition, mode) of the last file is in the \
             first.</p>\n",
        );
        return h;
    }
    let shown: Vec<&Change> = [Verdict::Regressed, Verdict::Improved]
        .iter()
        .flat_map(|v| changes.iter().filter(move |c| c.verdict == *v))
        .collect();
    if shown.is_empty() {
        h.push_str("<p>No figure moved beyond the noise.</p>\n");
        return h;
    }
    h.push_str(
        "<table class=\"changes\"><tr><th>verdict</th><th>bench</th><th>condition</th>\
         <th>mode</th><th>figure</th><th>base</th><th>new</th><th>change (95 % interval)</th>\
         <th>runs</th></tr>\n",
    );
    for c in shown {
        let unit = FIGURES.iter().find(|f| f.0 == c.metric).map_or("", |f| f.1);
        let _ = writeln!(
            h,
            "<tr class=\"{cls}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.4}</td><td>{:.4}</td><td>{:+.1} % ({:+.1} to {:+.1})</td><td>{} / {}</td></tr>",
            c.verdict.word(),
            esc(&c.bench),
            esc(&c.condition),
            esc(&c.mode),
            unit,
            c.base,
            c.new,
            100.0 * c.change,
            100.0 * c.low,
            100.0 * c.high,
            c.base_runs,
            c.new_runs,
            cls = c.verdict.word().replace(' ', "-"),
        );
    }
    h.push_str("</table>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_holds_the_point_and_collapses_without_spread() {
        let (c, lo, hi) = interval(&[10.0, 11.0, 9.0, 10.5, 9.5], &[7.0, 7.7, 6.3, 7.35, 6.65]);
        assert!((c - (-0.3)).abs() < 1e-9, "{c}");
        assert!(lo <= c && c <= hi && hi < 0.0, "{lo} {hi}");
        assert_eq!(interval(&[5.0], &[5.0]), (0.0, 0.0, 0.0));
        // The same every time: a fixed seed.
        let a = interval(&[1.0, 2.0, 3.0], &[2.0, 3.0, 4.0]);
        assert_eq!(a, interval(&[1.0, 2.0, 3.0], &[2.0, 3.0, 4.0]));
        // A collapse to zero is a change, not a gap: -100 %, the interval below zero.
        let (c, _, hi) = interval(&[10.0, 10.0, 10.0], &[0.0, 0.0, 0.0]);
        assert_eq!((c, hi), (-1.0, -1.0));
        // A base of some zero runs: the resamples with a zero median are left out.
        let (c, lo, hi) = interval(&[0.0, 10.0, 10.0], &[10.0, 10.0, 10.0]);
        assert!(c == 0.0 && lo.is_finite() && hi.is_finite(), "{lo} {hi}");
    }
}
