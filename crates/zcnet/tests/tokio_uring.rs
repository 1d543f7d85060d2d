//! `zcnet::tokio::UringSender` (issue 19): completions wake the task through the ring's eventfd,
//! under a current-thread runtime (one thread: no other thread could post them) and a
//! multi-threaded one; every buffer comes back once and the bytes arrive intact.
#![cfg(feature = "tokio")]

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use zcnet::tokio::UringSender;
use zcnet::uring::{Config, Mode};

const BUF: usize = 64 * 1024;

fn buffer(i: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(BUF);
    while v.len() < BUF {
        v.extend_from_slice(&i.to_le_bytes());
    }
    v
}

fn skip_without_uring() -> bool {
    let s = zcnet::uring::support();
    let ok = s
        .checks()
        .iter()
        .all(|c| c.status == zcnet::support::Status::Available);
    if !ok {
        netlab::skip::skip("io_uring SEND_ZC is not available here");
    }
    !ok
}

async fn send_all(mode: Mode, n: u64) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut server, _) = l.accept().unwrap();
    // The reader is a plain thread: the runtime under test has only its own thread(s).
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).map(|_| got)
    });
    let config = Config {
        mode,
        window: 8,
        ..Default::default()
    };
    let mut tx = UringSender::new(client, config).unwrap();
    let setup = tx.setup();
    assert!(
        !setup.single_issuer && !setup.registered_ring_fd,
        "{setup:?}"
    );
    let mut back = BTreeSet::new();
    let mut take = |r: zcnet::loan::Returned<Vec<u8>>| {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.sent, BUF);
        let id = u64::from_le_bytes(r.buf[..8].try_into().unwrap());
        assert!(back.insert(id), "buffer {id} came back twice");
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        for i in 0..n {
            // A window of 8: the sends after the eighth wait for completions.
            tx.send(buffer(i)).await.map_err(|e| e.error).unwrap();
            tx.returned().for_each(&mut take);
        }
        tx.drain().await.unwrap();
    })
    .await
    .expect("completions arrive through the eventfd");
    tx.returned().for_each(&mut take);
    assert_eq!(tx.in_flight(), 0);
    let c = tx.counters();
    assert_eq!(c.returned, n);
    if mode == Mode::ZeroCopy {
        assert_eq!(c.zero_copy_requests, n);
    }
    drop(tx);
    let got = reader.join().unwrap().unwrap();
    assert_eq!(back.len() as u64, n);
    assert_eq!(got.len(), n as usize * BUF);
    for (i, chunk) in got.chunks(BUF).enumerate() {
        assert_eq!(chunk, buffer(i as u64).as_slice(), "buffer {i}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn completes_under_a_current_thread_runtime() {
    if skip_without_uring() {
        return;
    }
    send_all(Mode::ZeroCopy, 512).await;
    send_all(Mode::Copy, 64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completes_under_a_multi_thread_runtime() {
    if skip_without_uring() {
        return;
    }
    send_all(Mode::ZeroCopy, 512).await;
}

/// Issue 62 item 3: a sender dropped with requests in flight leaked every buffer for good,
/// however soon the kernel gave them back. The drop waits for nothing; the crate's reaper
/// thread drives the ring and frees each buffer when its notification comes; the stream
/// arrives whole, the socket closing once the loans are back.
#[tokio::test(flavor = "current_thread")]
async fn a_sender_dropped_with_requests_in_flight_frees_them_when_they_come_back() {
    if skip_without_uring() {
        return;
    }
    // A receiver that reads nothing yet: 2 MiB is more than its window and the loopback's
    // queues take, so some loans stay out (on loopback a loan comes back when its bytes are
    // queued at the receiver, copied there). Default buffers: a tiny receive buffer makes
    // TCP wait on its persist timer, seconds a step (tried first: 32 loans took minutes).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut server, _) = l.accept().unwrap();
    let config = Config {
        mode: Mode::ZeroCopy,
        window: 64,
        ..Default::default()
    };
    let mut tx: UringSender<TcpStream, std::sync::Arc<[u8]>> =
        UringSender::new(client, config).unwrap();
    let mut mine = Vec::new();
    for i in 0..32 {
        let b: std::sync::Arc<[u8]> = buffer(i).into();
        mine.push(b.clone());
        tx.send(b).await.map_err(|e| e.error).unwrap();
    }
    tx.reap().unwrap();
    assert!(
        tx.in_flight() > 0,
        "nothing read yet: the kernel holds some"
    );
    let start = std::time::Instant::now();
    drop(tx);
    assert!(
        start.elapsed() < zcnet::loan::DROP_WAIT / 2,
        "the drop waited {:?}",
        start.elapsed()
    );
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).map(|_| got)
    });
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while mine.iter().any(|b| std::sync::Arc::strong_count(b) > 1) {
        assert!(
            std::time::Instant::now() < until,
            "the loans were never freed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = reader.join().unwrap().unwrap();
    let want: Vec<u8> = mine.iter().flat_map(|b| b.iter().copied()).collect();
    assert!(got == want, "the stream differs");
}

/// Issue 63: the tokio twin's `resend_returned`, as the synchronous one's: each buffer goes
/// again as it comes back, refilled, every datagram arrives whole, and every buffer is back at
/// the end, once.
#[tokio::test(flavor = "current_thread")]
async fn resend_returned_sends_each_buffer_again_as_it_comes_back() {
    if skip_without_uring() {
        return;
    }
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Short: a datagram the loopback dropped under load is not waited for long.
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(rx.local_addr().unwrap()).unwrap();
    let (total, buffers) = (200u64, 4u64);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while (got.len() as u64) < total {
            let Ok(n) = rx.recv(&mut buf) else { break };
            assert_eq!(n, 1000);
            let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert!(buf[8..n].iter().all(|&b| b == seq as u8), "datagram {seq}");
            got.push(seq);
        }
        got
    });
    let fill = |b: &mut Vec<u8>, seq: u64| {
        b.clear();
        b.extend_from_slice(&seq.to_le_bytes());
        b.resize(1000, seq as u8);
    };
    let mut tx: UringSender<std::net::UdpSocket, Vec<u8>> =
        UringSender::new(sock, Config::default()).unwrap();
    let mut seq = 0u64;
    for _ in 0..buffers {
        let mut b = Vec::new();
        fill(&mut b, seq);
        seq += 1;
        tx.send(b).await.map_err(|e| e.error).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        while seq < total {
            tx.resend_returned(|b| {
                if seq >= total {
                    return false;
                }
                fill(b, seq);
                seq += 1;
                true
            })
            .await
            .unwrap();
        }
        tx.drain().await.unwrap();
    })
    .await
    .expect("every buffer came back");
    assert_eq!(
        tx.returned().count() as u64,
        buffers,
        "each buffer back once"
    );
    assert_eq!(tx.counters().requests, total);
    // The loopback may drop a datagram under load; what came, came whole and in order.
    let got = reader.join().unwrap();
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
}
