//! `zcnet::tokio::relay` (issue 19): 200 concurrent connections through the async relay, every
//! byte of each stream checked at the destination and the destination's answer checked back at
//! the source; a destination that resets is failed over from the first unacknowledged byte; a
//! dropped relay future resets both connections.
#![cfg(feature = "tokio")]

mod relay_peers;

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use relay_peers::{Behaviour, Destination, End, first_difference};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zcnet::relay::{Config, Event, Serve};

/// The stream of connection `i`.
fn stream_of(i: u64, len: usize) -> Vec<u8> {
    netlab::pattern::random_bytes(len, 0x9e37_79b9_7f4a_7c15 ^ (i + 1))
}

/// Writes `data` and the end of the stream on `s`, and reads the answer to its end.
async fn exchange(s: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    let (mut r, mut w) = s.split();
    let (_, answer) = tokio::join!(
        async {
            w.write_all(data).await.unwrap();
            w.shutdown().await.unwrap();
        },
        async {
            let mut a = Vec::new();
            r.read_to_end(&mut a).await.unwrap();
            a
        }
    );
    answer
}

/// FNV-1a of `data`, as the destination answers it.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A destination that reads each stream to its end and answers its length and hash.
async fn destination() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.unwrap();
                let mut answer = (got.len() as u64).to_le_bytes().to_vec();
                answer.extend_from_slice(&fnv(&got).to_le_bytes());
                s.write_all(&answer).await.unwrap();
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connections_relayed_intact() {
    let (dest, dest_task) = destination().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = listener.local_addr().unwrap();
    let ok = Arc::new(AtomicU64::new(0));
    let relay = tokio::spawn({
        let ok = ok.clone();
        async move {
            let config = Arc::new(Config::new(vec![dest]));
            let how = Serve {
                count: Some(200),
                ..Serve::new(256)
            };
            let drain = Duration::from_secs(60);
            let never = std::future::pending();
            zcnet::tokio::relay::serve(&listener, config, &how, drain, never, move |e| {
                let Event::Ended { result, .. } = e else {
                    panic!("{e:?}");
                };
                let report = result.expect("relayed");
                assert!(report.failovers.is_empty());
                ok.fetch_add(report.bytes, Ordering::Relaxed);
            })
            .await
        }
    });
    let clients: Vec<_> = (0..200u64)
        .map(|i| {
            tokio::spawn(async move {
                let data = stream_of(i, 100_000 + 997 * i as usize);
                let mut s = TcpStream::connect(relay_addr).await.unwrap();
                let answer = exchange(&mut s, &data).await;
                assert_eq!(
                    answer.len(),
                    16,
                    "connection {i}: the answer came back whole"
                );
                assert_eq!(
                    u64::from_le_bytes(answer[..8].try_into().unwrap()),
                    data.len() as u64
                );
                assert_eq!(
                    u64::from_le_bytes(answer[8..].try_into().unwrap()),
                    fnv(&data)
                );
                data.len() as u64
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        total += tokio::time::timeout(Duration::from_secs(120), c)
            .await
            .expect("no hang")
            .unwrap();
    }
    let served = tokio::time::timeout(Duration::from_secs(30), relay)
        .await
        .expect("the relay ends after 200 connections")
        .unwrap()
        .unwrap();
    assert_eq!((served.relayed, served.refused, served.failed), (200, 0, 0));
    assert_eq!(
        ok.load(Ordering::Relaxed),
        total,
        "every byte acknowledged end to end"
    );
    dest_task.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn a_destination_that_resets_is_failed_over_without_a_gap() {
    // The first destination reads 300 KB and resets; the second gets the rest from the first
    // byte the first one's TCP had not acknowledged, and answers the hash of what it got.
    let first = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let first_addr = first.local_addr().unwrap();
    let first_task = tokio::spawn(async move {
        let (mut s, _) = first.accept().await.unwrap();
        let mut got = vec![0u8; 300_000];
        s.read_exact(&mut got).await.unwrap();
        s.set_zero_linger().unwrap();
        got
    });
    let (second_addr, second_task) = destination().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = listener.local_addr().unwrap();
    let relay = tokio::spawn(async move {
        let (src, _) = listener.accept().await.unwrap();
        let config = Config::new(vec![first_addr, second_addr]);
        zcnet::tokio::relay(src, config).await
    });
    let data = stream_of(7, 3 << 20);
    let mut s = TcpStream::connect(relay_addr).await.unwrap();
    let answer = exchange(&mut s, &data).await;
    let report = tokio::time::timeout(Duration::from_secs(30), relay)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap();
    let head = first_task.await.unwrap();
    assert_eq!(report.failovers.len(), 1, "{report:?}");
    let at = report.failovers[0].acknowledged as usize;
    // The first destination got the stream's start. The resume point may lie before the end of
    // what its application read: an application can read bytes whose ACK its TCP was still
    // delaying when it reset; those are sent again, never lost (`at >= head.len()` failed 2 runs
    // in 30).
    assert!(head == data[..head.len()], "the first destination's bytes");
    assert!(at > 0, "nothing acknowledged before the reset");
    // The second destination got exactly the stream from the resume point on.
    assert_eq!(answer.len(), 16);
    assert_eq!(
        u64::from_le_bytes(answer[..8].try_into().unwrap()),
        (data.len() - at) as u64
    );
    assert_eq!(
        u64::from_le_bytes(answer[8..].try_into().unwrap()),
        fnv(&data[at..])
    );
    assert_eq!(report.bytes, data.len() as u64);
    second_task.abort();
}

/// Issue 35: dropping the relay's future mid-stream resets the source and the destination. It
/// closed its descriptors, but the reverse copy task held duplicates: neither side heard
/// anything, and a FIN would have told the destination that the part it got was all.
#[test]
fn a_dropped_relay_future_resets_both_connections() {
    let dest = Destination::start(Behaviour {
        greeting: true,
        ..Behaviour::default()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let config = Config::new(vec![dest.addr]);
    let relay = rt.spawn(async move {
        let listener = TcpListener::from_std(listener).unwrap();
        let (src, _) = listener.accept().await.unwrap();
        zcnet::tokio::relay(src, config).await
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The greeting back: the relay has its destination and copies both ways.
    let mut banner = [0u8; 9];
    s.read_exact(&mut banner).unwrap();
    assert_eq!(&banner, b"BANNER-0\n");
    let data = stream_of(3, 1 << 20);
    s.write_all(&data).unwrap();
    relay.abort();
    let mut rest = Vec::new();
    let source_end = s.read_to_end(&mut rest).map_err(|e| e.kind());
    let conns = dest.finish();
    assert_eq!(source_end, Err(std::io::ErrorKind::ConnectionReset));
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].end, End::Reset);
    assert_eq!(first_difference(&conns[0].data, &data), None);
}
