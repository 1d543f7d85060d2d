//! The data streams of a test: each a thread that sends blocks or receives them, counting bytes
//! (and, UDP, datagrams); ended by the test's stop (its socket shut down) or, sending, by the
//! byte budget (`-n`). A TCP sender goes by `write`, `MSG_ZEROCOPY` (every block, or where the
//! library's `Mode::Auto` finds it pays), io_uring `SEND_ZC` from registered buffers, or
//! `sendfile` from a file of one block (`-Z`, as iperf3's); a TCP receiver maps pages with
//! `TCP_ZEROCOPY_RECEIVE` where the kernel can, or reads. UDP streams go by `send` and `recv`:
//! each datagram carries its own header.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcnet::ZeroCopyCounters as _;

use super::opt::{Receive, Send};
use super::proto;
use super::udp;

/// How long a stopped test's receiver waits for bytes still on their way.
pub const QUIET: Duration = Duration::from_millis(200);

/// Bytes a TCP receiver maps (or reads) a call at most, and its low-water mark: 512 KiB, as
/// `tcp_mmap` takes them.
const RECEIVE_WINDOW: usize = 512 * 1024;

/// How long a receiver reads on after the test stopped, at most (a peer that keeps sending
/// after its end of the test does not hold it).
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Whether a receiver should stop now: the test stopped [`DRAIN_MAX`] ago (`since` notes when
/// this receiver first saw it stopped).
fn drained_enough(shared: &Shared, since: &mut Option<Instant>) -> bool {
    shared.stopped() && since.get_or_insert_with(Instant::now).elapsed() > DRAIN_MAX
}

/// Send calls between two reads of the error queue (`MSG_ZEROCOPY`).
const REAP_EVERY: u64 = 32;

/// A data stream's socket.
pub enum Socket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

impl Socket {
    /// (local, remote) addresses.
    pub fn addrs(&self) -> io::Result<(std::net::SocketAddr, std::net::SocketAddr)> {
        match self {
            Socket::Tcp(s) => Ok((s.local_addr()?, s.peer_addr()?)),
            Socket::Udp(s) => Ok((s.local_addr()?, s.peer_addr()?)),
        }
    }

    fn dup(&self) -> io::Result<OwnedFd> {
        match self {
            Socket::Tcp(s) => s.as_fd().try_clone_to_owned(),
            Socket::Udp(s) => s.as_fd().try_clone_to_owned(),
        }
    }
}

/// What a stream's thread did, beyond its bytes.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// The calls it went by (`write`, `MSG_ZEROCOPY`, `TCP_ZEROCOPY_RECEIVE`, ...).
    pub path: &'static str,
    /// Bytes the kernel sent from our pages or mapped into ours: no copy.
    pub zero_copy_bytes: u64,
    /// Bytes copied (by the call, or by the kernel after all: completions flagged copied).
    pub copied_bytes: u64,
    /// Why it went by copy where it asked for zero copy, in one line.
    pub fallback: Option<String>,
    /// UDP: what the receiver counted (`packets`: the sender's datagrams when sending).
    pub udp: udp::Counts,
}

/// Live counts of a stream, read by the interval lines.
#[derive(Default)]
struct Live {
    bytes: AtomicU64,
    packets: AtomicU64,
    /// A UDP receiver's counts as iperf3 keeps them, taken together (an interval reads all
    /// three of one moment).
    udp: std::sync::Mutex<UdpLive>,
}

/// A UDP receiver's counts so far, for an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UdpLive {
    /// The highest packet number seen (the datagrams sent, as the receiver knows them).
    pub highest: u64,
    pub lost: u64,
    /// Seconds.
    pub jitter: f64,
}

impl Live {
    /// Counts `n` bytes more; returns the stream's bytes so far.
    fn add(&self, n: usize) -> u64 {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64
    }
}

