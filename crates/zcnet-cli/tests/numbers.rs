//! Issue 15 item 2: every numeric option of every subcommand, fed `-1`, `0`, `nan`, `inf`,
//! `1e30` and `2^64-1`, and (issue 35 item 15) values above 0 that no duration can be: `1e-10`,
//! the subnormals `2.2e-308`, `1e-320` and `5e-324` (the smallest `f64` above 0). None may panic
//! (exit 101) or die by a signal; a value out of range is exit 2 with one line. Each command is
//! built so that a value it accepts fails right after parsing (an interface, a file or a port
//! that is not there), so nothing runs for real.

mod common;
use common::zcnet;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

const VALUES: [&str; 10] = [
    "-1",
    "0",
    "nan",
    "inf",
    "1e30",
    "18446744073709551615",
    "1e-10",
    "2.2e-308",
    "1e-320",
    "5e-324",
];

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
        common::assert_no_repeat(common::error_line(&err));
        if strict {
            assert_eq!(code, 2, "zcnet {args:?} accepted {v}: {err}");
        }
    }
}

/// Options that take no number: addresses, paths, names, lab lists; `torture --seed`, an
/// identifier that every `u64` is (a valid one would run the harness).
const NOT_NUMBERS: [&str; 22] = [
    "labs",
    "listen",
    "connect",
    "output",
    "file",
    "addr",
    "to",
    "fallback",
    "interface",
    "write",
    "expr",
    "profile",
    "report",
    "inputs",
    "remote",
    "token_file",
    "seed",
    "reference",
    "selftests",
    "client",
    "bind",
    "iperf3",
];

/// Numbers that have a meaning at every value in range, so that only some of the sweep is
/// refused: a packet count, a relay's connection count (0: forever), a byte limit, iperf3's
/// `-i` (0: one interval over the test).
const LENIENT: [&str; 5] = [
    "capture count",
    "relay count",
    "send limit",
    "serve count",
    "iperf3 interval",
];

/// Every numeric option of every subcommand (walked from the clap definition, so a new option is
/// swept without being listed here): subcommand path, long or short flag, id.
fn numeric_options() -> Vec<(String, String, String)> {
    use clap::CommandFactory;
    fn walk(c: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, String, String)>) {
        for a in c.get_arguments() {
            let id = a.get_id().as_str();
            if !a.get_action().takes_values()
                || !a.get_possible_values().is_empty()
                || NOT_NUMBERS.contains(&id)
            {
                continue;
            }
            let flag = match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("--{l}"),
                (None, Some(s)) => format!("-{s}"),
                (None, None) => panic!("{path:?}: positional {id} is not known to NOT_NUMBERS"),
            };
            out.push((path.join(" "), flag, id.to_owned()));
        }
        for s in c.get_subcommands() {
            path.push(s.get_name().to_owned());
            walk(s, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(&zcnet_cli::cli::Cli::command(), &mut Vec::new(), &mut out);
    out
}

#[test]
fn every_numeric_option_refuses_nonsense_in_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let options = numeric_options();
    assert!(options.len() > 40, "{options:?}");
    for (path, flag, id) in options {
        // Each base fails right after parsing when the value is accepted.
        let base: Vec<&str> = match path.as_str() {
            "capture" => vec!["capture", "-i", "zcnet-none0", "-w", "/dev/null"],
            "recv" => vec!["recv", "--listen", &taken, "-o", "/dev/null"],
            "relay" => vec!["relay", "--listen", &taken, "--to", "127.0.0.1:9"],
            "send" => vec!["send", "/nonexistent/zcnet-test", "127.0.0.1:9"],
            "serve" => vec!["serve", "--listen", &taken],
            // A client of a closed port: a value it accepts ends in exit 1 at once.
            "iperf3" => vec!["iperf3", "-c", "127.0.0.1", "-p", "9"],
            // An input that is not there: a value it accepts ends in exit 2 at once.
            "report" => vec!["report", "/nonexistent/zcnet-a.json", "-o", "/dev/null"],
            // Any value a bench or tune accepts would run it: every one must be refused.
            bench if bench.starts_with("bench") => bench.split(' ').collect(),
            "tune" => vec!["tune"],
            // `--seconds` refuses every value of the sweep (at most a week).
            "torture" => vec!["torture"],
            other => panic!("no base command for `zcnet {other}` {flag}: add one here"),
        };
        let lenient = LENIENT.contains(&format!("{path} {id}").as_str());
        sweep(&base, &flag, !lenient);
    }
}
