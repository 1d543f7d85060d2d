//! `zcnet::packet` on a real veth pair: RX ring contents and filter, blocks handed back, drops
//! under overload, TX ring frames received intact by the other namespace; the copying packet
//! socket (one `recvfrom` per frame) the benches compare the ring with.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use netlab::frame::udp_v4;
use netlab::{Family, Side, VethLab, require_lab};
use zcnet::packet::{Filter, RxConfig, RxRing, Socket, TxConfig, TxRing};

const PORT: u16 = 40_000;

fn lab() -> VethLab {
    VethLab::new(None).expect("veth lab")
}

fn b_ip() -> IpAddr {
    VethLab::addr(Side::B, Family::V4)
}

/// A UDP socket in namespace A sending to B at a port nobody listens on (unconnected, so
/// the ICMP errors that come back are not reported).
struct Sender(UdpSocket, SocketAddr);

impl Sender {
    fn send(&self, b: &[u8]) -> std::io::Result<usize> {
        self.0.send_to(b, self.1)
    }
}

fn sender(lab: &VethLab, port: u16) -> Sender {
    let a = VethLab::addr(Side::A, Family::V4);
    let s = lab
        .ns(Side::A)
        .run(move || UdpSocket::bind(SocketAddr::new(a, 0)))
        .unwrap()
        .unwrap();
    Sender(s, SocketAddr::new(b_ip(), port))
}

fn ring(lab: &VethLab, config: RxConfig) -> RxRing {
    lab.ns(Side::B)
        .run(move || RxRing::new(VethLab::DEV_B, config))
        .unwrap()
        .unwrap()
}

/// The UDP payload of an Ethernet + IPv4 frame, if it is one to `port`.
fn udp_payload(frame: &[u8], port: u16) -> Option<&[u8]> {
    if frame.len() < 42 || frame[12..14] != [0x08, 0x00] || frame[23] != 17 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let udp = 14 + ihl;
    let dport = u16::from_be_bytes([*frame.get(udp + 2)?, *frame.get(udp + 3)?]);
    (dport == port).then(|| frame.get(udp + 8..)).flatten()
}

/// Reads blocks until `want` payloads to `port` arrived or `limit` passed; returns them and
/// the number of frames to other ports seen.
fn collect(ring: &mut RxRing, port: u16, want: usize, limit: Duration) -> (Vec<Vec<u8>>, usize) {
    let (mut got, mut other) = (Vec::new(), 0);
    let end = Instant::now() + limit;
    while got.len() < want && Instant::now() < end {
        let Some(block) = ring.next_block(Some(Duration::from_millis(100))).unwrap() else {
            continue;
        };
        for f in block.frames() {
            assert!(f.sec > 0, "frame without a timestamp");
            assert!(f.data.len() as u32 <= f.len);
            match udp_payload(f.data, port) {
                Some(p) => got.push(p.to_vec()),
                None => other += 1,
            }
        }
    }
    (got, other)
}

#[test]
fn rx_ring_captures_each_datagram_once_and_the_filter_keeps_one_port() {
    require_lab!();
    if let Err(why) = zcnet::packet::libpcap_available() {
        return netlab::skip::skip(&why);
    }
    let lab = lab();
    let config = RxConfig {
        filter: Some(Filter::compile(&format!("udp dst port {PORT}"), 65535).unwrap()),
        ..RxConfig::default()
    };
    let mut ring = ring(&lab, config);
    let kept = sender(&lab, PORT);
    let filtered = sender(&lab, PORT + 1);
    for i in 0..500u32 {
        kept.send(format!("datagram {i}").as_bytes()).unwrap();
        filtered.send(b"not this one").unwrap();
    }
    let (got, other) = collect(&mut ring, PORT, 500, Duration::from_secs(5));
    assert_eq!(other, 0, "frames the filter should have dropped");
    let set: HashSet<_> = got.iter().cloned().collect();
    assert_eq!(got.len(), 500, "captured {} of 500", got.len());
    assert_eq!(set.len(), 500, "a datagram captured twice");
    for i in 0..500u32 {
        assert!(
            set.contains(format!("datagram {i}").as_bytes()),
            "datagram {i} missing"
        );
    }
    assert_eq!(ring.statistics().unwrap().drops, 0);
}

