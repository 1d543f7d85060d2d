//! `zcnet relay --listen ADDR --to ADDR [--fallback ADDR]`: a TCP relay that keeps the bytes it
//! forwards in the source connection's kernel receive queue until the destination's TCP has
//! acknowledged them, reading them with a peek cursor ([`zcnet::peek`], `SO_PEEK_OFF`).
//!
//! What is guaranteed, source to destination: a byte is dropped from the source's queue only
//! once the destination's TCP acknowledged it (`tcpi_bytes_acked` of `TCP_INFO`). When the
//! destination fails (reset, refused, no acknowledgement for `--ack-timeout`), the relay connects
//! again (the next target first: `--to`, then `--fallback`, in turn) and sends from the first
//! unacknowledged byte, straight from the kernel queue: no user-space retransmit buffer. Bytes a
//! destination's TCP acknowledged but its application never read are outside what a relay can
//! know. The reverse direction (destination to source) is copied as it comes, without that
//! guarantee. Memory per connection: one 64 KiB buffer each way, plus, for the discard-buffer
//! method only, up to `--max-unacked` bytes of discard buffer; unacknowledged bytes stay in the
//! kernel and hold back the source through its receive window.
//!
//! The unacknowledged bytes occupy the source socket's receive buffer, which autotuning sizes by
//! what the application takes per round trip: a relay holding back more than a few hundred KiB
//! needs a larger one (`net.ipv4.tcp_rmem`'s default, or the bound is never reached and the
//! source's window, not `--max-unacked`, limits the bytes in flight downstream).
//!
//! Each connection is one thread with one epoll: new source bytes (edge-triggered `EPOLLIN`),
//! destination acknowledgements (`SO_TIMESTAMPING` `TX_ACK` notifications on its error queue,
//! `EPOLLERR`) and room in its send buffer (`EPOLLOUT`) wake it, with a 2 ms backstop while bytes
//! are unacknowledged (see [`ACK_BACKSTOP`]); it never spins.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use serde::Serialize;
use zcnet::peek::{Method, PeekCounters, PeekCursor};

/// Options of `zcnet relay`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Address to accept connections on (port 0: any; the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Destination.
    #[arg(long, value_name = "ADDR")]
    pub to: SocketAddr,
    /// Second destination, tried in turn with --to when one fails.
    #[arg(long, value_name = "ADDR")]
    pub fallback: Option<SocketAddr>,
    /// How to peek: auto (SO_PEEK_OFF where the kernel has it), peek-offset, discard-buffer.
    #[arg(long, value_enum, default_value = "auto")]
    pub method: MethodArg,
    /// Stop peeking while this many bytes are unacknowledged, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 16)]
    pub max_unacked_mib: u64,
    /// Fail over when no byte is acknowledged for this long, seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub ack_timeout: f64,
    /// Give up on a connection when no destination accepts for this long, seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub connect_timeout: f64,
    /// SO_SNDBUF of the destination sockets, KiB (the kernel doubles it); default: autotuned.
    #[arg(long, value_name = "KIB")]
    pub sndbuf_kib: Option<usize>,
    /// Connections relayed at once; more are closed at once.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_connections: usize,
    /// Relay this many connections, then exit (0: forever).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub count: u64,
    /// Print each finished connection as one JSON line on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `--method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MethodArg {
    /// SO_PEEK_OFF where the kernel has it, else the discard buffer.
    Auto,
    /// SO_PEEK_OFF.
    PeekOffset,
    /// MSG_PEEK through a discard buffer.
    DiscardBuffer,
}

/// How each connection is relayed.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Destinations, tried in turn.
    pub targets: Vec<SocketAddr>,
    /// `None`: the cursor decides.
    pub method: Option<Method>,
    /// Bytes unacknowledged at most.
    pub max_unacked: u64,
    /// No acknowledgement for this long: fail over.
    pub ack_timeout: Duration,
    /// No destination for this long: give up.
    pub connect_timeout: Duration,
    /// `SO_SNDBUF` of destination sockets (the kernel doubles it): bounds the bytes written and
    /// not yet acknowledged, and a full buffer makes the relay's write wait for acknowledgements.
    pub dest_sndbuf: Option<usize>,
    /// Record the unacknowledged bytes at every peek (benchmarks; memory grows with the stream).
    pub sample_unacked: bool,
}

