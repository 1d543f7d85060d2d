//! Presenting results: the one JSON document of every bench and the human table.

use serde::Serialize;
use serde_json::Value;

use super::copy_cost::{self, CopyCost};
use super::machine::{self, Competing, Window};
use super::stats::{Comparison, Metric, ResultSet};

/// The machine a report was made on, with what makes its figures comparable to another
/// machine's (issue 46): the CPU, the cache a copy really finds, the virtualization, and the
/// load before and during the runs.
#[derive(Clone, Debug, Serialize)]
pub struct HostInfo {
    /// Host name (`/proc/sys/kernel/hostname`), which labels the machine in `zcnet report`.
    pub hostname: String,
    /// When the report was made, UTC (RFC 3339).
    pub date: String,
    /// Kernel release.
    pub kernel: String,
    /// CPUs available.
    pub cpus: usize,
    /// Page size.
    pub page_size: usize,
    /// The CPU's model name (`/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// The largest working set a copy finds in cache here, bytes, as measured
    /// ([`CopyCost`]).
    pub llc_measured_bytes: u64,
    /// What a copy costs here from cache and from memory, and where the cache ends.
    pub copy_cost: CopyCost,
    /// The largest cache sysfs names (a guest may be told the host's, shared with others).
    pub llc_sysfs_bytes: Option<u64>,
    /// `kvm`, `kvm, docker`, `none`, as `systemd-detect-virt` tells.
    pub virtualization: String,
    /// The 1, 5 and 15 minute load averages when the bench started.
    pub load_average: Option<[f64; 3]>,
    /// What other processes and the hypervisor took of the CPU during the runs; set when the
    /// runs are over ([`Report::seal`]).
    pub competing: Option<Competing>,
}

impl HostInfo {
    /// This machine, from the probe.
    pub fn this() -> HostInfo {
        let h = &zcnet::probe::features().host;
        HostInfo {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|n| n.trim().to_owned())
                .unwrap_or_default(),
            date: crate::date::utc_now(),
            kernel: h.kernel.clone(),
            cpus: h.cpus,
            page_size: h.page_size,
            cpu_model: machine::cpu_model(),
            llc_measured_bytes: CopyCost::here().llc_bytes,
            copy_cost: CopyCost::here(),
            llc_sysfs_bytes: copy_cost::llc_sysfs(),
            virtualization: machine::virtualization(),
            load_average: machine::load_average(),
            competing: None,
        }
    }

    /// `AMD EPYC, 2 CPUs, Linux 6.18.44, kvm; a copy finds 16 MiB of cache (sysfs: 32 MiB),
    /// 2.8x dearer from memory; load 0.64 at the start`: the machine in one line.
    pub fn machine_line(&self) -> String {
        let size = |b: u64| {
            if b >= 1 << 20 {
                format!("{} MiB", b >> 20)
            } else {
                format!("{} KiB", b >> 10)
            }
        };
        let c = &self.copy_cost;
        format!(
            "{}, {} CPUs, Linux {}, {}; a copy finds {} of cache{}, {:.1}x dearer from memory; \
             load {} at the start",
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.cpus,
            self.kernel,
            self.virtualization,
            size(self.llc_measured_bytes),
            self.llc_sysfs_bytes
                .map_or(String::new(), |b| format!(" (sysfs: {})", size(b))),
            c.memory_ns_per_kib / c.cache_ns_per_kib,
            self.load_average
                .map_or("unknown".to_owned(), |l| format!("{:.2}", l[0])),
        )
    }
}

/// The one JSON document every `zcnet bench <name> --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Bench name.
    pub bench: String,
    /// zcnet version.
    pub zcnet_version: &'static str,
    /// The machine.
    pub host: HostInfo,
    /// With `--remote`: the far host (`zcnet serve`), as it describes itself; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_host: Option<Value>,
    /// Settings shared by every result (window, verification, CPU placement, ...).
    pub settings: Value,
    /// One set per (condition, mode).
    pub results: Vec<ResultSet>,
    /// Ratios between modes.
    pub comparisons: Vec<Comparison>,
    /// How much a run's cost depends on the mode that ran before it, where the bench measures
    /// that (tcp-rx's mirrored rounds); omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub order_effects: Vec<OrderEffect>,
    /// Runs a bench records in a shape of its own (`relay`: each run's figures of each relay),
    /// not drawn by the text or the page; omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<Value>,
    /// Since when others' CPU is counted: from [`Report::new`] to [`Report::seal`].
    #[serde(skip)]
    window: Option<Window>,
}

impl Report {
    /// An empty report for `bench` on this machine.
    pub fn new(bench: &str) -> Report {
        Report {
            bench: bench.to_owned(),
            zcnet_version: env!("CARGO_PKG_VERSION"),
            host: HostInfo::this(),
            remote_host: None,
            settings: Value::Null,
            results: Vec::new(),
            comparisons: Vec::new(),
            order_effects: Vec::new(),
            rows: Vec::new(),
            window: Some(Window::open()),
        }
    }

    /// Closes the report's window: what others took of the CPU since it was made goes into the
    /// host block. Once; later calls keep the first figures.
    pub fn seal(&mut self) {
        if let Some(w) = self.window.take() {
            self.host.competing = Some(w.close(self.host.cpus));
        }
    }
}

/// How much a mode's runs cost after another mode against after itself.
#[derive(Clone, Debug, Serialize)]
pub struct OrderEffect {
    /// The condition (`loopback ipv6 mss 4108`).
    pub condition: String,
    /// The mode whose runs are compared.
    pub mode: String,
    /// The mode that ran before the `after_other` runs.
    pub other: String,
    /// The metric.
    pub metric: Metric,
    /// Median after a run of `mode` itself.
    pub after_same: f64,
    /// Median after a run of `other`.
    pub after_other: f64,
    /// `after_other / after_same`.
    pub ratio: f64,
    /// Runs behind the smaller of the two medians.
    pub runs_each: usize,
}

