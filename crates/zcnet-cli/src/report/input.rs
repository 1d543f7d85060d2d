//! What `zcnet report` reads: the JSON of `zcnet bench --json` (the suite: probe, reports,
//! summary) or of one `zcnet bench NAME --json` (one report), typed. A file that is neither is
//! refused with the file and the field that did not fit.
//!
//! Inputs are bounded: a file is read up to [`MAX_INPUT`], holds at most [`MAX_SETS`] sets (and
//! [`MAX_REPORTS`], [`MAX_RUNS`], [`MAX_ENTRIES`]), and every string the page draws is cut to
//! [`MAX_NAME`] (or [`MAX_LINE`] for a probe's reasons) with a mark, so that the page stays the
//! size of its figures whatever a file holds (a 200 MB host name took 61 s and 7 GB, and was
//! drawn into a 3.5 GB page; drawing grows faster than the sets: in a debug build 5000 take 3 s,
//! 10 000 took 17 s).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// The parts of the probe the page shows.
#[derive(Clone, Debug, Deserialize)]
pub struct Probe {
    /// Each check.
    pub checks: Vec<Check>,
}

/// One probe check.
#[derive(Clone, Debug, Deserialize)]
pub struct Check {
    /// `rx.tcp_zerocopy_receive`, ...
    pub id: String,
    /// `available`, `unavailable`, ...
    pub status: String,
    /// Why, in one line.
    pub reason: String,
}

/// The machine of a report.
#[derive(Clone, Debug, Deserialize)]
pub struct Host {
    /// Host name (reports before it was recorded have none).
    #[serde(default)]
    pub hostname: String,
    /// When (reports before it was recorded have none).
    #[serde(default)]
    pub date: String,
    /// Kernel release.
    pub kernel: String,
    /// CPUs.
    pub cpus: usize,
    /// The CPU's model name (reports before issue 46 have none).
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// The largest working set a copy found in cache, bytes, as measured.
    #[serde(default)]
    pub llc_measured_bytes: Option<u64>,
    /// `kvm`, `kvm, docker`, `none`.
    #[serde(default)]
    pub virtualization: Option<String>,
    /// Load averages at the start.
    #[serde(default)]
    pub load_average: Option<Vec<f64>>,
    /// What others took of the CPU during the runs.
    #[serde(default)]
    pub competing: Option<Competing>,
}

/// What others took of the CPU during a report's runs.
#[derive(Clone, Debug, Deserialize)]
pub struct Competing {
    /// Other processes' CPU, a share of the machine's.
    pub others_share: f64,
    /// Steal, a share of the machine's CPU.
    pub steal_share: f64,
    /// Whether that was over the report's threshold.
    pub busy: bool,
    /// The busiest others.
    #[serde(default)]
    pub top: Vec<Other>,
}

/// A competing process.
#[derive(Clone, Debug, Deserialize)]
pub struct Other {
    /// Its command.
    pub command: String,
    /// Its CPU seconds.
    pub cpu_s: f64,
}

impl Competing {
    /// `others 49 % (sh 1.96 s), steal 0 %`.
    pub fn text(&self) -> String {
        let top: Vec<String> = self
            .top
            .iter()
            .map(|o| format!("{} {:.2} s", o.command, o.cpu_s))
            .collect();
        format!(
            "others {:.0} %{}, steal {:.0} %{}",
            self.others_share * 100.0,
            if top.is_empty() {
                String::new()
            } else {
                format!(" ({})", top.join(", "))
            },
            self.steal_share * 100.0,
            if self.busy { ": busy" } else { "" }
        )
    }
}

/// One bench's report.
#[derive(Clone, Debug, Deserialize)]
pub struct Report {
    /// Bench name.
    pub bench: String,
    /// zcnet version.
    pub zcnet_version: String,
    /// The machine.
    pub host: Host,
    /// The far host of a two-host run (`--remote`), as its `zcnet serve` describes itself.
    #[serde(default)]
    pub remote_host: Option<Host>,
    /// Settings shared by every result, shown as they are.
    pub settings: Value,
    /// One set per condition and mode.
    pub results: Vec<Set>,
}

