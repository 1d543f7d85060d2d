//! MSG_ZEROCOPY sends with owned buffers, against real sockets: every buffer back exactly once,
//! a peer reset with buffers in flight, the ENOBUFS fallback, truly zero-copy UDP into the
//! sink lab, and the loan's run-time guards (one sender per socket, the caller's flags).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use netlab::{Family, LoopbackLab, SinkLab, require_lab};
use zcnet::msg_zerocopy::{
    self, Config as SenderConfig, CopiedPolicy, Mode, Returned, SendFlags, ZeroCopyError,
    ZeroCopySender,
};

const TIMEOUT: Duration = Duration::from_secs(20);

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Reads `stream` to its end on a thread of its own; the join gives every byte.
fn read_all(mut stream: TcpStream) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        stream.read_to_end(&mut got).unwrap();
        got
    })
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
    let (client, server) = tcp_pair();
    let n = 400u32;
    let expected: usize = (0..n).map(|i| buffer(i).len()).sum();
    let reader = read_all(server);
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZeroCopySender::new(client, config).unwrap();
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
    assert!(c.loaned_calls >= u64::from(n / 4 * 3));
    assert_eq!(c.completed_calls, c.loaned_calls);
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
    let mut tx = ZeroCopySender::new(client, config).unwrap();
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
        c.loaned_calls >= 2,
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
    let mut tx = ZeroCopySender::new(client, config).unwrap();
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
    let (client, server) = lab
        .ns
        .run(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        })
        .unwrap();
    let reader = read_all(server);
    // Keep trying zero-copy although loopback copies: the point is the ENOBUFS path.
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZeroCopySender::new(client, config).unwrap();
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
        assert_eq!(c.loaned_bytes, 0, "{c:?}");
    }
    if c.enobufs_fallbacks == 0 {
        assert_eq!(c.copy_bytes, 0, "no ENOBUFS, no copy fallback: {c:?}");
    }
    assert_eq!(c.copy_bytes + c.loaned_bytes, 64 * 64 * 1024);
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
        let mut tx = ZeroCopySender::new(socket, config).unwrap();
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
    let (client, server) = tcp_pair();
    let reader = read_all(server);
    let mut tx: ZeroCopySender<TcpStream, Vec<u8>> =
        ZeroCopySender::new(client, SenderConfig::default()).unwrap();
    // Memory this test owns and keeps untouched until its token comes back.
    let regions: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i; 64 * 1024]).collect();
    let mut tokens = Vec::new();
    for r in &regions {
        // SAFETY: `regions` outlives the sender's drain below and is not written meanwhile.
        tokens.push(unsafe { tx.send_borrowed(r, SendFlags::empty()) }.unwrap());
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

/// The reason of a [`ZeroCopyError::SocketInUse`], or a panic naming what came instead.
fn in_use<S, B>(
    r: Result<ZeroCopySender<S, B>, zcnet::loan::NewError<S, ZeroCopyError>>,
) -> &'static str
where
    S: msg_zerocopy::ExclusiveSocket,
    B: msg_zerocopy::OwnedBuf,
{
    match r.map_err(|e| e.error) {
        Err(ZeroCopyError::SocketInUse { reason }) => reason,
        Err(e) => panic!("expected SocketInUse, got {e}"),
        Ok(_) => panic!("a second sender on the same socket was accepted"),
    }
}

/// A dup of the socket (`try_clone`) is another descriptor of the same socket, with the same
/// completion ids: a sender on it while the first lives would take the first one's
/// completions; after it, its ids would not start at 0. Both refused, in every mode; the first
/// sender goes on undisturbed.
#[test]
fn a_second_sender_on_a_dup_of_the_socket_is_refused() {
    let (client, server) = tcp_pair();
    let reader = read_all(server);
    let dup = client.try_clone().unwrap();
    let other_fd = std::os::fd::OwnedFd::from(client.try_clone().unwrap());
    let mut tx: ZeroCopySender<TcpStream, Vec<u8>> =
        ZeroCopySender::new(client, SenderConfig::default()).unwrap();
    for mode in [Mode::ZeroCopy, Mode::Copy, Mode::Auto] {
        let config = SenderConfig {
            mode,
            ..SenderConfig::default()
        };
        let r = ZeroCopySender::<_, Vec<u8>>::new(dup.try_clone().unwrap(), config);
        let reason = in_use(r);
        assert!(
            reason.contains("another zcnet sender"),
            "{mode:?}: {reason}"
        );
    }
    let reason = in_use(ZeroCopySender::<_, Vec<u8>>::new(
        other_fd,
        SenderConfig::default(),
    ));
    assert!(reason.contains("try_clone or dup"), "{reason}");
    // The first sender is untouched by the refusals.
    tx.send(vec![7u8; 64 * 1024]).unwrap();
    tx.drain(TIMEOUT).unwrap();
    assert_eq!(tx.returned().count(), 1);
    drop(tx);
    // Its socket's ids went on from 0: a new sender there would count from 0 again.
    let reason = in_use(ZeroCopySender::<_, Vec<u8>>::new(
        dup.try_clone().unwrap(),
        SenderConfig::default(),
    ));
    assert!(reason.contains("SO_ZEROCOPY is on already"), "{reason}");
    let e = ZeroCopySender::<_, Vec<u8>>::new(dup, SenderConfig::default())
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("would not be this sender's alone"),
        "{e}"
    );
    // The refusal handed the socket back: closing the last descriptor ends the stream.
    drop(e);
    assert_eq!(reader.join().unwrap(), vec![7u8; 64 * 1024]);
}

