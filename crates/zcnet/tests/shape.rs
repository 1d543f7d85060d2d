//! One shape (issue 32): every sender goes through one generic function, every receiver through
//! another, sync and async, each with the stream checked byte by byte by position
//! (`netlab::pattern`), so a lost, repeated or reordered byte fails. The functions know only the
//! traits of `zcnet::mechanism`: a mechanism that leaves the shape does not compile here.

use std::collections::HashSet;
use std::fmt::Debug;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netlab::pattern::{Verifier, chunk_at};
use zcnet::ZeroCopyCounters;
use zcnet::loan::Returned;
use zcnet::mechanism::{FrameSink, FrameSource, LendingReceiver, Lent, LoaningSender, Mechanism};

/// Bytes each stream carries: several buffers of uneven sizes, some beyond a socket buffer.
const TOTAL: u64 = 3 << 20;

/// The sizes of the buffers a sender loans, in order, adding up to `TOTAL`.
fn sizes() -> impl Iterator<Item = usize> {
    let mut left = TOTAL;
    let mut i = 0u64;
    std::iter::from_fn(move || {
        let n = (1 + (i * 7919) % 200_000).min(left);
        i += 1;
        left -= n;
        (n > 0).then_some(n as usize)
    })
}

/// A connected pair on loopback: (client, server).
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// A thread that reads `socket` to its end and checks every byte by its position.
fn verifying_reader(mut socket: TcpStream) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut v = Verifier::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = socket.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            v.check(&buf[..n]);
        }
        assert!(v.ok(), "stream wrong from byte {:?}", v.first_bad());
        v.offset()
    })
}

/// A thread that writes the pattern stream's first `TOTAL` bytes to `socket` and closes it.
fn pattern_writer(mut socket: TcpStream) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut at = 0;
        while at < TOTAL {
            let chunk = chunk_at(at, (TOTAL - at).min(60_000) as usize);
            socket.write_all(chunk).unwrap();
            at += chunk.len() as u64;
        }
    })
}

/// The mode rule every mechanism keeps: it runs the mode asked for, or says why not.
fn check_mode<M: Mechanism>(m: &M, asked: M::Mode) {
    assert!(
        m.mode() == asked || m.fallback_reason().is_some(),
        "runs {:?} where {asked:?} was asked, and gives no reason",
        m.mode()
    );
}

/// The loans of one stream: each buffer is known by its allocation, which the sender holds while
/// the buffer is out, so a buffer that came back twice, or one that never went out, is caught,
/// not just a wrong count.
#[derive(Default)]
struct Loans {
    at: u64,
    out: HashSet<usize>,
    sent: u64,
}

impl Loans {
    /// The next `n` bytes of the pattern stream, as a buffer now out.
    fn next(&mut self, n: usize) -> Vec<u8> {
        let buf = chunk_at(self.at, n).to_vec();
        self.at += n as u64;
        self.out.insert(buf.as_ptr() as usize);
        buf
    }

    fn back(&mut self, r: Returned<Vec<u8>>) {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.sent, r.buf.len(), "a buffer came back part-sent");
        assert!(
            self.out.remove(&(r.buf.as_ptr() as usize)),
            "a buffer came back twice, or was never loaned"
        );
        self.sent += r.sent as u64;
    }

    /// Every buffer back, whole, and the sender's counters account for every byte.
    fn all_back(&self, counters: impl ZeroCopyCounters + Debug) {
        assert!(
            self.out.is_empty(),
            "{} buffers never came back",
            self.out.len()
        );
        assert_eq!((self.at, self.sent), (TOTAL, TOTAL));
        let c = counters;
        assert_eq!(c.zero_copy_bytes() + c.copied_bytes(), TOTAL, "{c:?}");
    }
}

/// Loans the pattern stream buffer by buffer and takes each back once.
fn send_stream<T: LoaningSender<Vec<u8>>>(tx: &mut T) {
    let mut loans = Loans::default();
    for n in sizes() {
        tx.send(loans.next(n)).unwrap();
        tx.flush().unwrap();
        tx.reap().unwrap();
        tx.returned().for_each(|r| loans.back(r));
    }
    tx.drain(Duration::from_secs(30)).unwrap();
    assert_eq!(tx.in_flight(), 0);
    // One by one, then nothing more: each buffer comes back once either way.
    while let Some(r) = tx.pop_returned() {
        loans.back(r);
    }
    assert_eq!(tx.returned().count(), 0);
    loans.all_back(tx.counters());
}

/// Checks what a receiver lent, by its position in the stream.
fn check_lent(v: &mut Verifier, lent: Lent<'_>) {
    assert!(!lent.is_empty(), "a receive lent nothing");
    lent.parts().iter().for_each(|p| v.check(p));
}

/// The whole stream came, right, and the receiver's counters account for every byte.
fn all_received(v: &Verifier, counters: impl ZeroCopyCounters + Debug) {
    assert!(v.ok(), "stream wrong from byte {:?}", v.first_bad());
    assert_eq!(v.offset(), TOTAL);
    let c = counters;
    assert_eq!(c.zero_copy_bytes() + c.copied_bytes(), TOTAL, "{c:?}");
}

