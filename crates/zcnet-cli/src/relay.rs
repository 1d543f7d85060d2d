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

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
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
}

impl Dest {
    /// Data bytes of this connection the destination's TCP acknowledged.
    fn acked(&self) -> io::Result<u64> {
        acked_data_bytes(&self.stream)
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

/// Relays one accepted connection until the source's stream is acknowledged end to end.
pub fn relay_connection(src: TcpStream, s: &Settings) -> anyhow::Result<ConnStats> {
    let peer = src.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    // A short receive timeout: between peeks the relay reads the destination's acknowledgements.
    src.set_read_timeout(Some(Duration::from_millis(2)))?;
    let back = src.try_clone()?;
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
    let generation = Arc::new(AtomicU64::new(0));
    let mut dest = connect(s, 0, 0, &generation, &back)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut eof = false;
    let mut last_progress = Instant::now();
    loop {
        // Drop from the source what the destination acknowledged.
        match dest.acked() {
            Ok(a) => {
                let upto = (dest.base + a).min(cur.peeked());
                if upto > cur.consumed() {
                    cur.consume(upto - cur.consumed())?;
                    last_progress = Instant::now();
                }
            }
            Err(e) => bail!("TCP_INFO of the destination: {e}"),
        }
        if cur.outstanding() == 0 {
            last_progress = Instant::now();
            if eof {
                break;
            }
        }
        if last_progress.elapsed() > s.ack_timeout {
            let why = format!("no acknowledgement for {:?}", s.ack_timeout);
            dest = failover(&mut cur, dest, s, why, &mut stats, &generation, &back)?;
            last_progress = Instant::now();
            continue;
        }
        if eof || cur.outstanding() >= s.max_unacked {
            // Waiting for acknowledgements only.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        match cur.peek(&mut buf) {
            Ok(0) => eof = true,
            Ok(n) => {
                if s.sample_unacked {
                    stats.unacked_samples.push(cur.outstanding());
                }
                match dest.stream.write_all(&buf[..n]) {
                    Ok(()) => stats.written += n as u64,
                    Err(e) => {
                        dest = failover(
                            &mut cur,
                            dest,
                            s,
                            e.to_string(),
                            &mut stats,
                            &generation,
                            &back,
                        )?;
                        last_progress = Instant::now();
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the source"),
        }
    }
    // Everything acknowledged: pass the source's FIN on.
    let _ = dest.stream.shutdown(Shutdown::Write);
    stats.bytes = cur.consumed();
    stats.peek = cur.counters();
    Ok(stats)
}

/// Connects to the targets in turn, starting at `first`, for at most `connect_timeout`; starts
/// the reverse copy (destination to source) for the new connection.
fn connect(
    s: &Settings,
    first: usize,
    base: u64,
    generation: &Arc<AtomicU64>,
    back: &TcpStream,
) -> anyhow::Result<Dest> {
    let deadline = Instant::now() + s.connect_timeout;
    let mut errors = Vec::new();
    let mut i = first;
    loop {
        let target = s.targets[i % s.targets.len()];
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&target, left.max(Duration::from_millis(10))) {
            Ok(stream) => {
                if let Some(b) = s.dest_sndbuf {
                    let b = i32::try_from(b).unwrap_or(i32::MAX);
                    zcnet::sys::setsockopt(stream.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &b)?;
                }
                // A destination that stops reading fails writes after the ack timeout.
                stream.set_write_timeout(Some(s.ack_timeout))?;
                let gen_now = generation.fetch_add(1, Ordering::SeqCst) + 1;
                spawn_reverse(
                    stream.try_clone()?,
                    back.try_clone()?,
                    generation.clone(),
                    gen_now,
                );
                return Ok(Dest {
                    stream,
                    target: i % s.targets.len(),
                    base,
                    generation: gen_now,
                });
            }
            Err(e) => errors.push(format!("{target}: {e}")),
        }
        if Instant::now() >= deadline {
            bail!(
                "no destination accepted within {:?} ({})",
                s.connect_timeout,
                errors.join("; ")
            );
        }
        i += 1;
        if i % s.targets.len() == first % s.targets.len() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The destination failed: take its last acknowledgements, connect the next target, and rewind
/// the cursor to the first unacknowledged byte.
fn failover(
    cur: &mut PeekCursor<TcpStream>,
    old: Dest,
    s: &Settings,
    why: String,
    stats: &mut ConnStats,
    generation: &Arc<AtomicU64>,
    back: &TcpStream,
) -> anyhow::Result<Dest> {
    // TCP_INFO stays readable after a reset: its acknowledged count is final.
    if let Ok(a) = old.acked() {
        let upto = (old.base + a).min(cur.peeked());
        if upto > cur.consumed() {
            cur.consume(upto - cur.consumed())?;
        }
    }
    let at = cur.consumed();
    let target = s.targets[old.target];
    // Retire the old reverse copy before closing, so that its end is not taken for the
    // destination's FIN.
    let _ = generation.compare_exchange(
        old.generation,
        old.generation + 1_000_000,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    let _ = old.stream.shutdown(Shutdown::Both);
    drop(old);
    stats.resent += cur.peeked() - at;
    cur.rewind(at)?;
    let next = old_target_next(s, target);
    let dest = connect(s, next, at, generation, back)?;
    eprintln!(
        "zcnet relay: {}: destination {target} failed ({why}); resuming at byte {at} on {}",
        stats.peer, s.targets[dest.target]
    );
    stats.resumed_at.push(at);
    stats.failures.push(why);
    Ok(dest)
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
