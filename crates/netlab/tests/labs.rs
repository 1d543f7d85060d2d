//! The labs, built for real: they need root and iproute2, and skip visibly without them.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netlab::{Family, LoopbackLab, Netns, Side, SinkLab, VethLab, require_lab};

fn host_links() -> BTreeSet<String> {
    let out = netlab::ip(&["-j", "link", "show"]).expect("ip link");
    let v: serde_json::Value = serde_json::from_str(&out).expect("ip -j output");
    v.as_array()
        .expect("array")
        .iter()
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn ns_exists(name: &str) -> bool {
    let listed = netlab::ip(&["netns", "list"]).unwrap_or_default();
    std::path::Path::new("/run/netns").join(name).exists()
        || listed
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name))
}

const PATTERN_LEN: usize = (1 << 20) + 3;

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 12)) as u8
}

/// Sends a pattern over TCP from a thread in `client_ns` to a listener in `server_ns` and UDP
/// datagrams the same way; checks every byte.
fn exchange(server_ns: &Netns, client_ns: &Netns, server: std::net::IpAddr) {
    let listener = server_ns
        .run(move || TcpListener::bind((server, 0)).expect("bind tcp"))
        .unwrap();
    let udp_rx = server_ns
        .run(move || UdpSocket::bind((server, 0)).expect("bind udp"))
        .unwrap();
    let tcp_addr = listener.local_addr().unwrap();
    let udp_addr = udp_rx.local_addr().unwrap();
    udp_rx
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let sender = client_ns
        .spawn(move || {
            let mut s = TcpStream::connect(tcp_addr).expect("connect");
            let data: Vec<u8> = (0..PATTERN_LEN).map(pattern).collect();
            s.write_all(&data).expect("write");
            let u = UdpSocket::bind(SocketAddr::new(
                if tcp_addr.is_ipv4() {
                    [0, 0, 0, 0].into()
                } else {
                    std::net::Ipv6Addr::UNSPECIFIED.into()
                },
                0,
            ))
            .unwrap();
            u.send_to(b"datagram", udp_addr).expect("udp send");
        })
        .unwrap();
    // The listener was made in `server_ns`; accepting from this thread keeps that namespace.
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).unwrap();
    sender.join().unwrap();
    assert_eq!(got.len(), PATTERN_LEN);
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "TCP bytes differ"
    );
    let mut buf = [0u8; 64];
    let (n, _) = udp_rx.recv_from(&mut buf).expect("udp datagram");
    assert_eq!(&buf[..n], b"datagram");
}

#[test]
fn loopback_lab_carries_tcp_and_udp_both_families() {
    require_lab!();
    let lab = LoopbackLab::new(Some(61512)).unwrap();
    assert_eq!(
        lab.ns.sysctl("net.ipv4.tcp_congestion_control").unwrap(),
        "reno"
    );
    let lo = lab.ns.ip(&["-j", "link", "show", "lo"]).unwrap();
    assert!(lo.contains("\"mtu\":61512"), "{lo}");
    for family in Family::ALL {
        exchange(&lab.ns, &lab.ns, lab.addr(family));
    }
}

#[test]
fn veth_lab_carries_tcp_and_udp_both_families() {
    require_lab!();
    let lab = VethLab::new(None).unwrap();
    for ns in [&lab.a, &lab.b] {
        assert_eq!(
            ns.sysctl("net.ipv4.tcp_congestion_control").unwrap(),
            "reno"
        );
    }
    for family in Family::ALL {
        exchange(&lab.b, &lab.a, VethLab::addr(Side::B, family));
    }
}

#[test]
fn sink_drops_what_is_sent_and_zerocopy_completes_uncopied() {
    require_lab!();
    let lab = SinkLab::new().unwrap();
    for family in Family::ALL {
        let before = lab.dropped().unwrap();
        let target = SocketAddr::new(SinkLab::target(family), 9);
        lab.ns
            .run(move || {
                let bind: SocketAddr = match family {
                    Family::V4 => "0.0.0.0:0".parse().unwrap(),
                    Family::V6 => "[::]:0".parse().unwrap(),
                };
                let s = UdpSocket::bind(bind).unwrap();
                for _ in 0..100 {
                    s.send_to(&[7u8; 1000], target).expect("send into the sink");
                }
            })
            .unwrap();
        let dropped = lab.dropped().unwrap() - before;
        assert_eq!(
            dropped, 100,
            "{family:?}: the sink must drop exactly what was sent"
        );

        // A 64000-byte MSG_ZEROCOPY datagram into the sink completes without a copy.
        let completion = lab
            .ns
            .run(move || zcnet::msg_zerocopy::udp_send_once(target, 64000, Duration::from_secs(5)))
            .unwrap()
            .expect("zero-copy send into the sink");
        assert_eq!((completion.first, completion.last), (0, 0));
        assert!(!completion.copied, "{family:?}: completion flagged copied");
    }
}