/// One stream of a test.
pub struct Stream {
    /// A second descriptor of its socket: to shut it down, and to read `TCP_INFO`.
    handle: OwnedFd,
    /// A TCP stream (else UDP).
    tcp: bool,
    live: Arc<Live>,
    worker: Option<JoinHandle<io::Result<Tally>>>,
    tally: Option<Tally>,
}

/// What the senders of a test share: the bytes left to send (`-n`: `None`, no budget) and the
/// stop.
pub struct Shared {
    pub left: Option<AtomicU64>,
    pub stop: AtomicBool,
}

impl Shared {
    pub fn new(budget: u64) -> Arc<Shared> {
        Arc::new(Shared {
            left: (budget > 0).then(|| AtomicU64::new(budget)),
            stop: AtomicBool::new(false),
        })
    }

    /// Takes up to `want` bytes of the budget: what may be sent now (0: none left, or stopped).
    /// `whole`: a block as a whole (a datagram), however little of the budget is left.
    fn take(&self, want: usize, whole: bool) -> usize {
        if self.stopped() {
            return 0;
        }
        let Some(left) = &self.left else {
            return want;
        };
        let mut got = 0;
        let _ = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
            got = usize::try_from(l).unwrap_or(usize::MAX).min(want);
            (got > 0).then(|| l - got as u64)
        });
        if whole && got > 0 { want } else { got }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// How the streams of a test run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// This side sends (else it receives).
    pub sending: bool,
    /// Bytes a block (a write, a datagram).
    pub len: usize,
    /// Bits per second a stream at most (`-b`), 0: no limit.
    pub rate: u64,
    pub send: Send,
    pub receive: Receive,
    /// UDP: once the budget is spent and the test still runs this long after, send on (without
    /// a budget) until it stops. `None`: stop at the budget.
    pub past_budget: Option<Duration>,
}

/// A test's streams started on `sockets`.
pub fn start(sockets: Vec<Socket>, plan: Plan, shared: &Arc<Shared>) -> io::Result<Vec<Stream>> {
    sockets
        .into_iter()
        .map(|s| {
            let shared = shared.clone();
            let handle = s.dup()?;
            let tcp = matches!(s, Socket::Tcp(_));
            Ok(match (s, plan.sending) {
                (Socket::Tcp(s), true) => {
                    Stream::start(handle, tcp, move |live| send_tcp(s, plan, &shared, &live))
                }
                (Socket::Tcp(s), false) => Stream::start(handle, tcp, move |live| {
                    receive_tcp(s, plan, &shared, &live)
                }),
                (Socket::Udp(s), true) => {
                    Stream::start(handle, tcp, move |live| send_udp(&s, plan, &shared, &live))
                }
                (Socket::Udp(s), false) => Stream::start(handle, tcp, move |live| {
                    receive_udp(&s, plan, &shared, &live)
                }),
            })
        })
        .collect()
}

