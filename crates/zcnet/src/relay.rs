//! A TCP relay that keeps the bytes it forwards in the source connection's kernel receive queue
//! until the destination's TCP has acknowledged them, reading them with a peek cursor
//! ([`crate::peek`], `SO_PEEK_OFF`). `zcnet relay` is this module behind a command line.
//!
//! What is guaranteed, source to destination: a byte is dropped from the source's queue only
//! once the destination's TCP acknowledged it (`tcpi_bytes_acked` of `TCP_INFO`). When the
//! destination fails (reset, refused, silent while it owes an answer: [`Config::ack_timeout`]),
//! the relay connects again (the next of [`Config::targets`] first, in turn) and sends from the
//! first unacknowledged byte, straight from the kernel queue: no user-space retransmit buffer. A
//! destination that is idle, or that stops reading while its TCP answers the window probes, has
//! not failed. Bytes a destination's TCP acknowledged but its application never read are outside
//! what a relay can know. The reverse direction (destination to source) is copied as it comes, without that
//! guarantee. Memory per connection: one 64 KiB buffer each way, plus, for the discard-buffer
//! method only, up to [`Config::max_unacked`] bytes of discard buffer; unacknowledged bytes stay in the
//! kernel and hold back the source through its receive window.
//!
//! The unacknowledged bytes occupy the source socket's receive buffer, which autotuning sizes by
//! what the application takes per round trip: a relay holding back more than a few hundred KiB
//! needs a larger one (`net.ipv4.tcp_rmem`'s default, or the bound is never reached and the
//! source's window, not [`Config::max_unacked`], limits the bytes in flight downstream).
//!
//! Each connection is one thread with one epoll: new source bytes (edge-triggered `EPOLLIN`),
//! destination acknowledgements (`SO_TIMESTAMPING` `TX_ACK` notifications on its error queue,
//! `EPOLLERR`) and room in its send buffer (`EPOLLOUT`) wake it, with a 2 ms backstop while bytes
//! are unacknowledged (the kernel marks no byte of a write sent out whole at once); it never spins.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::peek::{self, PeekCursor};
use crate::sys::{self, Epoll};
use crate::tcp_info::{TcpInfo, TcpState, tcp_info};

/// Errors of relaying a connection.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// A call failed.
    #[error("{call} failed")]
    Io {
        /// The call, named as in C (or what it did).
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// No destination accepted a connection in time.
    #[error("no destination accepted within {timeout:?} ({errors})")]
    NoDestination {
        /// [`Config::connect_timeout`].
        timeout: Duration,
        /// The last error of each target, `; `-separated.
        errors: String,
    },
    /// The peek cursor refused an operation (a bug if it happens: the relay keeps within
    /// the cursor's rules).
    #[error(transparent)]
    Peek(#[from] peek::PeekError),
    /// The configuration cannot work (no targets, a zero bound).
    #[error("invalid relay configuration: {0}")]
    Config(&'static str),
}

fn io_err(call: &'static str) -> impl FnOnce(io::Error) -> RelayError {
    move |source| RelayError::Io { call, source }
}

/// How each connection is relayed.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the source is peeked: [`peek::Mode::Auto`] (`SO_PEEK_OFF` where the kernel has it),
    /// or one method.
    pub mode: peek::Mode,
    /// Destinations, tried in turn (at least one).
    pub targets: Vec<SocketAddr>,
    /// Bytes unacknowledged at most.
    pub max_unacked: u64,
    /// How long a destination may stay silent while it owes an answer before it is given up:
    /// bytes in flight and unacknowledged, or two window probes in a row unanswered, with
    /// nothing acknowledged and nothing at all received from its TCP for this long. An idle
    /// destination owes nothing, and one that stops reading (its receive window closed) is
    /// healthy for as long as its TCP answers the kernel's window probes (RFC 1122 4.2.2.17
    /// keeps such a connection open): neither is ever failed over, however long it lasts. One
    /// that dies while its window is closed is noticed once two probes went unanswered (the
    /// kernel backs them off from the retransmission timeout up to 2 minutes), then this long.
    pub ack_timeout: Duration,
    /// No destination for this long: give up.
    pub connect_timeout: Duration,
    /// `SO_SNDBUF` of destination sockets (the kernel doubles it): bounds the bytes written and
    /// not yet acknowledged, and a full buffer makes the relay's write wait for acknowledgements.
    pub dest_sndbuf: Option<usize>,
    /// Record the unacknowledged bytes at every peek (benchmarks; memory grows with the stream).
    pub sample_unacked: bool,
}

impl Config {
    /// A relay to `targets` with the defaults of `zcnet relay`: auto mode, 16 MiB unacknowledged
    /// at most, 5 s acknowledgement and connect timeouts, autotuned send buffers.
    pub fn new(targets: Vec<SocketAddr>) -> Config {
        Config {
            mode: peek::Mode::Auto,
            targets,
            max_unacked: 16 << 20,
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            dest_sndbuf: None,
            sample_unacked: false,
        }
    }
}

/// What one relayed connection did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
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
    /// Each failover: which destination failed, why, and the bytes it had acknowledged (the
    /// stream offset the next destination resumed at).
    pub failovers: Vec<Failover>,
    /// Why the cursor does not use `SO_PEEK_OFF`, if it does not.
    pub fallback_reason: Option<String>,
    /// True when the kernel gave no acknowledgement notifications (`SO_TIMESTAMPING`
    /// `TX_ACK`, Linux 4.6) and `TCP_INFO` was polled every millisecond instead.
    pub ack_polling: bool,
    /// Samples of the bytes unacknowledged, one per peek, when [`Config::sample_unacked`].
    #[serde(skip)]
    pub unacked_samples: Vec<u64>,
    /// The cursor's counters.
    pub peek: peek::Counters,
}

