//! Peers for the relay's tests, the library's (`tests/relay.rs`) and the command's
//! (`zcnet-cli/tests/relay.rs`, which includes this file by path): a destination that takes any
//! number of connections and records what each brought and how it ended, and sources that end
//! their stream with a FIN or a reset. Every peer bounds its waits; loopback only.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the reading side of a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Fin,
    Reset,
    /// This side reset it.
    ResetHere,
    Other(String),
}

impl End {
    pub fn of(e: &io::Error) -> End {
        match e.kind() {
            io::ErrorKind::ConnectionReset => End::Reset,
            _ => End::Other(e.to_string()),
        }
    }
}

/// What a [`Destination`] does with each connection.
#[derive(Clone, Copy, Default)]
pub struct Behaviour {
    /// Write `BANNER-<n>` first, `n` the connection's number from 0.
    pub greeting: bool,
    /// After this many bytes, stop reading for this long, then read on.
    pub pause: Option<(usize, Duration)>,
    /// After this many bytes, reset (SO_LINGER 0, close).
    pub reset_after: Option<usize>,
    /// At the end of the stream, answer its length (8 bytes, little-endian) before closing.
    pub answer: bool,
    /// Write back every byte it reads.
    pub echo: bool,
    /// `SO_RCVBUF`: a small one closes the window soon after the reading stops.
    pub rcvbuf: Option<usize>,
}

/// One connection a [`Destination`] accepted.
pub struct Conn {
    pub data: Vec<u8>,
    pub end: End,
    /// `tcpi_bytes_received` at the end of the pause.
    pub received_by_pause_end: Option<u64>,
}

impl Conn {
    /// Checks that it got the first bytes of `data`, each at its offset, and ended with `end`.
    pub fn check(&self, data: &[u8], end: End, what: &str) {
        let got = self.data.len();
        assert_eq!(
            first_difference(&self.data, data),
            None,
            "{what}: {got} bytes"
        );
        assert_eq!(self.end, end, "{what}: {got} bytes");
    }

    /// Checks a pausing destination's connection: all of `data`, in order, then the FIN; and its
    /// window did close (the stream did not fit in the buffers while it paused).
    pub fn check_whole_across_a_closed_window(&self, data: &[u8], what: &str) {
        self.check(data, End::Fin, what);
        assert_eq!(self.data.len(), data.len(), "{what}: bytes");
        let paused_at = self.received_by_pause_end.expect("the destination paused");
        assert!(
            paused_at < data.len() as u64,
            "{what}: the whole stream fitted in the buffers: the window never closed"
        );
    }
}

/// The one connection in `conns`.
pub fn only<'a>(conns: &'a [Conn], what: &str) -> &'a Conn {
    assert_eq!(conns.len(), 1, "{what}: connections to one destination");
    &conns[0]
}

/// A destination that accepts every connection until [`Destination::finish`].
pub struct Destination {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: JoinHandle<Vec<Conn>>,
}

impl Destination {
    pub fn start(behaviour: Behaviour) -> Destination {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Some(b) = behaviour.rcvbuf {
            // Inherited by the accepted sockets, in time for the window they offer.
            socket2::SockRef::from(&l).set_recv_buffer_size(b).unwrap();
        }
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut conns = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match l.accept() {
                        Ok((c, _)) => {
                            let n = conns.len();
                            conns.push(std::thread::spawn(move || serve_one(c, n, behaviour)));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(e) => panic!("accept: {e}"),
                    }
                }
                conns.into_iter().map(|h| h.join().unwrap()).collect()
            }
        });
        Destination {
            addr,
            stop,
            acceptor,
        }
    }

    /// Stops accepting; each connection once it ended, in the order they came.
    pub fn finish(self) -> Vec<Conn> {
        self.stop.store(true, Ordering::SeqCst);
        self.acceptor.join().unwrap()
    }

    /// Checks that nothing connected to it.
    pub fn check_unused(self, what: &str) {
        assert_eq!(self.finish().len(), 0, "{what}: the fallback was called");
    }
}

