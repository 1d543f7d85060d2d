//! The far side of each bench, as `zcnet serve` runs it: a [`Role`] prepared (its data socket
//! opened, so that `ready` can name the port), then run on a thread of its own, measured there
//! (`RUSAGE_THREAD`), bounded by the run's time plus [`GRACE`] and by the server's byte limit
//! ([`super::bounds`]). The receivers, the sender and the frame generator are here; the HTTP
//! clients of `async-serve` are `fetch`.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::pattern::{self, Verifier};
use zcnet::msg_zerocopy::{self, CopiedPolicy, ZeroCopySender};

use super::bounds::{Bounds, GRACE, Signals, far, work};
use super::fetch::fetch;
use super::proto::{Check, Key, Limits, Proto, Role};
use crate::measure::{Far, Meter, pin};

/// A role with its data socket open.
pub struct Prepared {
    /// The data port on the server's address (0 where the server connects out).
    pub port: u16,
    /// The run's key, for `ready`.
    pub key: Key,
    /// Whose data the run takes.
    owner: Owner,
    job: Job,
}

/// What makes data the run's own: it comes from the session's client, and shows the run's key
/// first. Anything else is turned away, and the run waits on for its client.
struct Owner {
    /// The control connection's peer.
    peer: IpAddr,
    key: Key,
}

enum Job {
    ReceiveTcp(TcpListener, Check, Option<u64>),
    ReceiveUdp(UdpSocket),
    Send(TcpListener, bool),
    Generate(UdpSocket, SocketAddr, usize),
    Fetch(SocketAddr, usize, u64),
}

/// Bytes of Ethernet, IPv4 and UDP headers in a generated frame.
const HEADERS: usize = 42;

/// Bytes of Ethernet, IP and UDP headers in a frame to `peer`.
fn headers(peer: IpAddr) -> usize {
    match peer {
        IpAddr::V4(_) => HEADERS,
        // The IPv6 header is 20 bytes longer.
        IpAddr::V6(_) => HEADERS + 20,
    }
}

/// Checks `role` against `limits` and opens its socket on `local` (the address the client
/// reached the server on); `peer` is the client's address.
///
/// # Errors
/// The role asks for more than the limits allow, or its socket cannot be opened.
pub fn prepare(
    role: &Role,
    seconds: f64,
    limits: &Limits,
    local: IpAddr,
    peer: IpAddr,
) -> anyhow::Result<Prepared> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= limits.max_seconds) {
        bail!(
            "a run of {seconds} s: this server runs 0 < seconds <= {} (its --max-seconds)",
            limits.max_seconds
        );
    }
    let bind_tcp = |mss: Option<i32>| -> anyhow::Result<TcpListener> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(SocketAddr::new(local, 0)),
            socket2::Type::STREAM,
            None,
        )?;
        if let Some(m) = mss {
            s.set_tcp_mss(m as u32).context("TCP_MAXSEG")?;
        }
        s.bind(&SocketAddr::new(local, 0).into())
            .with_context(|| format!("binding a data port on {local}"))?;
        s.listen(8)?;
        Ok(s.into())
    };
    let job = match *role {
        Role::Receive {
            proto: Proto::Tcp,
            check,
            rate_bps,
        } => {
            if let Check::Pool { size, span } = check
                && (size == 0 || span == 0)
            {
                bail!("a pool check needs a size and a span above 0");
            }
            if let Check::Buffers { size, count } = check
                && (!(1..=1 << 20).contains(&size) || !(1..=1 << 24).contains(&count))
            {
                bail!("a buffers check needs 1 to 2^20 bytes and 1 to 2^24 buffers");
            }
            if rate_bps.is_some_and(|r| r < 1_000_000) {
                bail!("a receive rate under 1 Mbit/s");
            }
            Job::ReceiveTcp(bind_tcp(None)?, check, rate_bps)
        }
        Role::Receive {
            proto: Proto::Udp,
            check,
            ..
        } => {
            if check != Check::Count {
                bail!("datagrams are counted, not checked");
            }
            let s = UdpSocket::bind(SocketAddr::new(local, 0))
                .with_context(|| format!("binding a data port on {local}"))?;
            // Room for bursts: the client sends as fast as it can.
            let _ = socket2::SockRef::from(&s).set_recv_buffer_size(4 << 20);
            Job::ReceiveUdp(s)
        }
        Role::Send { zerocopy, mss } => {
            if mss.is_some_and(|m| !(88..=65535).contains(&m)) {
                bail!("TCP_MAXSEG outside 88..=65535");
            }
            Job::Send(bind_tcp(mss)?, zerocopy)
        }
        Role::Generate { frame, port } => {
            if !(HEADERS + 1..=9000).contains(&frame) || port == 0 {
                bail!(
                    "frames of {frame} bytes to port {port}: frames are 43..=9000 bytes, the port not 0"
                );
            }
            let s = UdpSocket::bind(SocketAddr::new(local, 0))
                .with_context(|| format!("binding on {local}"))?;
            Job::Generate(s, SocketAddr::new(peer, port), frame)
        }
        Role::Fetch {
            port,
            clients,
            size,
        } => {
            if !(1..=limits.max_clients).contains(&clients) || port == 0 || size == 0 {
                bail!(
                    "a fetch by {clients} clients of {size} bytes from port {port}: this server \
                     runs 1..={} clients (its --max-clients), a size above 0",
                    limits.max_clients
                );
            }
            Job::Fetch(SocketAddr::new(peer, port), clients, size)
        }
    };
    // The pattern is generated on first use: here, not inside a measured run.
    let _ = pattern::chunk_at(0, 1);
    let port = match &job {
        Job::ReceiveTcp(l, ..) | Job::Send(l, _) => l.local_addr()?.port(),
        Job::ReceiveUdp(s) => s.local_addr()?.port(),
        Job::Generate(..) | Job::Fetch(..) => 0,
    };
    let key = Key::new().context("reading /dev/urandom for the run's key")?;
    Ok(Prepared {
        port,
        key: key.clone(),
        owner: Owner { peer, key },
        job,
    })
}