/// One failover of a relayed connection.
#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    /// The destination that failed.
    pub from: SocketAddr,
    /// The destination the stream resumed on.
    pub to: SocketAddr,
    /// Why it was given up (its error, or no acknowledgement in time).
    pub why: String,
    /// Stream bytes acknowledged by TCP when it failed, all destinations before it included:
    /// the offset the next one resumed at.
    pub acknowledged: u64,
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
    /// Drops from the source's queue what this destination acknowledged by `info`; whether it
    /// dropped any.
    fn consume_acked(
        &self,
        info: &TcpInfo,
        cur: &mut PeekCursor<TcpStream>,
    ) -> Result<bool, RelayError> {
        let acked = info.acked_data_bytes().ok_or_else(|| RelayError::Io {
            call: "getsockopt(TCP_INFO) of the destination",
            source: no_bytes_acked(),
        })?;
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
        while sys::recv_errqueue(self.stream.as_fd(), &mut control)?.is_some() {}
        if let Some(e) = self.stream.take_error()? {
            return Ok(Some(e.to_string()));
        }
        let info = tcp_info(&self.stream)?;
        Ok((info.state == TcpState::Close).then(|| "connection reset".to_owned()))
    }
}

/// Data bytes of an actively opened TCP connection that the peer acknowledged
/// (`tcpi_bytes_acked` of `TCP_INFO`, Linux 4.2).
///
/// # Errors
/// `getsockopt`'s error, or a kernel whose `tcp_info` lacks the field.
pub fn acked_data_bytes(stream: &TcpStream) -> io::Result<u64> {
    // tcpi_bytes_acked advances with snd_una, and the acknowledgement of our SYN moved it by
    // one: data bytes are one fewer (without this a failover skipped the byte after the last
    // one the destination received; `acknowledged_count_is_exact` checks it). A FIN's
    // acknowledgement adds one more at the end; callers cap at what was sent.
    tcp_info(stream)?
        .acked_data_bytes()
        .ok_or_else(no_bytes_acked)
}

fn no_bytes_acked() -> io::Error {
    io::Error::other("TCP_INFO without tcpi_bytes_acked (needs Linux 4.2)")
}