#[test]
fn blocks_go_back_to_the_kernel_when_dropped() {
    require_lab!();
    if let Err(why) = zcnet::packet::libpcap_available() {
        return netlab::skip::skip(&why);
    }
    let lab = lab();
    // Four one-page blocks: 100 rounds of 20 datagrams need many times more blocks than that.
    let config = RxConfig {
        block_size: 4096,
        block_count: 4,
        frame_size: 2048,
        retire_timeout: Duration::from_millis(2),
        filter: Some(Filter::compile(&format!("udp dst port {PORT}"), 65535).unwrap()),
        ignore_outgoing: false,
    };
    let mut ring = ring(&lab, config);
    let s = sender(&lab, PORT);
    let mut seen = 0;
    let mut blocks = 0;
    let mut last_seq = 0;
    for round in 0..100u32 {
        for i in 0..20u32 {
            s.send(format!("{round}/{i}").as_bytes()).unwrap();
        }
        let end = Instant::now() + Duration::from_secs(2);
        let mut this_round = 0;
        while this_round < 20 && Instant::now() < end {
            let Some(block) = ring.next_block(Some(Duration::from_millis(100))).unwrap() else {
                continue;
            };
            assert!(block.info().seq > last_seq, "block sequence went backwards");
            last_seq = block.info().seq;
            blocks += 1;
            this_round += block
                .frames()
                .filter(|f| udp_payload(f.data, PORT).is_some())
                .count();
        }
        assert_eq!(this_round, 20, "round {round}: the ring stalled");
        seen += this_round;
    }
    assert_eq!(seen, 2000);
    assert!(blocks >= 100, "only {blocks} blocks for 100 rounds");
    assert_eq!(ring.statistics().unwrap().drops, 0);
}

#[test]
fn drops_are_reported_under_overload() {
    require_lab!();
    let lab = lab();
    let config = RxConfig {
        block_size: 4096,
        block_count: 2,
        frame_size: 2048,
        retire_timeout: Duration::from_millis(2),
        filter: None,
        ignore_outgoing: false,
    };
    let mut ring = ring(&lab, config);
    let s = sender(&lab, PORT);
    // Nobody reads while 2000 datagrams arrive: two blocks hold a few dozen.
    for i in 0..2000u32 {
        s.send(&i.to_be_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let st = ring.statistics().unwrap();
    assert!(st.drops > 1000, "{st:?}");
    assert!(st.packets >= 2000, "{st:?}");
    assert!(st.freezes >= 1, "{st:?}");
    // After reading what the ring holds, capture goes on.
    while ring
        .next_block(Some(Duration::from_millis(20)))
        .unwrap()
        .is_some()
    {}
    s.send(b"after").unwrap();
    let (got, _) = collect(&mut ring, PORT, 1, Duration::from_secs(2));
    assert!(got.iter().any(|p| p == b"after"));
}

#[test]
fn tx_ring_frames_arrive_intact_in_the_other_namespace() {
    require_lab!();
    if let Err(why) = zcnet::packet::libpcap_available() {
        return netlab::skip::skip(&why);
    }
    let lab = lab();
    let (IpAddr::V4(a), IpAddr::V4(b)) = (VethLab::addr(Side::A, Family::V4), b_ip()) else {
        unreachable!()
    };
    let dst = lab.ns(Side::B).mac(VethLab::DEV_B).unwrap();
    let src = lab.ns(Side::A).mac(VethLab::DEV_A).unwrap();
    // Namespace B receives with a ring of its own, filtered to the port: whole frames compared.
    let config = RxConfig {
        filter: Some(Filter::compile(&format!("udp dst port {PORT}"), 65535).unwrap()),
        ..RxConfig::default()
    };
    let mut rx = ring(&lab, config);
    let mut tx = lab
        .ns(Side::A)
        .run(|| {
            let config = TxConfig {
                frame_count: 64,
                ..TxConfig::default()
            };
            TxRing::new(VethLab::DEV_A, config)
        })
        .unwrap()
        .unwrap();
    let frame = |i: u32| {
        let payload: Vec<u8> = (0..(i % 1000) + 1).map(|j| (i + j) as u8).collect();
        udp_v4(dst, src, a.octets(), b.octets(), (40_001, PORT), &payload)
    };
    let total = 300u32;
    let mut sent = 0u32;
    while sent < total {
        // Fill the ring (64 frames), then one kick.
        while sent < total && tx.push(&frame(sent)).unwrap() {
            sent += 1;
        }
        assert!(tx.flush().unwrap() > 0);
    }
    assert_eq!(tx.refused(), 0);
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < total as usize && Instant::now() < end {
        if let Some(block) = rx.next_block(Some(Duration::from_millis(100))).unwrap() {
            got.extend(block.frames().map(|f| f.data.to_vec()));
        }
    }
    assert_eq!(got.len(), total as usize);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(i as u32), "frame {i}");
    }
}

fn socket(lab: &VethLab, rcvbuf: Option<usize>) -> Socket {
    lab.ns(Side::B)
        .run(move || Socket::new(VethLab::DEV_B, rcvbuf))
        .unwrap()
        .unwrap()
}