/// What one relayed connection did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ConnStats {
    /// Source address.
    pub peer: String,
    /// `peek-offset` or `discard-buffer`.
    pub method: String,
    /// Bytes of the source stream relayed and acknowledged.
    pub bytes: u64,
    /// Bytes written to destinations, resent ones included.
    pub written: u64,
    /// Bytes sent again after a failover.
    pub resent: u64,
    /// Stream offsets at which each failover resumed.
    pub resumed_at: Vec<u64>,
    /// Why each failover happened.
    pub failures: Vec<String>,
    /// Samples of the bytes unacknowledged, one per peek, when [`Settings::sample_unacked`].
    #[serde(skip)]
    pub unacked_samples: Vec<u64>,
    /// The cursor's counters.
    pub peek: PeekCounters,
}

/// The current destination connection.
struct Dest {
    stream: TcpStream,
    target: usize,
    /// Stream offset of the first byte sent on it.
    base: u64,
    /// Marks the reverse-copy thread of the current destination.
    generation: u64,
    /// The kernel reports the acknowledgement of each write on the error queue
    /// ([`ask_ack_notifications`]); without it the relay polls `TCP_INFO` every millisecond.
    ack_events: bool,
}

impl Dest {
    /// Drops from the source's queue what this destination acknowledged; whether it dropped
    /// any.
    fn consume_acked(&self, cur: &mut PeekCursor<TcpStream>) -> anyhow::Result<bool> {
        let acked = acked_data_bytes(&self.stream).context("TCP_INFO of the destination")?;
        let upto = (self.base + acked).min(cur.peeked());
        if upto > cur.consumed() {
            cur.consume(upto - cur.consumed())?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Empties the error queue of acknowledgement notifications; then whether the connection
    /// failed: its pending error, or the reset that a concurrent read already took.
    fn failure(&self) -> io::Result<Option<String>> {
        let mut control = [0u8; 256];
        while zcnet::sys::recv_errqueue(self.stream.as_fd(), &mut control)?.is_some() {}
        if let Some(e) = self.stream.take_error()? {
            return Ok(Some(e.to_string()));
        }
        let (info, len) = zcnet::sys::tcp_info(self.stream.as_fd())?;
        const TCP_CLOSE: u8 = 7;
        Ok((len > 0 && info.head[0] == TCP_CLOSE).then(|| "connection reset".to_owned()))
    }
}

/// Data bytes of an actively opened TCP connection that the peer acknowledged
/// (`tcpi_bytes_acked` of `TCP_INFO`, Linux 4.2).
///
/// # Errors
/// `getsockopt`'s error, or a kernel whose `tcp_info` lacks the field.
pub fn acked_data_bytes(stream: &TcpStream) -> io::Result<u64> {
    let (info, len) = zcnet::sys::tcp_info(stream.as_fd())?;
    if len < zcnet::sys::abi::TCPI_BYTES_ACKED_END {
        return Err(io::Error::other(
            "TCP_INFO without tcpi_bytes_acked (needs Linux 4.2)",
        ));
    }
    // tcpi_bytes_acked advances with snd_una, and the acknowledgement of our SYN moved it by
    // one: data bytes are one fewer (without this a failover skipped the byte after the last
    // one the destination received; `acknowledged_count_is_exact` checks it). A FIN's
    // acknowledgement adds one more at the end; callers cap at what was sent.
    Ok(info.bytes_acked.saturating_sub(1))
}

/// Asks for an error-queue notification when the last byte of each write is acknowledged:
/// `SO_TIMESTAMPING` with `SOF_TIMESTAMPING_TX_ACK` (Linux 3.17) and `OPT_TSONLY` (4.6), see
/// the kernel's `Documentation/networking/timestamping.rst`. Each one wakes the relay's epoll
/// with `EPOLLERR`, so it learns of acknowledgements when they happen instead of by polling.
fn ask_ack_notifications(stream: &TcpStream) -> io::Result<()> {
    let flags = (libc::SOF_TIMESTAMPING_TX_ACK
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY) as i32;
    zcnet::sys::setsockopt(
        stream.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        &flags,
    )
}

/// Epoll tokens.
const SOURCE: u64 = 0;
const DESTINATION: u64 = 1;

/// Without acknowledgement notifications, how often `TCP_INFO` is read while bytes are
/// unacknowledged.
const ACK_POLL: Duration = Duration::from_millis(1);

/// With them, the same, as a backstop: the kernel marks the last byte of a write only if its
/// segment is still in the write queue when `tcp_sendmsg` ends (`tcp_tx_timestamp`), so a write
/// sent out whole at once gets no notification. Mid-stream the next write's covers it; at the
/// bound or the end of the stream only this timer does (the failover test caught one such
/// stall: a stream acknowledged in full, then five seconds of silence).
const ACK_BACKSTOP: Duration = Duration::from_millis(2);

/// What a connection's destinations share across failovers.
struct Link<'a> {
    s: &'a Settings,
    epoll: Epoll,
    /// Names the reverse-copy thread of the current destination.
    generation: Arc<AtomicU64>,
    /// The source, for the reverse copy.
    back: TcpStream,
}

/// Relays one accepted connection until the source's stream is acknowledged end to end.
///
/// One thread, one epoll: edge-triggered `EPOLLIN` on the source says bytes arrived (past the
/// peek offset, as the queue only grows at its tail), `EPOLLERR` on the destination says an
/// acknowledgement notification or an error arrived, `EPOLLOUT` that its send buffer has room
/// again. After any wake the relay does all it can without blocking (consume what was
/// acknowledged, write what it peeked, peek more) and waits again; the wait's timeout is what
/// is left of `ack_timeout`.
pub fn relay_connection(src: TcpStream, s: &Settings) -> anyhow::Result<ConnStats> {
    let peer = src.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let link = Link {
        s,
        epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create1")?,
        generation: Arc::new(AtomicU64::new(0)),
        back: src.try_clone()?,
    };
    link.epoll
        .add(
            &src,
            EpollEvent::new(
                EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET,
                SOURCE,
            ),
        )
        .context("epoll_ctl")?;
    let mut cur = match s.method {
        None => PeekCursor::new(src)?,
        Some(m) => PeekCursor::with_method(src, m)?,
    };
    if let Some(why) = cur.fallback_reason() {
        eprintln!("zcnet relay: {why}");
    }
    let mut stats = ConnStats {
        peer,
        method: cur.method().name().to_owned(),
        ..ConnStats::default()
    };
    let mut dest = link.connect(0, 0)?;
    if !dest.ack_events {
        eprintln!(
            "zcnet relay: no acknowledgement notifications (SO_TIMESTAMPING TX_ACK, Linux 4.6): \
             polling TCP_INFO every {ACK_POLL:?}"
        );
    }
    let mut buf = vec![0u8; 64 * 1024];
    // Bytes of `buf` peeked and not yet written to the destination.
    let mut pending = 0..0;
    let mut eof = false;
    let mut failed: Option<String> = None;
    let mut last_progress = Instant::now();
    let mut events = [EpollEvent::empty(); 4];
    loop {
        if failed.is_none() && last_progress.elapsed() > s.ack_timeout {
            failed = Some(format!("no acknowledgement for {:?}", s.ack_timeout));
        }
        if let Some(why) = failed.take() {
            dest = link.failover(&mut cur, dest, why, &mut stats)?;
            pending = 0..0;
            // The rewind made the bytes past the resume point unpeeked again: a FIN seen
            // before the failure comes after them (without this, a destination failing after
            // the source's end lost the rest: the stream "ended" at the resume point).
            eof = false;
            last_progress = Instant::now();
            continue;
        }
        if dest.consume_acked(&mut cur)? {
            last_progress = Instant::now();
        }
        if cur.outstanding() == 0 {
            last_progress = Instant::now();
            if eof {
                break;
            }
        }
        // Write what was peeked, peek more while there is room, until one side would block.
        loop {
            if pending.is_empty() {
                // Acknowledgements arrive while this loop runs: without taking them before
                // each peek the source queue (and the discard method's re-reading) grows
                // with every write the destination accepts.
                if dest.consume_acked(&mut cur)? {
                    last_progress = Instant::now();
                }
                if eof || cur.outstanding() >= s.max_unacked {
                    break;
                }
                let room = usize::try_from(s.max_unacked - cur.outstanding())
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                match cur.peek_with(&mut buf[..room], libc::MSG_DONTWAIT) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        pending = 0..n;
                        if s.sample_unacked {
                            stats.unacked_samples.push(cur.outstanding());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("reading the source"),
                }
            }
            let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            match zcnet::sys::sendto(dest.stream.as_fd(), &buf[pending.clone()], flags, None) {
                Ok(w) => {
                    pending.start += w;
                    stats.written += w as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        // A failure to handle, or the end just seen with nothing outstanding: no wait.
        if failed.is_some() || (eof && cur.outstanding() == 0) {
            continue;
        }
        let mut wait = s.ack_timeout.saturating_sub(last_progress.elapsed());
        if cur.outstanding() > 0 {
            wait = wait.min(if dest.ack_events {
                ACK_BACKSTOP
            } else {
                ACK_POLL
            });
        }
        let ms = u16::try_from(wait.as_millis() + 1).unwrap_or(u16::MAX);
        let n = match link.epoll.wait(&mut events, ms) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e).context("epoll_wait"),
        };
        let err = EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP;
        if events[..n]
            .iter()
            .any(|e| e.data() == DESTINATION && e.events().intersects(err))
        {
            failed = dest.failure().context("the destination's error queue")?;
        }
    }
    // Everything acknowledged: pass the source's FIN on.
    let _ = dest.stream.shutdown(Shutdown::Write);
    stats.bytes = cur.consumed();
    stats.peek = cur.counters();
    Ok(stats)
}

impl Link<'_> {
    /// Connects to the targets in turn, starting at `first`, for at most `connect_timeout`;
    /// registers the new connection with the epoll and starts its reverse copy (destination to
    /// source).
    fn connect(&self, first: usize, base: u64) -> anyhow::Result<Dest> {
        let s = self.s;
        let deadline = Instant::now() + s.connect_timeout;
        // The last error of each target, in target order.
        let mut errors: Vec<Option<String>> = vec![None; s.targets.len()];
        let mut i = first;
        loop {
            let target = s.targets[i % s.targets.len()];
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&target, left.max(Duration::from_millis(10))) {
                Ok(stream) => return self.adopt(stream, i % s.targets.len(), base),
                Err(e) => errors[i % s.targets.len()] = Some(format!("{target}: {e}")),
            }
            if Instant::now() >= deadline {
                bail!(
                    "no destination accepted within {:?} ({})",
                    s.connect_timeout,
                    errors.into_iter().flatten().collect::<Vec<_>>().join("; ")
                );
            }
            i += 1;
            if i % s.targets.len() == first % s.targets.len() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn adopt(&self, stream: TcpStream, target: usize, base: u64) -> anyhow::Result<Dest> {
        if let Some(b) = self.s.dest_sndbuf {
            let b = i32::try_from(b).unwrap_or(i32::MAX);
            // Past net.core.wmem_max with CAP_NET_ADMIN (SO_SNDBUFFORCE), else capped there.
            let fd = stream.as_fd();
            zcnet::sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &b)
                .or_else(|_| zcnet::sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &b))?;
        }
        let ack_events = ask_ack_notifications(&stream).is_ok();
        self.epoll
            .add(
                &stream,
                EpollEvent::new(
                    EpollFlags::EPOLLOUT | EpollFlags::EPOLLERR | EpollFlags::EPOLLET,
                    DESTINATION,
                ),
            )
            .context("epoll_ctl")?;
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        spawn_reverse(
            stream.try_clone()?,
            self.back.try_clone()?,
            self.generation.clone(),
            generation,
        );
        Ok(Dest {
            stream,
            target,
            base,
            generation,
            ack_events,
        })
    }

