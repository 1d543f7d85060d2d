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

/// Whether process `pid` runs a round: its sender's thread (`torture sender`) is there.
fn in_a_round(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .any(|comm| comm.trim() == "torture sender")
        })
        .unwrap_or(false)
}

/// Reads a child's pipe to its end on a thread of its own (a full pipe would block the child).
fn read_all(pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut pipe = pipe;
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

/// Deletes the lab namespaces `pid` left, returning their names.
fn remove_labs(pid: u32) -> Vec<String> {
    let left = labs_of(pid);
    for lab in &left {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", lab])
            .status();
    }
    left
}

/// A long torture run in the background, its output read as it comes.
struct Run {
    child: std::process::Child,
    pid: u32,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Run {
    /// Starts `zcnet torture --seconds 600 --seed SEED --json` and waits until a round is under
    /// way (labs built, probes run), however loaded the machine (the test fails if none starts
    /// in 60 s); also whether its labs are visible in /run/netns.
    fn start_in_a_round(seed: &str) -> (Run, bool) {
        let mut child = zcnet()
            .args(["torture", "--seconds", "600", "--seed", seed, "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let stdout = read_all(child.stdout.take().unwrap());
        let stderr = read_all(child.stderr.take().unwrap());
        let run = Run {
            child,
            pid,
            stdout,
            stderr,
        };
        let start = std::time::Instant::now();
        while !in_a_round(pid) {
            if start.elapsed() > std::time::Duration::from_secs(60) {
                run.give_up("no round started within 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let had_labs = !labs_of(pid).is_empty();
        (run, had_labs)
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), sig).unwrap();
    }

    /// Its end, within `limit`: the status and what it printed.
    fn end_within(
        mut self,
        limit: std::time::Duration,
    ) -> (std::process::ExitStatus, String, String) {
        let until = std::time::Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > until {
                self.give_up(&format!("torture went on {limit:?} after the signal"));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let status = self.child.wait().unwrap();
        (
            status,
            self.stdout.join().unwrap(),
            self.stderr.join().unwrap(),
        )
    }

    /// Ends it by its id, removes its labs, and fails the test.
    fn give_up(mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_labs(self.pid);
        panic!("{why}: {}", self.stderr.join().unwrap_or_default());
    }
}

#[test]
fn a_signal_ends_the_run_after_its_round_with_the_summary_and_no_lab_left() {
    use nix::sys::signal::Signal;
    if common::ignored_here().contains(&Signal::SIGTERM) {
        eprintln!("skipping: SIGTERM is ignored here (nohup?), and so in the child");
        return;
    }
    let (run, had_labs) = Run::start_in_a_round("3");
    let pid = run.pid;
    run.signal(Signal::SIGTERM);
    // The round in progress ends by itself: 2 s of time at most, then its drain (80 s at the
    // very most, counted as hung).
    let (status, stdout, stderr) = run.end_within(std::time::Duration::from_secs(120));
    let left = remove_labs(pid);
    assert!(status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["stopped_by"], "SIGTERM", "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["rounds"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["loans_out"], v["loans_back"]);
    // What the signal asked is said when it came.
    assert!(
        stderr.contains("SIGTERM: torture stops after the round in progress"),
        "{stderr}"
    );
    assert!(left.is_empty(), "labs left: {left:?}");
    if !had_labs {
        eprintln!(
            "note: the run's labs are not visible in /run/netns here (none made, or in a private \
             mount namespace): that none is left was not checked"
        );
    }
}

#[test]
fn a_second_signal_ends_the_run_at_once_and_still_removes_the_labs() {
    use nix::sys::signal::Signal;
    use std::os::unix::process::ExitStatusExt as _;
    let ignored = common::ignored_here();
    if let Some(s) = [Signal::SIGTERM, Signal::SIGINT]
        .into_iter()
        .find(|s| ignored.contains(s))
    {
        eprintln!("skipping: {s} is ignored here (nohup, a background job?), and so in the child");
        return;
    }
    let (run, had_labs) = Run::start_in_a_round("5");
    let pid = run.pid;
    // Two different signals (two of one kind may merge while pending): the first taken asks
    // for a stop, the second ends the process.
    run.signal(Signal::SIGTERM);
    run.signal(Signal::SIGINT);
    let (status, _, stderr) = run.end_within(std::time::Duration::from_secs(30));
    let left = remove_labs(pid);
    let sig = status.signal();
    assert!(
        sig == Some(Signal::SIGINT as i32) || sig == Some(Signal::SIGTERM as i32),
        "ended by the second signal: {status:?} {stderr}"
    );
    assert!(left.is_empty(), "labs left: {left:?}");
    if !had_labs {
        eprintln!("note: the run's labs are not visible in /run/netns here: not checked");
    }
}