#[test]
fn the_copying_socket_reads_each_frame_once_and_counts_its_drops() {
    require_lab!();
    let lab = lab();
    let mut sock = socket(&lab, Some(4 << 20));
    let s = sender(&lab, PORT);
    let payload = |i: u32| -> Vec<u8> { (0..(i % 1400) + 1).map(|j| (i ^ j) as u8).collect() };
    let total = 500u32;
    for i in 0..total {
        s.send(&payload(i * 7)).unwrap();
    }
    let mut buf = vec![0u8; 2048];
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < total as usize && Instant::now() < end {
        let Some(r) = sock
            .recv(&mut buf, Some(Duration::from_millis(100)))
            .unwrap()
        else {
            continue;
        };
        assert_eq!(
            r.len, r.original,
            "a 2048-byte buffer holds a whole 1500-MTU frame"
        );
        if let Some(p) = udp_payload(&buf[..r.len], PORT) {
            got.push(p.to_vec());
        }
    }
    assert_eq!(got.len(), total as usize);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p, &payload(i as u32 * 7), "datagram {i}");
    }
    // A short buffer gets the head of the frame and the frame's real length.
    s.send(&[0x5a; 1000]).unwrap();
    let mut short = [0u8; 60];
    let r = loop {
        let r = sock
            .recv(&mut short, Some(Duration::from_secs(2)))
            .unwrap()
            .expect("the datagram arrives");
        if udp_payload(&short, PORT).is_some() {
            break r;
        }
    };
    assert_eq!((r.len, r.original), (60, 1042));
    let st = sock.statistics().unwrap();
    assert_eq!(st.drops, 0, "{st:?}");
    assert!(st.packets > u64::from(total), "{st:?}");
    // Nothing waiting: the timeout, not an error. (On B's `lo`, which nobody uses: veth-b
    // carries the namespace's own IPv6 neighbour discovery at any moment.)
    let mut quiet = lab
        .ns(Side::B)
        .run(|| Socket::new("lo", None))
        .unwrap()
        .unwrap();
    assert_eq!(
        quiet
            .recv(&mut buf, Some(Duration::from_millis(20)))
            .unwrap(),
        None
    );

    // A small queue nobody reads drops, and says so.
    let mut small = socket(&lab, Some(64 << 10));
    for i in 0..2000u32 {
        s.send(&i.to_be_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let st = small.statistics().unwrap();
    assert!(st.drops > 1000, "{st:?}");
    assert!(st.packets >= 2000, "{st:?}");
    assert_eq!(st.freezes, 0, "{st:?}");
}

#[test]
fn bad_input_gives_clear_errors() {
    require_lab!();
    if let Err(why) = zcnet::packet::libpcap_available() {
        return netlab::skip::skip(&why);
    }
    let e = RxRing::new("no-such-if0", RxConfig::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no interface named \"no-such-if0\" in this network namespace"
    );
    let e = Socket::new("no-such-if0", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no interface named \"no-such-if0\" in this network namespace"
    );
    let e = Filter::compile("udp port", 65535).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("bad filter expression \"udp port\": "),
        "{e}"
    );
    let e = RxRing::new(
        "lo",
        RxConfig {
            block_size: 5000,
            ..RxConfig::default()
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("not a multiple of the page size"),
        "{e}"
    );
}

/// `Capture`, the one-shape entry: the same 300 datagrams through the ring (read in place)
/// and through the copying socket (copied), the counters saying which.
#[test]
fn capture_delivers_the_same_frames_in_both_modes_and_counts_how() {
    use zcnet::ZeroCopyCounters;
    use zcnet::packet::{Capture, Config, Mode};
    require_lab!();
    let lab = lab();
    for mode in [Mode::ZeroCopy, Mode::Copy] {
        let port = PORT + 7;
        let config = Config {
            mode,
            ring: RxConfig {
                retire_timeout: Duration::from_millis(10),
                ..RxConfig::default()
            },
            rcvbuf: Some(4 << 20),
        };
        let mut cap = lab
            .ns(Side::B)
            .run(move || Capture::new(VethLab::DEV_B, config))
            .unwrap()
            .unwrap();
        assert_eq!(cap.mode(), mode);
        let tx = sender(&lab, port);
        for i in 0..300u32 {
            tx.send(&i.to_be_bytes().repeat(25)).unwrap();
        }
        let mut got = HashSet::new();
        let end = Instant::now() + Duration::from_secs(10);
        while got.len() < 300 && Instant::now() < end {
            cap.recv_frames(Some(Duration::from_millis(100)), |f| {
                if let Some(p) = udp_payload(f.data, port) {
                    assert_eq!(p.len(), 100);
                    assert!(got.insert(p[..4].to_vec()), "{mode:?}: a datagram twice");
                }
            })
            .unwrap();
        }
        assert_eq!(got.len(), 300, "{mode:?}");
        let c = cap.counters();
        assert!(c.frames >= 300);
        match mode {
            Mode::ZeroCopy => {
                assert_eq!(c.copied_bytes, 0);
                assert_eq!(c.zero_copy_share(), Some(1.0));
                assert!(c.calls < c.frames, "a block carries many frames: {c:?}");
            }
            _ => {
                assert_eq!(c.ring_bytes, 0);
                assert_eq!(c.zero_copy_share(), Some(0.0));
                assert_eq!(c.calls, c.frames, "one recvfrom per frame");
            }
        }
    }
}
