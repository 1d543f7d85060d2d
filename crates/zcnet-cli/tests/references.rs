//! The kernel's own programs beside zcnet (`--reference`, `ZCNET_SELFTESTS`), and io_uring over
//! TCP delivering whole buffers.

mod common;
use common::zcnet;

/// io_uring over TCP: the lab's receiver checks that the stream is whole buffers of the pool,
/// in every mode (it got bytes of two buffers interleaved, in every invocation, before the
/// sender kept stream order).
#[test]
fn bench_uring_tx_over_tcp_delivers_whole_buffers() {
    if netlab::check_privileges().is_err() {
        return netlab::skip::skip("benches need root for their labs");
    }
    if zcnet::uring::support().send_zc.status != zcnet::support::Status::Available {
        return netlab::skip::skip("io_uring SEND_ZC is not available here");
    }
    let out = zcnet()
        .args(["bench", "uring-tx", "--lab", "loopback", "--lab", "veth"])
        .args(["--size", "1500", "--size", "64000"])
        .args(["--mode", "copy", "--mode", "zc", "--mode", "zc-fixed"])
        .args(["--runs", "1", "--seconds", "0.5", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sets = v["results"].as_array().unwrap();
    assert_eq!(sets.len(), 2 * 2 * 3);
    for set in sets {
        for run in set["runs"].as_array().unwrap() {
            assert_eq!(run["verified"], true, "{set}");
        }
    }
}

/// The modes of a bench's JSON results, in order.
fn modes_of(v: &serde_json::Value) -> Vec<&str> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect()
}

/// `zcnet ARGS PROGRAM` is refused before anything runs: exit 1, `needle` in what it says.
fn refused(args: &[&str], program: &std::path::Path, needle: &str) {
    let out = zcnet().args(args).arg(program).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{err}");
}

/// A stand-in for one of the kernel's send programs in `dir`: it writes the arguments it was
/// given to the returned log, one run a line, and prints `line` on stderr with `$mb` the MiB of
/// 1000 datagrams of its `-s` size (what the real program says after sending them).
fn stand_in(
    dir: &std::path::Path,
    name: &str,
    line: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (log, fake) = (dir.join(format!("{name}.args")), dir.join(name));
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\nsize=0\nwhile [ $# -gt 0 ]; do [ \"$1\" = -s ] && size=$2; shift; done\n\
         mb=$((1000 * size / 1048576))\necho \"{line}\" >&2\n",
        log = log.display()
    );
    std::fs::write(&fake, script).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    (fake, log)
}

/// `bench udp-tx --reference PATH` runs the kernel's `msg_zerocopy` beside zcnet in the sink
/// lab, copy and zc (`-z`), as uring-tx runs its program (the test above); zc-adaptive and
/// auto have no twin; tcp-tx refuses it.
#[test]
fn bench_udp_tx_runs_msg_zerocopy_beside_zcnet() {
    if netlab::check_privileges().is_err() {
        return netlab::skip::skip("benches need root for their labs");
    }
    let dir = std::env::temp_dir().join(format!("zcnet-reference-mz-{}", std::process::id()));
    let (fake, log) = stand_in(&dir, "msg_zerocopy", "tx=1000 ($mb MB) txc=1000 zc=y");
    let out = zcnet()
        .args([
            "bench",
            "udp-tx",
            "--lab",
            "sink",
            "--size",
            "8000",
            "--pool-mib",
            "2",
        ])
        .args(["--mode", "copy", "--mode", "zc", "--mode", "auto"])
        .args(["--runs", "2", "--seconds", "0.2", "--json", "--reference"])
        .arg(&fake)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes = modes_of(&v);
    assert_eq!(modes, ["copy", "zc", "auto", "ref-copy", "ref-zc"], "{v}");
    for r in v["results"].as_array().unwrap() {
        if r["mode"].as_str().unwrap().starts_with("ref-") {
            for run in r["runs"].as_array().unwrap() {
                assert_eq!(run["bytes"], 1000 * 8000, "{run}");
                assert_eq!(run["zero_copy_share"], serde_json::Value::Null, "{run}");
            }
        }
    }
    let pairs: Vec<(&str, &str)> = v["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"] == "cpu_us_per_mb")
        .map(|c| (c["a"].as_str().unwrap(), c["b"].as_str().unwrap()))
        .collect();
    for want in [
        ("ref-zc", "ref-copy"),
        ("copy", "ref-copy"),
        ("zc", "ref-zc"),
    ] {
        assert!(pairs.contains(&want), "{want:?} in {pairs:?}");
    }
    assert_eq!(v["settings"]["reference"]["program"], "msg_zerocopy");
    let asked = std::fs::read_to_string(&log).unwrap();
    let target = netlab::SinkLab::target(netlab::Family::V4);
    for z in ["", " -z"] {
        let line = format!("-4 -D {target} -p 9 -s 8000 -t 1{z} udp");
        assert_eq!(asked.lines().filter(|l| *l == line).count(), 2, "{asked}");
    }
    assert_eq!(asked.lines().count(), 4, "{asked}");
    refused(
        &["bench", "tcp-tx", "--lab", "loopback", "--reference"],
        &fake,
        "udp-tx only",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 51: the kernel's own programs, built from Debian's `linux-source` by `.ci/selftests`
/// into the directory `ZCNET_SELFTESTS` names, run beside zcnet: each bench that takes
/// `--reference` gets real figures from its program (its own count of what it sent, the CPU it
/// took) and pairs them with zcnet's, mode by mode. Stand-ins above check the arguments and the
/// parsing; this checks that the real programs say what those read.
#[test]
fn the_kernels_own_programs_run_beside_zcnet() {
    let Some(dir) = std::env::var_os("ZCNET_SELFTESTS") else {
        return netlab::skip::skip(
            "ZCNET_SELFTESTS is not set: build the kernel's programs with .ci/selftests DIR \
             and set it to DIR",
        );
    };
    if netlab::check_privileges().is_err() {
        return netlab::skip::skip("benches need root for their labs");
    }
    let dir = std::path::PathBuf::from(dir);
    // (bench, program, lab, the bench's arguments, the zero-copy mode paired with the program)
    type Beside<'a> = (&'a str, &'a str, &'a [&'a str], &'a [&'a str], &'a str);
    let sink: &[&str] = &["--lab", "sink"];
    let benches: [Beside; 4] = [
        (
            "udp-tx",
            "msg_zerocopy",
            sink,
            &["--size", "8000", "--mode", "copy", "--mode", "zc"],
            "zc",
        ),
        (
            "uring-tx",
            "io_uring_zerocopy_tx",
            sink,
            &["--size", "8000", "--mode", "copy", "--mode", "zc"],
            "zc",
        ),
        (
            "udp-gso",
            "udpgso_bench_tx",
            sink,
            &[
                "--segment",
                "1472",
                "--train",
                "8",
                "--mode",
                "gso-copy",
                "--mode",
                "gso-zc",
            ],
            "gso-zc",
        ),
        // tcp_mmap's server and client, MSS 4108 on loopback IPv6 (the condition).
        (
            "tcp-rx",
            "tcp_mmap",
            &["--lab", "loopback", "--family", "ipv6"],
            &["--no-verify", "--mode", "copy", "--mode", "zc"],
            "zc",
        ),
    ];
    for (bench, program, lab, args, zc) in benches {
        let path = dir.join(program);
        assert!(
            path.is_file(),
            "{} is missing from ZCNET_SELFTESTS",
            path.display()
        );
        let out = zcnet()
            .args(["bench", bench])
            .args(lab)
            .args(args)
            .args(["--runs", "1", "--seconds", "1", "--json", "--reference"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if bench == "uring-tx" && err.contains("io_uring is not available") {
            netlab::skip::skip(&format!("no io_uring here: {err}"));
            continue;
        }
        assert!(out.status.success(), "{bench} {program}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        program_sets_are_real(bench, program, &v);
        let paired = v["comparisons"].as_array().unwrap().iter().any(|c| {
            c["metric"] == "cpu_us_per_mb" && c["a"] == zc && c["b"] == format!("ref-{zc}")
        });
        assert!(paired, "{bench}: no {zc} over ref-{zc}: {v}");
    }
}

/// The program's sets of one bench: a copy and a zero-copy set per condition, each run with
/// bytes and CPU of its own (tcp_mmap: its word on what it mapped).
fn program_sets_are_real(bench: &str, program: &str, v: &serde_json::Value) {
    let refs: Vec<&serde_json::Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mode"].as_str().unwrap().starts_with("ref-"))
        .collect();
    // tcp-rx: a copy and a zc set per condition (two on loopback IPv6).
    let conditions = if bench == "tcp-rx" { 2 } else { 1 };
    assert_eq!(refs.len(), 2 * conditions, "{bench}: {v}");
    for r in refs {
        for run in r["runs"].as_array().unwrap() {
            let bytes = run["bytes"].as_f64().unwrap();
            let cpu = run["cpu_us_per_mb"].as_f64().unwrap();
            assert!(bytes > 0.0 && cpu > 0.0, "{bench} {program}: {run}");
            if bench == "tcp-rx" {
                // The program's own word on what it mapped: none in copy, most in zc
                // (what it is told to skip is read).
                let mapped = run["zero_copy_share"].as_f64().unwrap();
                match r["mode"].as_str().unwrap() {
                    "ref-copy" => assert_eq!(mapped, 0.0, "{run}"),
                    _ => assert!(mapped > 0.5, "{run}"),
                }
            }
        }
    }
}

/// `bench tcp-rx --reference PATH` is refused with a reason before any lab is built: a program
/// that is not there, beside a far host (the program runs in a lab here), or beside a hand-run
/// sender or receiver.
#[test]
fn bench_tcp_rx_refuses_a_reference_it_cannot_run() {
    for (args, says) in [
        (
            vec!["--reference", "/nonexistent/tcp_mmap"],
            "cannot read it",
        ),
        (
            vec!["--reference", "/bin/true", "--remote", "127.0.0.1:9"],
            "not with --remote",
        ),
        (
            vec!["--reference", "/bin/true", "--connect", "127.0.0.1:9"],
            "cannot be used with",
        ),
    ] {
        let out = zcnet()
            .args(["bench", "tcp-rx"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `bench uring-tx --reference PATH` runs the program beside zcnet in the sink lab, in the same
/// rounds, and reports it as its own sets with zcnet's ratios to it. A stand-in for the kernel's
/// `io_uring_zerocopy_tx` prints its line for the arguments it was given, and writes them down,
/// so the test checks what the program was asked to do and how its line is read.
#[test]
fn bench_uring_tx_runs_a_reference_beside_zcnet() {
    if netlab::check_privileges().is_err() {
        return netlab::skip::skip("benches need root for their labs");
    }
    let dir = std::env::temp_dir().join(format!("zcnet-reference-{}", std::process::id()));
    let (fake, log) = stand_in(
        &dir,
        "io_uring_zerocopy_tx",
        "tx=1000 (MB=$mb), tx/s=1000 (MB/s=0)",
    );
    let out = zcnet()
        .args(["bench", "uring-tx", "--lab", "sink", "--size", "8000"])
        .args(["--mode", "copy", "--mode", "zc-fixed", "--mode", "auto"])
        .args(["--runs", "2", "--seconds", "0.2", "--json", "--reference"])
        .arg(&fake)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("io_uring is not available") {
        std::fs::remove_dir_all(&dir).unwrap();
        return netlab::skip::skip(&format!("no io_uring here: {err}"));
    }
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes = modes_of(&v);
    // zcnet's sets, then the program's for the modes it has (auto has no twin there).
    assert_eq!(
        modes,
        ["copy", "zc-fixed", "auto", "ref-copy", "ref-zc-fixed"],
        "{v}"
    );
    for r in v["results"].as_array().unwrap() {
        let reference = r["mode"].as_str().unwrap().starts_with("ref-");
        for run in r["runs"].as_array().unwrap() {
            if reference {
                // Its own count of whole datagrams; no zero-copy share: it reports none.
                assert_eq!(run["bytes"], 1000 * 8000, "{run}");
                assert_eq!(run["zero_copy_share"], serde_json::Value::Null, "{run}");
            }
        }
    }
    // zcnet over the program, mode by mode, and each one's zero copy over its own copy.
    let pairs: Vec<(String, String)> = v["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"] == "cpu_us_per_mb")
        .map(|c| {
            (
                c["a"].as_str().unwrap().into(),
                c["b"].as_str().unwrap().into(),
            )
        })
        .collect();
    for want in [
        ("zc-fixed", "copy"),
        ("auto", "copy"),
        ("ref-zc-fixed", "ref-copy"),
        ("copy", "ref-copy"),
        ("zc-fixed", "ref-zc-fixed"),
    ] {
        assert!(
            pairs.contains(&(want.0.into(), want.1.into())),
            "{want:?} in {pairs:?}"
        );
    }
    assert_eq!(
        v["settings"]["reference"]["program"],
        "io_uring_zerocopy_tx"
    );
    // Asked as zcnet runs: IPv4 to the sink, port 9, the size, at least -t 1 (it divides by
    // it), zcnet's batch, -m 0 and -m 2,
    // each twice (two rounds).
    let asked = std::fs::read_to_string(&log).unwrap();
    let batch = zcnet_cli::bench::uring_tx::CONFIG.batch;
    let target = netlab::SinkLab::target(netlab::Family::V4);
    for m in [0, 2] {
        let line = format!("-4 -D {target} -p 9 -s 8000 -t 1 -n {batch} -m {m} udp");
        assert_eq!(asked.lines().filter(|l| *l == line).count(), 2, "{asked}");
    }
    assert_eq!(asked.lines().count(), 4, "{asked}");
    // Refused before any lab is built: a missing program, and a run without the sink lab.
    refused(
        &["bench", "uring-tx", "--lab", "loopback", "--reference"],
        &fake,
        "sink",
    );
    let out = zcnet()
        .args(["bench", "uring-tx", "--lab", "sink", "--reference"])
        .arg(dir.join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("missing"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
