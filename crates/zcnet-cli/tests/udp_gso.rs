//! `zcnet bench udp-gso`: over veth every mode's datagrams are checked by a GRO receiver and the
//! copied share is what the kernel said (veth delivery copies); the kernel's `udpgso_bench_tx`
//! runs beside it with the arguments of each mode (a stand-in that prints its summary line);
//! shapes the kernel cannot take are one line and a non-zero exit before any lab is built.

use std::process::Command;

mod common;

fn zcnet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcnet"));
    c.env_remove("ZCNET_PROFILE");
    c
}

#[test]
fn over_veth_every_datagram_of_every_mode_is_checked_and_none_claimed_zero_copy() {
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let out = zcnet()
        .args(["bench", "udp-gso", "--lab", "veth", "--segment", "1200"])
        .args([
            "--train",
            "1",
            "--train",
            "42",
            "--runs",
            "1",
            "--seconds",
            "0.2",
        ])
        .arg("--json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sets = v["results"].as_array().unwrap();
    let uring = !err.contains("io_uring");
    assert_eq!(sets.len(), 2 * 6, "two shapes, six modes: {err}");
    for set in sets {
        let mode = set["mode"].as_str().unwrap();
        assert_eq!(set["params"]["segment"], 1200);
        for run in set["runs"].as_array().unwrap() {
            assert_eq!(run["verified"], true, "{mode}: {run}");
            // What arrived was checked; how much arrived is said, not assumed.
            let got = run["received_share"].as_f64().unwrap();
            assert!(got > 0.0 && got <= 1.0, "{mode}: {run}");
            assert!(run["requests_per_s"].as_f64().unwrap() > 0.0, "{run}");
            match mode {
                "sendmsg" | "sendmmsg" => assert!(run["zero_copy_share"].is_null(), "{run}"),
                // Delivered to a local socket: whatever was loaned, the kernel copied.
                _ => assert_eq!(run["zero_copy_share"], 0.0, "{mode}: {run}"),
            }
        }
    }
    assert!(uring || sets.iter().all(|s| s["mode"] != "gso-zc-fixed"));
}

#[test]
fn shapes_the_kernel_cannot_send_are_refused_before_any_lab() {
    for (args, says) in [
        (
            vec!["--segment", "1472", "--train", "45"],
            "exceeds one UDP datagram",
        ),
        (vec!["--train", "65"], "1..=64"),
        (vec!["--train", "0"], "1..=64"),
        (vec!["--segment", "7"], "8..=9000"),
        (vec!["--lab", "loopback"], "no lab \"loopback\" for udp-gso"),
        (
            vec!["--reference", "/nonexistent/udpgso_bench_tx"],
            "cannot read it",
        ),
    ] {
        let out = zcnet()
            .args(["bench", "udp-gso"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        // The rule, not this machine's output: one error line, the last, saying why (a bare
        // machine prints a note first: no ethtool, no sink-swgso lab).
        let line = common::error_line(&err);
        assert!(line.contains(says), "{args:?}: {err}");
    }
}

/// Writes the stand-in for `udpgso_bench_tx` into `dir`: (the program, the log of its arguments).
fn stand_in(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.join("args");
    let fake = dir.join("udpgso_bench_tx");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\nsize=0; gso=0\n\
         while [ $# -gt 0 ]; do [ \"$1\" = -s ] && size=$2; [ \"$1\" = -S ] && gso=$2; shift; done\n\
         if [ $gso = 0 ]; then calls=$((1000 * ((size + 1471) / 1472))); else calls=1000; fi\n\
         echo \"sum udp tx:     10 MB/s $calls calls (1/s)       1000 msgs (1/s)\" >&2\n",
        log = log.display()
    );
    std::fs::write(&fake, script).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (fake, log)
}

/// A stand-in for the kernel's `udpgso_bench_tx`: writes its arguments down and prints the
/// summary line of `-a` for 1000 sends of `-s` bytes (`calls`: 1000 for a train, one per
/// 1472-byte datagram otherwise).
#[test]
fn the_kernels_program_runs_beside_each_mode_it_has() {
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let dir = std::env::temp_dir().join(format!("zcnet-udpgso-ref-{}", std::process::id()));
    let (fake, log) = stand_in(&dir);
    let out = zcnet()
        .args([
            "bench",
            "udp-gso",
            "--lab",
            "sink",
            "--segment",
            "1472",
            "--train",
            "8",
        ])
        .args([
            "--mode", "sendmsg", "--mode", "gso-copy", "--mode", "gso-zc",
        ])
        .args(["--runs", "1", "--seconds", "0.2", "--json", "--reference"])
        .arg(&fake)
        .output()
        .unwrap();
    let args = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        modes,
        [
            "sendmsg",
            "ref-sendmsg",
            "gso-copy",
            "ref-gso-copy",
            "gso-zc",
            "ref-gso-zc"
        ],
        "{v}"
    );
    for r in v["results"].as_array().unwrap() {
        if r["mode"].as_str().unwrap().starts_with("ref-") {
            let run = &r["runs"][0];
            assert_eq!(run["bytes"], 1000 * 8 * 1472, "{run}");
            // Datagrams: 8 per send, as its own calls or as the train's segments.
            let datagrams =
                run["requests_per_s"].as_f64().unwrap() * run["seconds"].as_f64().unwrap();
            assert_eq!(datagrams.round(), 8000.0, "{run}");
        } else if r["mode"] == "gso-zc" {
            // Into the sink a train is really sent without a copy.
            assert_eq!(r["runs"][0]["zero_copy_share"], 1.0, "{r}");
        }
    }
    // Asked as zcnet sends: IPv4 to the sink's port 9, the train's bytes, the segment for
    // its GSO modes, -z for zero copy, -a for the summary.
    let lines: Vec<&str> = args.lines().collect();
    assert_eq!(lines.len(), 3, "{args}");
    assert!(
        lines[0].starts_with("-4 -D 198.19.0.2 -p 9 -l 1 -s 11776 -a"),
        "{args}"
    );
    assert!(!lines[0].contains("-S"), "{args}");
    assert!(lines[1].ends_with("-s 11776 -a -S 1472"), "{args}");
    assert!(lines[2].ends_with("-s 11776 -a -S 1472 -z"), "{args}");
    let pairs: Vec<(&str, &str)> = v["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"] == "cpu_us_per_mb")
        .map(|c| (c["a"].as_str().unwrap(), c["b"].as_str().unwrap()))
        .collect();
    for want in [
        ("gso-copy", "sendmsg"),
        ("gso-zc", "gso-copy"),
        ("gso-copy", "ref-gso-copy"),
        ("gso-zc", "ref-gso-zc"),
        ("sendmsg", "ref-sendmsg"),
    ] {
        assert!(pairs.contains(&want), "{want:?} in {pairs:?}");
    }
}

/// Issue 48 item 7: over IPv6 the veth lab failed in 3 of 3 runs ("the receiver got no
/// datagram"): neighbour discovery took a second, longer than a run. The lab's neighbours are
/// permanent now.
#[test]
fn ipv6_over_veth_delivers_from_the_first_run() {
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let out = zcnet()
        .args(["bench", "udp-gso", "--lab", "veth", "--family", "ipv6"])
        .args([
            "--segment",
            "1200",
            "--train",
            "8",
            "--mode",
            "gso-copy",
            "--mode",
            "gso-zc",
        ])
        .args(["--runs", "1", "--seconds", "0.3", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for set in v["results"].as_array().unwrap() {
        assert_eq!(set["family"], "ipv6");
        let run = &set["runs"][0];
        assert!(run["received_share"].as_f64().unwrap() > 0.0, "{run}");
    }
}

/// Issue 48 item 8: `gso-zc-fixed` whose pool could not be locked (an ordinary user's 8 MiB of
/// `RLIMIT_MEMLOCK`, `--pool-kib 65536`) took the whole bench down with it. It is left out with
/// one line, as uring-tx leaves zc-fixed out, and the other modes run.
#[test]
fn a_pool_that_cannot_be_locked_leaves_gso_zc_fixed_out() {
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    netlab::require_program!("setpriv");
    netlab::require_program!("prlimit");
    if !nix::unistd::geteuid().is_root() {
        return netlab::skip::skip("needs root to drop CAP_IPC_LOCK for the bench");
    }
    let out = Command::new("setpriv")
        .args([
            "--inh-caps=-ipc_lock",
            "--bounding-set=-ipc_lock",
            "prlimit",
        ])
        .arg("--memlock=8388608")
        .arg(env!("CARGO_BIN_EXE_zcnet"))
        .args(["bench", "udp-gso", "--lab", "sink", "--pool-kib", "65536"])
        .args(["--segment", "1472", "--train", "42"])
        .args(["--mode", "gso-copy", "--mode", "gso-zc-fixed"])
        .args(["--runs", "1", "--seconds", "0.2", "--json"])
        .env_remove("ZCNET_PROFILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("gso-zc-fixed left out"), "{err}");
    assert!(err.contains("RLIMIT_MEMLOCK"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["gso-copy"]);
}
