//! The SO_PEEK_OFF cursor against a reference model: random interleavings of peek, consume and
//! rewind over real TCP connections (IPv4 and IPv6), for the peek offset and the discard-buffer
//! fallback alike.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};

use netlab::pattern;
use zcnet::peek::{Config, Mode as Method, PeekCursor, PeekError};

const STREAM: usize = 1 << 20;

/// xorshift64*: a small deterministic generator, so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn pair(addr: &str) -> Option<(TcpStream, TcpStream)> {
    let l = TcpListener::bind(addr).ok()?;
    let c = TcpStream::connect(l.local_addr().ok()?).ok()?;
    let (s, _) = l.accept().ok()?;
    Some((c, s))
}

fn stream_bytes() -> Vec<u8> {
    pattern::chunk_at(0, STREAM).to_vec()
}

/// One random interleaving against the model; panics with the seed on the first difference.
fn run_model(addr: &str, method: Method, seed: u64) {
    let Some((mut c, s)) = pair(addr) else {
        netlab::skip::skip(&format!("no TCP on {addr}"));
        return;
    };
    let data = stream_bytes();
    let writer = std::thread::spawn(move || {
        c.write_all(pattern::chunk_at(0, STREAM)).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        c
    });
    let mut cur = PeekCursor::new(s, Config { mode: method }).unwrap();
    assert_eq!(cur.mode(), method, "{:?}", cur.fallback_reason());
    let mut rng = Rng(seed | 1);
    // The model: the first unconsumed byte and the next byte a peek returns.
    let (mut consumed, mut peeked) = (0u64, 0u64);
    let mut buf = vec![0u8; 65536];
    let mut steps = 0;
    while consumed < STREAM as u64 {
        steps += 1;
        assert!(steps < 100_000, "seed {seed}: no progress");
        match rng.below(10) {
            // peek (most often)
            0..=5 => {
                let want = 1 + rng.below(40_000) as usize;
                // Never block: with the window full of unconsumed bytes the writer cannot send
                // more, and a blocking peek past them would wait forever.
                let got = match cur.peek_with(&mut buf[..want], libc::MSG_DONTWAIT) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::yield_now();
                        continue;
                    }
                    Err(e) => panic!("seed {seed} step {steps}: {e}"),
                };
                let end = (peeked as usize + got).min(STREAM);
                assert_eq!(
                    &buf[..got],
                    &data[peeked as usize..end],
                    "seed {seed} step {steps}: peek at {peeked}"
                );
                if got == 0 {
                    assert_eq!(peeked, STREAM as u64, "seed {seed}: early end of stream");
                    // At the end: consume everything so the loop finishes.
                    cur.consume(peeked - consumed).unwrap();
                    consumed = peeked;
                }
                peeked += got as u64;
            }
            // consume part of what was peeked
            6..=7 => {
                let n = rng.below(peeked - consumed + 1);
                cur.consume(n).unwrap();
                consumed += n;
            }
            // rewind somewhere in the held range
            8 => {
                let to = consumed + rng.below(peeked - consumed + 1);
                cur.rewind(to).unwrap();
                peeked = to;
            }
            // a call outside the model must fail and change nothing
            _ => {
                let e = cur.consume(peeked - consumed + 1).unwrap_err();
                assert!(matches!(e, PeekError::ConsumeBeyondPeeked { .. }));
                if consumed > 0 {
                    let e = cur.rewind(consumed - 1).unwrap_err();
                    assert!(matches!(e, PeekError::RewindOutside { .. }));
                }
            }
        }
        assert_eq!(
            (cur.consumed(), cur.peeked()),
            (consumed, peeked),
            "seed {seed}"
        );
    }
    // Everything consumed: the next peek is the end of the stream.
    assert_eq!(cur.peek(&mut buf).unwrap(), 0, "seed {seed}");
    let counters = cur.counters();
    assert_eq!(counters.consumed_bytes, STREAM as u64);
    match method {
        Method::ZeroCopy => assert_eq!(counters.reread_bytes, 0),
        _ => assert!(counters.reread_bytes > 0, "seed {seed}"),
    }
    drop(writer.join().unwrap());
}

#[test]
fn random_interleavings_match_the_model_with_the_peek_offset() {
    for (i, addr) in ["127.0.0.1:0", "[::1]:0"].iter().enumerate() {
        // The rule holds where the kernel has the offset (TCP over IPv4 from 6.9, IPv6 later).
        let check = zcnet::peek::support().for_family(i == 1);
        if check.status != zcnet::support::Status::Available {
            netlab::skip::skip(&format!("{addr}: {}", check.reason));
            continue;
        }
        for seed in 0..12u64 {
            run_model(addr, Method::ZeroCopy, seed * 7919 + i as u64);
        }
    }
}