/// What a destination's TCP has left unanswered, by its `TCP_INFO`: the acknowledgement timeout
/// runs only while it owes an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unanswered {
    /// Nothing: it acknowledged all it was sent. An idle connection, or a receiver whose window
    /// is closed while its TCP answers the kernel's window probes.
    Nothing,
    /// One window probe. A live receiver leaves one unanswered now and then: it rate-limits the
    /// ACKs it sends for out-of-window segments (`tcp_invalid_ratelimit`, 500 ms by default),
    /// so a probe that comes sooner after the last one it answered gets none (seen here: 0.86 s
    /// without an answer, then the next probe answered). The clock runs; this alone never ends it.
    OneProbe,
    /// Segments in flight (`tcpi_unacked`), or window probes two in a row (`tcpi_probes`):
    /// a live TCP answers these. `silent` is how long it has sent nothing at all.
    Owed {
        segments: u32,
        probes: u8,
        silent: Duration,
    },
}

impl Unanswered {
    fn of(info: &TcpInfo) -> Unanswered {
        match (info.unacked, info.probes) {
            (0, 0) => Unanswered::Nothing,
            (0, 1) => Unanswered::OneProbe,
            (segments, probes) => Unanswered::Owed {
                segments,
                probes,
                silent: Duration::from_millis(info.last_ack_recv_ms.into()),
            },
        }
    }

    /// Why to give the destination up, if it has owed an answer, acknowledging nothing, for
    /// `stalled`, and both that and its silence exceed `limit` (the silence alone would count
    /// a long idle time before the first byte; the stall alone, a TCP answering with duplicate
    /// ACKs).
    fn expired(self, stalled: Duration, limit: Duration) -> Option<String> {
        let Unanswered::Owed {
            segments,
            probes,
            silent,
        } = self
        else {
            return None;
        };
        if stalled <= limit || silent <= limit {
            return None;
        }
        Some(if segments > 0 {
            format!("nothing acknowledged for {limit:?}, {segments} segment(s) in flight")
        } else {
            format!("its window closed, {probes} window probes unanswered for {limit:?}")
        })
    }
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
    sys::setsockopt(
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
pub(crate) struct Link<'a> {
    s: &'a Config,
    epoll: Epoll,
    /// Names the reverse-copy task of the current destination.
    generation: Arc<AtomicU64>,
    /// The source, for the reverse copy.
    back: TcpStream,
}

/// What a session asks of its driver after doing all it could without blocking.
pub(crate) enum Next {
    /// The source's stream is acknowledged end to end.
    Done,
    /// The destination failed: connect to the targets from `first` ([`Session::failing_over`]
    /// did the rest), then [`Session::adopt`].
    Connect {
        /// The target to try first.
        first: usize,
    },
    /// Wait for an event of the session's epoll set, at most this long (`None`: nothing can time
    /// out, only an event brings work), then [`Session::woke`].
    Wait(Option<Duration>),
}

/// Starts the copy from a new destination back to the source: a thread (synchronous relay) or
/// a task (async relay), ending when `generation` no longer names `mine`.
pub(crate) type Reverse = fn(TcpStream, TcpStream, Arc<AtomicU64>, u64);

/// One relayed connection as a state machine, without a wait of its own: the blocking
/// [`relay`] and the async `zcnet::tokio::relay` drive the same steps.
pub(crate) struct Session<'a> {
    link: Link<'a>,
    cur: PeekCursor<TcpStream>,
    dest: Option<Dest>,
    stats: Report,
    buf: Vec<u8>,
    /// Bytes of `buf` peeked and not yet written to the destination.
    pending: std::ops::Range<usize>,
    eof: bool,
    failed: Option<String>,
    /// Why the destination being replaced failed, and the offset resumed at.
    failover: Option<(SocketAddr, String, u64)>,
    /// Since when the destination has owed an answer and acknowledged nothing.
    stalled_since: Option<Instant>,
    events: Vec<(u32, u64)>,
    reverse: Reverse,
}

