//! `zcnet torture` (issue 29): a short run passes with its summary line, and a run that sees
//! one wrong byte fails: the harness can fail.

mod common;
use common::zcnet;

use std::process::Output;

/// Runs `zcnet torture ARGS` to its end.
fn torture(args: &[&str]) -> Output {
    zcnet().arg("torture").args(args).output().unwrap()
}

/// The summary line: `torture: R rounds, B bytes checked, W wrong, M missing, faults: ...,
/// loans: O out K back, fds: F leaked, skipped: S -- ok|FAILED`; the numbers in order.
fn summary(stdout: &str) -> (Vec<u64>, String) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("torture: "))
        .unwrap_or_else(|| panic!("no summary line in {stdout:?}"));
    for part in [
        " rounds, ",
        " bytes checked, ",
        " wrong, ",
        " missing, faults: sndbuf=",
        " optmem=",
        " memlock=",
        " stall=",
        " reset=",
        " cancel=",
        " dropped=",
        ", loans: ",
        " out ",
        " back, fds: ",
        " leaked, skipped: ",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    let numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (numbers, line.to_owned())
}

#[test]
fn five_seconds_of_torture_pass_with_the_summary_line() {
    let out = torture(&["--seconds", "5", "--seed", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let (n, line) = summary(&stdout);
    // rounds, bytes, wrong, missing, 7 fault counts, loans out, back, fds, skipped.
    assert_eq!(n.len(), 15, "{line}");
    assert!(line.ends_with(" -- ok"), "{line}");
    assert!(n[0] > 0 && n[1] > 0, "rounds and bytes checked: {line}");
    assert_eq!((n[2], n[3]), (0, 0), "wrong, missing: {line}");
    assert_eq!(n[11], n[12], "loans out and back: {line}");
    assert_eq!(n[13], 0, "descriptors leaked: {line}");
    // The seed is said, so that the run can be replayed; each skip says why.
    assert!(stderr.contains("seed 1"), "{stderr}");
    let skips = stderr.lines().filter(|l| l.contains("skipping")).count() as u64;
    assert_eq!(skips, n[14], "{stderr}");
}

#[test]
fn one_wrong_byte_fails_the_run() {
    // The first round's receiver flips one bit before checking: the checker must see it.
    let out = torture(&["--seconds", "1", "--seed", "1", "--corrupt-one-byte"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let (n, line) = summary(&stdout);
    assert!(line.ends_with(" -- FAILED"), "{line}");
    assert_eq!(n[2], 1, "exactly one wrong byte or datagram: {line}");
    // The failure names the round, its mechanisms and its seed.
    let failed = stderr
        .lines()
        .find(|l| l.starts_with("torture: FAILED round 0 (seed "))
        .unwrap_or_else(|| panic!("no failure described: {stderr}"));
    assert!(failed.contains(" -> "), "{failed}");
    assert!(failed.contains("1 wrong"), "{failed}");
}

#[test]
fn json_is_one_document_with_the_same_counts() {
    let out = torture(&[
        "--seconds",
        "1",
        "--seed",
        "7",
        "--json",
        "--mechanism",
        "msg-zerocopy",
        "--mechanism",
        "peek",
        "--fault",
        "stall",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["seed"], 7);
    assert_eq!(v["ok"], true);
    assert!(v["rounds"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["wrong"], 0);
    assert_eq!(v["loans_out"], v["loans_back"]);
    let by = v["rounds_by_mechanism"].as_object().unwrap();
    assert!(
        by.keys().all(|k| k == "msg-zerocopy" || k == "peek"),
        "only the mechanisms asked for: {by:?}"
    );
    let faults = v["faults"].as_object().unwrap();
    assert!(
        faults.keys().all(|k| k == "stall" || k == "dropped"),
        "only the faults asked for: {faults:?}"
    );
}

/// The lab namespaces of process `pid` (netlab names them `zcnet-PID-N`).
fn labs_of(pid: u32) -> Vec<String> {
    let prefix = format!("zcnet-{pid}-");
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_signal_ends_the_run_after_its_round_with_the_summary_and_no_lab_left() {
    use nix::sys::signal::{Signal, kill};
    use std::time::{Duration, Instant};
    if common::ignored_here().contains(&Signal::SIGTERM) {
        eprintln!("skipping: SIGTERM is ignored here (nohup?), and so in the child");
        return;
    }
    let mut child = zcnet()
        .args(["torture", "--seconds", "600", "--seed", "3", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Rounds under way: its labs are up (where it can make them), and a moment more.
    let start = Instant::now();
    while labs_of(pid).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let had_labs = !labs_of(pid).is_empty();
    std::thread::sleep(Duration::from_secs(2));
    kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    // The round in progress ends by itself: 2 s of time, then its drain (80 s at the very
    // most, counted as hung).
    let limit = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("torture went on 120 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["stopped_by"], "SIGTERM", "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["rounds"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["loans_out"], v["loans_back"]);
    assert!(labs_of(pid).is_empty(), "labs left: {:?}", labs_of(pid));
    if !had_labs {
        eprintln!("note: no lab namespaces here (no privileges); only the summary was checked");
    }
}