impl Prepared {
    /// Runs the role on this thread (pinned to CPU 1, where the labs put the far side).
    ///
    /// # Errors
    /// The run failed, broke a limit, or the session ended under it.
    pub fn run(self, seconds: f64, max_bytes: u64, signals: &Signals) -> anyhow::Result<Far> {
        pin(1);
        let bounds = Bounds {
            seconds,
            deadline: Instant::now() + Duration::from_secs_f64(seconds) + GRACE,
            max_bytes,
            signals,
        };
        match self.job {
            Job::ReceiveTcp(l, check, rate) => receive_tcp(&l, &self.owner, check, rate, &bounds),
            Job::ReceiveUdp(s) => receive_udp(&s, &self.owner, &bounds),
            Job::Send(l, zc) => send(&l, &self.owner, zc, &bounds),
            Job::Generate(s, to, frame) => generate(&s, to, frame, &bounds),
            Job::Fetch(addr, clients, size) => fetch(addr, clients, size, &bounds),
        }
    }
}

/// Most connections waiting to show a key at once; the oldest goes when another comes.
const MAX_CANDIDATES: usize = 16;

/// How long a connection from the client's address has to show the key (the client sends it
/// as soon as it is connected).
const KEY_WAIT: Duration = Duration::from_secs(5);

/// A connection from the client's address that has not shown the whole key yet.
struct Candidate {
    conn: TcpStream,
    from: SocketAddr,
    got: Vec<u8>,
    since: Instant,
}