/// Receives the pattern stream through `rx` and checks it by position.
fn recv_stream<R: LendingReceiver>(rx: &mut R)
where
    R::Error: Debug,
{
    let mut v = Verifier::new();
    while let Some(lent) = rx.recv().unwrap() {
        check_lent(&mut v, lent);
    }
    all_received(&v, rx.counters());
}

fn uring_available() -> bool {
    let ok = zcnet::uring::support()
        .checks()
        .iter()
        .all(|c| c.status == zcnet::support::Status::Available);
    if !ok {
        netlab::skip::skip("io_uring SEND_ZC is not available here");
    }
    ok
}

#[test]
fn every_sender_through_one_function() {
    use zcnet::{msg_zerocopy, uring};
    for mode in [msg_zerocopy::Mode::ZeroCopy, msg_zerocopy::Mode::Copy] {
        let (c, s) = pair();
        let reader = verifying_reader(s);
        let config = msg_zerocopy::Config {
            mode,
            ..Default::default()
        };
        let mut tx = msg_zerocopy::ZeroCopySender::new(c, config).unwrap();
        check_mode(&tx, mode);
        send_stream(&mut tx);
        drop(tx);
        assert_eq!(reader.join().unwrap(), TOTAL, "{mode:?}");
    }
    if !uring_available() {
        return;
    }
    for mode in [uring::Mode::ZeroCopy, uring::Mode::Copy] {
        let (c, s) = pair();
        let reader = verifying_reader(s);
        let config = uring::Config {
            mode,
            ..Default::default()
        };
        let mut tx = uring::UringSender::new(c, config).unwrap();
        check_mode(&tx, mode);
        send_stream(&mut tx);
        drop(tx);
        assert_eq!(reader.join().unwrap(), TOTAL, "{mode:?}");
    }
}

#[test]
fn every_receiver_through_one_function() {
    use zcnet::{peek, tcp_rx};
    for mode in [tcp_rx::Mode::ZeroCopy, tcp_rx::Mode::Copy] {
        let (c, s) = pair();
        let writer = pattern_writer(c);
        let config = tcp_rx::Config {
            mode,
            ..Default::default()
        };
        let mut rx = tcp_rx::TcpZeroCopyReceiver::new(s, config).unwrap();
        check_mode(&rx, mode);
        recv_stream(&mut rx);
        writer.join().unwrap();
    }
    for mode in [peek::Mode::ZeroCopy, peek::Mode::Copy] {
        let (c, s) = pair();
        let writer = pattern_writer(c);
        let mut rx = peek::PeekCursor::new(s, peek::Config { mode }).unwrap();
        check_mode(&rx, mode);
        recv_stream(&mut rx);
        writer.join().unwrap();
    }
}

#[cfg(feature = "tokio")]
mod async_shape {
    use super::*;
    use zcnet::mechanism::{AsyncLendingReceiver, AsyncLoaningSender};

    async fn send_stream<T: AsyncLoaningSender<Vec<u8>>>(tx: &mut T) {
        let mut loans = Loans::default();
        for (i, n) in sizes().enumerate() {
            tx.send(loans.next(n)).await.unwrap();
            if i % 8 == 7 {
                // Wait for one, as a sender bounding its memory does.
                if let Some(r) = tx.wait_returned().await.unwrap() {
                    loans.back(r);
                }
            }
        }
        let all = tokio::time::timeout(Duration::from_secs(30), tx.drain());
        all.await.expect("every loan back in time").unwrap();
        assert_eq!(tx.in_flight(), 0);
        tx.returned().for_each(|r| loans.back(r));
        loans.all_back(tx.counters());
    }

