//! UDP GSO trains (`UDP_SEGMENT`) from every UDP sender, against real sockets: over veth to a
//! `UDP_GRO` receiver that checks every datagram's bytes and size, with the copied share as the
//! kernel reports it (veth delivery copies); into the sink, where trains go truly zero-copy; and
//! the refusals (too many segments, a TCP socket) with their reasons.

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use netlab::{Family, Side, SinkLab, VethLab, require_lab};
use zcnet::ZeroCopyCounters as _;
use zcnet::auto::Segmentation;
use zcnet::msg_zerocopy::{self, CopiedPolicy, ZeroCopyError, ZeroCopySender};
use zcnet::udp_gso::{self, Segment};
use zcnet::uring::{self, Pool, UringSender};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Datagram header: train number and datagram number in it.
const HEAD: usize = 8;

/// Train `t` of `n` datagrams of `seg` bytes, the last `last` bytes: each datagram starts with
/// (t, k) and is filled with a byte of both, so a datagram cut wrong or mixed up shows.
fn train(t: u32, seg: usize, n: usize, last: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for k in 0..n {
        let len = if k + 1 == n { last } else { seg };
        let start = v.len();
        v.resize(start + len, (t as u8).wrapping_mul(31) ^ (k as u8));
        v[start..start + 4].copy_from_slice(&t.to_le_bytes());
        v[start + 4..start + 8].copy_from_slice(&(k as u32).to_le_bytes());
    }
    v
}

/// The shape of train `t`: 1 to 42 datagrams, the last one 8 bytes to a whole segment.
fn shape(t: u32, seg: usize) -> (usize, usize) {
    let n = [1usize, 2, 8, 42, 17, 5][t as usize % 6];
    let last = HEAD + (t as usize * 97) % (seg - HEAD + 1);
    (n, last)
}

/// Checks one received datagram against what train `t` sent.
fn check(d: &[u8], seg: usize) -> Result<(u32, u32), String> {
    if d.len() < HEAD {
        return Err(format!("a {}-byte datagram", d.len()));
    }
    let t = u32::from_le_bytes(d[..4].try_into().unwrap());
    let k = u32::from_le_bytes(d[4..8].try_into().unwrap());
    let (n, last) = shape(t, seg);
    let want = train(t, seg, n, last);
    let at = k as usize * seg;
    let len = if k as usize + 1 == n { last } else { seg };
    if k as usize >= n || d.len() != len || d != &want[at..at + len] {
        return Err(format!(
            "train {t} datagram {k}: {} bytes, wanted {len} of its bytes",
            d.len()
        ));
    }
    Ok((t, k))
}

/// What the receiver says of each datagram: (train, datagram) or what is wrong.
type Datagrams = mpsc::Receiver<Result<(u32, u32), String>>;

/// A `UDP_GRO` receiver in `lab`'s namespace B: reads trains, cuts them with
/// [`udp_gso::datagrams`], checks each datagram, and reports the datagrams of each train.
fn receiver(lab: &VethLab, seg: usize) -> (SocketAddr, Datagrams) {
    let to = SocketAddr::new(VethLab::addr(Side::B, Family::V4), 0);
    let rx = lab
        .ns(Side::B)
        .run(move || UdpSocket::bind(to))
        .unwrap()
        .unwrap();
    udp_gso::enable_gro(&rx).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let addr = rx.local_addr().unwrap();
    let (tx, got) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(t) = udp_gso::recv_train(&rx, &mut buf, 0) {
            assert!(!t.truncated);
            for d in t.datagrams(&buf) {
                if tx.send(check(d, seg)).is_err() {
                    return;
                }
            }
        }
    });
    (addr, got)
}

/// Waits for every datagram of train `t` (sent alone: nothing else is in flight).
fn await_train(got: &Datagrams, t: u32, seg: usize, what: &str) {
    let (n, _) = shape(t, seg);
    let mut seen = vec![false; n];
    let deadline = Instant::now() + TIMEOUT;
    while seen.iter().any(|s| !s) {
        let left = deadline.saturating_duration_since(Instant::now());
        match got.recv_timeout(left) {
            Ok(Ok((tt, k))) => {
                assert_eq!(
                    tt, t,
                    "{what}: a datagram of train {tt} while train {t} was due"
                );
                assert!(!seen[k as usize], "{what}: train {t} datagram {k} twice");
                seen[k as usize] = true;
            }
            Ok(Err(why)) => panic!("{what}: {why}"),
            Err(_) => panic!("{what}: train {t} incomplete: {seen:?}"),
        }
    }
}

