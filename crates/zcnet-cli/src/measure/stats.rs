//! Repetition and comparison: A/B alternation, medians and spreads, typed metrics, ratios
//! pair by pair.

use serde::Serialize;
use serde_json::{Map, Value};

use super::cpu::Run;
use super::progress::Progress;

/// A figure of a [`Run`] that benches compare and tables show: typed, so that no code looks a
/// metric up by a string key. Serialized as the run's field name (`cpu_us_per_mb`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// [`Run::gbit`].
    Gbit,
    /// [`Run::requests_per_s`].
    RequestsPerS,
    /// [`Run::cpu_us_per_mb`].
    CpuUsPerMb,
    /// [`Run::cpu_ns_per_request`].
    CpuNsPerRequest,
    /// [`Run::machine_cpu_us_per_mb`].
    MachineCpuUsPerMb,
    /// [`Run::ctx_switches`].
    CtxSwitches,
    /// [`Run::zero_copy_share`].
    ZeroCopyShare,
    /// [`Run::capture_share`].
    CaptureShare,
    /// [`Run::packets_dropped`].
    PacketsDropped,
    /// [`Run::remote_cpu_us_per_mb`].
    RemoteCpuUsPerMb,
}

impl Metric {
    /// The metric's value in `run`; `None` where it does not apply.
    pub fn of(self, run: &Run) -> Option<f64> {
        match self {
            Metric::Gbit => Some(run.gbit),
            Metric::RequestsPerS => run.requests_per_s,
            Metric::CpuUsPerMb => Some(run.cpu_us_per_mb),
            Metric::CpuNsPerRequest => run.cpu_ns_per_request,
            Metric::MachineCpuUsPerMb => run.machine_cpu_us_per_mb,
            Metric::CtxSwitches => Some(run.ctx_switches as f64),
            Metric::ZeroCopyShare => run.zero_copy_share,
            Metric::CaptureShare => run.capture_share,
            Metric::PacketsDropped => run.packets_dropped.map(|n| n as f64),
            Metric::RemoteCpuUsPerMb => run.remote_cpu_us_per_mb,
        }
    }

    /// The field name, as in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Gbit => "gbit",
            Metric::RequestsPerS => "requests_per_s",
            Metric::CpuUsPerMb => "cpu_us_per_mb",
            Metric::CpuNsPerRequest => "cpu_ns_per_request",
            Metric::MachineCpuUsPerMb => "machine_cpu_us_per_mb",
            Metric::CtxSwitches => "ctx_switches",
            Metric::ZeroCopyShare => "zero_copy_share",
            Metric::CaptureShare => "capture_share",
            Metric::PacketsDropped => "packets_dropped",
            Metric::RemoteCpuUsPerMb => "remote_cpu_us_per_mb",
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Median of `v` (mean of the middle two for an even count); `None` for an empty slice.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Median, minimum and maximum of every field over `runs`, each an object with a run's fields.
///
/// A numeric field that is `null` in any run is `null`; `verified` is true only if every run
/// verified, `null` if none did.
pub fn summarize(runs: &[Run]) -> (Value, Value, Value) {
    let objs: Vec<Map<String, Value>> = runs
        .iter()
        .filter_map(|r| match serde_json::to_value(r) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        })
        .collect();
    let (mut med, mut min, mut max) = (Map::new(), Map::new(), Map::new());
    let Some(first) = objs.first() else {
        return (Value::Null, Value::Null, Value::Null);
    };
    for key in first.keys() {
        let vals: Vec<&Value> = objs.iter().map(|o| &o[key]).collect();
        if vals.iter().all(|v| v.is_boolean()) {
            let all = Value::Bool(vals.iter().all(|v| v.as_bool() == Some(true)));
            for m in [&mut med, &mut min, &mut max] {
                m.insert(key.clone(), all.clone());
            }
            continue;
        }
        let nums: Option<Vec<f64>> = vals.iter().map(|v| v.as_f64()).collect();
        let (a, b, c) = match nums {
            Some(n) if !n.is_empty() => (
                median(&n).map_or(Value::Null, Value::from),
                Value::from(n.iter().copied().fold(f64::INFINITY, f64::min)),
                Value::from(n.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            ),
            _ => (Value::Null, Value::Null, Value::Null),
        };
        med.insert(key.clone(), a);
        min.insert(key.clone(), b);
        max.insert(key.clone(), c);
    }
    (Value::Object(med), Value::Object(min), Value::Object(max))
}

/// Ratios `a[i] / b[i]` of `metric`, pair by pair (runs made side by side, alternating).
pub fn ratio_pairs(a: &[Run], b: &[Run], metric: Metric) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| {
            let (x, y) = (metric.of(x)?, metric.of(y)?);
            (y != 0.0).then_some(x / y)
        })
        .collect()
}