impl<'a> Session<'a> {
    /// A session for `src`, not yet connected: the driver connects to the targets from the first
    /// and calls [`Session::adopt`].
    pub(crate) fn new(src: TcpStream, s: &'a Config, reverse: Reverse) -> Result<Self, RelayError> {
        if s.targets.is_empty() {
            return Err(RelayError::Config("no destination"));
        }
        if s.max_unacked == 0 {
            return Err(RelayError::Config(
                "max_unacked is 0: nothing could ever be forwarded",
            ));
        }
        let peer = src.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let link = Link {
            s,
            epoll: Epoll::new().map_err(io_err("epoll_create1"))?,
            generation: Arc::new(AtomicU64::new(0)),
            back: src.try_clone().map_err(io_err("dup"))?,
        };
        link.epoll
            .add(
                src.as_fd(),
                (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
                SOURCE,
            )
            .map_err(io_err("epoll_ctl"))?;
        let cur = PeekCursor::new(src, peek::Config { mode: s.mode })?;
        let stats = Report {
            peer,
            method: cur.method().name().to_owned(),
            fallback_reason: cur.fallback_reason().map(str::to_owned),
            ..Report::default()
        };
        Ok(Session {
            link,
            cur,
            dest: None,
            stats,
            buf: vec![0u8; 64 * 1024],
            pending: 0..0,
            eof: false,
            failed: None,
            failover: None,
            stalled_since: None,
            events: Vec::with_capacity(Epoll::MAX_EVENTS),
            reverse,
        })
    }

    /// The session's epoll set (source and destination), for a driver that waits on it.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn epoll(&self) -> &Epoll {
        &self.link.epoll
    }

    fn dest(&self) -> &Dest {
        self.dest.as_ref().expect("connected")
    }

    /// Reads the destination's `TCP_INFO` once: drops from the source what it acknowledged, and
    /// keeps the stall clock, which runs from the first look at which the destination owed an
    /// answer while acknowledging nothing.
    fn observe(&mut self) -> Result<Unanswered, RelayError> {
        let dest = self.dest.as_ref().expect("connected");
        let info =
            tcp_info(&dest.stream).map_err(io_err("getsockopt(TCP_INFO) of the destination"))?;
        let progressed = dest.consume_acked(&info, &mut self.cur)?;
        let unanswered = Unanswered::of(&info);
        if progressed || unanswered == Unanswered::Nothing {
            self.stalled_since = None;
        } else {
            self.stalled_since.get_or_insert_with(Instant::now);
        }
        Ok(unanswered)
    }

    /// Takes `stream`, connected to target `target`, as the destination.
    ///
    /// # Errors
    /// `setsockopt`, `epoll_ctl` and `dup` errors.
    pub(crate) fn adopt(&mut self, stream: TcpStream, target: usize) -> Result<(), RelayError> {
        let dest = self
            .link
            .adopt(stream, target, self.cur.consumed(), self.reverse)?;
        if !dest.ack_events {
            self.stats.ack_polling = true;
        }
        if let Some((from, why, acknowledged)) = self.failover.take() {
            self.stats.failovers.push(Failover {
                from,
                to: self.link.s.targets[target],
                why,
                acknowledged,
            });
        }
        self.dest = Some(dest);
        self.pending = 0..0;
        // The rewind made the bytes past the resume point unpeeked again: a FIN seen before the
        // failure comes after them (without this, a destination failing after the source's end
        // lost the rest: the stream "ended" at the resume point).
        self.eof = false;
        self.stalled_since = None;
        Ok(())
    }

    /// Does all it can without blocking (consume what was acknowledged, write what it peeked,
    /// peek more) and says what it waits for.
    ///
    /// # Errors
    /// The source's failure, or a call on the destination that is not the destination failing.
    pub(crate) fn step(&mut self) -> Result<Next, RelayError> {
        let s = self.link.s;
        loop {
            if let Some(why) = self.failed.take() {
                let first = self.failing_over(why)?;
                return Ok(Next::Connect { first });
            }
            let unanswered = self.observe()?;
            let stalled = self.stalled_since.map_or(Duration::ZERO, |t| t.elapsed());
            if let Some(why) = unanswered.expired(stalled, s.ack_timeout) {
                self.failed = Some(why);
                continue;
            }
            if self.eof && self.cur.outstanding() == 0 {
                return Ok(Next::Done);
            }
            self.forward()?;
            // A failure to handle, or the end just seen with nothing outstanding: no wait.
            if self.failed.is_some() || (self.eof && self.cur.outstanding() == 0) {
                continue;
            }
            // With nothing outstanding nothing can time out: only an event brings work.
            let backstop = if self.dest().ack_events {
                ACK_BACKSTOP
            } else {
                ACK_POLL
            };
            return Ok(Next::Wait((self.cur.outstanding() > 0).then_some(backstop)));
        }
    }

