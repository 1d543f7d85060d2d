//! A verdict with its certainty (issue 46): a ratio measured over the runs of one invocation,
//! its 95 % bootstrap interval ([`crate::measure::interval`]), and a goal. The verdict is
//! `ok` when the whole interval meets the goal, `MISS` when the whole interval misses it, and
//! `unsure` when the interval straddles it, with the `--runs` that would likely decide. A ratio
//! without a goal is `info`; wrong bytes are `FAIL` whatever the figures.
//!
//! The ratio is the median of the pairwise ratios (runs made side by side, alternating), and
//! the interval resamples the pairs; where a ratio is of two independent samples (runs chosen
//! by what ran before them), [`Verdict::judge_samples`] resamples each side apart.

use serde::Serialize;

use crate::measure::interval::{self, Interval};

/// What a ratio must be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// At least this.
    AtLeast(f64),
    /// At most this.
    AtMost(f64),
    /// Within `by` (a fraction) of 1: `1 - by ..= 1 + by`.
    NearOne(f64),
}

impl Goal {
    /// The goal as the tables write it: `>= 1.6`, `<= 0.5`, `within 5 % of 1`.
    pub fn text(self) -> String {
        match self {
            Goal::AtLeast(b) => format!(">= {b}"),
            Goal::AtMost(b) => format!("<= {b}"),
            Goal::NearOne(by) => format!("within {:.0} % of 1", by * 100.0),
        }
    }

    /// How far `x` lies inside the goal (positive) or outside it (negative).
    fn margin(self, x: f64) -> f64 {
        match self {
            Goal::AtLeast(b) => x - b,
            Goal::AtMost(b) => b - x,
            Goal::NearOne(by) => by - (x - 1.0).abs(),
        }
    }

    /// Whether every value of `i` meets the goal.
    fn met_by_all(self, i: &Interval) -> bool {
        self.margin(i.low) >= 0.0 && self.margin(i.high) >= 0.0
    }

    /// Whether no value of `i` meets the goal.
    fn missed_by_all(self, i: &Interval) -> bool {
        match self {
            Goal::AtLeast(b) => i.high < b,
            Goal::AtMost(b) => i.low > b,
            Goal::NearOne(by) => i.high < 1.0 - by || i.low > 1.0 + by,
        }
    }
}

/// The verdict's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// No goal: the figure is information.
    Info,
    /// The whole interval meets the goal.
    Ok,
    /// The interval straddles the goal: more runs would tell.
    Unsure,
    /// The whole interval misses the goal, or a condition besides the ratio failed.
    Miss,
    /// Wrong bytes: nothing else counts.
    Fail,
}

impl Decision {
    /// The word as the tables print it.
    pub fn word(self) -> &'static str {
        match self {
            Decision::Info => "info",
            Decision::Ok => "ok",
            Decision::Unsure => "unsure",
            Decision::Miss => "MISS",
            Decision::Fail => "FAIL",
        }
    }
}

/// The most runs a verdict suggests (`--runs` takes at most 1000).
const MAX_RUNS: usize = 1000;

/// A ratio judged against its goal.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The word.
    pub decision: Decision,
    /// What the ratio had to be; `None` for information.
    pub goal: Option<Goal>,
    /// The ratio and its 95 % interval; `None` where nothing was measured.
    pub interval: Option<Interval>,
    /// Values the interval stands on (pairs, or the fewer of two samples).
    pub runs: usize,
    /// For an `unsure` verdict: about how many `--runs` would narrow the interval to one side of
    /// the goal (`None` where the ratio sits on the goal, or more than [`MAX_RUNS`] would be
    /// needed).
    pub runs_to_decide: Option<usize>,
    /// Conditions besides the ratio and notes, each a short clause (`mapped < 99.9 %`).
    pub notes: Vec<String>,
}

