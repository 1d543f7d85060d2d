//! MSG_ZEROCOPY sends with owned buffers, against real sockets: every buffer back exactly once,
//! a peer reset with buffers in flight, the ENOBUFS fallback, and truly zero-copy UDP into the
//! sink lab.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use netlab::{Family, LoopbackLab, SinkLab, require_lab};
use zcnet::msg_zerocopy::{Config as SenderConfig, CopiedPolicy, Returned, ZerocopySender};

const TIMEOUT: Duration = Duration::from_secs(20);

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Buffer `i`: its length varies around the threshold, its bytes say who it is.
fn buffer(i: u32) -> Vec<u8> {
    let len = [100usize, 16 * 1024, 64 * 1024 + 7, 300 * 1024][i as usize % 4];
    let mut v = vec![(i % 251) as u8; len];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

fn tag(r: &Returned<Vec<u8>>) -> u32 {
    u32::from_le_bytes(r.buf[..4].try_into().unwrap())
}

#[test]
fn every_tcp_buffer_comes_back_exactly_once_and_data_arrives() {
    let (client, mut server) = tcp_pair();
    let n = 400u32;
    let expected: usize = (0..n).map(|i| buffer(i).len()).sum();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZerocopySender::new(client, config).unwrap();
    let mut back = Vec::new();
    for i in 0..n {
        tx.send(buffer(i)).unwrap();
        tx.reap().unwrap();
        back.extend(tx.returned());
    }
    tx.drain(TIMEOUT).unwrap();
    back.extend(tx.returned());
    let c = tx.counters();
    drop(tx);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), expected);
    let mut tags: Vec<u32> = back.iter().map(tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..n).collect::<Vec<_>>(), "each buffer exactly once");
    // Unchanged contents: what came back is what was sent.
    assert!(back.iter().all(|r| r.buf == buffer(tag(r))));
    // The 100-byte buffers go by copy (below the 16 KiB threshold), the others by MSG_ZEROCOPY.
    assert_eq!(
        back.iter().filter(|r| !r.zero_copy).count(),
        (n / 4) as usize
    );
    assert!(c.zerocopy_calls >= u64::from(n / 4 * 3));
    assert_eq!(c.completed_calls, c.zerocopy_calls);
    // Over loopback the kernel copies, and must say so.
    assert_eq!(c.copied_calls, c.completed_calls);
    assert!(
        back.iter()
            .filter(|r| r.zero_copy)
            .all(|r| r.copied == Some(true))
    );
    assert!(
        back.iter()
            .filter(|r| !r.zero_copy)
            .all(|r| r.copied.is_none())
    );
}

#[test]
fn adaptive_policy_turns_zero_copy_off_after_a_copied_completion() {
    let (client, mut server) = tcp_pair();
    let reader =
        std::thread::spawn(move || std::io::copy(&mut server, &mut std::io::sink()).unwrap());
    let config = SenderConfig {
        policy: CopiedPolicy::RetryAfter(50),
        ..SenderConfig::default()
    };
    let mut tx = ZerocopySender::new(client, config).unwrap();
    for _ in 0..200 {
        tx.send(vec![1u8; 64 * 1024]).unwrap();
        tx.reap().unwrap();
        tx.returned().for_each(drop);
    }
    tx.drain(TIMEOUT).unwrap();
    let c = tx.counters();
    drop(tx);
    reader.join().unwrap();
    assert!(c.policy_disables >= 1, "{c:?}");
    assert!(
        c.copy_calls >= 50,
        "copied completions must send copies for a while: {c:?}"
    );
    assert!(
        c.zerocopy_calls >= 2,
        "zero-copy must be retried after 50 sends: {c:?}"
    );
}

#[test]
fn peer_reset_with_buffers_in_flight_returns_them_all() {
    let (client, server) = tcp_pair();
    // A small receive buffer and nobody reading: the sender blocks with buffers loaned.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        socket2::SockRef::from(&server)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(server); // RST
    });
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZerocopySender::new(client, config).unwrap();
    let mut handed = 0u32;
    let mut back = Vec::new();
    let err = loop {
        match tx.send(buffer(1)) {
            Ok(()) => handed += 1,
            Err(e) => {
                // Refused sends give the buffer back at once; a send that failed after part
                // of its buffer was loaned returned Ok and its buffer comes back with the
                // completion, carrying the error (the refusal here repeats it).
                back.push(e.buf);
                break e.error;
            }
        }
        tx.reap().unwrap();
        back.extend(tx.returned().map(|r| r.buf));
    };
    killer.join().unwrap();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "{err}"
    );
    tx.drain(TIMEOUT)
        .expect("every loaned buffer must come back after a reset");
    back.extend(tx.returned().map(|r| r.buf));
    assert_eq!(tx.in_flight(), 0);
    assert!(handed > 0);
    // Every buffer handed over comes back exactly once, and the refused one with its error.
    assert_eq!(
        back.len() as u32,
        handed + 1,
        "returned {} of {handed} + 1",
        back.len()
    );
}