/// One sender under test.
enum Tx {
    Msg(ZeroCopySender<UdpSocket, Vec<u8>>),
    Uring(UringSender<UdpSocket, Vec<u8>>),
    Fixed(UringSender<UdpSocket, uring::PoolBuf>, Pool),
}

impl Tx {
    fn send(&mut self, data: Vec<u8>) {
        match self {
            Tx::Msg(tx) => tx.send(data).unwrap(),
            Tx::Uring(tx) => {
                tx.send(data).unwrap();
                tx.flush().unwrap();
            }
            Tx::Fixed(tx, pool) => {
                let mut b = loop {
                    if let Some(b) = pool.acquire() {
                        break b;
                    }
                    tx.reap().unwrap();
                    tx.returned().for_each(drop);
                };
                b.set_len(data.len());
                b.copy_from_slice(&data);
                tx.send(b).unwrap();
                tx.flush().unwrap();
            }
        }
    }

    /// Waits for every loan; (zero-copy calls completed, of them flagged copied, zero-copy
    /// bytes not copied).
    fn finish(self) -> (u64, u64, u64) {
        match self {
            Tx::Msg(mut tx) => {
                tx.drain(TIMEOUT).unwrap();
                let c = tx.counters();
                (c.completed_calls, c.copied_calls, c.zero_copy_bytes())
            }
            Tx::Uring(mut tx) => {
                tx.drain(TIMEOUT).unwrap();
                let c = tx.counters();
                (c.copied + c.not_copied, c.copied, c.zero_copy_bytes())
            }
            Tx::Fixed(mut tx, _pool) => {
                tx.drain(TIMEOUT).unwrap();
                let c = tx.counters();
                (c.copied + c.not_copied, c.copied, c.zero_copy_bytes())
            }
        }
    }
}

const MODES: [&str; 6] = [
    "copy",
    "zc",
    "auto",
    "uring-copy",
    "uring-zc",
    "uring-zc-fixed",
];

fn sender(mode: &str, sock: UdpSocket, segment: Segment) -> Tx {
    let msg = |m| msg_zerocopy::Config {
        mode: m,
        threshold: 0,
        policy: CopiedPolicy::Keep,
        segment: Some(segment),
        ..msg_zerocopy::Config::default()
    };
    let ring = |m| uring::Config {
        mode: m,
        segment: Some(segment),
        ..uring::Config::default()
    };
    match mode {
        "copy" => Tx::Msg(ZeroCopySender::new(sock, msg(msg_zerocopy::Mode::Copy)).unwrap()),
        "zc" => Tx::Msg(ZeroCopySender::new(sock, msg(msg_zerocopy::Mode::ZeroCopy)).unwrap()),
        "auto" => Tx::Msg(ZeroCopySender::new(sock, msg(msg_zerocopy::Mode::Auto)).unwrap()),
        "uring-copy" => Tx::Uring(UringSender::new(sock, ring(uring::Mode::Copy)).unwrap()),
        "uring-zc" => Tx::Uring(UringSender::new(sock, ring(uring::Mode::ZeroCopy)).unwrap()),
        _ => {
            let pool = Pool::new(8, 64 * 1024).unwrap();
            let tx = UringSender::with_pool(sock, ring(uring::Mode::ZeroCopyFixed), &pool).unwrap();
            Tx::Fixed(tx, pool)
        }
    }
}

/// Whether `check` is available here; else says so as a skip.
fn available(check: &zcnet::support::Check) -> bool {
    let ok = check.status == zcnet::support::Status::Available;
    if !ok {
        netlab::skip::skip(&check.reason);
    }
    ok
}

fn uring_works() -> bool {
    let s = zcnet::uring::support();
    s.send_zc.status == zcnet::support::Status::Available
}

#[test]
fn trains_over_veth_arrive_whole_in_their_segment_size_from_every_sender() {
    require_lab!();
    if !available(&udp_gso::support().gro) {
        return;
    }
    // The veth's own MTU (1500): every segment fits one frame, as on a real link.
    let lab = VethLab::quiet(None).unwrap();
    for seg in [1200usize, 1472] {
        let segment = Segment::new(seg).unwrap();
        for mode in MODES {
            if mode.starts_with("uring") && !uring_works() {
                netlab::skip::skip("io_uring SEND_ZC is not available: its modes are skipped");
                continue;
            }
            let (dest, got) = receiver(&lab, seg);
            let sock = lab
                .ns(Side::A)
                .run(move || {
                    let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                    s.connect(dest).unwrap();
                    s
                })
                .unwrap();
            let mut tx = sender(mode, sock, segment);
            let what = format!("{mode}, {seg}-byte segments");
            let mut bytes = 0u64;
            for t in 0..60u32 {
                let (n, last) = shape(t, seg);
                let data = train(t, seg, n, last);
                bytes += data.len() as u64;
                tx.send(data);
                await_train(&got, t, seg, &what);
            }
            let (completed, copied, zc_bytes) = tx.finish();
            // veth delivers to a local socket: the kernel copies what was loaned, and says so.
            assert_eq!(copied, completed, "{what}: every completion flagged copied");
            assert_eq!(zc_bytes, 0, "{what}: nothing reported zero-copied");
            if mode.ends_with("zc") || mode.ends_with("fixed") {
                assert!(
                    completed > 0,
                    "{what}: zero-copy sends completed ({bytes} bytes)"
                );
            }
        }
    }
}