    /// Writes what was peeked and peeks more while there is room, until one side would block.
    fn forward(&mut self) -> Result<(), RelayError> {
        let s = self.link.s;
        loop {
            if self.pending.is_empty() {
                // Acknowledgements arrive while this loop runs: without taking them before each
                // peek the source queue (and the discard method's re-reading) grows with every
                // write the destination accepts.
                self.observe()?;
                if self.eof || self.cur.outstanding() >= s.max_unacked {
                    return Ok(());
                }
                let room = usize::try_from(s.max_unacked - self.cur.outstanding())
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                match self
                    .cur
                    .peek_with(&mut self.buf[..room], libc::MSG_DONTWAIT)
                {
                    Ok(0) => {
                        self.eof = true;
                        return Ok(());
                    }
                    Ok(n) => {
                        self.pending = 0..n;
                        if s.sample_unacked {
                            self.stats.unacked_samples.push(self.cur.outstanding());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_err("recv(MSG_PEEK) from the source")(e)),
                }
            }
            let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            let data = &self.buf[self.pending.clone()];
            match sys::sendto(self.dest().stream.as_fd(), data, flags, None) {
                Ok(w) => {
                    self.pending.start += w;
                    self.stats.written += w as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed = Some(e.to_string());
                    return Ok(());
                }
            }
        }
    }

    /// Takes the events the wait returned (`timeout` 0: those ready now, for a driver that
    /// waited elsewhere); returns how many it read.
    ///
    /// # Errors
    /// `epoll_wait`'s error, and reading the destination's error queue.
    pub(crate) fn woke(&mut self, timeout: Duration) -> Result<usize, RelayError> {
        self.link
            .epoll
            .wait(&mut self.events, timeout)
            .map_err(io_err("epoll_wait"))?;
        let err = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        if self
            .events
            .iter()
            .any(|&(ev, token)| token == DESTINATION && ev & err != 0)
        {
            self.failed = self
                .dest()
                .failure()
                .map_err(io_err("recvmsg(MSG_ERRQUEUE) of the destination"))?;
        }
        Ok(self.events.len())
    }

    /// The destination failed: take its last acknowledgements, retire it, and rewind the cursor
    /// to the first unacknowledged byte; returns the target to try first.
    fn failing_over(&mut self, why: String) -> Result<usize, RelayError> {
        let old = self.dest.take().expect("connected");
        // TCP_INFO stays readable after a reset: its acknowledged count is final.
        if let Ok(info) = tcp_info(&old.stream) {
            let _ = old.consume_acked(&info, &mut self.cur);
        }
        let at = self.cur.consumed();
        let target = self.link.s.targets[old.target];
        // Retire the old reverse copy before closing, so that its end is not taken for the
        // destination's FIN.
        let _ = self.link.generation.compare_exchange(
            old.generation,
            old.generation + 1_000_000,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        // The reverse copy holds a duplicate of the descriptor: closing ours would leave the
        // registration (it belongs to the open file) and its events.
        let _ = self.link.epoll.delete(old.stream.as_fd());
        let _ = old.stream.shutdown(Shutdown::Both);
        drop(old);
        self.stats.resent += self.cur.peeked() - at;
        self.cur.rewind(at)?;
        self.failover = Some((target, why, at));
        Ok(old_target_next(self.link.s, target))
    }

    /// The report, after [`Next::Done`]: passes the source's FIN on.
    pub(crate) fn finish(mut self) -> Report {
        if let Some(dest) = &self.dest {
            let _ = dest.stream.shutdown(Shutdown::Write);
        }
        self.stats.bytes = self.cur.consumed();
        self.stats.peek = self.cur.counters();
        self.stats
    }
}

/// Relays one accepted connection until the source's stream is acknowledged end to end.
///
/// One thread, one epoll: edge-triggered `EPOLLIN` on the source says bytes arrived (past the
/// peek offset, as the queue only grows at its tail), `EPOLLERR` on the destination says an
/// acknowledgement notification or an error arrived, `EPOLLOUT` that its send buffer has room
/// again. After any wake the relay does all it can without blocking (consume what was
/// acknowledged, write what it peeked, peek more) and waits again: with a backstop timer while
/// bytes are outstanding, without one while none are (nothing can time out then).
///
/// # Errors
/// [`RelayError::NoDestination`] when no destination accepts within the connect timeout (at
/// the start or after a failure), [`RelayError::Io`] when the source fails. Bytes the last
/// destination acknowledged are in [`Report`] only on success; on an error they were consumed
/// from the source as far as acknowledged.
pub fn relay(src: TcpStream, s: &Config) -> Result<Report, RelayError> {
    let mut session = Session::new(src, s, spawn_reverse)?;
    let mut next = Next::Connect { first: 0 };
    loop {
        match next {
            Next::Done => return Ok(session.finish()),
            Next::Connect { first } => {
                let (stream, target) = connect(s, first)?;
                session.adopt(stream, target)?;
            }
            Next::Wait(wait) => {
                // Epoll caps an endless wait at i32::MAX ms, 24 days: a step then finds nothing.
                session.woke(wait.unwrap_or(Duration::MAX))?;
            }
        }
        next = session.step()?;
    }
}

/// Connects to the targets in turn, starting at `first`, for at most `connect_timeout`; returns
/// the stream and its target's index.
fn connect(s: &Config, first: usize) -> Result<(TcpStream, usize), RelayError> {
    let deadline = Instant::now() + s.connect_timeout;
    // The last error of each target, in target order.
    let mut errors: Vec<Option<String>> = vec![None; s.targets.len()];
    let mut i = first;
    loop {
        let target = s.targets[i % s.targets.len()];
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&target, left.max(Duration::from_millis(10))) {
            Ok(stream) => return Ok((stream, i % s.targets.len())),
            Err(e) => errors[i % s.targets.len()] = Some(format!("{target}: {e}")),
        }
        if Instant::now() >= deadline {
            return Err(no_destination(s, errors));
        }
        i += 1;
        if i % s.targets.len() == first % s.targets.len() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// [`RelayError::NoDestination`] with the last error of each target.
pub(crate) fn no_destination(s: &Config, errors: Vec<Option<String>>) -> RelayError {
    RelayError::NoDestination {
        timeout: s.connect_timeout,
        errors: errors.into_iter().flatten().collect::<Vec<_>>().join("; "),
    }
}

impl Link<'_> {
    /// Registers a new destination with the epoll and starts its reverse copy (destination to
    /// source).
    fn adopt(
        &self,
        stream: TcpStream,
        target: usize,
        base: u64,
        reverse: Reverse,
    ) -> Result<Dest, RelayError> {
        if let Some(b) = self.s.dest_sndbuf {
            let b = i32::try_from(b).unwrap_or(i32::MAX);
            // Past net.core.wmem_max with CAP_NET_ADMIN (SO_SNDBUFFORCE), else capped there.
            let fd = stream.as_fd();
            sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &b)
                .or_else(|_| sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &b))
                .map_err(io_err("setsockopt(SO_SNDBUF)"))?;
        }
        let ack_events = ask_ack_notifications(&stream).is_ok();
        self.epoll
            .add(
                stream.as_fd(),
                (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLET) as u32,
                DESTINATION,
            )
            .map_err(io_err("epoll_ctl"))?;
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        reverse(
            stream.try_clone().map_err(io_err("dup"))?,
            self.back.try_clone().map_err(io_err("dup"))?,
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
}

pub(crate) fn old_target_next(s: &Config, failed: SocketAddr) -> usize {
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

/// [`RelayError::Config`] for a `serve` that could relay nothing.
pub(crate) fn check_max_connections(max_connections: usize) -> Result<(), RelayError> {
    if max_connections == 0 {
        return Err(RelayError::Config(
            "max_connections is 0: every connection would be refused",
        ));
    }
    Ok(())
}

/// What [`serve`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once because `max_connections` were being relayed.
    pub refused: u64,
    /// Connections that ended in an error.
    pub failed: u64,
}

/// Accepts connections on `listener` and relays each on its own thread, at most
/// `max_connections` at once (more are closed at once), until `count` connections were
/// accepted (`None`: forever). `done` is called on each connection's thread when it ends.
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails, [`RelayError::Config`] for `max_connections` 0.
pub fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    max_connections: usize,
    count: Option<u64>,
    done: impl Fn(SocketAddr, Result<Report, RelayError>) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    check_max_connections(max_connections)?;
    let done = Arc::new(done);
    let active = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let mut served = Served::default();
    while count.is_none_or(|c| served.accepted < c) {
        let (src, from) = listener.accept().map_err(io_err("accept"))?;
        served.accepted += 1;
        if active.load(Ordering::SeqCst) >= max_connections {
            served.refused += 1;
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (config, active, failed, done) =
            (config.clone(), active.clone(), failed.clone(), done.clone());
        handles.push(std::thread::spawn(move || {
            let r = relay(src, &config);
            active.fetch_sub(1, Ordering::SeqCst);
            if r.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            done(from, r);
        }));
        handles.retain(|h| !h.is_finished());
    }
    for h in handles {
        let _ = h.join();
    }
    served.failed = failed.load(Ordering::SeqCst);
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(unacked: u32, probes: u8, last_ack_recv_ms: u32) -> TcpInfo {
        TcpInfo {
            state: TcpState::Established,
            bytes_acked: Some(1),
            bytes_received: Some(0),
            bytes_sent: Some(0),
            bytes_retrans: Some(0),
            unacked,
            probes,
            last_ack_recv_ms,
        }
    }

    const LIMIT: Duration = Duration::from_secs(1);
    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn a_destination_that_owes_nothing_never_expires() {
        // Idle for a minute, or its window closed with every probe answered.
        let idle = Unanswered::of(&info(0, 0, 60_000));
        assert_eq!(idle, Unanswered::Nothing);
        assert_eq!(idle.expired(LONG, LIMIT), None);
    }

    #[test]
    fn one_unanswered_window_probe_never_expires() {
        // A live receiver's rate limit on out-of-window ACKs can leave one unanswered.
        let one = Unanswered::of(&info(0, 1, 60_000));
        assert_eq!(one, Unanswered::OneProbe);
        assert_eq!(one.expired(LONG, LIMIT), None);
    }

    #[test]
    fn two_unanswered_probes_expire_after_the_limit_of_silence() {
        let two = Unanswered::of(&info(0, 2, 2_000));
        let why = two.expired(LONG, LIMIT).expect("expired");
        assert!(why.contains("2 window probes unanswered"), "{why}");
        assert_eq!(two.expired(LIMIT / 2, LIMIT), None, "stalled too briefly");
    }

    #[test]
    fn bytes_in_flight_expire_only_when_the_peer_is_silent_too() {
        let why = Unanswered::of(&info(5, 0, 1_500))
            .expired(LONG, LIMIT)
            .expect("expired");
        assert!(why.contains("5 segment(s) in flight"), "{why}");
        // Duplicate ACKs still coming: a live TCP, however long nothing is acknowledged.
        assert_eq!(Unanswered::of(&info(5, 0, 100)).expired(LONG, LIMIT), None);
        // The first bytes after a long idle time: silent for long, owing only just now.
        assert_eq!(
            Unanswered::of(&info(5, 0, 60_000)).expired(LIMIT / 10, LIMIT),
            None
        );
    }
}
