//! The probe on this machine: its findings are complete, consistent and cached, and what it
//! calls available really works when used.

use std::net::UdpSocket;
use std::time::Duration;

use zcnet::probe::{self, CheckId, Status};

#[test]
fn every_check_once_with_reason_and_method() {
    let f = probe::features();
    assert_eq!(f.schema, probe::SCHEMA);
    assert_eq!(f.checks.len(), 18);
    let mut ids: Vec<CheckId> = f.checks.iter().map(|c| c.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), f.checks.len(), "a check appears twice");
    for c in &f.checks {
        assert_eq!(c.mechanism, c.id.mechanism());
        assert!(!c.reason.is_empty(), "{}: no reason", c.id.name());
        match c.status {
            Status::Available => assert!(c.errno.is_none(), "{}: errno on success", c.id.name()),
            Status::Skipped => {}
            Status::Unavailable | Status::Blocked => {
                assert!(
                    !c.method.is_empty(),
                    "{}: says no without saying how",
                    c.id.name()
                )
            }
        }
    }
    assert!(f.host.page_size >= 4096);
    assert!(f.host.cpus >= 1);
}

#[test]
fn features_are_computed_once() {
    assert!(std::ptr::eq(probe::features(), probe::features()));
}

#[test]
fn json_has_the_documented_shape() {
    let v = serde_json::to_value(probe::features()).unwrap();
    assert_eq!(v["schema"], "zcnet-probe/1");
    for key in [
        "kernel",
        "page_size",
        "cpus",
        "memlock_soft",
        "optmem_max",
        "lo_mtu",
    ] {
        assert!(v["host"].get(key).is_some(), "host.{key}");
    }
    for key in [
        "euid",
        "cap_net_admin",
        "cap_net_raw",
        "cap_ipc_lock",
        "cap_sys_admin",
    ] {
        assert!(v["privileges"].get(key).is_some(), "privileges.{key}");
    }
    let c = &v["checks"][0];
    assert_eq!(c["id"], "rx.tcp_zerocopy_receive");
    assert_eq!(c["mechanism"], "RX");
    for key in ["status", "reason", "method", "errno", "detail"] {
        assert!(c.get(key).is_some(), "checks[].{key}");
    }
}

#[test]
fn available_udp_zerocopy_really_completes() {
    let f = probe::features();
    if !f.available(CheckId::TxUdp) {
        netlab::skip::skip(&f.check(CheckId::TxUdp).reason);
        return;
    }
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let c =
        zcnet::msg_zerocopy::udp_send_once(rx.local_addr().unwrap(), 32000, Duration::from_secs(5))
            .expect("the probe said UDP zero-copy works");
    assert_eq!((c.first, c.last), (0, 0));
    // Over loopback the kernel must copy for local delivery, and must say so.
    assert!(
        c.copied,
        "a loopback completion not flagged copied would be a lie"
    );
    let mut buf = vec![0u8; 65536];
    assert_eq!(rx.recv(&mut buf).unwrap(), 32000);
    assert!(buf[..32000].iter().all(|&b| b == 0xa5));
}

#[test]
fn rx_reports_the_struct_fields_the_kernel_fills() {
    let f = probe::features();
    let rx = f.check(CheckId::RxTcpZerocopyReceive);
    if rx.status != Status::Available {
        netlab::skip::skip(&rx.reason);
        return;
    }
    let fields = rx.detail["fields"].as_array().unwrap();
    assert_eq!(fields[0], "address");
    assert!(fields.iter().any(|f| f == "recv_skip_hint"));
    let len = rx.detail["struct_len"].as_u64().unwrap();
    assert!((16..=64).contains(&len), "{len}");
}