/// A verdict as a summary row of the report carries it: its text (`ok (>= 1.6: ...)`), its
/// word (`decision`), the goal's text (`null` for information), the ratio's 95 % interval
/// (`ratio_low`, `ratio_high`; `null` where it stands on fewer than two runs), the runs and,
/// for `unsure`, about how many `--runs` would likely decide.
impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let interval = self.interval.filter(|_| self.runs >= 2);
        let mut row = s.serialize_struct("Verdict", 7)?;
        row.serialize_field("verdict", &self.text())?;
        row.serialize_field("decision", &self.decision)?;
        row.serialize_field("goal", &self.goal.map(Goal::text))?;
        row.serialize_field("ratio_low", &interval.map(|i| i.low))?;
        row.serialize_field("ratio_high", &interval.map(|i| i.high))?;
        row.serialize_field("runs", &self.runs)?;
        row.serialize_field("runs_to_decide", &self.runs_to_decide)?;
        row.end()
    }
}

impl Verdict {
    /// Judges the pairwise ratios `pairs` against `goal` (information without one).
    pub fn judge(pairs: &[f64], goal: Option<Goal>) -> Verdict {
        let finite: Vec<f64> = pairs.iter().copied().filter(|x| x.is_finite()).collect();
        Verdict::decide(
            interval::median_of_pairs(&finite),
            &finite,
            finite.len(),
            goal,
        )
    }

    /// Judges the ratio of the medians of two independent samples, `new / base`.
    pub fn judge_samples(base: &[f64], new: &[f64], goal: Option<Goal>) -> Verdict {
        let runs = base.len().min(new.len());
        // The spread that decides is the noisier side's, relative to its median.
        let relative = |v: &[f64]| {
            let m = crate::measure::median(v).unwrap_or(f64::NAN);
            v.iter().map(|x| x / m).collect::<Vec<f64>>()
        };
        let (rb, rn) = (relative(base), relative(new));
        let spread = if sd(&rb) >= sd(&rn) { rb } else { rn };
        Verdict::decide(interval::ratio_of_medians(base, new), &spread, runs, goal)
    }

    /// The decision for `interval` over `runs` values whose spread `spread` shows.
    fn decide(
        interval: Option<Interval>,
        spread: &[f64],
        runs: usize,
        goal: Option<Goal>,
    ) -> Verdict {
        let mut v = Verdict {
            decision: Decision::Info,
            goal,
            interval,
            runs,
            runs_to_decide: None,
            notes: Vec::new(),
        };
        let Some(goal) = goal else {
            return v;
        };
        let Some(i) = interval else {
            v.decision = Decision::Unsure;
            v.notes.push("nothing measured".into());
            return v;
        };
        v.decision = if runs < 2 {
            // One value has no spread and so no interval to judge by.
            Decision::Unsure
        } else if goal.met_by_all(&i) {
            Decision::Ok
        } else if goal.missed_by_all(&i) {
            Decision::Miss
        } else {
            Decision::Unsure
        };
        if v.decision == Decision::Unsure {
            v.runs_to_decide = runs_to_decide(spread, goal.margin(i.point).abs(), runs);
        }
        v
    }

    /// Information: a figure without a goal, with a note (`kernel copies`).
    pub fn info(pairs: &[f64], note: &str) -> Verdict {
        Verdict::judge(pairs, None).note(note)
    }

    /// Adds a note, shown after the figures.
    pub fn note(mut self, note: impl Into<String>) -> Verdict {
        let note = note.into();
        if !note.is_empty() {
            self.notes.push(note);
        }
        self
    }

    /// A condition besides the ratio: when `holds` is false the verdict is a `MISS`, saying
    /// `what` (unless it is a `FAIL` already or information).
    pub fn require(mut self, holds: bool, what: &str) -> Verdict {
        if !holds && self.decision != Decision::Info {
            self.decision = self.decision.max(Decision::Miss);
            self.notes.push(what.to_owned());
        }
        self
    }

    /// A second ratio that must hold too: the worse of the two decisions, the first's
    /// figures, the second's said in a note (`Gbit ratio >= 0.95: 0.97-1.02`).
    pub fn and(mut self, what: &str, other: Verdict) -> Verdict {
        if other.decision > self.decision || self.decision == Decision::Info {
            self.decision = other.decision.max(self.decision);
            self.runs_to_decide = match other.decision {
                Decision::Unsure => other.runs_to_decide,
                _ => self.runs_to_decide,
            };
        }
        let figures = other.figures();
        self.notes.push(format!("{what} {figures}"));
        self.notes.extend(other.notes);
        self
    }