/// A set of runs of one mode under one condition.
#[derive(Clone, Debug, Serialize)]
pub struct ResultSet {
    /// The lab (`loopback`, `veth`, `sink`).
    pub lab: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// TCP congestion control in the lab, or `null` where no TCP is involved.
    pub congestion: Option<String>,
    /// The bench's parameters (MTU, MSS, sizes, ...).
    pub params: Value,
    /// The mode (`copy`, `zc`, ...).
    pub mode: String,
    /// Every run, in the order made.
    pub runs: Vec<Run>,
    /// Per-field median.
    pub median: Value,
    /// Per-field minimum.
    pub min: Value,
    /// Per-field maximum.
    pub max: Value,
}

impl ResultSet {
    /// Median of `metric` over the runs; `None` where it does not apply (or no runs).
    pub fn median_of(&self, metric: Metric) -> Option<f64> {
        let v: Option<Vec<f64>> = self.runs.iter().map(|r| metric.of(r)).collect();
        median(&v?)
    }

    /// Smallest `metric` over the runs; `None` where it does not apply (or no runs).
    pub fn min_of(&self, metric: Metric) -> Option<f64> {
        self.runs
            .iter()
            .map(|r| metric.of(r))
            .try_fold(None, |m: Option<f64>, v| {
                v.map(|v| Some(m.map_or(v, |m| m.min(v))))
            })?
    }

    /// Largest `metric` over the runs; `None` where it does not apply (or no runs).
    pub fn max_of(&self, metric: Metric) -> Option<f64> {
        self.runs
            .iter()
            .map(|r| metric.of(r))
            .try_fold(None, |m: Option<f64>, v| {
                v.map(|v| Some(m.map_or(v, |m| m.max(v))))
            })?
    }

    /// Whether no run failed its verification (runs without verification count as passing).
    pub fn verified(&self) -> bool {
        self.runs.iter().all(|r| r.verified != Some(false))
    }

    /// Builds the set and its summaries.
    pub fn new(
        lab: &str,
        family: &str,
        congestion: Option<&str>,
        params: Value,
        mode: &str,
        runs: Vec<Run>,
    ) -> ResultSet {
        let (median, min, max) = summarize(&runs);
        ResultSet {
            lab: lab.to_owned(),
            family: family.to_owned(),
            congestion: congestion.map(str::to_owned),
            params,
            mode: mode.to_owned(),
            runs,
            median,
            min,
            max,
        }
    }
}

/// The ratio of one metric between two modes of the same condition.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The lab.
    pub lab: String,
    /// The family.
    pub family: String,
    /// The parameters shared by both sets.
    pub params: Value,
    /// Numerator mode.
    pub a: String,
    /// Denominator mode.
    pub b: String,
    /// The metric compared.
    pub metric: Metric,
    /// Median of the pairwise ratios.
    pub ratio_median: f64,
    /// Smallest pairwise ratio.
    pub ratio_min: f64,
    /// Largest pairwise ratio.
    pub ratio_max: f64,
    /// The 95 % percentile-bootstrap interval of the median ratio
    /// ([`super::interval::median_of_pairs`]): what the verdicts are judged on.
    pub ratio_low: f64,
    /// Its upper end.
    pub ratio_high: f64,
}