/// A block of `len` bytes of iperf3-like payload (a repeating pattern).
fn block(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Holds a sender to `rate` bits per second: sleeps until `sent` bytes are due.
struct Pacer {
    rate: u64,
    start: Instant,
}

impl Pacer {
    fn new(rate: u64) -> Pacer {
        Pacer {
            rate,
            start: Instant::now(),
        }
    }

    fn wait(&self, sent: u64, shared: &Shared) {
        if self.rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(sent as f64 * 8.0 / self.rate as f64);
        while !shared.stopped() {
            let now = self.start.elapsed();
            if now >= due {
                return;
            }
            // iperf3's pacing timer ticks each millisecond.
            std::thread::sleep((due - now).min(Duration::from_millis(1)));
        }
    }
}

/// The end of a send that failed: the test's stop shuts the socket down under it.
fn ended(e: io::Error, shared: &Shared) -> io::Result<()> {
    if shared.stopped() { Ok(()) } else { Err(e) }
}

fn send_tcp(s: TcpStream, plan: Plan, shared: &Shared, live: &Live) -> io::Result<Tally> {
    let pacer = Pacer::new(plan.rate);
    match plan.send {
        Send::Write => {
            let block = block(plan.len);
            let mut w = &s;
            loop {
                let n = shared.take(plan.len, false);
                if n == 0 {
                    break;
                }
                if let Err(e) = w.write_all(&block[..n]) {
                    ended(e, shared)?;
                    break;
                }
                pacer.wait(live.add(n), shared);
            }
            let bytes = live.bytes.load(Ordering::Relaxed);
            Ok(Tally {
                path: "write",
                copied_bytes: bytes,
                ..Tally::default()
            })
        }
        Send::MsgZeroCopy { auto } => send_msg_zerocopy(s, plan, auto, shared, live, &pacer),
        Send::UringFixed => send_uring(s, plan, shared, live, &pacer),
        Send::Sendfile => send_file(&s, plan, shared, live, &pacer),
    }
}

/// `MSG_ZEROCOPY` (every block, or as `Mode::Auto` learns), blocks loaned as `Arc<[u8]>`: the
/// same block goes again while the kernel still holds it (nobody writes it).
fn send_msg_zerocopy(
    s: TcpStream,
    plan: Plan,
    auto: bool,
    shared: &Shared,
    live: &Live,
    pacer: &Pacer,
) -> io::Result<Tally> {
    use zcnet::msg_zerocopy::{Config, CopiedPolicy, Mode, ZeroCopySender};
    let config = if auto {
        Config {
            mode: Mode::Auto,
            ..Config::default()
        }
    } else {
        Config {
            mode: Mode::ZeroCopy,
            threshold: 0,
            policy: CopiedPolicy::Keep,
            ..Config::default()
        }
    };
    let mut tx = ZeroCopySender::new(s, config).map_err(|e| io::Error::other(e.error))?;
    let full: Arc<[u8]> = block(plan.len).into();
    let mut tail: Option<Arc<[u8]>> = None;
    let mut calls = 0u64;
    loop {
        let n = shared.take(plan.len, false);
        if n == 0 {
            break;
        }
        let buf = if n == plan.len {
            full.clone()
        } else {
            tail.get_or_insert_with(|| full[..n].into()).clone()
        };
        if let Err(e) = tx.send(buf) {
            ended(e.error, shared)?;
            break;
        }
        pacer.wait(live.add(n), shared);
        calls += 1;
        if calls % REAP_EVERY == 0 {
            tx.reap()?;
            tx.returned().for_each(drop);
        }
    }
    if let Err(e) = tx.drain(Duration::from_secs(5)) {
        ended(e, shared)?;
    }
    let c = tx.counters();
    let why = tx.fallback_reason().map(str::to_owned).or_else(|| {
        let a = c.auto;
        let by_copy = a.copy_bytes + a.backoff_bytes;
        if auto && by_copy > 0 {
            let told = if c.completed_calls > 0 {
                format!(
                    " ({} of {} completions flagged copied: a receiver on this host)",
                    c.copied_calls, c.completed_calls
                )
            } else {
                " (none tried: its prior for this route and size said copy)".to_owned()
            };
            Some(format!(
                "Mode::Auto sent {by_copy} of {} bytes by copy, where zero copy does not pay \
                 or the kernel copies anyway{told}",
                by_copy + a.zero_copy_bytes
            ))
        } else {
            flagged_copied(c.copied_calls, c.completed_calls)
        }
    });
    Ok(Tally {
        path: if auto {
            "MSG_ZEROCOPY (auto)"
        } else {
            "MSG_ZEROCOPY"
        },
        zero_copy_bytes: c.zero_copy_bytes(),
        copied_bytes: c.copied_bytes(),
        fallback: why,
        ..Tally::default()
    })
}

/// Why zero-copy sends were copied after all, where completions said so.
fn flagged_copied(copied: u64, completed: u64) -> Option<String> {
    (copied > 0).then(|| {
        format!(
            "the kernel flagged {copied} of {completed} completions copied: it copies for a \
             receiver on this host (loopback, a veth into a namespace); zero copy pays toward \
             another host"
        )
    })
}

/// io_uring `SEND_ZC` from a registered pool of blocks, each sent again as it comes back; a
/// budget's last part block goes by `write` once the ring is empty.
fn send_uring(
    s: TcpStream,
    plan: Plan,
    shared: &Shared,
    live: &Live,
    pacer: &Pacer,
) -> io::Result<Tally> {
    use zcnet::uring::{Config, Mode, Pool, UringSender};
    const BLOCKS: usize = 8;
    let pool = Pool::new(BLOCKS, plan.len)?;
    let config = Config {
        mode: Mode::ZeroCopyFixed,
        window: BLOCKS,
        ..Config::default()
    };
    let mut w = s.try_clone()?;
    let mut tx = UringSender::with_pool(s, config, &pool).map_err(|e| io::Error::other(e.error))?;
    let fallback = tx.fallback_reason().map(str::to_owned);
    let pattern = block(plan.len);
    let mut spare: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    for b in &mut spare {
        b.copy_from_slice(&pattern);
    }
    // A block counts as sent when it comes back without an error (the kernel sent it), not
    // when it is queued: a test's end shuts the socket under what is still queued.
    let mut tail = 0;
    let mut queued = 0u64;
    'send: loop {
        let n = shared.take(plan.len, false);
        if n == 0 {
            break;
        }
        if n < plan.len {
            tail = n;
            break;
        }
        let buf = loop {
            if let Some(b) = spare.pop() {
                break b;
            }
            // Every block loaned: wait for one (not a spin on the completion queue).
            match tx.wait_returned(Duration::from_millis(100))? {
                Some(r) => match r.error {
                    Some(e) => {
                        ended(e, shared)?;
                        break 'send;
                    }
                    None => {
                        live.add(plan.len);
                        break r.buf;
                    }
                },
                None if shared.stopped() => break 'send,
                None => {}
            }
        };
        if let Err(e) = tx.send(buf) {
            ended(e.error, shared)?;
            break;
        }
        queued += n as u64;
        pacer.wait(queued, shared);
    }
    if let Err(e) = tx.drain(Duration::from_secs(5)) {
        ended(e, shared)?;
    }
    let mut failed = None;
    for r in tx.returned() {
        match r.error {
            None => {
                live.add(plan.len);
            }
            Some(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        ended(e, shared)?;
    }
    let c = tx.counters();
    let fallback = fallback.or_else(|| flagged_copied(c.copied, c.copied + c.not_copied));
    let mut copied = c.copied_bytes();
    if tail > 0 {
        w.write_all(&pattern[..tail])?;
        live.add(tail);
        copied += tail as u64;
    }
    Ok(Tally {
        path: "io_uring SEND_ZC (registered buffers)",
        zero_copy_bytes: c.zero_copy_bytes(),
        copied_bytes: copied,
        fallback,
        ..Tally::default()
    })
}

/// A file of one block that `sendfile` sends from, as iperf3's `-Z` does: unnamed (`O_TMPFILE`)
/// in `$TMPDIR` or /tmp, else a named one removed at once.
fn block_file(len: usize) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = std::env::var_os("TMPDIR").map_or_else(|| "/tmp".into(), std::path::PathBuf::from);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(&dir)
        .or_else(|_| {
            let path = dir.join(format!("zcnet-iperf3.{}", std::process::id()));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            let _ = std::fs::remove_file(&path);
            f
        })?;
    f.write_all(&block(len))?;
    Ok(f)
}

fn send_file(
    s: &TcpStream,
    plan: Plan,
    shared: &Shared,
    live: &Live,
    pacer: &Pacer,
) -> io::Result<Tally> {
    use zcnet::file::{Config, FileSender, Mode};
    let file = block_file(plan.len)?;
    let mut tx = FileSender::new(
        s,
        Config {
            mode: Mode::Sendfile,
            ..Config::default()
        },
    )
    .map_err(io::Error::other)?;
    loop {
        let n = shared.take(plan.len, false);
        if n == 0 {
            break;
        }
        if let Err(e) = tx.send_file(&file, 0, n as u64) {
            ended(io::Error::other(e), shared)?;
            break;
        }
        pacer.wait(live.add(n), shared);
    }
    let c = tx.counters();
    Ok(Tally {
        path: "sendfile",
        zero_copy_bytes: c.zero_copy_bytes(),
        copied_bytes: c.copied_bytes(),
        fallback: tx.fallback_reason().map(str::to_owned),
        ..Tally::default()
    })
}

/// Receives to the end of the stream, or, once the test stopped, to the first [`QUIET`] without
/// a byte (what the peer sent before its end of the test is counted; a peer that keeps its
/// streams open until the results are exchanged, as iperf3 does, does not hold it).
fn receive_tcp(s: TcpStream, plan: Plan, shared: &Shared, live: &Live) -> io::Result<Tally> {
    use zcnet::tcp_rx::{Config, Mode, RxError, TcpZeroCopyReceiver};
    let mode = match plan.receive {
        Receive::Map => Mode::ZeroCopy,
        Receive::Read => Mode::Copy,
    };
    // Woken per window (as `tcp_mmap` and `zcnet recv` are): a call maps many pages at once.
    // What is left below the mark when the stream pauses (the end of a test, `-b`) is taken
    // with the mark at one byte, then the mark goes back up.
    let window = RECEIVE_WINDOW.max(plan.len.min(1 << 20));
    let config = Config {
        mode,
        window,
        rcvlowat: Some(window),
        timeout: Some(QUIET),
        ..Config::default()
    };
    let mut rx = TcpZeroCopyReceiver::new(s, config).map_err(io::Error::other)?;
    let mut lowered = false;
    let mut since = None;
    loop {
        if drained_enough(shared, &mut since) {
            break;
        }
        match rx.recv() {
            Ok(Some(got)) => {
                live.bytes.fetch_add(got.len() as u64, Ordering::Relaxed);
                if lowered && !shared.stopped() {
                    rx.set_rcvlowat(window).map_err(io::Error::other)?;
                    lowered = false;
                }
            }
            Ok(None) => break,
            Err(RxError::BelowLowWater { .. }) => {
                rx.set_rcvlowat(1).map_err(io::Error::other)?;
                lowered = true;
            }
            Err(RxError::TimedOut(_)) if shared.stopped() => break,
            Err(RxError::TimedOut(_)) => {}
            Err(_) if shared.stopped() => break,
            Err(e) => return Err(io::Error::other(e)),
        }
    }
    let c = rx.counters();
    Ok(Tally {
        path: match mode {
            Mode::Copy => "read",
            _ => "TCP_ZEROCOPY_RECEIVE",
        },
        zero_copy_bytes: c.mapped_bytes,
        copied_bytes: c.copied_bytes,
        fallback: rx.fallback_reason().map(str::to_owned),
        ..Tally::default()
    })
}

fn send_udp(s: &UdpSocket, plan: Plan, shared: &Shared, live: &Live) -> io::Result<Tally> {
    let pacer = Pacer::new(plan.rate);
    let mut block = block(plan.len);
    let mut number = 0u32;
    let mut unbounded = false;
    loop {
        let n = if unbounded {
            plan.len
        } else {
            shared.take(plan.len, true)
        };
        if shared.stopped() {
            break;
        }
        if n == 0 {
            match plan.past_budget {
                Some(wait) if wait_for_stop(shared, wait) => break,
                Some(_) => {
                    unbounded = true;
                    continue;
                }
                None => break,
            }
        }
        number = number.wrapping_add(1);
        udp::stamp(&mut block, number);
        loop {
            match s.send(&block[..n]) {
                Ok(_) => break,
                // A full queue (the device's, on a fast path): a moment, then again.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    ended(e, shared)?;
                    return Ok(udp_tally(live, number));
                }
            }
        }
        live.packets.fetch_add(1, Ordering::Relaxed);
        pacer.wait(live.add(n), shared);
    }
    Ok(udp_tally(live, number))
}

