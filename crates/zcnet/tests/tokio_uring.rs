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