/// `SO_ZEROCOPY` turned on by the caller (`msg_zerocopy::enable`) may mean sends counted before
/// the sender's: refused.
#[test]
fn a_socket_with_so_zerocopy_on_already_is_refused() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    msg_zerocopy::enable(&tx).unwrap();
    let reason = in_use(ZeroCopySender::<_, Vec<u8>>::new(
        tx,
        SenderConfig::default(),
    ));
    assert!(reason.contains("SO_ZEROCOPY is on already"), "{reason}");
}

/// `SendFlags` carries the caller's flags on every call of a buffer, copied or loaned:
/// `MSG_EOR` after a header, `MSG_MORE` on a payload's first part. Every byte arrives in order
/// and every buffer comes back once. (That `MSG_EOR` keeps the payload's pages mappable:
/// `tcp_rx.rs` `msg_eor_after_a_header_lets_the_payload_be_mapped`.)
#[test]
fn send_flags_eor_and_more_still_work() {
    let (client, server) = tcp_pair();
    let reader = read_all(server);
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZeroCopySender::new(client, config).unwrap();
    let mut expected = Vec::new();
    for i in 0..32u8 {
        let header = vec![i; 100];
        let first = vec![i ^ 0x55; 32 * 1024];
        let rest = vec![i ^ 0xaa; 64 * 1024];
        expected.extend([&header[..], &first, &rest].concat());
        tx.send_with(header, SendFlags::EOR).unwrap();
        tx.send_with(first, SendFlags::MORE).unwrap();
        tx.send_with(rest, SendFlags::empty()).unwrap();
        tx.reap().unwrap();
    }
    tx.drain(TIMEOUT).unwrap();
    let back: Vec<_> = tx.returned().collect();
    let c = tx.counters();
    drop(tx);
    assert_eq!(back.len(), 96, "every buffer back once");
    // The 100-byte headers went by copy, the rest loaned; each loan completed.
    assert_eq!(back.iter().filter(|r| !r.zero_copy).count(), 32);
    assert_eq!(c.completed_calls, c.loaned_calls);
    assert!(reader.join().unwrap() == expected, "every byte, in order");
}

