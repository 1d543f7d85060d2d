//! Issue 63: a bench's `--json` carries what its text says: the summary rows (each verdict with
//! its 95 % interval and goal), and each comparison's interval, as the suite's JSON does; and
//! `zcnet report` reads it back.

mod common;

#[test]
fn a_bench_json_holds_its_verdicts_with_their_intervals() {
    if netlab::check_privileges().is_err() {
        return netlab::skip::skip("benches need root for their labs");
    }
    let dir = common::TempDir::new("bench-json");
    let out = common::zcnet()
        .args(["bench", "udp-tx", "--lab", "sink", "--size", "8000"])
        .args([
            "--mode",
            "copy",
            "--mode",
            "zc",
            "--runs",
            "3",
            "--seconds",
            "0.1",
        ])
        .args(["--pool-mib", "2", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = v["summary"].as_array().expect("summary rows");
    assert!(!summary.is_empty(), "{v}");
    for row in summary {
        let (low, high) = (row["ratio_low"].as_f64(), row["ratio_high"].as_f64());
        let ratio = row["ratio"].as_f64().unwrap();
        match (low, high) {
            (Some(l), Some(h)) => assert!(l <= ratio && ratio <= h, "{row}"),
            _ => panic!("no interval in {row}"),
        }
        assert!(
            row["verdict"].is_string() && row["decision"].is_string(),
            "{row}"
        );
    }
    let comparisons = v["comparisons"].as_array().expect("comparisons");
    assert!(!comparisons.is_empty(), "{v}");
    for c in comparisons {
        let get = |k: &str| c[k].as_f64().unwrap_or_else(|| panic!("no {k} in {c}"));
        let (min, low, median, high, max) = (
            get("ratio_min"),
            get("ratio_low"),
            get("ratio_median"),
            get("ratio_high"),
            get("ratio_max"),
        );
        assert!(
            min <= low && low <= median && median <= high && high <= max,
            "{c}"
        );
    }
    // The same document is a report's input, its verdicts read.
    let json = dir.join("udp-tx.json");
    std::fs::write(&json, &out.stdout).unwrap();
    let page = dir.join("udp-tx.html");
    let r = common::zcnet()
        .arg("report")
        .arg(&json)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    let first = summary[0]["experiment"].as_str().unwrap();
    assert!(html.contains(first), "the page names {first}");
}