#[test]
fn random_interleavings_match_the_model_with_the_discard_buffer() {
    for (i, addr) in ["127.0.0.1:0", "[::1]:0"].iter().enumerate() {
        for seed in 0..12u64 {
            run_model(addr, Method::Copy, seed * 104_729 + i as u64);
        }
    }
}

#[test]
fn new_picks_the_peek_offset_here_and_says_nothing() {
    let (_c, s) = pair("127.0.0.1:0").unwrap();
    let cur = PeekCursor::new(s, Config::default()).unwrap();
    // Linux 6.9+ takes SO_PEEK_OFF on TCP: the cursor uses it where the probe found it, and
    // says why not where it did not.
    let check = zcnet::peek::support().for_family(false);
    if check.status == zcnet::support::Status::Available {
        assert_eq!(cur.mode(), Method::ZeroCopy, "{:?}", cur.fallback_reason());
        assert!(cur.fallback_reason().is_none());
    } else {
        assert_eq!(cur.mode(), Method::Copy);
        assert!(cur.fallback_reason().is_some_and(|r| r.contains("6.9")));
    }
}

#[test]
fn a_udp_socket_is_refused() {
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = PeekCursor::new(u, Config::default()).unwrap_err();
    // The step here, the reason in the cause (issue 35 item 17: the step's name said it too).
    assert_eq!(
        e.to_string(),
        "the socket check (a peek cursor reads a connected TCP stream, IPv4 or IPv6) failed"
    );
    let cause = std::error::Error::source(&e).map(ToString::to_string);
    assert_eq!(
        cause.as_deref(),
        Some("this one is UDP (SO_PROTOCOL)"),
        "{e}"
    );
}

/// An `AsFd` that names a TCP socket when the cursor is built and a UDP socket afterwards (what
/// a closed and reused descriptor number looks like to the cursor).
struct Shifty {
    tcp: TcpStream,
    udp: std::net::UdpSocket,
    calls: std::cell::Cell<u32>,
}

impl std::os::fd::AsFd for Shifty {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        // The constructor asks a few times (the TCP check, SO_PEEK_OFF); later calls get UDP.
        if n < 4 {
            self.tcp.as_fd()
        } else {
            self.udp.as_fd()
        }
    }
}

#[test]
fn a_descriptor_that_stops_being_tcp_is_refused_not_written_through() {
    use std::os::fd::AsFd;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // A 64 KiB datagram waits on the UDP socket: MSG_TRUNC there would copy it into the
    // discard path's 1-byte sink if the cursor trusted an earlier check.
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sender
        .send_to(&[7u8; 60000], udp.local_addr().unwrap())
        .unwrap();
    c.write_all(b"0123456789").unwrap();
    let shifty = Shifty {
        tcp: s,
        udp,
        calls: std::cell::Cell::new(0),
    };
    let mut cur = PeekCursor::new(shifty, Config { mode: Method::Copy }).unwrap();
    // Burn the TCP answers, so that the next as_fd is the UDP socket.
    while cur.get_ref().calls.get() < 4 {
        let _ = cur.get_ref().as_fd();
    }
    let mut buf = [0u8; 4];
    // A peek through the UDP socket reads the datagram's head into a real buffer (harmless)...
    assert_eq!(cur.peek(&mut buf).unwrap(), 4);
    assert_eq!(buf, [7u8; 4]);
    // ...but consuming must refuse: the socket is not TCP any more.
    let e = cur.consume(4).unwrap_err();
    let cause = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.contains("not a TCP socket")),
        "{e}: {cause:?}"
    );
    assert_eq!(cur.consumed(), 0);
    // And the free function refuses a UDP socket outright.
    let e = zcnet::peek::discard(&cur.get_ref().udp, 60000).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
}

/// Issue 62 item 8: two cursors on one socket share its one `SO_PEEK_OFF`, each moving the
/// other's offset. A second is refused while the first lives (`EBUSY`), through any descriptor
/// of the socket; after the first is dropped a new one is taken.
#[test]
fn a_second_cursor_on_the_same_socket_is_refused_while_the_first_lives() {
    let (_c, s) = pair("127.0.0.1:0").unwrap();
    let first = PeekCursor::new(&s, Config::default()).unwrap();
    let dup = s.try_clone().unwrap();
    for second in [
        PeekCursor::new(&s, Config::default()),
        PeekCursor::new(&dup, Config::default()),
    ] {
        let Err(e) = second else {
            panic!("a second cursor was taken")
        };
        assert_eq!(e.kind(), std::io::ErrorKind::ResourceBusy, "{e}");
        assert!(e.to_string().contains("one cursor a socket"), "{e}");
    }
    drop(first);
    PeekCursor::new(&dup, Config::default()).expect("the socket is free again");
}
