//! What `zcnet report` reads: the JSON of `zcnet bench --json` (the suite: probe, reports,
//! summary) or of one `zcnet bench NAME --json` (one report), typed. A file that is neither is
//! refused with the file and the field that did not fit.

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
}

/// Reads `path`.
///
/// # Errors
/// One line naming the file and, for a document that is not a zcnet report, the field that did
/// not fit ("r.json: results[2].runs[0].gbit: invalid type: string, expected f64").
pub fn read(path: &Path) -> anyhow::Result<Input> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
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
    let (probe, reports) = if value.get("reports").is_some() {
        #[derive(Deserialize)]
        struct Suite {
            probe: Probe,
            reports: Vec<Report>,
        }
        let s: Suite = typed(value)?;
        (Some(s.probe), s.reports)
    } else {
        (None, vec![typed::<Report>(value)?])
    };
    if reports.is_empty() {
        return Err("reports: no bench report in it".into());
    }
    let label = reports[0].host.hostname.clone();
    Ok(Input {
        label,
        probe,
        reports,
    })
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
}
