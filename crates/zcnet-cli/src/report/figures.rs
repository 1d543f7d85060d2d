//! What the page reads of the sets: each set's message size and condition without it, a figure
//! (median, min, max), the reports grouped by bench, and the zero-copy path a mode stands for.

use std::fmt::Write as _;

use super::input;
use super::input::{Input, Report, Set};
use super::text::shown;

/// The parameter that is a message size, where a bench sweeps sizes (the reader renames the
/// old spellings to it: [`super::input::OLD_SIZE_KEYS`]).
pub(super) const SIZE_KEY: &str = "size";

/// The message size of a set.
pub(super) fn size_of(set: &Set) -> Option<f64> {
    set.params.get(SIZE_KEY)?.as_f64()
}

/// The condition without its size, for the sweep's lines.
pub(super) fn condition_without_size(set: &Set) -> String {
    let mut s = format!("{} {}", set.lab, set.family);
    for (k, v) in &set.params {
        if k != SIZE_KEY
            && let Some(v) = shown(v)
        {
            let _ = write!(s, " {k}={v}");
        }
    }
    s
}

/// What one chart plots of a run.
#[derive(Clone, Copy)]
pub(super) enum Figure {
    Cpu,
    Gbit,
    Requests,
    Share,
    FarCpu,
}

impl Figure {
    pub(super) fn of(self, r: &input::Run) -> Option<f64> {
        let v = match self {
            Figure::Cpu => Some(r.cpu_us_per_mb),
            Figure::Gbit => Some(r.gbit),
            Figure::Requests => r.requests_per_s,
            Figure::Share => r.zero_copy_share.map(|s| 100.0 * s),
            Figure::FarCpu => r.remote_cpu_us_per_mb,
        };
        v.filter(|v| v.is_finite())
    }

    pub(super) fn title(self) -> (&'static str, &'static str) {
        match self {
            Figure::Cpu => ("CPU per MB (median, min-max)", "CPU us/MB"),
            Figure::Gbit => ("Throughput (median, min-max)", "Gbit/s"),
            Figure::Requests => ("Requests per second (median, min-max)", "req/s"),
            Figure::Share => ("Share without a copy (median, min-max)", "%"),
            Figure::FarCpu => (
                "Far host's CPU per MB, zcnet serve (median, min-max)",
                "far CPU us/MB",
            ),
        }
    }
}

/// Median, min and max of `figure` over the runs of `set`; `None` where no run has it.
pub(super) fn spread(set: &Set, figure: Figure) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = set.runs.iter().filter_map(|r| figure.of(r)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

/// The reports of one bench across the inputs, each with its input's label and what tells it
/// apart from the file's other reports of the bench.
pub(super) struct Bench<'a> {
    pub(super) name: String,
    pub(super) reports: Vec<(&'a str, &'a Report, String)>,
}

pub(super) fn benches(inputs: &[Input]) -> Vec<Bench<'_>> {
    let mut out: Vec<Bench<'_>> = Vec::new();
    for i in inputs {
        for r in &i.reports {
            let same: Vec<&Report> = i.reports.iter().filter(|o| o.bench == r.bench).collect();
            let entry = (i.label.as_str(), r, distinguishing(&same, r));
            match out.iter_mut().find(|b| b.name == r.bench) {
                Some(b) => b.reports.push(entry),
                None => out.push(Bench {
                    name: r.bench.clone(),
                    reports: vec![entry],
                }),
            }
        }
    }
    out
}

/// What tells apart reports of the same bench in one file (the suite runs udp-tx with a large
/// and a small pool): the scalar settings whose values differ between them, as ` key=value`.
pub(super) fn distinguishing(reports: &[&Report], r: &Report) -> String {
    if reports.len() < 2 {
        return String::new();
    }
    let Some(mine) = r.settings.as_object() else {
        return String::new();
    };
    let mut out = String::new();
    for (k, v) in mine {
        if v.is_object() || v.is_array() {
            continue;
        }
        if reports.iter().any(|o| o.settings.get(k) != Some(v))
            && let Some(v) = shown(v)
        {
            let _ = write!(out, " {k}={v}");
        }
    }
    out
}

/// The zero-copy path and route of a set of a sending bench, where its mode has a threshold.
pub(super) fn send_path(
    bench: &str,
    set: &Set,
) -> Option<(zcnet::auto::SendPath, zcnet::auto::Route)> {
    use zcnet::auto::{Route, SendPath};
    let route = if set.lab == "loopback" {
        Route::Local
    } else {
        Route::Device
    };
    let path = match (bench, set.mode.as_str()) {
        ("udp-tx", "zc" | "auto") => SendPath::MsgZerocopyUdp,
        ("tcp-tx", "zc" | "zc-adaptive" | "auto") => SendPath::MsgZerocopyTcp,
        ("uring-tx", "zc" | "auto") => SendPath::UringZc,
        ("uring-tx", "zc-fixed") => SendPath::UringZcFixed,
        _ => return None,
    };
    Some((path, route))
}
