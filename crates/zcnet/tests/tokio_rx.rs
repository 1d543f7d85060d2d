//! `zcnet::tokio::TcpZeroCopyReceiver` fed by `zcnet::tokio::ZeroCopySender` (issue 19): the
//! bytes intact, pages really mapped in the loopback lab, a reset reported without a hang.
#![cfg(feature = "tokio")]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use zcnet::ZeroCopyCounters as _;

use netlab::pattern::{self, Verifier};
use netlab::{Family, LoopbackLab, require_lab};
use zcnet::msg_zerocopy::{self, CopiedPolicy};
use zcnet::tcp_rx::{Config, RxError};
use zcnet::tokio::{TcpZeroCopyReceiver, ZeroCopySender};

/// A connected pair in the lab's namespace, MSS 4108 (one page of payload per segment).
fn pair(lab: &LoopbackLab, family: Family) -> (TcpStream, TcpStream) {
    let ip = lab.addr(family);
    lab.ns
        .run(move || {
            let l = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
            socket2::SockRef::from(&l).set_tcp_mss(4108).unwrap();
            let c = socket2::Socket::new(
                socket2::Domain::for_address(l.local_addr().unwrap()),
                socket2::Type::STREAM,
                None,
            )
            .unwrap();
            c.set_tcp_mss(4108).unwrap();
            c.connect(&l.local_addr().unwrap().into()).unwrap();
            (TcpStream::from(c), l.accept().unwrap().0)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_sender_to_async_receiver_maps_pages_and_keeps_every_byte() {
    require_lab!();
    let lab = LoopbackLab::new(None).unwrap();
    for family in Family::ALL {
        let (client, server) = pair(&lab, family);
        let total: u64 = 48 << 20;
        let sender = tokio::spawn(async move {
            // MSG_ZEROCOPY over loopback: the kernel copies at delivery and says so; the
            // receiver can map only what such a sender sent (docs/measuring.md).
            let config = msg_zerocopy::Config {
                policy: CopiedPolicy::Keep,
                ..Default::default()
            };
            let mut tx = ZeroCopySender::new(client, config).unwrap();
            let mut off = 0u64;
            while off < total {
                let n = pattern::MAX_CHUNK.min((total - off) as usize);
                tx.send(pattern::chunk_at(off, n))
                    .await
                    .map_err(|e| e.error)?;
                off += n as u64;
                tx.reap()?;
                tx.returned().for_each(drop);
            }
            tx.drain().await?;
            Ok::<_, std::io::Error>(tx.counters())
        });
        let mut rx = TcpZeroCopyReceiver::new(server, Config::default()).unwrap();
        let mut v = Verifier::new();
        tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(r) = rx.recv().await.unwrap() {
                for part in r.parts() {
                    v.check(part);
                }
            }
        })
        .await
        .expect("the stream ends");
        let sent = sender.await.unwrap().unwrap();
        let stats = rx.counters();
        assert!(v.ok(), "{family:?}: first bad byte at {:?}", v.first_bad());
        assert_eq!(v.offset(), total);
        assert_eq!(stats.bytes(), total);
        assert!(sent.loaned_calls > 0, "{sent:?}");
        // As the synchronous receiver in the same lab (tests/tcp_rx.rs): > 0.9 mapped.
        assert!(
            stats.zero_copy_share().unwrap() > 0.9,
            "{family:?}: too little mapped: {stats:?}"
        );
        assert_eq!(stats.mapped_bytes, stats.mapped_pages * 4096);
        eprintln!(
            "{family:?}: {:.2} % mapped",
            100.0 * stats.zero_copy_share().unwrap()
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_reset_ends_the_async_receive_with_an_error_not_a_hang() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = tokio::net::TcpStream::connect(l.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = l.accept().await.unwrap();
    let mut rx = TcpZeroCopyReceiver::new(server, Config::default()).unwrap();
    let peer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut client = client;
        client.write_all(&[5u8; 100_000]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.set_zero_linger().unwrap();
        drop(client);
    });
    let mut got = 0u64;
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match rx.recv().await {
                Ok(Some(r)) => {
                    assert!(r.parts().iter().all(|p| p.iter().all(|&b| b == 5)));
                    got += r.len() as u64;
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        }
    })
    .await
    .expect("no hang");
    peer.await.unwrap();
    // Everything sent before the reset was read (it was acknowledged and queued), then the reset.
    assert_eq!(got, 100_000);
    match end {
        Some(RxError::Receive { received, source }) => {
            assert_eq!(received, 100_000);
            assert_eq!(source.kind(), std::io::ErrorKind::ConnectionReset);
        }
        other => panic!("expected the reset, got {other:?}"),
    }
}