/// In copy mode `MSG_ZEROCOPY` would be ignored by the kernel (no `SO_ZEROCOPY` for it) and
/// take no completion id: a borrowed send there is a copy, its token reported at once (it
/// waited for a completion that never came).
#[test]
fn a_borrowed_send_in_copy_mode_is_reported_at_once() {
    let (client, server) = tcp_pair();
    let reader = read_all(server);
    let config = SenderConfig {
        mode: Mode::Copy,
        ..SenderConfig::default()
    };
    let mut tx: ZeroCopySender<TcpStream, Vec<u8>> = ZeroCopySender::new(client, config).unwrap();
    let region = vec![3u8; 64 * 1024];
    // SAFETY: `region` outlives the sender and is not written while it lives.
    let token = unsafe { tx.send_borrowed(&region, SendFlags::EOR) }.unwrap();
    assert_eq!(tx.completed_borrowed().collect::<Vec<_>>(), [token]);
    assert_eq!(tx.in_flight(), 0);
    let c = tx.counters();
    assert_eq!((c.loaned_calls, c.copy_bytes), (0, 64 * 1024), "{c:?}");
    drop(tx);
    assert_eq!(reader.join().unwrap(), region);
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

fn pin_to(cpu: usize) {
    let mut one = nix::sched::CpuSet::new();
    one.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).unwrap();
}

/// A fragmented datagram read by a receiver on this host on another CPU than the sender's is
/// freed by the sender's CPU at its next network softirq (`skb_attempt_defer_free`), and its
/// completion waits with it: with nothing else on the network, for minutes (the torture
/// harness saw 107 s; 1 round in 200 of the async sender over veth failed). `drain` now runs
/// every CPU's deferred frees when completions stall, so each datagram's buffer comes back.
#[test]
fn a_completion_held_by_a_deferred_free_comes_back_in_drain() {
    require_lab!();
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        netlab::skip::skip(
            "needs two CPUs: the receiver must read on another CPU than the sender's",
        );
        return;
    }
    let lab = netlab::VethLab::quiet(None).unwrap();
    let to = SocketAddr::new(netlab::VethLab::addr(netlab::Side::B, Family::V4), 0);
    let rx = lab
        .ns(netlab::Side::B)
        .run(move || UdpSocket::bind(to))
        .unwrap()
        .unwrap();
    let to = rx.local_addr().unwrap();
    let tx = lab
        .ns(netlab::Side::A)
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            s.connect(to)?;
            std::io::Result::Ok(s)
        })
        .unwrap()
        .unwrap();
    let rounds = 10;
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let (reader_cpu, sender_cpu) = (cpus[1], cpus[0]);
    let reader = std::thread::spawn(move || {
        pin_to(reader_cpu);
        rx.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut buf = vec![0u8; 65536];
        for _ in 0..rounds {
            let n = rx.recv(&mut buf).unwrap();
            got_tx.send(n).unwrap();
        }
    });
    pin_to(sender_cpu);
    let config = SenderConfig {
        mode: Mode::ZeroCopy,
        threshold: 0,
        policy: CopiedPolicy::Keep,
        segment: None,
        ..SenderConfig::default()
    };
    let mut tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(tx, config).unwrap();
    for i in 0..rounds {
        // Over the 1500-byte MTU: fragments, each holding the completion until freed.
        let buf = vec![i as u8; 4000];
        tx.send(buf).unwrap();
        assert_eq!(got_rx.recv_timeout(TIMEOUT).unwrap(), 4000, "round {i}");
        // Read by the other CPU: now only a free on this one completes the send.
        tx.drain(Duration::from_secs(10)).unwrap_or_else(|e| {
            panic!(
                "round {i}: {e} (deferred kicks: {})",
                tx.counters().deferred_kicks
            )
        });
        let back: Vec<_> = tx.returned().collect();
        assert_eq!(back.len(), 1, "round {i}");
        assert_eq!(back[0].buf, vec![i as u8; 4000]);
    }
    reader.join().unwrap();
    eprintln!("deferred kicks: {}", tx.counters().deferred_kicks);
}