/// The runs of one mode in one condition.
#[derive(Clone, Debug, Deserialize)]
pub struct Set {
    /// The lab.
    pub lab: String,
    /// `ipv4`, `ipv6`.
    pub family: String,
    /// The bench's parameters (sizes, MTU, ...), shown as `key=value`.
    pub params: serde_json::Map<String, Value>,
    /// The mode.
    pub mode: String,
    /// Every run.
    pub runs: Vec<Run>,
}

/// The figures of one run the page plots.
#[derive(Clone, Debug, Deserialize)]
pub struct Run {
    /// Payload Gbit/s.
    pub gbit: f64,
    /// CPU µs per MB of the measured side.
    pub cpu_us_per_mb: f64,
    /// Requests (sends, packets) per second, where that is the unit.
    #[serde(default)]
    pub requests_per_s: Option<f64>,
    /// Share really zero-copied (mapped, not copied), where it applies.
    #[serde(default)]
    pub zero_copy_share: Option<f64>,
    /// The far host's CPU µs per MB, in a two-host run.
    #[serde(default)]
    pub remote_cpu_us_per_mb: Option<f64>,
}

/// One input file, read.
#[derive(Clone, Debug)]
pub struct Input {
    /// How the page names it: the host name, else the file name (made unique by the caller).
    pub label: String,
    /// The probe, when the file is a suite.
    pub probe: Option<Probe>,
    /// Its reports.
    pub reports: Vec<Report>,
    /// The suite's summary rows (a verdict per seed experiment), when the file is a suite.
    pub summary: Vec<SummaryRow>,
}

/// One row of a suite's summary: a seed experiment and its verdict.
#[derive(Clone, Debug, Deserialize)]
pub struct SummaryRow {
    /// `udp-tx sink 64000 B zc`: the bench's name first.
    pub experiment: String,
    /// The figure compared.
    pub metric: String,
    /// The ratio of the medians (`null` where a median was missing: serde_json writes NaN so).
    pub ratio: Option<f64>,
    /// The share zero-copied, where it applies.
    pub zero_copy_share: Option<f64>,
    /// `ok (...)`, `MISS (...)`, `unsure (...)`, `info`.
    pub verdict: String,
    /// The verdict's word (`ok`, `miss`, `unsure`, `info`, `fail`; older files have none).
    #[serde(default)]
    pub decision: Option<String>,
    /// The ratio's 95 % interval over the runs.
    #[serde(default)]
    pub ratio_low: Option<f64>,
    /// Its upper end.
    #[serde(default)]
    pub ratio_high: Option<f64>,
    /// What competed for the CPU during the runs, where that was much.
    #[serde(default)]
    pub load: Option<String>,
}

impl SummaryRow {
    /// The verdict's word, lower case: from `decision`, else the verdict's first word.
    pub fn word(&self) -> String {
        self.decision.clone().unwrap_or_else(|| {
            self.verdict
                .split([' ', ':'])
                .next()
                .unwrap_or("")
                .to_lowercase()
        })
    }
}

/// The most bytes of one input file: a suite's JSON is well under 1 MiB (57 sets: 160 KiB).
pub const MAX_INPUT: u64 = 64 << 20;

/// The most characters of a name the page draws (a host, kernel, mode, parameter or setting).
pub const MAX_NAME: usize = 100;

/// The most characters of a probe check's reason, a line of prose.
pub const MAX_LINE: usize = 400;

/// The most reports in one file (a suite has 10).
pub const MAX_REPORTS: usize = 100;

/// The most sets in one file, all its reports together (a suite has 57).
pub const MAX_SETS: usize = 5000;

/// The most runs of one set (`--runs` is at most 1000).
pub const MAX_RUNS: usize = 1000;

/// The most entries of a report's settings, a set's parameters or a probe's checks.
pub const MAX_ENTRIES: usize = 1000;

/// What ends a string that was cut.
pub const CUT: &str = "…[cut]";

