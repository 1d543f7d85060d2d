//! `zcnet capture` on a veth pair: a pcap file that tshark reads back with the packets sent,
//! and one-line errors for bad input.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TempDir, one_line_error, wait_bounded, zcnet};
use netlab::{Family, Side, VethLab, require_lab, require_program};

const PORT: u16 = 40_000;

#[test]
fn a_pcap_tshark_reads_back_with_the_packets_sent() {
    require_lab!();
    require_program!("tshark");
    if let Err(why) = zcnet::packet::libpcap_available() {
        return netlab::skip::skip(&why);
    }
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
    began(&file);
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
    if zcnet::packet::libpcap_available().is_ok() {
        let err = one_line_error(
            zcnet()
                .args(["capture", "-i", "lo", "-c", "1", "udp", "port"])
                .output()
                .unwrap(),
        );
        assert!(err.contains("bad filter expression \"udp port\""), "{err}");
    }
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

/// Waits until the capture writing `file` has begun: its rings or sockets are open and bound
/// once the file holds the pcap header (a sleep guessed it, and a loaded machine outran it).
fn began(file: &std::path::Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(file).is_ok_and(|m| m.len() >= 24) {
        assert!(
            std::time::Instant::now() < deadline,
            "the capture never began"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads a pcap file (as `zcnet::packet::pcap::Writer` writes it): each record's bytes.
fn pcap_records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24, "no pcap header");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_ne_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    out
}

/// UDP destination port of an Ethernet + IPv4 frame.
fn udp_dport(f: &[u8]) -> Option<u16> {
    (f.len() >= 42 && f[12..14] == [8, 0] && f[23] == 17)
        .then(|| u16::from_be_bytes([f[36], f[37]]))
}

/// Issue 15 item 3: on `lo` each packet passes twice (out and in); tcpdump records it once,
/// and so must `zcnet capture`. In a private namespace, so only this test's packets are seen;
/// no filter expression, so it also runs without libpcap.
#[test]
fn lo_records_each_packet_once() {
    require_lab!();
    let lab = netlab::LoopbackLab::new(None).unwrap();
    let dir = std::env::temp_dir().join(format!("zcnet-capture-lo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lo.pcap");
    let cap = lab
        .ns
        .command(env!("CARGO_BIN_EXE_zcnet"))
        .args(["capture", "-i", "lo", "--seconds", "2", "-w"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    began(&file);
    lab.ns
        .run(|| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..100u32 {
                s.send_to(&i.to_be_bytes(), "127.0.0.1:40999").unwrap();
            }
        })
        .unwrap();
    let out = cap.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Vec<Vec<u8>> = pcap_records(&file)
        .into_iter()
        .filter(|f| udp_dport(f) == Some(40999))
        .collect();
    assert_eq!(ours.len(), 100, "each datagram once, not twice");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 15 item 5: a capture that fails before capturing (no such interface) leaves an
/// existing output file as it was, and so does `recv` when its listen address is taken.
#[test]
fn a_failure_before_the_work_leaves_existing_outputs_alone() {
    let dir = std::env::temp_dir().join(format!("zcnet-clobber-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("precious");
    std::fs::write(&file, b"precious bytes").unwrap();
    let out = zcnet()
        .args(["capture", "-i", "no-such-if0", "-c", "1", "-w"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"precious bytes");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = zcnet()
        .args([
            "recv",
            "--listen",
            &taken.local_addr().unwrap().to_string(),
            "-o",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"precious bytes");
    // No temporary left behind either.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 16 item 1: libpcap is loaded only for a filter expression. Pointed at a library that
/// is not there, a filter gives one line naming the package and exit 2.
#[test]
fn a_filter_without_libpcap_names_the_package() {
    let out = zcnet()
        .env("ZCNET_LIBPCAP", "/nonexistent/libpcap.so.1")
        .args(["capture", "-i", "lo", "-c", "1", "tcp", "port", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("apt install libpcap0.8"), "{err}");
}

/// Issue 22 item 3: `--blocks 100000` allocated until killed, `--fanout 1000` took 8.4 GB before
/// starting. Rings that together exceed half the available memory are refused with one line,
/// before anything is allocated (no privilege is needed to be told so).
#[test]
fn rings_beyond_the_memory_are_refused_before_allocating() {
    for args in [
        &["--block-kib", "65536", "--blocks", "65536"][..],
        &["--fanout", "64", "--block-kib", "65536", "--blocks", "1024"][..],
    ] {
        let start = std::time::Instant::now();
        let out = zcnet()
            .args(["capture", "-i", "lo", "-c", "1"])
            .args(args)
            .output()
            .unwrap();
        let err = one_line_error(out);
        assert!(err.contains("more than half"), "{args:?}: {err}");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "{args:?}: refused only after {:?}",
            start.elapsed()
        );
    }
}

/// Issue 22 item 7: `-c 0` with no traffic waited forever; a count is at least 1 (tcpdump's
/// `-c 0` is an error too).
#[test]
fn a_count_of_zero_is_refused() {
    let out = zcnet()
        .args(["capture", "-i", "lo", "-c", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("-c <COUNT>"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `zcnet capture --xdp` on veth-b with `queues` while `frames` are sent from veth-a through a
/// TX ring (through the qdisc: the flow's hash picks the queue); its stderr and the pcap's
/// records. Checks that it ended well and that the program went with it.
fn xdp_capture(lab: &VethLab, queues: &[&str], frames: &[Vec<u8>]) -> (String, Vec<Vec<u8>>) {
    let dir = std::env::temp_dir().join(format!(
        "zcnet-capture-xdp-{}-{}",
        std::process::id(),
        queues.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.pcap");
    let mut cmd = lab.ns(Side::B).command(env!("CARGO_BIN_EXE_zcnet"));
    cmd.args(["capture", "--xdp"]);
    for q in queues {
        cmd.args(["--queue", q]);
    }
    let child = cmd
        .args(["-i", VethLab::DEV_B, "-c", &frames.len().to_string()])
        .args(["--seconds", "20", "-w"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    began(&file);
    send_frames(lab, frames);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let records = pcap_records(&file);
    let _ = std::fs::remove_dir_all(&dir);
    // The program went with the capture.
    let link = lab
        .ns(Side::B)
        .ip(&["-d", "link", "show", "dev", VethLab::DEV_B])
        .unwrap();
    assert!(!link.contains("prog/xdp"), "{link}");
    (err, records)
}

#[test]
fn xdp_capture_writes_every_frame_sent() {
    require_lab!();
    let lab = VethLab::quiet(None).unwrap();
    let n = 500usize;
    // Raw frames of an experimental EtherType: nothing in the stack answers them.
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut f = netlab::pattern::random_bytes(60 + (i * 13) % 1400, i as u64 + 1);
            f[..12].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9]);
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            f
        })
        .collect();
    let (err, records) = xdp_capture(&lab, &[], &frames);
    assert!(err.contains("AF_XDP on veth-b queue 0 (copy mode"), "{err}");
    assert!(
        err.contains(&format!("{n} packets captured, 0 dropped")),
        "{err}"
    );
    assert_eq!(records.len(), n);
    for (i, (r, f)) in records.iter().zip(&frames).enumerate() {
        assert_eq!(r, f, "frame {i}");
    }
}

#[test]
fn xdp_capture_refuses_what_it_cannot_do() {
    // A filter (it needs the ring), fanout, an unknown interface: one line each.
    let err = one_line_error(
        zcnet()
            .args(["capture", "--xdp", "-i", "lo", "-w", "/dev/null", "udp"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("a filter expression needs the packet ring"),
        "{err}"
    );
    let out = zcnet()
        .args(["capture", "--xdp", "--fanout", "2", "-i", "lo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = one_line_error(
        zcnet()
            .args(["capture", "--xdp", "-i", "zcnet-none0", "-w", "/dev/null"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("no interface named \"zcnet-none0\""), "{err}");
}

#[test]
fn xdp_capture_of_a_queue_the_device_lacks_says_so() {
    // ethtool cannot tell loopback's queues: the bind's EINVAL said only "Invalid argument".
    // A private namespace's lo, never the host's.
    require_lab!();
    let ns = netlab::Netns::new().unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    let err = one_line_error(
        ns.command(env!("CARGO_BIN_EXE_zcnet"))
            .args([
                "capture",
                "--xdp",
                "--queue",
                "1",
                "-i",
                "lo",
                "-w",
                "/dev/null",
            ])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("queue 1 of lo: bind refused") && err.contains("fewer queues"),
        "{err}"
    );
    let link = ns.ip(&["-d", "link", "show", "dev", "lo"]).unwrap();
    assert!(!link.contains("prog/xdp"), "nothing left attached: {link}");
}

#[test]
fn xdp_capture_of_two_queues_writes_every_frame_once() {
    // `--queue` repeated: one socket per queue on one shared UMEM, one pcap of both. Frames of
    // 64 flows reach both queues (a frame on a queue without a socket would go to the stack,
    // and the count would not be reached).
    require_lab!();
    let lab = VethLab::multiqueue(2).unwrap();
    let n = 1000usize;
    let frames = netlab::frame::udp_flows(n, 7);
    let (err, mut records) = xdp_capture(&lab, &["0", "1"], &frames);
    assert!(
        err.contains("AF_XDP on veth-b queue 0, 1 (copy mode"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{n} packets captured, 0 dropped")),
        "{err}"
    );
    // Every frame once, intact (the queues interleave: compared by index).
    assert_eq!(records.len(), n);
    records.sort_by_key(|r| netlab::frame::flow_index(r));
    for (i, (r, f)) in records.iter().zip(&frames).enumerate() {
        assert_eq!(r, f, "frame {i}");
    }
    // A queue given twice: one line, before anything is attached.
    let err = one_line_error(
        lab.ns(Side::B)
            .command(env!("CARGO_BIN_EXE_zcnet"))
            .args(["capture", "--xdp", "--queue", "1", "--queue", "1"])
            .args(["-i", VethLab::DEV_B, "-w", "/dev/null"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("--queue 1 is given twice"), "{err}");
}

/// Sends `frames` out of veth-a through a TX ring.
fn send_frames(lab: &VethLab, frames: &[Vec<u8>]) {
    let sent = frames.to_vec();
    lab.ns(Side::A)
        .run(move || {
            let mut tx = zcnet::packet::TxRing::new(VethLab::DEV_A, Default::default()).unwrap();
            for f in &sent {
                while !tx.push(f).unwrap() {
                    tx.flush().unwrap();
                }
            }
            tx.flush().unwrap();
        })
        .unwrap();
}

/// Checks that `path` is a whole pcap file (a header, then records that end where the file
/// ends) and returns the records that are among `sent`, sorted by their index.
fn whole_pcap_of(path: &std::path::Path, sent: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert!(b.len() >= 24, "{} bytes: no pcap header", b.len());
    assert_eq!(
        &b[..4],
        &0xa1b2_3c4du32.to_ne_bytes(),
        "the nanosecond pcap magic"
    );
    let mut at = 24;
    while at < b.len() {
        assert!(at + 16 <= b.len(), "a record header cut at {at}");
        let caplen = u32::from_ne_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        assert!(at + 16 + caplen <= b.len(), "a record cut at {at}");
        at += 16 + caplen;
    }
    let mut ours: Vec<Vec<u8>> = pcap_records(path)
        .into_iter()
        .filter(|r| sent.contains(r))
        .collect();
    ours.sort_by_key(|r| netlab::frame::flow_index(r));
    ours
}

/// Issue 35 item 10: `capture` went on silently (18 s and counting) after its interface was
/// deleted. It now ends by itself, with the pcap of what it captured whole, one error line
/// naming the interface, exit 1: the packet ring, a fanout of two rings, and AF_XDP. A ring
/// also ends when its interface goes down (its socket says `ENETDOWN`), as tcpdump does.
#[test]
fn a_deleted_interface_ends_the_capture_with_one_line_and_a_whole_pcap() {
    require_lab!();
    let frames = netlab::frame::udp_flows(40, 35);
    let (del, down) = (
        ["link", "del", VethLab::DEV_B],
        ["link", "set", VethLab::DEV_B, "down"],
    );
    for (mode, how, says) in [
        (&[][..], &del[..], "was deleted"),
        (&["--fanout", "2"], &del, "was deleted"),
        (&["--xdp"], &del, "was deleted"),
        (&[], &down, "went down"),
    ] {
        let lab = VethLab::quiet(None).unwrap();
        let dir = TempDir::new("capture-gone");
        let file = dir.join("c.pcap");
        let child = lab
            .ns(Side::B)
            .command(env!("CARGO_BIN_EXE_zcnet"))
            .args(["capture", "-i", VethLab::DEV_B, "--seconds", "60", "-w"])
            .arg(&file)
            .args(mode)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Frames are sent until all of them are in the file (the capture starts in a moment;
        // sent before, they are not seen), then the interface goes.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            send_frames(&lab, &frames);
            std::thread::sleep(Duration::from_millis(100));
            // The file may be caught between its creation and its header.
            let got = std::fs::metadata(&file).is_ok_and(|m| m.len() >= 24) && {
                let mut seen: Vec<Vec<u8>> = pcap_records(&file)
                    .into_iter()
                    .filter(|r| frames.contains(r))
                    .collect();
                seen.sort();
                seen.dedup();
                seen.len() == frames.len()
            };
            if got {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{mode:?}: never captured"
            );
        }
        lab.ns(Side::B).ip(how).unwrap();
        let out = wait_bounded(child, 15);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode:?}: {err}");
        let last = err.trim_end().lines().last().unwrap_or("");
        assert!(
            last.starts_with(&format!("zcnet: error: the interface veth-b {says}")),
            "{mode:?}: {err}"
        );
        assert_eq!(err.matches("zcnet: error").count(), 1, "{mode:?}: {err}");
        common::assert_no_repeat(last);
        let ours = whole_pcap_of(&file, &frames);
        let mut distinct = ours.clone();
        distinct.dedup();
        assert_eq!(distinct, frames, "{mode:?}: every frame sent, intact");
    }
}

/// Issue 35 item 14: SIGINT or SIGTERM before the first packet left a 0-byte file (the pcap
/// header was still in a buffer), which tcpdump reads as "truncated dump file". A signal now
/// ends a capture as it ends tcpdump: the pcap whole, the summary printed, exit 0. Sent at any
/// moment of the start, it never leaves a partial file or a temporary.
#[test]
fn a_signal_ends_a_capture_with_a_whole_pcap() {
    use nix::sys::signal::{Signal, kill};
    use std::os::unix::process::ExitStatusExt;
    require_lab!();
    let lab = netlab::LoopbackLab::new(None).unwrap();
    let dir = TempDir::new("capture-signal");
    let file = dir.join("c.pcap");
    let spawn = |file: &std::path::Path| {
        let _ = std::fs::remove_file(file);
        let child = lab
            .ns
            .command(env!("CARGO_BIN_EXE_zcnet"))
            .args(["capture", "-i", "lo", "--seconds", "60", "-w"])
            .arg(file)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        (child, pid)
    };
    let header = |file: &std::path::Path| {
        let b = std::fs::read(file).unwrap();
        assert_eq!(b.len(), 24, "a pcap header and no record");
        assert_eq!(&b[..4], &0xa1b2_3c4du32.to_ne_bytes());
    };
    // A signal ignored when the command starts stays ignored, as for tcpdump (`nohup` ignores
    // SIGHUP, and the children of this test inherit that): such a signal cannot end it.
    let ignored = common::ignored_here();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        if ignored.contains(&sig) {
            netlab::skip::skip(&format!(
                "{sig} is ignored by this test's process (nohup?), so by the capture it starts"
            ));
            continue;
        }
        let (child, pid) = spawn(&file);
        began(&file);
        kill(pid, sig).unwrap();
        let out = wait_bounded(child, 10);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{sig}: {err}");
        assert!(err.contains("0 packets captured"), "{sig}: {err}");
        header(&file);
    }
    for delay_ms in [0, 1, 3, 10, 30] {
        if ignored.contains(&Signal::SIGINT) {
            break;
        }
        let (child, pid) = spawn(&file);
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill(pid, Signal::SIGINT).unwrap();
        let out = wait_bounded(child, 10);
        if out.status.signal() == Some(Signal::SIGINT as i32) {
            // Ended before the file was opened.
            assert!(!file.exists(), "{delay_ms} ms");
        } else {
            assert_eq!(out.status.code(), Some(0), "{delay_ms} ms: {out:?}");
            header(&file);
        }
        assert!(dir.names().len() <= 1, "{delay_ms} ms: {:?}", dir.names());
    }
}