/// A connection whose receiver does not read and advertises a small window: what the sender
/// loans beyond it stays in the sender's queue, held by the kernel, until the receiver reads.
fn held_pair() -> (TcpStream, TcpStream) {
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // Set before listen: the accepted socket inherits it, and its window starts small.
    listener.set_recv_buffer_size(4096).unwrap();
    listener
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    listener.listen(1).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let client = TcpStream::connect(addr).unwrap();
    // Room for the loans in the send queue, so the sends return while the window is shut.
    socket2::SockRef::from(&client)
        .set_send_buffer_size(1 << 20)
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, TcpStream::from(server))
}

/// Bytes `0..len` of the pattern of buffer `i` (position-dependent, so reordering shows).
fn pattern(i: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k % 251) as u8 ^ i.wrapping_mul(37))
        .collect()
}

/// `close(timeout)` hands back what came back and counts, without freeing, what the kernel
/// still holds (issue 49 item 5): the bytes of the buffers left to it still arrive whole.
#[test]
fn close_hands_back_what_came_back_and_leaves_what_the_kernel_holds() {
    let (client, mut server) = held_pair();
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        ..SenderConfig::default()
    };
    let mut tx = ZeroCopySender::new(client, config).unwrap();
    let len = 64 * 1024;
    let before = zcnet::loan::leaked_buffers();
    for i in 0..4u8 {
        tx.send(pattern(i, len)).unwrap();
    }
    let closed = tx.close(Duration::from_millis(200));
    let back = closed.returned.len();
    assert!(
        closed.still_loaned > 0,
        "the receiver read nothing: some buffers must still be held ({back} came back)"
    );
    assert_eq!(
        back + closed.still_loaned,
        4,
        "every buffer accounted for once"
    );
    assert!(closed.returned.iter().all(|r| r.error.is_none()));
    assert!(zcnet::loan::leaked_buffers() >= before + closed.still_loaned as u64);
    // The kernel still reads the buffers left to it: the receiver gets every byte in order.
    // (Slowly: a window far below the loopback MSS is announced by the sender's zero-window
    // probes, backing off; about 27 s here.)
    let mut got = Vec::new();
    server.read_to_end(&mut got).unwrap();
    let want: Vec<u8> = (0..4u8).flat_map(|i| pattern(i, len)).collect();
    assert!(
        got == want,
        "{} bytes of {} arrived, or out of order",
        got.len(),
        want.len()
    );
}

/// `wait_returned` blocks until one buffer comes back (a fixed pool recycles with it), and
/// returns `None` at once when nothing is loaned (issue 49 item 4).
#[test]
fn wait_returned_gives_back_one_buffer_at_a_time() {
    let (client, server) = tcp_pair();
    let reader = read_all(server);
    let config = SenderConfig {
        policy: CopiedPolicy::Keep,
        threshold: 0,
        ..SenderConfig::default()
    };
    let mut tx = ZeroCopySender::new(client, config).unwrap();
    assert!(
        tx.wait_returned(TIMEOUT).unwrap().is_none(),
        "nothing loaned"
    );
    // A pool of two buffers, recycled twenty times: each send waits for a buffer back.
    let mut pool = vec![vec![0u8; 32 * 1024], vec![0u8; 32 * 1024]];
    let mut want = Vec::new();
    for i in 0..20u8 {
        let mut buf = match pool.pop() {
            Some(b) => b,
            None => {
                let r = tx
                    .wait_returned(TIMEOUT)
                    .unwrap()
                    .expect("a buffer back in time");
                assert!(r.error.is_none());
                r.buf
            }
        };
        let len = buf.len();
        buf.copy_from_slice(&pattern(i, len));
        want.extend_from_slice(&buf);
        tx.send(buf).unwrap();
    }
    let closed = tx.close(TIMEOUT);
    assert_eq!(closed.still_loaned, 0);
    assert_eq!(
        closed.returned.len(),
        2,
        "the pool's two buffers back at the end"
    );
    assert!(
        reader.join().unwrap() == want,
        "the stream differs from what was sent"
    );
}