#[test]
fn enobufs_falls_back_to_copy_and_finishes() {
    require_lab!();
    // optmem_max is per namespace: 0 makes every zero-copy notification allocation fail, 4096
    // lets a few through (issue 15 asks for both). Ten rounds at 4096: it varies.
    enobufs_case("0");
    for _ in 0..10 {
        enobufs_case("4096");
    }
}

fn enobufs_case(optmem: &str) {
    let lab = LoopbackLab::new(None).unwrap();
    lab.ns.set_sysctl("net.core.optmem_max", optmem).unwrap();
    let (client, mut server) = lab
        .ns
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        })
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    // Keep trying zero-copy although loopback copies: the point is the ENOBUFS path.
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZerocopySender::new(client, config).unwrap();
    let mut back = 0;
    for i in 0..64u32 {
        tx.send(vec![(i % 251) as u8; 64 * 1024]).unwrap();
        tx.reap().unwrap();
        back += tx.returned().count();
    }
    tx.drain(TIMEOUT).unwrap();
    back += tx.returned().count();
    let c = tx.counters();
    drop(tx);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), 64 * 64 * 1024);
    assert!(
        got.chunks(64 * 1024)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == (i % 251) as u8))
    );
    assert_eq!(back, 64);
    // At 0 every notification allocation fails; at 4096 only when several are outstanding at
    // once, which loopback's prompt completions do not always allow: whether or not ENOBUFS
    // came, nothing may be lost and every fallback byte must be counted as copied.
    if optmem == "0" {
        assert!(
            c.enobufs_fallbacks > 0,
            "optmem_max 0 must produce ENOBUFS: {c:?}"
        );
        assert_eq!(c.zerocopy_bytes, 0, "{c:?}");
    }
    if c.enobufs_fallbacks == 0 {
        assert_eq!(c.copy_bytes, 0, "no ENOBUFS, no copy fallback: {c:?}");
    }
    assert_eq!(c.copy_bytes + c.zerocopy_bytes, 64 * 64 * 1024);
}

#[test]
fn udp_into_the_sink_completes_uncopied_for_every_buffer() {
    require_lab!();
    let lab = SinkLab::new().unwrap();
    for family in Family::ALL {
        let target = SocketAddr::new(SinkLab::target(family), 9);
        let socket = lab
            .ns
            .run(move || {
                let bind: SocketAddr = if target.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                }
                .parse()
                .unwrap();
                let s = UdpSocket::bind(bind).unwrap();
                s.connect(target).unwrap();
                s
            })
            .unwrap();
        let before = lab.dropped().unwrap();
        let config = SenderConfig {
            policy: CopiedPolicy::Keep,
            ..SenderConfig::default()
        };
        let mut tx = ZerocopySender::new(socket, config).unwrap();
        let mut back = Vec::new();
        for i in 0..200u32 {
            tx.send(vec![i as u8; 64000]).unwrap();
            tx.reap().unwrap();
            back.extend(tx.returned());
        }
        tx.drain(TIMEOUT).unwrap();
        back.extend(tx.returned());
        let c = tx.counters();
        assert_eq!(back.len(), 200);
        assert!(
            back.iter().all(|r| r.zero_copy && r.copied == Some(false)),
            "{family:?}: {c:?}"
        );
        assert_eq!(c.copied_calls, 0);
        assert_eq!(
            lab.dropped().unwrap() - before,
            200,
            "{family:?}: the sink drops each datagram"
        );
    }
}

#[test]
fn borrowed_sends_report_their_tokens_once_the_kernel_is_done() {
    let (client, mut server) = tcp_pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    let mut tx: ZerocopySender<TcpStream, Vec<u8>> =
        ZerocopySender::new(client, SenderConfig::default()).unwrap();
    // Memory this test owns and keeps untouched until its token comes back.
    let regions: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i; 64 * 1024]).collect();
    let mut tokens = Vec::new();
    for r in &regions {
        // SAFETY: `regions` outlives the sender's drain below and is not written meanwhile.
        tokens.push(unsafe { tx.send_borrowed(r, 0) }.unwrap());
    }
    tx.drain(TIMEOUT).unwrap();
    let mut done: Vec<_> = tx.completed_borrowed().collect();
    done.sort();
    assert_eq!(done, tokens, "every borrowed send reported exactly once");
    assert_eq!(tx.in_flight(), 0);
    drop(tx);
    let got = reader.join().unwrap();
    assert_eq!(got, regions.concat());
}