impl Comparison {
    /// Compares `metric` of set `a` over set `b`, pair by pair; `None` without pairs.
    pub fn new(a: &ResultSet, b: &ResultSet, metric: Metric) -> Option<Comparison> {
        let r = ratio_pairs(&a.runs, &b.runs, metric);
        let interval = super::interval::median_of_pairs(&r)?;
        Some(Comparison {
            lab: a.lab.clone(),
            family: a.family.clone(),
            params: a.params.clone(),
            a: a.mode.clone(),
            b: b.mode.clone(),
            metric,
            ratio_median: median(&r)?,
            ratio_min: r.iter().copied().fold(f64::INFINITY, f64::min),
            ratio_max: r.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ratio_low: interval.low,
            ratio_high: interval.high,
        })
    }
}

/// Runs `runs` rounds of every mode, alternating A B A B, so that drift on a shared machine
/// falls on both modes alike. Returns the runs per mode, in `modes` order.
pub fn alternate<M: Copy, E>(
    modes: &[M],
    runs: usize,
    progress: &Progress,
    mut one: impl FnMut(M, usize) -> Result<Run, E>,
) -> Result<Vec<Vec<Run>>, E> {
    let mut out = vec![Vec::with_capacity(runs); modes.len()];
    for i in 0..runs {
        for (m, mode) in modes.iter().enumerate() {
            out[m].push(one(*mode, i)?);
            progress.inc();
        }
    }
    Ok(out)
}

/// The runs per mode of [`alternate_abba`], and for each run the index of the mode before it.
pub type OrderedRuns = (Vec<Vec<Run>>, Vec<Vec<Option<usize>>>);

/// Runs of every mode in mirrored rounds, A B B A A B ..., so that each mode follows each other
/// mode and itself equally often and what a run leaves behind (freed pages, cache state) falls on
/// every mode alike. Returns the runs per mode and, for each run, the index of the mode that ran
/// just before it (`None` for the very first run).
pub fn alternate_abba<M: Copy, E>(
    modes: &[M],
    runs: usize,
    progress: &Progress,
    mut one: impl FnMut(M, usize) -> Result<Run, E>,
) -> Result<OrderedRuns, E> {
    let mut out = vec![Vec::with_capacity(runs); modes.len()];
    let mut after = vec![Vec::with_capacity(runs); modes.len()];
    let mut last = None;
    for i in 0..runs {
        let order: Vec<usize> = if i % 2 == 0 {
            (0..modes.len()).collect()
        } else {
            (0..modes.len()).rev().collect()
        };
        for m in order {
            out[m].push(one(modes[m], i)?);
            after[m].push(last);
            last = Some(m);
            progress.inc();
        }
    }
    Ok((out, after))
}