impl std::fmt::Display for OrderEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} after {} / {} after {} = {:.1} / {:.1} = {:.3} ({} runs each)",
            self.condition,
            self.mode,
            self.other,
            self.mode,
            self.mode,
            self.after_other,
            self.after_same,
            self.ratio,
            self.runs_each
        )
    }
}

fn fmt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.prec$}"))
}

/// The human table: one row per result set (medians, with the spread of the thread's CPU per
/// MB; the thread's CPU per request where requests are counted), then the comparisons. The
/// parameters column is as wide as the longest.
pub fn render(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: Linux {}, {} CPUs, medians of {} sets; {}",
        report.bench,
        report.host.kernel,
        report.host.cpus,
        report.results.len(),
        report.settings
    );
    let _ = writeln!(out, "machine: {}", report.host.machine_line());
    if let Some(c) = &report.host.competing {
        let _ = writeln!(
            out,
            "during the runs: {}{}",
            c.text(),
            if c.busy {
                format!(
                    " (busy: over {:.0} %; read the verdicts with that)",
                    c.busy_if_share_above * 100.0
                )
            } else {
                String::new()
            }
        );
    }
    let params: Vec<String> = report
        .results
        .iter()
        .map(|r| match &r.params {
            Value::Object(m) => m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            _ => String::new(),
        })
        .collect();
    if let Some(far) = &report.remote_host {
        let _ = writeln!(
            out,
            "far side: {} ({}), Linux {}, {} CPUs; its CPU is the `far us/MB` column",
            far["hostname"].as_str().unwrap_or("?"),
            report.settings["remote"].as_str().unwrap_or("?"),
            far["kernel"].as_str().unwrap_or("?"),
            far["cpus"]
        );
    }
    let far = report.remote_host.is_some();
    let pw = params.iter().map(String::len).max().unwrap_or(0).max(22);
    let mw = report
        .results
        .iter()
        .map(|r| r.mode.len())
        .max()
        .unwrap_or(0)
        .max(9);
    let _ = write!(
        out,
        "{:<9} {:<5} {:<pw$} {:<mw$} {:>8} {:>11} {:>9} {:>17} {:>12} {:>7} {:>9}",
        "lab",
        "fam",
        "params",
        "mode",
        "Gbit",
        "req/s",
        "ns/req",
        "us/MB (min-max)",
        "machine us/MB",
        "zc %",
        "c-switch"
    );
    let _ = writeln!(out, "{}", if far { "  far us/MB" } else { "" });
    for (r, params) in report.results.iter().zip(&params) {
        let spread = format!(
            "{} ({}-{})",
            fmt(r.median_of(Metric::CpuUsPerMb), 1),
            fmt(r.min_of(Metric::CpuUsPerMb), 0),
            fmt(r.max_of(Metric::CpuUsPerMb), 0)
        );
        let _ = write!(
            out,
            "{:<9} {:<5} {:<pw$} {:<mw$} {:>8} {:>11} {:>9} {:>17} {:>12} {:>7} {:>9}",
            r.lab,
            r.family,
            params,
            r.mode,
            fmt(r.median_of(Metric::Gbit), 2),
            fmt(r.median_of(Metric::RequestsPerS), 0),
            fmt(r.median_of(Metric::CpuNsPerRequest), 0),
            spread,
            fmt(r.median_of(Metric::MachineCpuUsPerMb), 1),
            fmt(r.median_of(Metric::ZeroCopyShare).map(|s| s * 100.0), 2),
            fmt(r.median_of(Metric::CtxSwitches), 0),
        );
        let far_cpu = far.then(|| fmt(r.median_of(Metric::RemoteCpuUsPerMb), 1));
        let _ = writeln!(
            out,
            "{}",
            far_cpu.map_or(String::new(), |f| format!(" {f:>10}"))
        );
    }
    for c in &report.comparisons {
        let _ = writeln!(
            out,
            "{} {} {}: {}/{} {} = {:.3} (pairs {:.3}-{:.3})",
            c.lab, c.family, c.params, c.a, c.b, c.metric, c.ratio_median, c.ratio_min, c.ratio_max
        );
    }
    for e in &report.order_effects {
        let _ = writeln!(out, "order effect ({}): {e}", e.metric.name());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::cpu::Run;
    use crate::measure::stats::tests::run;

    #[test]
    fn the_table_aligns_long_parameters_and_shows_cpu_per_request() {
        let mut report = Report::new("t");
        let with = |requests: Option<f64>| Run {
            requests_per_s: requests.map(|_| 1000.0),
            cpu_ns_per_request: requests,
            ..run(10.0, 1.0, None)
        };
        report.results = vec![
            ResultSet::new(
                "veth",
                "ipv4",
                None,
                serde_json::json!({"n": 1}),
                "a",
                vec![with(None)],
            ),
            ResultSet::new(
                "veth",
                "ipv4",
                None,
                serde_json::json!({"condition": "a-rather-long-condition", "frame_bytes": 64}),
                "b",
                vec![with(Some(35.4))],
            ),
        ];
        let table = render(&report);
        let lines: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("lab "))
            .take(3)
            .collect();
        let col = |l: &str, word: &str| l.find(word).unwrap();
        // The mode column starts at the same place in the header and in both rows.
        assert_eq!(col(lines[0], "mode"), col(lines[1], " a ") + 1, "{table}");
        assert_eq!(col(lines[0], "mode"), col(lines[2], " b ") + 1, "{table}");
        assert!(lines[0].contains("ns/req"), "{table}");
        assert!(lines[2].contains(" 35 "), "{table}");
    }
}