#[test]
fn trains_into_the_sink_go_zero_copy_and_are_dropped_whole() {
    require_lab!();
    let lab = SinkLab::new().unwrap();
    let segment = Segment::new(1472).unwrap();
    for mode in ["zc", "uring-zc", "uring-zc-fixed"] {
        if mode.starts_with("uring") && !uring_works() {
            netlab::skip::skip("io_uring SEND_ZC is not available: its modes are skipped");
            continue;
        }
        let target = SocketAddr::new(SinkLab::target(Family::V4), 9);
        let sock = lab
            .ns
            .run(move || {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                s.connect(target).unwrap();
                s
            })
            .unwrap();
        let before = lab.dropped().unwrap();
        let mut tx = sender(mode, sock, segment);
        for t in 0..100u32 {
            tx.send(train(t, 1472, 42, 1472));
        }
        let (completed, copied, zc_bytes) = tx.finish();
        assert_eq!(copied, 0, "{mode}: no train copied into the sink");
        assert!(completed > 0, "{mode}");
        assert_eq!(zc_bytes, 100 * 42 * 1472, "{mode}: every byte zero-copied");
        // The device offloads UDP segmentation: each train reaches it, and is dropped, whole.
        let dropped = lab.dropped().unwrap() - before;
        assert_eq!(dropped, 100, "{mode}: the sink dropped one skb per train");
    }
}

#[test]
fn a_train_of_too_many_segments_is_refused_with_its_count_and_handed_back() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(rx.local_addr().unwrap()).unwrap();
    let config = msg_zerocopy::Config {
        segment: Some(Segment::new(100).unwrap()),
        ..msg_zerocopy::Config::default()
    };
    let mut tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(sock, config).unwrap();
    let e = tx.send(vec![7u8; 6401]).unwrap_err();
    assert_eq!(e.buf.len(), 6401, "the buffer comes back with the error");
    assert_eq!(e.error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.error.to_string().contains("65 datagrams"), "{}", e.error);
    // The limit itself is a train the kernel takes: 64 datagrams, read one by one.
    tx.send(vec![7u8; 6400]).unwrap();
    rx.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = [0u8; 200];
    for _ in 0..64 {
        assert_eq!(rx.recv(&mut buf).unwrap(), 100);
    }
    tx.drain(TIMEOUT).unwrap();
}

#[test]
fn a_segment_size_on_a_tcp_socket_is_refused_saying_why() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let config = msg_zerocopy::Config {
        segment: Some(Segment::new(1200).unwrap()),
        ..msg_zerocopy::Config::default()
    };
    let s = match ZeroCopySender::<_, Vec<u8>>::new(s, config) {
        Err(e) => {
            match &e.error {
                ZeroCopyError::Socket { what, source } => {
                    assert!(what.contains("not a UDP socket"), "{what}");
                    assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP));
                }
                other => panic!("expected the socket refused, got {other:?}"),
            }
            e.socket
        }
        Ok(_) => panic!("a segment size on TCP was taken"),
    };
    // The socket came back as it was given: SO_ZEROCOPY off (a sender refuses a socket on
    // which it is on already), so a plain sender takes it.
    let plain = ZeroCopySender::<_, Vec<u8>>::new(s, msg_zerocopy::Config::default());
    assert!(plain.is_ok(), "{:?}", plain.err().map(|e| e.error));
    assert!(Segment::new(0).is_err() && Segment::new(70_000).is_err());
}

#[test]
fn the_probe_reports_gso_and_gro() {
    let s = udp_gso::support();
    for c in s.checks() {
        assert!(!c.reason.is_empty(), "{:?} says why", c.id);
        assert!(!c.method.is_empty(), "{:?} says how", c.id);
    }
    if s.gso.status == zcnet::support::Status::Available {
        assert_eq!(
            s.gso.detail["datagrams"],
            serde_json::json!([1000, 1000, 500])
        );
    }
}