/// Waits up to `wait` for the test to stop: whether it did.
fn wait_for_stop(shared: &Shared, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if shared.stopped() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.stopped()
}

fn udp_tally(live: &Live, number: u32) -> Tally {
    Tally {
        path: "send",
        copied_bytes: live.bytes.load(Ordering::Relaxed),
        fallback: Some(
            "UDP goes by copy: each datagram carries its own header (sequence number and time)"
                .into(),
        ),
        udp: udp::Counts::sent(u64::from(number)),
        ..Tally::default()
    }
}

fn receive_udp(s: &UdpSocket, plan: Plan, shared: &Shared, live: &Live) -> io::Result<Tally> {
    s.set_read_timeout(Some(QUIET))?;
    let mut buf = vec![0u8; plan.len.max(udp::MAX_DATAGRAM)];
    let mut counts = udp::Counts::default();
    let mut since = None;
    loop {
        if drained_enough(shared, &mut since) {
            break;
        }
        match s.recv(&mut buf) {
            Ok(0) if shared.stopped() => break,
            Ok(n) => {
                live.bytes.fetch_add(n as u64, Ordering::Relaxed);
                live.packets.fetch_add(1, Ordering::Relaxed);
                if let Some((sent, number)) = udp::read_header(&buf[..n]) {
                    counts.arrived(number, sent, udp::now());
                    *live.udp.lock().unwrap_or_else(|p| p.into_inner()) = UdpLive {
                        highest: counts.packets,
                        lost: counts.lost,
                        jitter: counts.jitter,
                    };
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if shared.stopped() => break,
            // Waiting for the first datagram, or a port unreachable from an earlier one.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Tally {
        path: "recv",
        copied_bytes: live.bytes.load(Ordering::Relaxed),
        udp: counts,
        ..Tally::default()
    })
}

impl Stream {
    fn start(
        handle: OwnedFd,
        tcp: bool,
        work: impl FnOnce(Arc<Live>) -> io::Result<Tally> + std::marker::Send + 'static,
    ) -> Stream {
        let live = Arc::new(Live::default());
        let l = live.clone();
        let worker = std::thread::spawn(move || work(l));
        Stream {
            handle,
            tcp,
            live,
            worker: Some(worker),
            tally: None,
        }
    }

    /// Whether its thread ended (budget spent, end of stream, error).
    pub fn finished(&self) -> bool {
        self.worker.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Ends it: shut down (a blocked read or write returns), then waits for its thread.
    pub fn end(&mut self) -> io::Result<()> {
        let _ = socket2::SockRef::from(&self.handle).shutdown(Shutdown::Both);
        self.join()
    }

    /// Waits for its thread until `deadline`, then ends it (a sender blocked on a peer that
    /// reads nothing returns once its socket is shut down).
    pub fn join_by(&mut self, deadline: Instant) -> io::Result<()> {
        while !self.finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.finished() {
            self.join()
        } else {
            self.end()
        }
    }

    /// Waits for its thread.
    pub fn join(&mut self) -> io::Result<()> {
        match self.worker.take() {
            Some(w) => {
                let t = w
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a stream's thread panicked")))?;
                self.tally = Some(t);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Bytes sent or received so far.
    pub fn count(&self) -> u64 {
        self.live.bytes.load(Ordering::Relaxed)
    }

    /// Datagrams sent or received so far (UDP).
    pub fn packets(&self) -> u64 {
        self.live.packets.load(Ordering::Relaxed)
    }

    /// A UDP receiver's counts so far.
    pub fn udp_live(&self) -> UdpLive {
        *self.live.udp.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What its thread did (once it ended).
    pub fn tally(&self) -> Tally {
        self.tally.clone().unwrap_or_default()
    }

    /// This TCP stream's `TCP_INFO` now; `None` for UDP (or where the call failed).
    pub fn tcp_info(&self) -> Option<zcnet::tcp_info::TcpInfo> {
        self.tcp
            .then(|| zcnet::tcp_info::tcp_info(&self.handle).ok())
            .flatten()
    }

    /// This TCP stream's congestion control (`TCP_CONGESTION`: `cubic`, `bbr`, ...).
    pub fn congestion(&self) -> Option<String> {
        let name = self
            .tcp
            .then(|| socket2::SockRef::from(&self.handle).tcp_congestion().ok())
            .flatten()?;
        let name = String::from_utf8_lossy(&name);
        Some(name.trim_end_matches('\0').to_owned()).filter(|n| !n.is_empty())
    }

    /// Segments this TCP stream retransmitted (`tcpi_total_retrans`); `None` for UDP.
    pub fn retransmits(&self) -> Option<u64> {
        self.tcp_info().map(|i| u64::from(i.total_retrans))
    }

    /// Bytes of this (TCP) stream its peer acknowledged, where the kernel says.
    pub fn acked(&self) -> Option<u64> {
        zcnet::tcp_info::tcp_info(&self.handle)
            .ok()
            .and_then(|i| i.acked_data_bytes())
    }
}

/// This process's CPU time so far, all its threads: (user, system) seconds, from
/// `/proc/self/stat` (what iperf3's `cpu_util` reports, from `getrusage(RUSAGE_SELF)`).
pub fn cpu_now() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (utime, stime) = crate::measure::cpu::parse_pid_stat(&stat)?;
    let hz = crate::measure::cpu::ticks_per_second();
    Some((utime as f64 / hz, stime as f64 / hz))
}

/// This side's results: each stream's bytes (and, UDP, datagrams), the CPU it took.
pub fn results(
    streams: &[Stream],
    seconds: f64,
    cpu: Option<&(f64, f64)>,
    sender: bool,
) -> proto::Results {
    let pct = |s: f64| {
        if seconds > 0.0 {
            100.0 * s / seconds
        } else {
            0.0
        }
    };
    let (user, sys) = cpu.map_or((0.0, 0.0), |c| (pct(c.0), pct(c.1)));
    proto::Results {
        cpu_util_total: user + sys,
        cpu_util_user: user,
        cpu_util_system: sys,
        // As iperf3: a TCP sender counts its retransmits (1), a receiver says -1, UDP 0.
        sender_has_retransmits: match (sender, streams.iter().all(|s| s.tcp)) {
            (true, true) => 1,
            (false, _) => -1,
            (true, false) => 0,
        },
        congestion_used: streams.iter().find_map(Stream::congestion),
        streams: streams
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let u = s.tally().udp;
                let whole = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                proto::StreamResult {
                    id: proto::stream_id(k),
                    bytes: whole(s.count()),
                    retransmits: match (sender, s.retransmits()) {
                        (true, Some(r)) => whole(r),
                        (true, None) => 0,
                        (false, _) => -1,
                    },
                    jitter: u.jitter,
                    errors: whole(u.lost),
                    packets: whole(if u.packets > 0 {
                        u.packets
                    } else {
                        s.packets()
                    }),
                    start_time: 0.0,
                    end_time: seconds,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything 300-byte takers get of a 1000-byte budget.
    fn spent(whole: bool) -> usize {
        let s = Shared::new(1000);
        std::iter::from_fn(|| Some(s.take(300, whole)).filter(|&n| n > 0)).sum()
    }

    #[test]
    fn a_budget_is_spent_exactly_across_takers() {
        assert_eq!(spent(false), 1000);
        assert_eq!(Shared::new(0).take(300, false), 300);
        let s = Shared::new(10);
        s.stop.store(true, Ordering::Relaxed);
        assert_eq!(s.take(300, false), 0);
    }

    #[test]
    fn datagrams_take_the_budget_whole() {
        // Four datagrams: the last one whole, past the budget.
        assert_eq!(spent(true), 1200);
    }
}