/// Reads `path`, at most [`MAX_INPUT`] bytes of it.
///
/// # Errors
/// One line naming the file and, for a document that is not a zcnet report, the field that did
/// not fit (`r.json: results[2].runs[0].gbit: invalid type: string, expected f64`); a file
/// over the cap (`r.json: larger than 64 MiB, the cap for a report input`).
pub fn read(path: &Path) -> anyhow::Result<Input> {
    let text = crate::capped::read_to_string(path, MAX_INPUT, "a report input")
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Parses one document.
///
/// # Errors
/// The field that did not fit and why.
pub fn parse(text: &str) -> Result<Input, String> {
    // The suite's shape when the document has its `reports`, else one report's; either way the
    // error names the path of what did not fit (an untagged enum would lose it).
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    parse_value(value)
}

/// [`parse`] of a document already parsed as JSON.
///
/// # Errors
/// The field that did not fit and why.
pub fn parse_value(value: Value) -> Result<Input, String> {
    let (probe, reports, summary) = if is_iperf3(&value) {
        (None, vec![iperf3_report(&value)?], Vec::new())
    } else if value.get("reports").is_some() {
        #[derive(Deserialize)]
        struct Suite {
            probe: Probe,
            reports: Vec<Report>,
            #[serde(default)]
            summary: Vec<SummaryRow>,
        }
        let s: Suite = typed(value)?;
        (Some(s.probe), s.reports, s.summary)
    } else {
        // One bench's report, with its summary rows since issue 63 (older ones have none).
        let summary = match value.get("summary") {
            Some(rows) => {
                typed::<Vec<SummaryRow>>(rows.clone()).map_err(|e| format!("summary: {e}"))?
            }
            None => Vec::new(),
        };
        (None, vec![typed::<Report>(value)?], summary)
    };
    if reports.is_empty() {
        return Err("reports: no bench report in it".into());
    }
    let mut input = Input {
        label: String::new(),
        probe,
        reports,
        summary,
    };
    input.check_counts()?;
    input.check_figures()?;
    input.clip();
    input.rename_old_size_keys();
    input.label = input.reports[0].host.hostname.clone();
    Ok(input)
}

/// Whether `v` is an iperf3 `-J` document (iperf3's, or `zcnet iperf3 -J`'s): `start`,
/// `intervals` and `end`.
fn is_iperf3(v: &Value) -> bool {
    ["start", "intervals", "end"]
        .iter()
        .all(|k| v.get(k).is_some())
        && v.get("bench").is_none()
}

/// An iperf3 `-J` document (a client's) as a report of one set and one run: the bench
/// `iperf3`, the set named by the program and the path (`zcnet`'s object where there is one),
/// the rate received, this side's CPU per MB it moved and the far side's.
fn iperf3_report(v: &Value) -> Result<Report, String> {
    if let Some(e) = v["error"].as_str() {
        return Err(format!("an iperf3 -J document of a test that failed: {e}"));
    }
    let end = &v["end"];
    let num = |v: &Value, path: &str| {
        v.pointer(path)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("an iperf3 -J document without {path}"))
    };
    let received = num(end, "/sum_received/bits_per_second")?;
    let (sent_bytes, received_bytes) = (
        num(end, "/sum_sent/bytes")?,
        num(end, "/sum_received/bytes")?,
    );
    let seconds = num(end, "/sum_sent/seconds")?;
    let test = &v["start"]["test_start"];
    let reverse = test["reverse"].as_i64().unwrap_or(0) != 0;
    let zcnet = v.get("zcnet");
    // Whose document: a server's (iperf3's says whom it accepted; ours says its role) or a
    // client's; and whether that side sent (a client unless -R, a server with -R).
    let server = v["start"].get("accepted_connection").is_some()
        || zcnet.is_some_and(|z| z["role"] == "server");
    let sent = server == reverse;
    let (ours, theirs) = if sent {
        (sent_bytes, received_bytes)
    } else {
        (received_bytes, sent_bytes)
    };
    let per_mb = |pct: f64, bytes: f64| {
        if bytes > 0.0 {
            pct / 100.0 * seconds * 1e6 / (bytes / 1e6)
        } else {
            0.0
        }
    };
    let cpu = |k: &str| num(end, &format!("/cpu_utilization_percent/{k}"));
    let program = if zcnet.is_some() { "zcnet" } else { "iperf3" };
    let mode = match zcnet.and_then(|z| z["path"].as_str()) {
        Some(path) => format!("zcnet {path}"),
        None => "iperf3".to_owned(),
    };
    let version = v["start"]["version"].as_str().unwrap_or("").to_owned();
    let doc = serde_json::json!({
        "bench": "iperf3",
        "zcnet_version": version,
        "host": {
            "hostname": match (server, v["start"]["connecting_to"]["host"].as_str()) {
                (true, _) => format!("{program} -s"),
                (false, Some(h)) => format!("{program} -c {h}"),
                (false, None) => program.to_owned(),
            },
            "date": v["start"]["timestamp"]["time"].as_str().unwrap_or(""),
            "kernel": v["start"]["system_info"].as_str().unwrap_or(""),
            "cpus": 0,
        },
        "settings": v["start"]["test_start"].clone(),
        "results": [{
            "lab": "iperf3",
            "family": "",
            "params": {
                "protocol": test["protocol"].clone(),
                "streams": test["num_streams"].clone(),
                "blksize": test["blksize"].clone(),
                "reverse": reverse,
            },
            "mode": mode,
            "runs": [{
                "gbit": received / 1e9,
                "cpu_us_per_mb": per_mb(cpu("host_total")?, ours),
                "remote_cpu_us_per_mb": per_mb(cpu("remote_total")?, theirs),
                "zero_copy_share": zcnet.and_then(|z| z["zero_copy_share"].as_f64()),
            }],
        }],
    });
    typed(doc)
}