    /// The destination failed: take its last acknowledgements, connect the next target, and
    /// rewind the cursor to the first unacknowledged byte.
    fn failover(
        &self,
        cur: &mut PeekCursor<TcpStream>,
        old: Dest,
        why: String,
        stats: &mut ConnStats,
    ) -> anyhow::Result<Dest> {
        let s = self.s;
        // TCP_INFO stays readable after a reset: its acknowledged count is final.
        let _ = old.consume_acked(cur);
        let at = cur.consumed();
        let target = s.targets[old.target];
        // Retire the old reverse copy before closing, so that its end is not taken for the
        // destination's FIN.
        let _ = self.generation.compare_exchange(
            old.generation,
            old.generation + 1_000_000,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        // The reverse copy holds a duplicate of the descriptor: closing ours would leave the
        // registration (it belongs to the open file) and its events.
        let _ = self.epoll.delete(&old.stream);
        let _ = old.stream.shutdown(Shutdown::Both);
        drop(old);
        stats.resent += cur.peeked() - at;
        cur.rewind(at)?;
        let next = old_target_next(s, target);
        let dest = self.connect(next, at)?;
        eprintln!(
            "zcnet relay: {}: destination {target} failed ({why}); resuming at byte {at} on {}",
            stats.peer, s.targets[dest.target]
        );
        stats.resumed_at.push(at);
        stats.failures.push(why);
        Ok(dest)
    }
}

fn old_target_next(s: &Settings, failed: SocketAddr) -> usize {
    let i = s.targets.iter().position(|&t| t == failed).unwrap_or(0);
    (i + 1) % s.targets.len()
}

/// Copies destination to source while `generation` still names this destination; passes the
/// destination's FIN on.
fn spawn_reverse(mut from: TcpStream, mut to: TcpStream, generation: Arc<AtomicU64>, mine: u64) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => {
                    if generation.load(Ordering::SeqCst) == mine {
                        let _ = to.shutdown(Shutdown::Write);
                    }
                    return;
                }
                Ok(n) => {
                    if generation.load(Ordering::SeqCst) != mine || to.write_all(&buf[..n]).is_err()
                    {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    });
}