/// What an auto sender of 1472-byte trains into `lab` starts with: its choice after `trains`
/// 42-segment trains and `singles` single datagrams, and the sends by zero copy of each kind.
fn auto_into(lab: &SinkLab, uring: bool, trains: u32, singles: u32) -> (zcnet::auto::Choice, u64) {
    let target = SocketAddr::new(SinkLab::target(Family::V4), 9);
    // Built on the lab's thread: the route is looked up from the thread that makes the sender.
    lab.ns
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect(target).unwrap();
            let segment = Some(Segment::new(1472).unwrap());
            let mut tx = if uring {
                Tx::Uring(
                    UringSender::new(
                        s,
                        uring::Config {
                            mode: uring::Mode::Auto,
                            segment,
                            ..uring::Config::default()
                        },
                    )
                    .unwrap(),
                )
            } else {
                Tx::Msg(
                    ZeroCopySender::new(
                        s,
                        msg_zerocopy::Config {
                            mode: msg_zerocopy::Mode::Auto,
                            segment,
                            ..msg_zerocopy::Config::default()
                        },
                    )
                    .unwrap(),
                )
            };
            for t in 0..trains {
                tx.send(train(t, 1472, 42, 1472));
            }
            for t in 0..singles {
                tx.send(train(t, 1472, 1, 1000));
            }
            let (choice, zc) = match &tx {
                Tx::Msg(m) => (m.auto_choice(), m.counters().auto.zero_copy_calls),
                Tx::Uring(u) => (u.auto_choice(), u.counters().auto.zero_copy_calls),
                Tx::Fixed(..) => unreachable!(),
            };
            tx.finish();
            (choice.expect("an auto sender has a choice"), zc)
        })
        .unwrap()
}

#[test]
fn auto_copies_trains_a_device_cuts_in_software_and_says_why() {
    require_lab!();
    if !available(&udp_gso::support().gso) {
        return;
    }
    if !netlab::skip::on_path("ethtool") {
        netlab::skip::skip("ethtool (Debian package ethtool) is not installed: no sink-swgso lab");
        return;
    }
    let software = SinkLab::software_gso().unwrap();
    let offload = SinkLab::new().unwrap();
    let class_of = |c: &zcnet::auto::Choice, len: usize| {
        c.classes
            .iter()
            .find(|k| k.from <= len && k.to.is_none_or(|t| len < t))
            .cloned()
            .unwrap_or_else(|| panic!("a class for {len} B in {c}"))
    };
    for uring in [false, true] {
        if uring && !uring_works() {
            netlab::skip::skip("io_uring SEND_ZC is not available: its auto is skipped");
            continue;
        }
        let what = if uring { "uring" } else { "msg_zerocopy" };
        // Fewer trains than a round: what the sender starts with, not what it measured.
        let (c, zc) = auto_into(&software, uring, 10, 10);
        let t = c
            .trains
            .clone()
            .expect("a sender of trains says what its device does");
        if matches!(&t.segmentation, Segmentation::Unknown { why, .. } if why.contains("5.14")) {
            netlab::skip::skip(&format!("the route's device cannot be read here: {t}"));
            return;
        }
        assert_eq!(
            t.segmentation,
            Segmentation::Software {
                device: "sink0".into()
            },
            "{what}: {t}"
        );
        assert!(t.software());
        let text = c.to_string();
        assert!(
            text.contains("sink0, which cuts them in software (tx-udp-segmentation off)"),
            "{what}: {text}"
        );
        let train_class = class_of(&c, 42 * 1472);
        assert!(
            !train_class.zero_copy,
            "{what}: trains start at copy: {text}"
        );
        assert_eq!(
            train_class.margin,
            zcnet::auto::LEARNING.software_gso_margin
        );
        // A single datagram is no train: the profile's prior and the usual bar.
        let single = class_of(&c, 1000);
        assert_eq!(single.margin, zcnet::auto::LEARNING.hysteresis, "{what}");
        assert_eq!(
            single.zero_copy,
            c.threshold.zero_copy(1000),
            "{what}: {text}"
        );
        assert_eq!(
            zc,
            u64::from(single.zero_copy) * 10,
            "{what}: only singles by zero copy, if any"
        );

        // With the offload on, the same trains start where the profile says, at the usual bar.
        let (c, _) = auto_into(&offload, uring, 10, 0);
        let t = c.trains.clone().unwrap();
        assert_eq!(
            t.segmentation,
            Segmentation::Offload {
                device: "sink0".into()
            },
            "{what}: {t}"
        );
        let train_class = class_of(&c, 42 * 1472);
        assert_eq!(
            train_class.margin,
            zcnet::auto::LEARNING.hysteresis,
            "{what}"
        );
        assert_eq!(
            train_class.zero_copy,
            c.threshold.zero_copy(42 * 1472),
            "{what}"
        );
    }
}