/// The largest figure a run may have: far beyond any machine (1e15 Gbit/s, µs per MB or
/// requests a second), and far enough below `f64::MAX` that a chart's scale stays finite.
pub const MAX_FIGURE: f64 = 1e15;

/// How reports written before every bench said `size` named a set's message size: `bytes`,
/// `frame_bytes` (packet, packet-tx), `file_bytes` (async-serve).
pub const OLD_SIZE_KEYS: [&str; 3] = ["bytes", "frame_bytes", "file_bytes"];

impl Input {
    /// Renames a set's message size from an old spelling ([`OLD_SIZE_KEYS`]) to `size`, as every
    /// bench writes it now: an old file reads as a new one, and compares cell by cell with it.
    fn rename_old_size_keys(&mut self) {
        for r in &mut self.reports {
            for set in &mut r.results {
                if set.params.contains_key("size") {
                    continue;
                }
                if let Some(v) = OLD_SIZE_KEYS.iter().find_map(|k| set.params.remove(*k)) {
                    set.params.insert("size".into(), v);
                }
            }
        }
    }

    /// Refuses a figure no run can have, naming the first: negative, or beyond [`MAX_FIGURE`]
    /// (issue 62 items 5 and 9: a `gbit` of 1.7e308, finite, overflowed the chart's scale to
    /// infinity and its ticks looped for ever; a negative one was drawn as a -120.9 % change).
    fn check_figures(&self) -> Result<(), String> {
        let check = |at: &dyn Fn() -> String, v: f64| {
            if (0.0..=MAX_FIGURE).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{}: {v}: a figure is a number from 0 to {MAX_FIGURE:e}",
                    at()
                ))
            }
        };
        for (i, r) in self.reports.iter().enumerate() {
            for (j, set) in r.results.iter().enumerate() {
                for (k, run) in set.runs.iter().enumerate() {
                    let figures = [
                        ("gbit", Some(run.gbit)),
                        ("cpu_us_per_mb", Some(run.cpu_us_per_mb)),
                        ("requests_per_s", run.requests_per_s),
                        ("zero_copy_share", run.zero_copy_share),
                        ("remote_cpu_us_per_mb", run.remote_cpu_us_per_mb),
                    ];
                    for (name, v) in figures {
                        if let Some(v) = v {
                            check(&|| format!("reports[{i}].results[{j}].runs[{k}].{name}"), v)?;
                        }
                    }
                }
            }
        }
        for (i, row) in self.summary.iter().enumerate() {
            for (name, v) in [
                ("ratio", row.ratio),
                ("zero_copy_share", row.zero_copy_share),
                ("ratio_low", row.ratio_low),
                ("ratio_high", row.ratio_high),
            ] {
                if let Some(v) = v {
                    check(&|| format!("summary[{i}].{name}"), v)?;
                }
            }
        }
        Ok(())
    }

    /// Refuses more reports, sets, runs or entries than a page draws, naming the first count
    /// over its cap.
    fn check_counts(&self) -> Result<(), String> {
        let over = |what: &str, n: usize, cap: usize| {
            if n > cap {
                Err(format!("{what}: {n}, more than the {cap} a page draws"))
            } else {
                Ok(())
            }
        };
        over("reports", self.reports.len(), MAX_REPORTS)?;
        over("summary", self.summary.len(), MAX_SETS)?;
        let sets = self.reports.iter().map(|r| r.results.len()).sum();
        over("sets (results of all reports)", sets, MAX_SETS)?;
        if let Some(p) = &self.probe {
            over("probe.checks", p.checks.len(), MAX_ENTRIES)?;
        }
        for (i, r) in self.reports.iter().enumerate() {
            let settings = r.settings.as_object().map_or(0, serde_json::Map::len);
            over(&format!("reports[{i}].settings"), settings, MAX_ENTRIES)?;
            for (j, set) in r.results.iter().enumerate() {
                let at = format!("reports[{i}].results[{j}]");
                over(&format!("{at}.params"), set.params.len(), MAX_ENTRIES)?;
                over(&format!("{at}.runs"), set.runs.len(), MAX_RUNS)?;
            }
        }
        Ok(())
    }

    /// Cuts every string the page draws to its cap, with [`CUT`].
    fn clip(&mut self) {
        for row in &mut self.summary {
            clip(&mut row.experiment, MAX_LINE);
            clip(&mut row.metric, MAX_NAME);
            clip(&mut row.verdict, MAX_LINE);
            for t in row.decision.iter_mut().chain(row.load.as_mut()) {
                clip(t, MAX_LINE);
            }
        }
        for c in self.probe.iter_mut().flat_map(|p| &mut p.checks) {
            clip(&mut c.id, MAX_NAME);
            clip(&mut c.status, MAX_NAME);
            clip(&mut c.reason, MAX_LINE);
        }
        for r in &mut self.reports {
            clip(&mut r.bench, MAX_NAME);
            clip(&mut r.zcnet_version, MAX_NAME);
            for h in std::iter::once(&mut r.host).chain(r.remote_host.as_mut()) {
                clip(&mut h.hostname, MAX_NAME);
                clip(&mut h.date, MAX_NAME);
                clip(&mut h.kernel, MAX_NAME);
                for t in h.cpu_model.iter_mut().chain(h.virtualization.as_mut()) {
                    clip(t, MAX_NAME);
                }
                if let Some(c) = &mut h.competing {
                    c.top.truncate(3);
                    for o in &mut c.top {
                        clip(&mut o.command, MAX_NAME);
                    }
                }
                if let Some(l) = &mut h.load_average {
                    l.truncate(3);
                }
            }
            clip_value(&mut r.settings);
            for set in &mut r.results {
                clip(&mut set.lab, MAX_NAME);
                clip(&mut set.family, MAX_NAME);
                clip(&mut set.mode, MAX_NAME);
                set.params = clip_map(std::mem::take(&mut set.params));
            }
        }
    }
}

