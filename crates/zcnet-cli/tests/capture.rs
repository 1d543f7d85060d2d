//! `zcnet capture` on a veth pair: a pcap file that tshark reads back with the packets sent,
//! and one-line errors for bad input.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{one_line_error, zcnet};
use netlab::{Family, Side, VethLab, require_lab, require_program};

const PORT: u16 = 40_000;

#[test]
fn a_pcap_tshark_reads_back_with_the_packets_sent() {
    require_lab!();
    require_program!("tshark");
    let lab = VethLab::new(None).unwrap();
    let dir = std::env::temp_dir().join(format!("zcnet-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.pcap");
    let n = 200usize;
    let child = lab
        .ns(Side::B)
        .command(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "capture",
            "-i",
            VethLab::DEV_B,
            "-c",
            &n.to_string(),
            "--seconds",
            "20",
        ])
        .arg("-w")
        .arg(&file)
        .args(["udp", "dst", "port", &PORT.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The ring is open well within this (it takes milliseconds).
    std::thread::sleep(Duration::from_millis(500));
    let a = VethLab::addr(Side::A, Family::V4);
    let s = lab
        .ns(Side::A)
        .run(move || UdpSocket::bind(SocketAddr::new(a, 0)))
        .unwrap()
        .unwrap();
    let to = SocketAddr::new(VethLab::addr(Side::B, Family::V4), PORT);
    let other = SocketAddr::new(VethLab::addr(Side::B, Family::V4), PORT + 1);
    let payloads: Vec<Vec<u8>> = (0..n)
        .map(|i| (0..(i * 7) % 1400 + 1).map(|j| (i ^ j) as u8).collect())
        .collect();
    for p in &payloads {
        s.send_to(p, to).unwrap();
        s.send_to(b"filtered out", other).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("{n} packets captured")), "{err}");
    let tshark = Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.len",
            "-e",
            "udp.dstport",
            "-e",
            "udp.payload",
        ])
        .output()
        .unwrap();
    assert!(
        tshark.status.success(),
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
    let text = String::from_utf8(tshark.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), n, "tshark read {} packets", rows.len());
    for (i, (row, p)) in rows.iter().zip(&payloads).enumerate() {
        let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(row[1], PORT.to_string(), "packet {i}");
        assert_eq!(row[2].replace(':', ""), hex, "packet {i}: payload");
        // Ethernet 14 + IPv4 20 + UDP 8.
        assert_eq!(row[0], (42 + p.len()).to_string(), "packet {i}: length");
    }
    // The file says nanoseconds: tshark shows nine digits.
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-c", "1", "-T", "fields", "-e", "frame.time_epoch"])
        .output()
        .unwrap();
    let epoch = String::from_utf8(t.stdout).unwrap();
    assert_eq!(
        epoch.trim().split('.').nth(1).map(str::len),
        Some(9),
        "{epoch}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_gives_one_line_and_exit_1() {
    require_lab!();
    let err = one_line_error(
        zcnet()
            .args(["capture", "-i", "no-such-if0", "-c", "1"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("no interface named \"no-such-if0\""), "{err}");
    let err = one_line_error(
        zcnet()
            .args(["capture", "-i", "lo", "-c", "1", "udp", "port"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("bad filter expression \"udp port\""), "{err}");
    let err = one_line_error(
        zcnet()
            .args([
                "capture",
                "-i",
                "lo",
                "-c",
                "1",
                "-w",
                "/nonexistent-dir/x.pcap",
            ])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("cannot write /nonexistent-dir/x.pcap"),
        "{err}"
    );
    if netlab::skip::on_path("setpriv") {
        let err = one_line_error(
            Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--inh-caps=-all",
                ])
                .arg(env!("CARGO_BIN_EXE_zcnet"))
                .args(["capture", "-i", "lo", "-c", "1"])
                .output()
                .unwrap(),
        );
        assert!(err.contains("packet sockets need CAP_NET_RAW"), "{err}");
    }
}