#[test]
fn fifty_cycles_leave_no_namespace_or_device() {
    require_lab!();
    let links_before = host_links();
    let mut names = Vec::new();
    for i in 0..50 {
        match i % 3 {
            0 => {
                let lab = LoopbackLab::new(None).unwrap();
                names.push(lab.ns.name().to_owned());
            }
            1 => {
                let lab = VethLab::new(None).unwrap();
                names.push(lab.a.name().to_owned());
                names.push(lab.b.name().to_owned());
            }
            _ => {
                let lab = SinkLab::new().unwrap();
                names.push(lab.ns.name().to_owned());
            }
        }
    }
    let left: Vec<_> = names.iter().filter(|n| ns_exists(n)).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    assert_eq!(host_links(), links_before, "host interfaces changed");
}

#[test]
fn panic_inside_a_lab_leaves_nothing_behind() {
    require_lab!();
    let links_before = host_links();
    let names = Arc::new(Mutex::new(Vec::new()));
    let seen = names.clone();
    let outcome = std::panic::catch_unwind(move || {
        let lab = VethLab::new(None).unwrap();
        seen.lock()
            .unwrap()
            .extend([lab.a.name().to_owned(), lab.b.name().to_owned()]);
        // A panic on a thread inside the namespace comes back through `run`.
        lab.a.run(|| panic!("boom inside the namespace")).unwrap();
    });
    assert!(outcome.is_err(), "the panic must propagate");
    let names = names.lock().unwrap();
    assert_eq!(names.len(), 2);
    for n in names.iter() {
        assert!(!ns_exists(n), "{n} left behind after a panic");
    }
    assert_eq!(host_links(), links_before);
}

#[test]
fn threads_inside_a_namespace_see_only_its_devices() {
    require_lab!();
    let lab = SinkLab::new().unwrap();
    // Inside: lo and the sink. The host's devices (eth0, ...) are not there.
    let inside = lab
        .ns
        .run(|| std::net::UdpSocket::bind("198.19.0.1:0").map(|s| s.local_addr().unwrap()))
        .unwrap();
    assert!(inside.is_ok(), "the sink's address is bindable inside");
    let outside = std::net::UdpSocket::bind("198.19.0.1:0");
    assert!(
        outside.is_err(),
        "the lab's address must not exist on the host"
    );
}

/// The sink device sends nothing of its own: without the lab's sysctls it sent two router
/// solicitations in the seconds after it came up (after its link-local address's DAD), which
/// it dropped and counted like a test's datagrams (201 for 200, once in 200 runs).
#[test]
fn the_sink_drops_nothing_it_was_not_sent() {
    require_lab!();
    let lab = SinkLab::new().unwrap();
    // A new device: every drop is counted from its start. The solicitations went out within 1 s
    // and about 4 s after it came up.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(lab.dropped().unwrap(), 0);
}

/// Another `ip netns add` while a lab lives (another tool, another test run) must not hide the
/// lab's namespace from its own removal: `/run/netns` was not a mount point of its own, so
/// iproute2 bind-mounted it over itself, on top of the lab's namespace mount, and the lab's
/// `ip netns del` failed ("Device or resource busy"), leaving it behind.
#[test]
fn a_lab_namespace_goes_even_if_ip_netns_add_ran_meanwhile() {
    require_lab!();
    let ns = netlab::Netns::new().unwrap();
    let path = std::path::PathBuf::from("/run/netns").join(ns.name());
    let other = format!("zcnet-{}-iproute2", std::process::id());
    let run = |args: &[&str]| {
        let ok = std::process::Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip {args:?}");
    };
    run(&["netns", "add", &other]);
    run(&["netns", "del", &other]);
    assert!(path.exists());
    drop(ns);
    assert!(!path.exists(), "{} is left behind", path.display());
}