    /// Wrong bytes: `FAIL`, whatever the figures.
    pub fn fail(mut self, why: &str) -> Verdict {
        self.decision = Decision::Fail;
        self.notes.insert(0, why.to_owned());
        self
    }

    /// The ratio the interval is of; NaN where nothing was measured.
    pub fn ratio(&self) -> f64 {
        self.interval.map_or(f64::NAN, |i| i.point)
    }

    /// `>= 1.6: 1.72 (95 % 1.65-1.80)`, the goal and the figures.
    fn figures(&self) -> String {
        let goal = self.goal.map(|g| g.text() + ": ").unwrap_or_default();
        match self.interval {
            None => format!("{goal}no figure"),
            Some(i) if self.runs < 2 => format!("{goal}{:.3} (1 run, no interval)", i.point),
            Some(i) => format!("{goal}{:.3} (95 % {:.3}-{:.3})", i.point, i.low, i.high),
        }
    }

    /// The verdict as the tables print it, its word first: `ok (>= 1.6: 1.72 (95 %
    /// 1.65-1.80))`, `unsure (>= 1.6: 1.62 (95 % 1.51-1.70); --runs 9 would likely decide)`.
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if self.decision == Decision::Fail {
            parts.extend(self.notes.iter().cloned());
        } else {
            if self.goal.is_some() || self.interval.is_some() {
                parts.push(self.figures());
            }
            parts.extend(self.notes.iter().cloned());
            if self.decision == Decision::Unsure {
                parts.push(match self.runs_to_decide {
                    Some(n) => format!("--runs {n} would likely decide"),
                    None if self.runs < 2 => format!("--runs {RANGE_RUNS} or more to judge"),
                    None => "the ratio sits at its goal: more runs are unlikely to decide".into(),
                });
            }
        }
        if parts.is_empty() {
            self.decision.word().to_owned()
        } else {
            format!("{} ({})", self.decision.word(), parts.join("; "))
        }
    }
}

