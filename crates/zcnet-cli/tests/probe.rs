//! `zcnet probe`: the document, the table, and what it claims inside a user namespace.

mod common;
use common::zcnet;

use std::process::Command;

#[test]
fn probe_json_is_the_documented_document() {
    let out = zcnet().args(["probe", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["schema"], "zcnet-probe/1");
    assert_eq!(v["checks"].as_array().unwrap().len(), 18);
}

#[test]
fn probe_table_lists_every_mechanism() {
    let out = zcnet().arg("probe").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for mech in ["RX ", "TX ", "FILE ", "URING ", "PEEK ", "RING ", "XDP "] {
        assert!(text.contains(mech), "{mech} missing:\n{text}");
    }
    assert!(text.contains("host: Linux"));
}

/// Issue 15 item 8 / issue 16 item 4: under `unshare -r` the process is "root" with every
/// capability, but only inside its user namespace, which does not own the host's network
/// namespace: the probe must not claim CAP_NET_RAW or the memlock exemption, and the ring checks
/// are blocked. Under `unshare -rn` (a network namespace of its own) the network capabilities
/// are real again.
#[test]
fn probe_in_a_user_namespace_claims_only_what_works_there() {
    if !netlab::skip::on_path("unshare") {
        return netlab::skip::skip("unshare (util-linux) is not installed");
    }
    let probe = |flags: &str| {
        let out = Command::new("unshare")
            .arg(flags)
            .arg(env!("CARGO_BIN_EXE_zcnet"))
            .args(["probe", "--json"])
            .output()
            .unwrap();
        (out.status.success() && !out.stdout.is_empty())
            .then(|| serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap())
    };
    let Some(v) = probe("-r") else {
        return netlab::skip::skip("unprivileged user namespaces are not allowed here");
    };
    let p = &v["privileges"];
    assert_eq!(p["euid"], 0);
    assert_eq!(p["user_namespace"], true, "{p}");
    assert_eq!(p["cap_net_raw"], false, "{p}");
    assert_eq!(p["cap_net_admin"], false, "{p}");
    assert_eq!(
        p["cap_ipc_lock"], false,
        "not exempt from RLIMIT_MEMLOCK: {p}"
    );
    let ring = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "ring.tpacket_v3_rx")
        .unwrap();
    assert_eq!(ring["status"], "blocked", "{ring}");
    let v = probe("-rn").expect("unshare -rn");
    let p = &v["privileges"];
    assert_eq!(p["user_namespace"], true, "{p}");
    assert_eq!(p["cap_net_raw"], true, "its own network namespace: {p}");
    assert_eq!(p["cap_ipc_lock"], false, "{p}");
    // Its loopback is down: the checks say so instead of blaming the kernel (the IPv4 peek
    // check used to ask for "an IPv6 loopback address").
    let peek4 = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "peek.tcp_ipv4")
        .unwrap();
    let reason = peek4["reason"].as_str().unwrap();
    assert_eq!(peek4["status"], "blocked", "{peek4}");
    assert!(reason.contains("loopback is down"), "{reason}");
    assert!(!reason.contains("IPv6"), "{reason}");
}