fn serve_one(mut c: TcpStream, n: usize, b: Behaviour) -> Conn {
    c.set_nonblocking(false).unwrap();
    // A relay that holds a connection open for ever must fail the test, not hang it.
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    if b.greeting {
        c.write_all(format!("BANNER-{n}\n").as_bytes()).unwrap();
    }
    let mut conn = Conn {
        data: Vec::new(),
        end: End::Fin,
        received_by_pause_end: None,
    };
    let mut buf = vec![0u8; 65536];
    loop {
        let got = conn.data.len();
        let paused = conn.received_by_pause_end.is_some();
        if let Some((_, pause)) = b.pause.filter(|&(at, _)| at == got && !paused) {
            std::thread::sleep(pause);
            conn.received_by_pause_end = Some(tcp_received_now(&c));
        }
        if b.reset_after == Some(got) {
            socket2::SockRef::from(&c)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            conn.end = End::ResetHere;
            return conn;
        }
        // Stop exactly at the pause or the reset.
        let stops = [b.pause.map(|p| p.0), b.reset_after];
        let want = stops
            .into_iter()
            .flatten()
            .filter(|&at| at > got)
            .map(|at| at - got)
            .fold(buf.len(), usize::min);
        match c.read(&mut buf[..want]) {
            Ok(0) => {
                if b.answer {
                    let _ = c.write_all(&(got as u64).to_le_bytes());
                }
                return conn;
            }
            Ok(k) => {
                conn.data.extend_from_slice(&buf[..k]);
                // A reset's error goes to one call only: the write's, then the read sees an end.
                if let Err(e) = if b.echo {
                    c.write_all(&buf[..k])
                } else {
                    Ok(())
                } {
                    conn.end = End::of(&e);
                    return conn;
                }
            }
            Err(e) => {
                conn.end = End::of(&e);
                return conn;
            }
        }
    }
}

/// Data bytes the connection's TCP received (`tcpi_bytes_received`).
pub fn tcp_received_now(c: &TcpStream) -> u64 {
    zcnet::tcp_info::tcp_info(c)
        .unwrap()
        .bytes_received
        .unwrap()
}

/// The first offset where `got` is not `want`'s start, if any.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or((got.len() > want.len()).then_some(want.len()))
}

/// Sends `data` to `to`, ends the stream, and reads to the end (the relay passing the
/// destination's FIN back).
pub fn send_all(to: SocketAddr, data: Vec<u8>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(to).unwrap();
        s.write_all(&data).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    })
}

/// Connects to `to` and only reads, for `quiet`; then ends its stream and reads to the end.
/// Returns what it read.
pub fn read_quietly(to: SocketAddr, quiet: Duration) -> Vec<u8> {
    let mut c = TcpStream::connect(to).unwrap();
    let mut got = Vec::new();
    let until = Instant::now() + quiet;
    let mut buf = [0u8; 256];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("the client's read: {e}"),
        }
    }
    c.shutdown(Shutdown::Write).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.read_to_end(&mut got).unwrap();
    got
}

/// Connects to `to`, sends `data`, and resets the connection (SO_LINGER 0, close): at once, or
/// once the peer's TCP acknowledged every byte.
pub fn send_then_reset(to: SocketAddr, data: &[u8], after_acknowledged: bool) {
    let mut s = TcpStream::connect(to).unwrap();
    s.write_all(data).unwrap();
    if after_acknowledged {
        let until = Instant::now() + Duration::from_secs(30);
        while zcnet::tcp_info::tcp_info(&s)
            .unwrap()
            .acked_data_bytes()
            .unwrap()
            < data.len() as u64
        {
            assert!(
                Instant::now() < until,
                "the relay's TCP never took the stream"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// Sends `data` to `to`, ends the stream and reads to the end: what came back, and how it
/// ended.
pub fn exchange(to: SocketAddr, data: &[u8]) -> (Vec<u8>, End) {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // The first call after a reset returns it; later ones say EPIPE or end.
    if let Err(e) = s.write_all(data) {
        return (Vec::new(), End::of(&e));
    }
    // A connection reset by now refuses the shutdown (ENOTCONN) without taking the reset's
    // error: the read below gets it.
    let _ = s.shutdown(Shutdown::Write);
    let mut back = Vec::new();
    match s.read_to_end(&mut back) {
        Ok(_) => (back, End::Fin),
        Err(e) => (back, End::of(&e)),
    }
}

/// Checks that `got` is a contiguous piece of `data` that starts at or before `by`: returns
/// where.
pub fn piece_of(data: &[u8], got: &[u8], by: usize) -> usize {
    (0..=by.min(data.len().saturating_sub(got.len())))
        .find(|&at| data[at..].starts_with(got))
        .unwrap_or_else(|| panic!("{} bytes that are no piece of the stream", got.len()))
}

/// The peek methods to test: both, or the discard buffer alone where this kernel has no
/// `SO_PEEK_OFF` on TCP over IPv4 (recorded as a skip of that part). Call it on the test's own
/// thread: the skip names the thread.
pub fn peek_methods() -> Vec<zcnet::peek::Mode> {
    use zcnet::peek::Mode;
    let check = &zcnet::peek::support().ipv4;
    if check.status == zcnet::support::Status::Available {
        vec![Mode::ZeroCopy, Mode::Copy]
    } else {
        netlab::skip::skip(&format!("the peek-offset runs: {}", check.reason));
        vec![Mode::Copy]
    }
}