/// The standard deviation of `v` (n - 1); 0 for fewer than two values.
fn sd(v: &[f64]) -> f64 {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Runs below which the percentile bootstrap of a median is the range of the values (the
/// extremes stay above its 2.5 % tails up to 5 runs): fewer cannot narrow the interval.
const RANGE_RUNS: usize = 6;

/// About how many runs would bring the 95 % interval of a median within `margin` of it: the
/// standard error of a median is about 1.253 standard deviations over the square root of the
/// runs, and the interval's half-width 1.96 of those. At least one more than `runs` and at least
/// [`RANGE_RUNS`]; `None` where `margin` is 0, the values show no spread, or more than
/// [`MAX_RUNS`] would be needed.
fn runs_to_decide(values: &[f64], margin: f64, runs: usize) -> Option<usize> {
    let s = sd(values);
    if margin <= 0.0 || s <= 0.0 || !margin.is_finite() {
        return None;
    }
    let n = (1.96 * 1.253 * s / margin).powi(2).ceil();
    (n <= MAX_RUNS as f64).then(|| (n as usize).max(runs + 1).max(RANGE_RUNS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_interval_on_one_side_decides() {
        let v = Verdict::judge(&[1.7, 1.8, 1.75, 1.72, 1.9], Some(Goal::AtLeast(1.6)));
        assert_eq!(v.decision, Decision::Ok);
        assert!(
            v.text().starts_with("ok (>= 1.6: 1.750 (95 % "),
            "{}",
            v.text()
        );
        let v = Verdict::judge(&[1.1, 1.2, 1.3], Some(Goal::AtLeast(1.6)));
        assert_eq!(v.decision, Decision::Miss);
        assert!(
            v.text()
                .starts_with("MISS (>= 1.6: 1.200 (95 % 1.100-1.300)")
        );
        let v = Verdict::judge(&[0.3, 0.35, 0.4], Some(Goal::AtMost(0.5)));
        assert_eq!(v.decision, Decision::Ok);
    }

    #[test]
    fn an_interval_across_the_goal_is_unsure_and_says_how_many_runs() {
        // The median is above the goal but the lowest pair is below: 3 runs cannot tell.
        let v = Verdict::judge(&[0.95, 1.02, 1.04], Some(Goal::AtLeast(0.97)));
        assert_eq!(v.decision, Decision::Unsure);
        let n = v.runs_to_decide.unwrap();
        assert!(n > 3 && n <= MAX_RUNS, "{n}");
        assert!(
            v.text()
                .ends_with(&format!("--runs {n} would likely decide)")),
            "{}",
            v.text()
        );
        // A median exactly at the goal: no number of runs is likely to decide.
        let v = Verdict::judge(&[0.9, 0.97, 1.1], Some(Goal::AtLeast(0.97)));
        assert_eq!((v.decision, v.runs_to_decide), (Decision::Unsure, None));
        // One run has no interval.
        let v = Verdict::judge(&[2.0], Some(Goal::AtLeast(1.6)));
        assert_eq!(v.decision, Decision::Unsure);
        assert!(v.text().contains("1 run, no interval"), "{}", v.text());
    }

    #[test]
    fn more_runs_are_suggested_as_the_spread_grows() {
        let tight = runs_to_decide(&[1.0, 1.01, 0.99], 0.01, 3).unwrap();
        let wide = runs_to_decide(&[1.0, 1.1, 0.9], 0.01, 3);
        assert!(wide.is_none_or(|w| w > tight), "{tight} {wide:?}");
        assert_eq!(runs_to_decide(&[1.0, 1.0], 0.1, 2), None, "no spread");
        assert_eq!(runs_to_decide(&[1.0, 1.1], 0.0, 2), None, "on the goal");
    }

    #[test]
    fn near_one_needs_the_whole_interval_inside() {
        let goal = Some(Goal::NearOne(0.05));
        let ok = Verdict::judge_samples(&[100.0, 101.0, 99.0], &[102.0, 101.0, 103.0], goal);
        assert_eq!(ok.decision, Decision::Ok, "{}", ok.text());
        let miss = Verdict::judge_samples(&[100.0, 101.0, 99.0], &[120.0, 121.0, 119.0], goal);
        assert_eq!(miss.decision, Decision::Miss, "{}", miss.text());
        let unsure = Verdict::judge_samples(&[100.0, 101.0, 99.0], &[104.0, 108.0, 101.0], goal);
        assert_eq!(unsure.decision, Decision::Unsure, "{}", unsure.text());
    }

    #[test]
    fn conditions_besides_the_ratio_and_wrong_bytes() {
        let ok = || Verdict::judge(&[1.7, 1.8, 1.9], Some(Goal::AtLeast(1.6)));
        let v = ok().require(false, "copied > 0 %");
        assert_eq!(v.decision, Decision::Miss);
        assert!(v.text().ends_with("; copied > 0 %)"), "{}", v.text());
        assert_eq!(ok().require(true, "x").decision, Decision::Ok);
        let v = ok().fail("wrong bytes");
        assert_eq!(v.text(), "FAIL (wrong bytes)");
        // A second ratio: the worse decision, said in a note.
        let unsure = Verdict::judge(&[0.9, 0.96, 1.0], Some(Goal::AtLeast(0.95)));
        let v = ok().and("Gbit ratio", unsure);
        assert_eq!(v.decision, Decision::Unsure);
        assert!(
            v.text().contains("Gbit ratio >= 0.95: 0.960"),
            "{}",
            v.text()
        );
        // Information stays information, with its figures.
        let v = Verdict::info(&[1.2, 1.3], "kernel copies").require(false, "x");
        assert_eq!(v.decision, Decision::Info);
        assert!(v.text().starts_with("info (1.250 (95 % "), "{}", v.text());
        assert!(v.text().ends_with("; kernel copies)"), "{}", v.text());
    }
}
