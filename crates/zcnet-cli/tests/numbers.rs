//! Issue 15 item 2: every numeric option of every subcommand, fed `-1`, `0`, `nan`, `inf`,
//! `1e30` and `2^64-1`. None may panic (exit 101) or die by a signal; a value out of range is
//! exit 2 with one line. Each command is built so that a value it accepts fails right after
//! parsing (an interface, a file or a port that is not there), so nothing runs for real.

mod common;
use common::zcnet;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

const VALUES: [&str; 6] = ["-1", "0", "nan", "inf", "1e30", "18446744073709551615"];

/// Runs `zcnet ARGS`, at most 20 s; returns (exit code, stderr).
fn run(args: &[String]) -> (Option<i32>, String) {
    let mut child = zcnet()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("zcnet {args:?} still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `base` with `opt=VALUE` for each value; `strict`: every value must be refused (exit 2).
fn sweep(base: &[&str], opt: &str, strict: bool) {
    for v in VALUES {
        let mut args: Vec<String> = base.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("{opt}={v}"));
        let (code, err) = run(&args);
        let Some(code) = code else {
            panic!("zcnet {args:?} died by a signal: {err}");
        };
        assert_ne!(code, 101, "zcnet {args:?} panicked: {err}");
        assert!(code == 1 || code == 2, "zcnet {args:?}: exit {code}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "zcnet {args:?}: {err:?}");
        if strict {
            assert_eq!(code, 2, "zcnet {args:?} accepted {v}: {err}");
        }
    }
}

#[test]
fn every_numeric_option_refuses_nonsense_in_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let capture = ["capture", "-i", "zcnet-none0", "-w", "/dev/null"];
    for opt in [
        "-c",
        "-s",
        "--fanout",
        "--seconds",
        "--block-kib",
        "--blocks",
    ] {
        sweep(&capture, opt, opt != "-c");
    }
    let recv = ["recv", "--listen", &taken, "-o", "/dev/null"];
    for opt in ["--mss", "--window-kib"] {
        sweep(&recv, opt, true);
    }
    let relay = ["relay", "--listen", &taken, "--to", "127.0.0.1:9"];
    for opt in [
        "--max-unacked-mib",
        "--ack-timeout",
        "--connect-timeout",
        "--sndbuf-kib",
        "--max-connections",
    ] {
        sweep(&relay, opt, true);
    }
    // --count 0 means "forever", 2^64-1 is a count: both accepted, then the port is taken.
    sweep(&relay, "--count", false);
    let send = ["send", "/nonexistent/zcnet-test", "127.0.0.1:9"];
    sweep(&send, "--limit", false);
    sweep(&send, "--connect-timeout", true);
    // Any value a bench accepts would run it: every one of these must be refused.
    for (bench, opts) in [
        (
            "tcp-rx",
            &["--runs", "--seconds", "--mss", "--window-kib"][..],
        ),
        (
            "udp-tx",
            &["--size", "--pool-mib", "--runs", "--seconds"][..],
        ),
        ("uring-tx", &["--size", "--pool-mib"][..]),
        ("file-tx", &["--size-mib", "--copy-buffer-kib"][..]),
        ("packet", &["--size"][..]),
        ("peek", &["--runs", "--seconds"][..]),
    ] {
        for opt in opts {
            sweep(&["bench", bench], opt, true);
        }
    }
    sweep(&["bench"], "--runs", true);
    sweep(&["bench"], "--seconds", true);
}