/// `zcnet relay`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let mut targets = vec![opt.to];
    targets.extend(opt.fallback);
    let settings = Arc::new(Settings {
        targets,
        method: match opt.method {
            MethodArg::Auto => None,
            MethodArg::PeekOffset => Some(Method::PeekOffset),
            MethodArg::DiscardBuffer => Some(Method::DiscardBuffer),
        },
        max_unacked: opt.max_unacked_mib << 20,
        ack_timeout: Duration::from_secs_f64(opt.ack_timeout),
        connect_timeout: Duration::from_secs_f64(opt.connect_timeout),
        dest_sndbuf: opt.sndbuf_kib.map(|k| k << 10),
        sample_unacked: false,
    });
    let listener = TcpListener::bind(opt.listen)
        .with_context(|| format!("cannot listen on {}", opt.listen))?;
    eprintln!("zcnet relay: listening on {}", listener.local_addr()?);
    let active = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut accepted = 0u64;
    let mut failed = 0usize;
    while opt.count == 0 || accepted < opt.count {
        let (src, from) = listener.accept().context("accept")?;
        accepted += 1;
        if active.load(Ordering::SeqCst) >= opt.max_connections {
            eprintln!(
                "zcnet relay: {from}: refused, {} connections are being relayed",
                opt.max_connections
            );
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (settings, active, json) = (settings.clone(), active.clone(), opt.json);
        handles.push(std::thread::spawn(move || {
            let r = relay_connection(src, &settings);
            active.fetch_sub(1, Ordering::SeqCst);
            match r {
                Ok(stats) => {
                    if json {
                        println!("{}", serde_json::to_string(&stats).unwrap_or_default());
                    }
                    eprintln!(
                        "zcnet relay: {from}: {} bytes relayed ({}), {} failover(s), {} B re-read",
                        stats.bytes,
                        stats.method,
                        stats.resumed_at.len(),
                        stats.peek.reread_bytes
                    );
                    true
                }
                Err(e) => {
                    eprintln!("zcnet relay: {from}: {e:#}");
                    false
                }
            }
        }));
        let (done, running): (Vec<_>, Vec<_>) = handles.into_iter().partition(|h| h.is_finished());
        handles = running;
        failed += done
            .into_iter()
            .map(|h| h.join().unwrap_or(false))
            .filter(|ok| !ok)
            .count();
    }
    for h in handles {
        if !h.join().unwrap_or(false) {
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} connection(s) could not be relayed in full");
    }
    Ok(())
}
