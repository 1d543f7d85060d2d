//! `bench packet`, `bench packet-tx` and `bench async-serve`: what they refuse and what they count.

mod common;
use common::zcnet;

#[test]
fn bench_async_serve_rejects_what_it_cannot_run() {
    for (args, code, says) in [
        (&["--lab", "loopback"][..], 1, "veth lab only"),
        (&["--clients", "0"][..], 2, "0 is not in 1..=1000"),
        (&["--size", "0"][..], 2, "0 is not in 1..=1073741824"),
        (&["--size", "2000000000"][..], 2, "not in 1..=1073741824"),
    ] {
        let out = zcnet()
            .args(["bench", "async-serve"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(common::error_line(&err).contains(says), "{args:?}: {err}");
    }
}

#[test]
fn bench_async_serve_says_which_descriptor_limit_is_too_low() {
    // 1000 clients under a hard limit of 256 descriptors: one line naming the limit, before any
    // lab or file is made (so this needs no privilege).
    if !netlab::skip::on_path("prlimit") {
        netlab::skip::skip("prlimit (util-linux) is not installed");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_zcnet");
    let out = std::process::Command::new("prlimit")
        .args([
            "--nofile=256:256",
            "--",
            bin,
            "bench",
            "async-serve",
            "--clients",
            "1000",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.contains("1000 clients need about 4256 file descriptors, but RLIMIT_NOFILE is 256"),
        "{err}"
    );
}

#[test]
fn bench_packet_rejects_what_it_cannot_run() {
    let out = zcnet()
        .args(["bench", "packet", "--size", "20"])
        .output()
        .unwrap();
    // Refused by the argument parser now: exit 2, one line naming the range.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("20 is not in 42..=1514"), "{err}");
    let out = zcnet()
        .args(["bench", "packet", "--lab", "sink"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("veth lab only"));
    let out = zcnet()
        .args(["bench", "packet", "--mode", "pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bench_packet_tx_counts_the_frames_that_arrive() {
    // Issue 18: sendmmsg, the TX ring with and without the qdisc bypass, and AF_XDP TX, each
    // counted where the frames arrive: the sink's drop counter, the far side of the veth pair.
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let out = zcnet()
        .args([
            "bench",
            "packet-tx",
            "--json",
            "--runs",
            "1",
            "--seconds",
            "0.3",
        ])
        .args(["--size", "64", "--size", "1500"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sets = r["results"].as_array().unwrap();
    let runs: Vec<(&str, &str)> = sets
        .iter()
        .map(|s| (s["lab"].as_str().unwrap(), s["mode"].as_str().unwrap()))
        .collect();
    assert_eq!(sets.len(), 16, "{runs:?}");
    for lab in ["sink", "veth"] {
        for m in ["sendmmsg", "ring", "ring-bypass", "xdp"] {
            let n = runs.iter().filter(|x| **x == (lab, m)).count();
            assert_eq!(n, 2, "{lab} {m}");
        }
    }
    for set in sets {
        let size = set["params"]["size"].as_u64().unwrap();
        for run in set["runs"].as_array().unwrap() {
            let sent = run["packets_offered"].as_u64().unwrap();
            let bytes = run["bytes"].as_u64().unwrap();
            // Counted where they arrive: never more than sent, whole frames, nearly all of them
            // (nothing drops in the idle labs).
            assert_eq!(bytes % size, 0, "{run}");
            let arrived = bytes / size;
            assert!(arrived > 0 && arrived <= sent, "{run}");
            assert!(arrived as f64 >= 0.99 * sent as f64, "{run}");
        }
    }
}

#[test]
fn bench_packet_tx_refuses_what_it_cannot_run() {
    for args in [
        &["bench", "packet-tx", "--mode", "ring"][..],
        &["bench", "packet-tx", "--lab", "loopback"],
        &["bench", "packet-tx", "--size", "40"],
    ] {
        let out = zcnet().args(args).output().unwrap();
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{args:?}: {out:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        common::error_line(&err);
    }
}