    async fn recv_stream<R: AsyncLendingReceiver>(rx: &mut R)
    where
        R::Error: Debug,
    {
        let mut v = Verifier::new();
        while let Some(lent) = rx.recv().await.unwrap() {
            check_lent(&mut v, lent);
        }
        all_received(&v, rx.counters());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_async_sender_through_one_function() {
        use zcnet::{msg_zerocopy, uring};
        for mode in [msg_zerocopy::Mode::ZeroCopy, msg_zerocopy::Mode::Copy] {
            let (c, s) = pair();
            let reader = verifying_reader(s);
            let config = msg_zerocopy::Config {
                mode,
                ..Default::default()
            };
            let mut tx = zcnet::tokio::ZeroCopySender::new(c, config).unwrap();
            check_mode(&tx, mode);
            send_stream(&mut tx).await;
            drop(tx);
            assert_eq!(reader.join().unwrap(), TOTAL, "{mode:?}");
        }
        if !uring_available() {
            return;
        }
        for mode in [uring::Mode::ZeroCopy, uring::Mode::Copy] {
            let (c, s) = pair();
            let reader = verifying_reader(s);
            let config = uring::Config {
                mode,
                ..Default::default()
            };
            let mut tx = zcnet::tokio::UringSender::new(c, config).unwrap();
            check_mode(&tx, mode);
            send_stream(&mut tx).await;
            drop(tx);
            assert_eq!(reader.join().unwrap(), TOTAL, "{mode:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_async_receiver_through_one_function() {
        use zcnet::{peek, tcp_rx};
        for mode in [tcp_rx::Mode::ZeroCopy, tcp_rx::Mode::Copy] {
            let (c, s) = pair();
            let writer = pattern_writer(c);
            let config = tcp_rx::Config {
                mode,
                ..Default::default()
            };
            let mut rx = zcnet::tokio::TcpZeroCopyReceiver::new(s, config).unwrap();
            check_mode(&rx, mode);
            recv_stream(&mut rx).await;
            writer.join().unwrap();
        }
        for mode in [peek::Mode::ZeroCopy, peek::Mode::Copy] {
            let (c, s) = pair();
            let writer = pattern_writer(c);
            let mut rx = zcnet::tokio::PeekCursor::new(s, peek::Config { mode }).unwrap();
            check_mode(&rx, mode);
            recv_stream(&mut rx).await;
            writer.join().unwrap();
        }
    }
}

/// Frames from every sink to every source across the veth lab: each frame whole, in order, once.
mod frames {
    use super::*;
    use netlab::{Side, VethLab};
    use zcnet::{packet, xdp};

    const FRAMES: u32 = 500;

    /// Frame `i`: broadcast, a local experimental EtherType nothing answers, its index, then the
    /// pattern stream from `i * 1500`.
    fn frame(i: u32) -> Vec<u8> {
        let len = 64 + (i as usize * 131) % 1400;
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0xa, 0x88, 0xb5]);
        f.extend_from_slice(&i.to_be_bytes());
        f.extend_from_slice(chunk_at(u64::from(i) * 1500, len - f.len()));
        f
    }

    fn send_all<K: FrameSink>(sink: &mut K)
    where
        K::Error: Debug,
    {
        for i in 0..FRAMES {
            let f = frame(i);
            while !sink.push(&f).unwrap() {
                sink.flush().unwrap();
            }
        }
        sink.flush().unwrap();
    }

    /// Takes frames until `FRAMES` of ours came or a quiet second passed; checks each by index.
    fn recv_all<S: FrameSource>(source: &mut S) -> u32
    where
        S::Error: Debug,
    {
        let mut next = 0u32;
        let end = Instant::now() + Duration::from_secs(20);
        while next < FRAMES && Instant::now() < end {
            source
                .recv_frames(Some(Duration::from_millis(200)), &mut |f| {
                    if f.len() < 18 || f[12..14] != [0x88, 0xb5] {
                        return; // not ours
                    }
                    assert_eq!(f, frame(next), "frame {next} (or one lost before it)");
                    next += 1;
                })
                .unwrap();
        }
        next
    }

    fn through<K, S>(
        lab: &VethLab,
        sink: impl FnOnce() -> K + Send + 'static,
        source: impl FnOnce() -> S + Send + 'static,
    ) where
        K: FrameSink,
        K::Error: Debug,
        S: FrameSource,
        S::Error: Debug,
    {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let receiver = lab
            .ns(Side::B)
            .spawn(move || {
                let mut s = source();
                ready_tx.send(()).unwrap();
                recv_all(&mut s)
            })
            .unwrap();
        ready.recv_timeout(Duration::from_secs(10)).unwrap();
        lab.ns(Side::A).run(move || send_all(&mut sink())).unwrap();
        let got = receiver.join().unwrap();
        assert_eq!(
            got,
            FRAMES,
            "{} to {}",
            std::any::type_name::<K>(),
            std::any::type_name::<S>()
        );
    }

    fn xdp_copy(rx: bool) -> xdp::Config {
        xdp::Config {
            mode: xdp::Mode::Copy,
            attach: xdp::Attach::Generic,
            rx,
            tx: !rx,
            ..xdp::Config::default()
        }
    }

    #[test]
    fn every_frame_sink_to_every_frame_source() {
        if let Err(e) = netlab::check_privileges() {
            netlab::skip::skip(&e.to_string());
            return;
        }
        let lab = VethLab::quiet(None).unwrap();
        let ring = || packet::TxRing::new(VethLab::DEV_A, packet::TxConfig::default()).unwrap();
        let xsk = || xdp::XdpSocket::new(VethLab::DEV_A, xdp_copy(false)).unwrap();
        for mode in [packet::Mode::ZeroCopy, packet::Mode::Copy] {
            let capture = move || {
                // The copying capture's queue holds the whole burst (the ring mode's 32 MiB does).
                let config = packet::Config {
                    mode,
                    rcvbuf: Some(16 << 20),
                    ..Default::default()
                };
                let c = packet::Capture::new(VethLab::DEV_B, config).unwrap();
                check_mode(&c, mode);
                c
            };
            through(&lab, ring, capture);
            through(&lab, xsk, capture);
        }
        let xsk_rx = || xdp::XdpSocket::new(VethLab::DEV_B, xdp_copy(true)).unwrap();
        through(&lab, ring, xsk_rx);
        through(&lab, xsk, xsk_rx);
    }
}