/// A GSO segment on a TCP socket is refused before the socket is changed, and the socket
/// comes back in the error (issue 49 item 1).
#[test]
fn a_refused_constructor_hands_the_socket_back_unchanged() {
    let (client, _server) = tcp_pair();
    let config = SenderConfig {
        segment: Some(zcnet::udp_gso::Segment::new(1200).unwrap()),
        ..SenderConfig::default()
    };
    let e = match ZeroCopySender::<_, Vec<u8>>::new(client, config) {
        Err(e) => e,
        Ok(_) => panic!("a GSO sender on TCP was made"),
    };
    assert!(e.to_string().contains("not a UDP socket"), "{e}");
    let zerocopy: libc::c_int = {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        use std::os::fd::AsRawFd;
        // SAFETY: a live socket, a c_int with its length.
        let r = unsafe {
            libc::getsockopt(
                e.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ZEROCOPY,
                (&raw mut v).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    };
    assert_eq!(zerocopy, 0, "SO_ZEROCOPY left on by a refused constructor");
    ZeroCopySender::<_, Vec<u8>>::new(e.socket, SenderConfig::default())
        .map_err(|e| e.error)
        .expect("a plain sender on the socket handed back");
}

/// Issue 62 item 2: `send` on a TCP socket whose peer does not read sat in `poll` for ever,
/// `O_NONBLOCK` or not. A non-blocking socket now says `WouldBlock` and hands the buffer back
/// unsent; a blocking one fails with `TimedOut` after `Config::stall_timeout`. Nothing is lost
/// either way: once the peer reads, what was sent arrives whole and in order.
#[test]
fn a_peer_that_does_not_read_never_holds_a_send_for_ever() {
    for mode in [Mode::ZeroCopy, Mode::Copy, Mode::Auto] {
        // Non-blocking: WouldBlock with the buffer, never a wait. One-byte buffers, so that
        // the kernel takes each whole or not at all; small socket buffers, so that they fill
        // soon.
        let (client, server) = small_tcp_pair();
        client.set_nonblocking(true).unwrap();
        let config = SenderConfig {
            mode,
            threshold: 0,
            ..SenderConfig::default()
        };
        let mut tx = ZeroCopySender::new(client, config).unwrap();
        let mut sent: Vec<u8> = Vec::new();
        let start = std::time::Instant::now();
        let refused = loop {
            let byte = (sent.len() % 251) as u8;
            match tx.send(vec![byte]) {
                Ok(()) => sent.push(byte),
                Err(e) => break e,
            }
            tx.reap().unwrap();
            tx.returned().for_each(drop);
            assert!(
                start.elapsed() < TIMEOUT,
                "{mode:?}: never refused after {} bytes",
                sent.len()
            );
        };
        assert_eq!(
            refused.error.kind(),
            std::io::ErrorKind::WouldBlock,
            "{mode:?}"
        );
        assert_eq!(refused.sent, 0, "{mode:?}");
        assert_eq!(
            refused.buf,
            [(sent.len() % 251) as u8],
            "{mode:?}: handed back"
        );
        // The peer reads: every byte sent arrives, in order, and every buffer comes back.
        let reader = read_all(server);
        tx.drain(TIMEOUT).unwrap();
        drop(tx);
        assert!(
            reader.join().unwrap() == sent,
            "{mode:?}: the stream differs"
        );

        // Blocking: TimedOut after the stall timeout, not for ever.
        let (client, _server) = small_tcp_pair();
        let config = SenderConfig {
            mode,
            threshold: 0,
            stall_timeout: Duration::from_millis(300),
            ..SenderConfig::default()
        };
        let mut tx = ZeroCopySender::new(client, config).unwrap();
        let start = std::time::Instant::now();
        let failed = loop {
            if let Err(e) = tx.send(pattern(1, 64 * 1024)) {
                break e;
            }
            tx.reap().unwrap();
            tx.returned().for_each(drop);
            assert!(start.elapsed() < TIMEOUT, "{mode:?}: never timed out");
        };
        assert_eq!(
            failed.error.kind(),
            std::io::ErrorKind::TimedOut,
            "{mode:?}"
        );
        assert!(
            failed.error.to_string().contains("stall_timeout"),
            "{mode:?}: {}",
            failed.error
        );
    }
}

/// A connected pair on loopback whose buffers are the kernel's smallest.
fn small_tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_send_buffer_size(4096).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&l.local_addr().unwrap().into()).unwrap();
    let (server, _) = l.accept().unwrap();
    socket2::SockRef::from(&server)
        .set_recv_buffer_size(4096)
        .unwrap();
    (s.into(), server)
}