/// `s` cut to `max` characters, ending in [`CUT`], where it is longer.
fn clip(s: &mut String, max: usize) {
    if let Some((at, _)) = s.char_indices().nth(max) {
        s.truncate(at);
        s.push_str(CUT);
    }
}

/// Every string in `v`, keys included, cut to [`MAX_NAME`].
fn clip_value(v: &mut Value) {
    match v {
        Value::String(s) => clip(s, MAX_NAME),
        Value::Array(items) => items.iter_mut().for_each(clip_value),
        Value::Object(map) => *map = clip_map(std::mem::take(map)),
        _ => {}
    }
}

/// `map` with its keys and values cut (two long keys cut alike keep the last value).
fn clip_map(map: serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    map.into_iter()
        .map(|(mut k, mut v)| {
            clip(&mut k, MAX_NAME);
            clip_value(&mut v);
            (k, v)
        })
        .collect()
}

/// `value` as `T`, or the path of the first field that does not fit.
fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("not a zcnet bench report: {inner}")
        } else {
            format!("{path}: {inner}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"bench":"udp-tx","zcnet_version":"0.1.0",
        "host":{"hostname":"a","date":"2026-11-23T00:00:00Z","kernel":"6.18","cpus":2,"page_size":4096},
        "settings":{"runs":3},
        "results":[{"lab":"sink","family":"ipv4","congestion":null,"params":{"size":8000},
          "mode":"zc","runs":[{"gbit":9.5,"cpu_us_per_mb":50.0,"zero_copy_share":1.0}],
          "median":{},"min":{},"max":{}}],
        "comparisons":[]}"#;

    #[test]
    fn old_spellings_of_the_size_read_as_size() {
        for old in OLD_SIZE_KEYS {
            let text = ONE.replace(
                r#""params":{"size":8000}"#,
                &format!(r#""params":{{"{old}":8000}}"#),
            );
            assert!(text.contains(old), "{text}");
            let input = parse(&text).unwrap();
            let params = &input.reports[0].results[0].params;
            assert_eq!(params.get("size"), Some(&Value::from(8000)), "{old}");
            assert!(!params.contains_key(old), "{old}");
        }
        // A set that says size keeps it, and an old key beside it is left as it was.
        let text = ONE.replace(
            r#""params":{"size":8000}"#,
            r#""params":{"size":8000,"bytes":5}"#,
        );
        let input = parse(&text).unwrap();
        let params = &input.reports[0].results[0].params;
        assert_eq!(
            (params["size"].as_u64(), params["bytes"].as_u64()),
            (Some(8000), Some(5))
        );
    }

    #[test]
    fn an_iperf3_document_reads_as_a_report_of_one_run() {
        // The fields iperf3 3.12's client writes with -J (a TCP test of 2 s), trimmed.
        let doc = serde_json::json!({
            "start": {"version": "iperf 3.12", "system_info": "Linux h 6.18.44",
                      "timestamp": {"time": "Sun, 29 Nov 2026 02:50:00 GMT"},
                      "connecting_to": {"host": "::1", "port": 5201},
                      "test_start": {"protocol": "TCP", "num_streams": 1, "blksize": 131072,
                                     "reverse": 0}},
            "intervals": [],
            "end": {"sum_sent": {"bytes": 5e9, "seconds": 2.0, "bits_per_second": 2e10},
                    "sum_received": {"bytes": 5e9, "seconds": 2.0, "bits_per_second": 2e10},
                    "cpu_utilization_percent": {"host_total": 50.0, "remote_total": 25.0}},
        });
        let input = parse_value(doc.clone()).unwrap();
        let set = &input.reports[0].results[0];
        assert_eq!(
            (set.mode.as_str(), input.reports[0].bench.as_str()),
            ("iperf3", "iperf3")
        );
        let run = &set.runs[0];
        // 1 s of CPU over 5,000 MB; the server 0.5 s.
        assert!((run.cpu_us_per_mb - 200.0).abs() < 1e-9, "{run:?}");
        assert_eq!(run.remote_cpu_us_per_mb, Some(100.0));
        assert_eq!(run.gbit, 20.0);
        // A server's document of a forward test: its side received.
        let mut server = doc.clone();
        server["start"]["accepted_connection"] = serde_json::json!({"host": "::1"});
        server["end"]["sum_received"]["bytes"] = serde_json::json!(2.5e9);
        let input = parse_value(server).unwrap();
        assert_eq!(input.reports[0].host.hostname, "iperf3 -s");
        // 1 s of CPU over the 2,500 MB it received.
        assert!((input.reports[0].results[0].runs[0].cpu_us_per_mb - 400.0).abs() < 1e-9);
        let mut ours = doc;
        ours["zcnet"] = serde_json::json!({"path": "sendfile", "zero_copy_share": 1.0});
        let input = parse_value(ours).unwrap();
        let set = &input.reports[0].results[0];
        assert_eq!(set.mode, "zcnet sendfile");
        assert_eq!(set.runs[0].zero_copy_share, Some(1.0));
        let mut bad = serde_json::json!({"start": {}, "intervals": [], "end": {}});
        assert!(
            parse_value(bad.take())
                .unwrap_err()
                .contains("sum_received")
        );
    }

    #[test]
    fn one_report_and_a_suite_are_read() {
        let i = parse(ONE).unwrap();
        assert_eq!(i.label, "a");
        assert!(i.probe.is_none());
        assert_eq!(i.reports[0].results[0].runs[0].gbit, 9.5);
        let suite = format!(
            r#"{{"probe":{{"checks":[{{"id":"rx.x","status":"available","reason":"works"}}]}},
                "reports":[{ONE}],"summary":[]}}"#
        );
        let i = parse(&suite).unwrap();
        assert_eq!(i.probe.unwrap().checks[0].id, "rx.x");
    }

    #[test]
    fn a_foreign_document_names_the_field() {
        assert!(parse("[1, 2").unwrap_err().starts_with("not JSON"));
        let e = parse(r#"{"name": "something else"}"#).unwrap_err();
        assert!(e.contains("missing field `bench`"), "{e}");
        let bad = ONE.replace(r#""gbit":9.5"#, r#""gbit":"fast""#);
        let e = parse(&bad).unwrap_err();
        assert!(
            e.starts_with("results[0].runs[0].gbit: invalid type"),
            "{e}"
        );
        let e = parse(r#"{"probe":{"checks":[]},"reports":[],"summary":[]}"#).unwrap_err();
        assert_eq!(e, "reports: no bench report in it");
    }

    #[test]
    fn counts_over_their_caps_are_named() {
        let mut v: Value = serde_json::from_str(ONE).unwrap();
        let set = v["results"][0].clone();
        v["results"] = vec![set.clone(); MAX_SETS + 1].into();
        let e = parse_value(v.clone()).unwrap_err();
        assert_eq!(
            e,
            format!(
                "sets (results of all reports): {}, more than the {MAX_SETS} a page draws",
                MAX_SETS + 1
            )
        );
        v["results"] = vec![set.clone(); MAX_SETS].into();
        assert!(parse_value(v.clone()).is_ok());
        let mut many_runs = set;
        many_runs["runs"] = vec![many_runs["runs"][0].clone(); MAX_RUNS + 1].into();
        v["results"] = vec![many_runs].into();
        let e = parse_value(v).unwrap_err();
        assert!(
            e.starts_with("reports[0].results[0].runs: 1001, more than"),
            "{e}"
        );
    }

    #[test]
    fn long_strings_are_cut_with_a_mark() {
        let long = "é".repeat(MAX_NAME + 1);
        let mut v: Value = serde_json::from_str(ONE).unwrap();
        v["host"]["hostname"] = long.clone().into();
        v["settings"] = serde_json::json!({ long.clone(): [long.clone(), 1], "pool": "a" });
        v["results"][0]["params"][&long] = long.clone().into();
        v["results"][0]["mode"] = long.clone().into();
        let i = parse_value(v).unwrap();
        let cut = format!("{}{CUT}", "é".repeat(MAX_NAME));
        assert_eq!(i.label, cut);
        assert_eq!(i.reports[0].host.hostname, cut);
        let settings = i.reports[0].settings.as_object().unwrap();
        assert_eq!(settings[&cut][0], cut.as_str());
        assert_eq!(settings["pool"], "a");
        let set = &i.reports[0].results[0];
        assert_eq!(set.mode, cut);
        assert_eq!(set.params[&cut], cut.as_str());
        assert_eq!(set.params["size"], 8000);
        // At the cap, nothing is cut.
        let mut s = "a".repeat(MAX_NAME);
        clip(&mut s, MAX_NAME);
        assert_eq!(s.len(), MAX_NAME);
    }
}