/// The order effect on mode `m` of an [`alternate_abba`] series: the medians of `metric` over
/// its runs that followed `m` itself and over those that followed mode `other`, and the fewer
/// of the two run counts (`None` when either kind is missing).
pub fn order_effect(
    runs: &[Run],
    after: &[Option<usize>],
    m: usize,
    other: usize,
    metric: Metric,
) -> Option<(f64, f64, usize)> {
    let pick = |prev: usize| -> Vec<f64> {
        runs.iter()
            .zip(after)
            .filter(|(_, a)| **a == Some(prev))
            .filter_map(|(r, _)| metric.of(r))
            .collect()
    };
    let (same, after_other) = (pick(m), pick(other));
    let n = same.len().min(after_other.len());
    Some((median(&same)?, median(&after_other)?, n))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn medians_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn abba_rounds_put_every_mode_after_every_mode() {
        let mut seq = Vec::new();
        let (runs, after) = alternate_abba(&['a', 'b'], 4, &Progress::hidden(), |m, i| {
            seq.push(m);
            Ok::<_, ()>(run(if m == 'a' { 10.0 + i as f64 } else { 1.0 }, 1.0, None))
        })
        .unwrap();
        assert_eq!(seq, ['a', 'b', 'b', 'a', 'a', 'b', 'b', 'a']);
        assert_eq!(after[0], [None, Some(1), Some(0), Some(1)]);
        assert_eq!(after[1], [Some(0), Some(1), Some(0), Some(1)]);
        // a after a: run 2 (12); a after b: runs 1 and 3 (11, 13).
        let (same, other, n) = order_effect(&runs[0], &after[0], 0, 1, Metric::CpuUsPerMb).unwrap();
        assert_eq!((same, other, n), (12.0, 12.0, 1));
    }

    /// A run of 1 MiB with the given CPU, rate and verification (shared with the report tests).
    pub(crate) fn run(cpu_us: f64, gbit: f64, verified: Option<bool>) -> Run {
        Run {
            cpu_us_per_mb: cpu_us,
            gbit,
            verified,
            bytes: 1 << 20,
            ..Default::default()
        }
    }

    #[test]
    fn ratio_pairs_follow_the_alternation() {
        let zc = [
            run(50.0, 30.0, None),
            run(60.0, 30.0, None),
            run(45.0, 30.0, None),
        ];
        let copy = [
            run(100.0, 30.0, None),
            run(100.0, 30.0, None),
            run(90.0, 30.0, None),
        ];
        assert_eq!(
            ratio_pairs(&zc, &copy, Metric::CpuUsPerMb),
            vec![0.5, 0.6, 0.5]
        );
        let a = ResultSet::new(
            "loopback",
            "ipv6",
            Some("reno"),
            Value::Null,
            "zc",
            zc.to_vec(),
        );
        let b = ResultSet::new(
            "loopback",
            "ipv6",
            Some("reno"),
            Value::Null,
            "copy",
            copy.to_vec(),
        );
        assert_eq!(a.min_of(Metric::CpuUsPerMb), Some(45.0));
        assert_eq!(a.max_of(Metric::CpuUsPerMb), Some(60.0));
        assert_eq!(
            a.max_of(Metric::RequestsPerS),
            None,
            "null in the runs: no spread"
        );
        let c = Comparison::new(&a, &b, Metric::CpuUsPerMb).unwrap();
        assert_eq!((c.ratio_median, c.ratio_min, c.ratio_max), (0.5, 0.5, 0.6));
        // A null metric gives no pairs and so no comparison.
        assert!(Comparison::new(&a, &b, Metric::RequestsPerS).is_none());
    }

    #[test]
    fn summaries_keep_the_run_fields() {
        let (med, min, max) = summarize(&[
            run(10.0, 1.0, Some(true)),
            run(30.0, 3.0, Some(true)),
            run(20.0, 2.0, Some(false)),
        ]);
        assert_eq!(med["cpu_us_per_mb"], 20.0);
        assert_eq!(min["gbit"], 1.0);
        assert_eq!(max["gbit"], 3.0);
        assert_eq!(
            med["verified"], false,
            "one unverified run makes the set unverified"
        );
        assert!(med["requests_per_s"].is_null());
        assert!(med["zero_copy_share"].is_null());
        let all_fields = serde_json::to_value(Run::default()).unwrap();
        assert_eq!(
            med.as_object().unwrap().len(),
            all_fields.as_object().unwrap().len()
        );
    }

    #[test]
    fn alternation_order_is_a_b_a_b() {
        let mut order = Vec::new();
        let out: Result<_, ()> = alternate(&['a', 'b'], 3, &Progress::hidden(), |m, i| {
            order.push((m, i));
            Ok(run(i as f64, 0.0, None))
        });
        assert_eq!(
            order,
            vec![('a', 0), ('b', 0), ('a', 1), ('b', 1), ('a', 2), ('b', 2)]
        );
        let out = out.unwrap();
        assert_eq!(out[0].len(), 3);
        assert_eq!(out[1][2].cpu_us_per_mb, 2.0);
    }
}