/// Issue 62 item 6: copy mode asked for is no fallback; `fallback_reason()` said "copy mode
/// requested".
#[test]
fn copy_mode_asked_for_has_no_fallback_reason() {
    let (client, _server) = tcp_pair();
    let config = SenderConfig {
        mode: Mode::Copy,
        ..SenderConfig::default()
    };
    let tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(client, config).unwrap();
    assert_eq!(tx.mode(), Mode::Copy);
    assert_eq!(tx.fallback_reason(), None);
}

/// Issue 62, the second adversarial pass: a TCP buffer cut part-way (the socket took part of it,
/// then nothing for the stall timeout) left a stream that could never be whole, and the drop
/// ended it with a clean FIN. It is reset now: the peer reads what went, then `ConnectionReset`.
#[test]
fn a_stream_cut_by_a_stalled_send_is_reset() {
    for mode in [Mode::Copy, Mode::ZeroCopy] {
        let (client, server) = small_tcp_pair();
        let config = SenderConfig {
            mode,
            threshold: 0,
            stall_timeout: Duration::from_millis(300),
            ..SenderConfig::default()
        };
        let mut tx = ZeroCopySender::new(client, config).unwrap();
        let start = std::time::Instant::now();
        // Until a send fails (copy: this one; zero copy: the one after a loaned buffer failed).
        while tx.send(pattern(3, 64 * 1024)).is_ok() {
            tx.reap().unwrap();
            tx.returned().for_each(drop);
            assert!(start.elapsed() < TIMEOUT, "{mode:?}: never stalled");
        }
        // Issue 62, the third pass: after a cut the sender went on, and the peer read later
        // buffers spliced onto the cut one. Whatever comes after the failure is refused now
        // when the stream was cut.
        let after = tx.send(pattern(4, 64 * 1024)).map_err(|e| e.error.kind());
        let after2 = tx.send(pattern(5, 64 * 1024)).map_err(|e| e.error.kind());
        let mut back: Vec<_> = tx.returned().collect();
        back.extend(tx.close(Duration::from_millis(200)).returned);
        let cut = back.iter().any(|r| r.error.is_some() && r.sent > 0);
        let mut server = server;
        let mut got = Vec::new();
        let end = server.read_to_end(&mut got);
        match end {
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{mode:?}");
                // The pending error of a loaned cut buffer may come first, then the refusal.
                assert!(
                    after.is_err() && after2 == Err(std::io::ErrorKind::BrokenPipe),
                    "{mode:?}: {after:?} {after2:?}"
                );
                // No byte of a later buffer follows the cut: all that arrived is pattern 3.
                assert!(
                    got.chunks(64 * 1024)
                        .all(|c| c == &pattern(3, 64 * 1024)[..c.len()]),
                    "{mode:?}: spliced"
                );
            }
            // Nothing of a buffer went before the stall: the stream is whole buffers.
            Ok(_) => assert!(
                !cut && got.len() % (64 * 1024) == 0,
                "{mode:?}: {} bytes, clean end",
                got.len()
            ),
        }
    }
}