/// Where a candidate is.
enum Shown {
    /// The whole key: the run's connection.
    Key,
    /// Not yet.
    NotYet,
    /// Another key, the end of the connection, or no key in time: not the run's.
    Refused(&'static str),
}

impl Candidate {
    /// Reads what has come of the key, never a byte past it.
    fn read_key(&mut self, key: &Key) -> Shown {
        let mut part = [0u8; Key::LEN];
        let want = Key::LEN - self.got.len();
        match self.conn.read(&mut part[..want]) {
            Ok(0) => return Shown::Refused("closed before the run's key"),
            Ok(n) => self.got.extend_from_slice(&part[..n]),
            Err(e) if timed_out(&e) => {}
            Err(_) => return Shown::Refused("failed before the run's key"),
        }
        if self.got.len() == Key::LEN {
            if key.is(&self.got) {
                Shown::Key
            } else {
                Shown::Refused("another key")
            }
        } else if self.since.elapsed() > KEY_WAIT {
            Shown::Refused("no key in time")
        } else {
            Shown::NotYet
        }
    }
}

/// Accepts the run's one connection: the first from the client's address to show the run's
/// key, its key read. Others are closed (before, the first to reach the port took the run,
/// whoever it was). Polls, so that the bounds hold.
fn accept(l: &TcpListener, owner: &Owner, bounds: &Bounds) -> anyhow::Result<TcpStream> {
    l.set_nonblocking(true)?;
    let mut candidates: Vec<Candidate> = Vec::new();
    loop {
        match l.accept() {
            Ok((_, from)) if from.ip() != owner.peer => {
                turned_away(from, "not the session's client");
                continue;
            }
            Ok((conn, from)) => {
                conn.set_nonblocking(true)?;
                if candidates.len() == MAX_CANDIDATES {
                    let oldest = candidates.remove(0);
                    turned_away(oldest.from, "too many connections waiting");
                }
                candidates.push(Candidate {
                    conn,
                    from,
                    got: Vec::with_capacity(Key::LEN),
                    since: Instant::now(),
                });
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("accept"),
        }
        let mut i = 0;
        while i < candidates.len() {
            match candidates[i].read_key(&owner.key) {
                Shown::Key => {
                    let c = candidates.remove(i).conn;
                    c.set_nonblocking(false)?;
                    return Ok(c);
                }
                Shown::NotYet => i += 1,
                Shown::Refused(why) => turned_away(candidates.remove(i).from, why),
            }
        }
        bounds.check(0).context("waiting for the data connection")?;
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Says why data from `from` is not taken for the run (it is closed or dropped).
fn turned_away(from: SocketAddr, why: &str) {
    eprintln!("zcnet serve: data from {from} turned away: {why}");
}

fn receive_tcp(
    l: &TcpListener,
    owner: &Owner,
    check: Check,
    rate: Option<u64>,
    bounds: &Bounds,
) -> anyhow::Result<Far> {
    let mut c = accept(l, owner, bounds)?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut verifier = match check {
        Check::Count => None,
        Check::Pattern => Some(Verifier::new()),
        Check::Pool { size, span } => Some(Verifier::pool(size, span)),
        Check::Buffers { size, count } => Some(Verifier::buffers(size as usize, count as usize)),
    };
    // Paced reads take a little at a time, so that the window closes smoothly.
    let mut buf = vec![0u8; if rate.is_some() { 64 << 10 } else { 1 << 20 }];
    let meter = Meter::start();
    let start = Instant::now();
    let mut bytes = 0u64;
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes += n as u64;
                if let Some(v) = &mut verifier {
                    v.check(&buf[..n]);
                }
                if let Some(r) = rate {
                    let due = Duration::from_secs_f64(bytes as f64 * 8.0 / r as f64);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            }
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e).context("receiving"),
        }
        bounds.check(bytes)?;
    }
    let run = meter.finish(work(bytes));
    Ok(far(&run, 1, verifier.as_ref()))
}

/// Whether a read with a timeout only timed out (or was interrupted): try again.
pub(super) fn timed_out(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    matches!(e.kind(), WouldBlock | TimedOut | Interrupted)
}

/// Datagrams from the client's socket until the client's `finish` and then 300 ms without one.
fn receive_udp(s: &UdpSocket, owner: &Owner, bounds: &Bounds) -> anyhow::Result<Far> {
    const QUIET: Duration = Duration::from_millis(300);
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = vec![0u8; 65536];
    introduced(s, owner, &mut buf, bounds)?;
    let meter = Meter::start();
    let (mut bytes, mut datagrams) = (0u64, 0u64);
    let mut last = Instant::now();
    loop {
        match s.recv(&mut buf) {
            // The introduction again, sent before the echo reached the client: not data.
            Ok(n) if owner.key.is(&buf[..n]) => {
                let _ = s.send(owner.key.as_bytes());
            }
            Ok(n) => {
                bytes += n as u64;
                datagrams += 1;
                last = Instant::now();
            }
            Err(e) if timed_out(&e) => {
                if bounds.signals.finish.load(Ordering::Acquire) && last.elapsed() >= QUIET {
                    break;
                }
            }
            Err(e) => return Err(e).context("receiving"),
        }
        bounds.check(bytes)?;
    }
    let run = meter.finish(work(bytes));
    Ok(far(&run, datagrams, None))
}

/// Waits for the client's socket to introduce itself (a datagram of the run's key from the
/// client's address), then takes datagrams from that socket alone (`connect(2)`: the kernel
/// drops the others) and echoes the key, which tells the client to send. Datagrams before the
/// introduction are not the run's: the client sends none.
fn introduced(s: &UdpSocket, owner: &Owner, buf: &mut [u8], bounds: &Bounds) -> anyhow::Result<()> {
    loop {
        match s.recv_from(buf) {
            Ok((n, from)) if from.ip() == owner.peer && owner.key.is(&buf[..n]) => {
                s.connect(from)
                    .context("connecting to the client's socket")?;
                s.send(owner.key.as_bytes()).context("echoing the key")?;
                return Ok(());
            }
            Ok(_) => {}
            Err(e) if timed_out(&e) => {
                if bounds.signals.finish.load(Ordering::Acquire) {
                    bail!("the client finished without its socket introducing itself");
                }
            }
            Err(e) => return Err(e).context("receiving"),
        }
        bounds
            .check(0)
            .context("waiting for the client's socket to introduce itself")?;
    }
}

/// The pattern for the run's seconds in 512 KiB calls, then the write side shut.
fn send(l: &TcpListener, owner: &Owner, zerocopy: bool, bounds: &Bounds) -> anyhow::Result<Far> {
    const CHUNK: usize = 512 * 1024;
    let c = accept(l, owner, bounds)?;
    c.set_write_timeout(Some(GRACE))?;
    let config = msg_zerocopy::Config {
        mode: if zerocopy {
            msg_zerocopy::Mode::ZeroCopy
        } else {
            msg_zerocopy::Mode::Copy
        },
        threshold: 0,
        policy: CopiedPolicy::Keep,
        segment: None,
        ..Default::default()
    };
    // The sender owns the socket: its completions must be its own (zcnet::loan::ExclusiveSocket).
    let mut tx = ZeroCopySender::new(c, config)
        .map_err(|e| e.error)
        .context("enabling SO_ZEROCOPY")?;
    let meter = Meter::start();
    let start = Instant::now();
    let mut off = 0u64;
    while start.elapsed().as_secs_f64() < bounds.seconds {
        let n = (CHUNK as u64).min(bounds.max_bytes - off) as usize;
        if n == 0 {
            break;
        }
        tx.send(pattern::chunk_at(off, n))
            .map_err(|e| e.error)
            .context("send")?;
        off += n as u64;
        tx.reap().context("reading the error queue")?;
        tx.returned().for_each(drop);
        bounds.check(off)?;
    }
    tx.drain(GRACE).context("draining completions")?;
    tx.get_ref().shutdown(std::net::Shutdown::Write)?;
    let run = meter.finish(work(off));
    Ok(far(&run, off.div_ceil(CHUNK as u64), None))
}

/// UDP datagrams making `frame`-byte frames, as fast as the socket takes them: 64 per
/// `sendmmsg(2)` call.
fn generate(s: &UdpSocket, to: SocketAddr, frame: usize, bounds: &Bounds) -> anyhow::Result<Far> {
    use nix::sys::socket::{ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, sendmmsg};
    use std::io::IoSlice;
    use std::os::fd::AsRawFd;
    const BATCH: usize = 64;
    let payload = vec![0x5a; frame - headers(to.ip())];
    let slices: Vec<[IoSlice<'_>; 1]> = (0..BATCH).map(|_| [IoSlice::new(&payload)]).collect();
    let addrs = vec![Some(SockaddrStorage::from(to)); BATCH];
    let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let no_cmsgs: [ControlMessage<'_>; 0] = [];
    let meter = Meter::start();
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < bounds.seconds {
        match sendmmsg(
            s.as_raw_fd(),
            &mut hdrs,
            &slices,
            &addrs,
            no_cmsgs,
            MsgFlags::empty(),
        ) {
            Ok(done) => sent += done.count() as u64,
            // A full send buffer or queue: the device is as busy as it gets.
            Err(nix::errno::Errno::ENOBUFS | nix::errno::Errno::EAGAIN) => {}
            Err(e) => return Err(e).context("sendmmsg"),
        }
        bounds.check(sent * frame as u64)?;
    }
    let run = meter.finish(work(sent * frame as u64));
    Ok(far(&run, sent, None))
}
