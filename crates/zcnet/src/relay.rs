//! A TCP relay that keeps the bytes it forwards in the source connection's kernel receive queue
//! until the destination's TCP has acknowledged them, reading them with a peek cursor
//! ([`crate::peek`], `SO_PEEK_OFF`). `zcnet relay` is this module behind a command line.
//!
//! What is guaranteed, source to destination: a byte is dropped from the source's queue only
//! once the destination's TCP acknowledged it (`tcpi_bytes_acked` of `TCP_INFO`). When the
//! destination fails (reset, refused, silent while it owes an answer: [`Config::ack_timeout`]),
//! the relay resets it and connects to the next of [`Config::targets`] it has not given up on,
//! and sends from the first unacknowledged byte, straight from the kernel queue: no user-space
//! retransmit buffer. A destination that failed is not used again for that connection (it would
//! take a second piece of one stream for a new one); with none left the relay ends in
//! [`RelayError::DestinationFailed`] and resets the source. A destination that is idle, or that
//! stops reading while its TCP answers the window probes, has not failed. Bytes a destination's
//! TCP acknowledged but its application never read are outside what a relay can know.
//!
//! Ends are passed on as they came, so that a cut stream never looks whole: the source's FIN
//! as a FIN once the destination acknowledged every byte; a source's reset (any end without its
//! FIN) as a reset after those bytes ([`RelayError::SourceReset`]). Any other error, and the
//! async relay's future dropped, reset both connections. The reply (destination to source) is
//! copied as it comes, without the guarantee, by the same session: a connection ends when both
//! directions have ended, the destination's FIN passed to the source after the source's passed
//! to the destination, or when either side resets. A destination's reset before the source's
//! stream is acknowledged is a failure of that destination (failed over); after it, while only
//! its reply was left, it ends the connection ([`RelayError::ReplyCut`], the source reset).
//!
//! Memory per connection: a 64 KiB buffer each way, allocated with the first bytes that way and
//! freed once that way has ended, plus, for the discard-buffer method only, up to
//! [`Config::max_unacked`] bytes of discard buffer; unacknowledged bytes stay in the kernel and
//! hold back the source through its receive window. Descriptors per connection: three, the
//! source, the destination and the epoll set (a failover closes the destination that failed
//! before it connects the next); the async relay watches the same epoll set, without a
//! duplicate.
//!
//! The unacknowledged bytes occupy the source socket's receive buffer, which autotuning sizes by
//! what the application takes per round trip: a relay holding back more than a few hundred KiB
//! needs a larger one (`net.ipv4.tcp_rmem`'s default, or the bound is never reached and the
//! source's window, not [`Config::max_unacked`], limits the bytes in flight downstream).
//!
//! Each connection is one thread (or task) with one epoll: new source bytes (edge-triggered
//! `EPOLLIN`), destination acknowledgements (`SO_TIMESTAMPING` `TX_ACK` notifications on its
//! error queue, `EPOLLERR`), room in either send buffer (`EPOLLOUT`) and reply bytes (the
//! destination's `EPOLLIN`) wake it, with a 2 ms backstop while bytes are unacknowledged (the
//! kernel marks no byte of a write sent out whole at once); it never spins.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "serde")]
use serde::Serialize;

use crate::peek::{self, PeekCursor};
use crate::sys::{self, event::Epoll};
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
    /// The destination failed and no target is left that was not given up on already (each
    /// takes a connection's stream at most once). The source was reset.
    #[error(
        "destination {target} failed ({why}) with {acknowledged} bytes acknowledged, and no \
         other destination is left: the source was reset"
    )]
    DestinationFailed {
        /// The destination that failed last.
        target: SocketAddr,
        /// Its error, or the silence it was given up for.
        why: String,
        /// Stream bytes acknowledged by the destinations: the source's bytes after these were
        /// not delivered.
        acknowledged: u64,
    },
    /// The source's connection ended without its FIN (a reset, a timeout). Every byte its TCP
    /// had taken was relayed and acknowledged, then the destination was reset too.
    #[error(
        "the source's connection ended without its FIN after {relayed} bytes: they were \
         relayed, then the destination was reset"
    )]
    SourceReset {
        /// Stream bytes relayed and acknowledged.
        relayed: u64,
        /// How it ended.
        #[source]
        source: io::Error,
    },
    /// The source's stream was relayed and acknowledged whole, and the destination's reply
    /// ended without its FIN (a reset): the source was reset too, so that the part of the reply
    /// it got does not pass for the whole.
    #[error(
        "destination {target} ended its reply without its FIN ({why}) after the source's {relayed} \
         bytes were acknowledged: the source was reset"
    )]
    ReplyCut {
        /// The destination.
        target: SocketAddr,
        /// Its error.
        why: String,
        /// Stream bytes relayed and acknowledged.
        relayed: u64,
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
    /// How the source is peeked: [`peek::Mode::ZeroCopy`] (`SO_PEEK_OFF` where the kernel has it),
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
            mode: peek::Mode::ZeroCopy,
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
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(Serialize))]
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
    #[cfg_attr(feature = "serde", serde(skip))]
    pub unacked_samples: Vec<u64>,
    /// The cursor's counters.
    pub peek: peek::Counters,
}

/// One failover of a relayed connection.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(Serialize))]
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
    /// failed: its pending error, or a reset whose error another call took (closed although
    /// the relay sent no FIN: `shut` says whether it did).
    fn failure(&self, shut: bool) -> io::Result<Option<String>> {
        let mut control = [0u8; 256];
        while sys::net::recv_errqueue(self.stream.as_fd(), &mut control)?.is_some() {}
        if let Some(e) = self.stream.take_error()? {
            return Ok(Some(e.to_string()));
        }
        Ok((!shut && closed(&self.stream)).then(|| "connection reset".to_owned()))
    }
}

/// Whether `stream`'s connection is closed (`TCP_CLOSE`): after a reset, or after both FINs.
fn closed(stream: &TcpStream) -> bool {
    tcp_info(stream).is_ok_and(|i| i.state == TcpState::Close)
}

/// Whether the end a read of `stream` just returned (0 bytes) is the peer's FIN, to pass on.
/// Not when the connection is closed although the relay sent no FIN (`shut` false): that end
/// is a reset whose error another call took (`SO_ERROR`, a write), after which a read returns
/// 0; passed on, it would close the other side as if the peer had finished. After the relay's
/// own FIN, closed is the clean end of both.
fn end_is_fin(stream: &TcpStream, shut: bool) -> bool {
    shut || !closed(stream)
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
    let flags = libc::SOF_TIMESTAMPING_TX_ACK
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    sys::sockopt::set_timestamping(stream.as_fd(), flags)
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
    /// The session's epoll set: its driver's (the blocking relay's, or the async relay's, which
    /// watches it too), borrowed for the session's life.
    epoll: &'a Epoll,
}

/// What a session asks of its driver after doing all it could without blocking.
pub(crate) enum Next {
    /// Both directions ended: the source's stream acknowledged end to end and its FIN passed on,
    /// the destination's reply and its FIN passed back.
    Done,
    /// Connect to one of these targets (indices into [`Config::targets`]), tried in this order
    /// and in turn again until the connect timeout, then [`Session::adopt`].
    Connect(Vec<usize>),
    /// Wait for an event of the session's epoll set, at most this long (`None`: nothing can time
    /// out, only an event brings work), then [`Session::woke`].
    Wait(Option<Duration>),
}

/// The reply: what the destination sends, copied to the source as it comes.
#[derive(Default)]
struct Reply {
    /// Allocated with the first reply bytes: a connection whose destination never answers
    /// costs none.
    buf: Vec<u8>,
    /// Bytes of `buf` read and not yet written to the source.
    pending: std::ops::Range<usize>,
    /// The destination's FIN was passed to the source: nothing more comes back.
    done: bool,
}

/// Bytes of each direction's buffer.
const BUF: usize = 64 * 1024;

/// One relayed connection as a state machine, without a wait of its own: the blocking
/// [`relay`] and the async `zcnet::tokio::relay` drive the same steps, both directions.
pub(crate) struct Session<'a> {
    link: Link<'a>,
    cur: PeekCursor<TcpStream>,
    dest: Option<Dest>,
    stats: Report,
    buf: Vec<u8>,
    /// Bytes of `buf` peeked and not yet written to the destination.
    pending: std::ops::Range<usize>,
    eof: bool,
    /// The source's connection ended without its FIN: how. Kept across failovers (a rewind
    /// makes the bytes before it readable again, but the kernel reports the error only once).
    source_reset: Option<io::Error>,
    failed: Option<String>,
    /// Why the destination being replaced failed, and the offset resumed at.
    failover: Option<(SocketAddr, String, u64)>,
    /// Destinations that failed on this connection; none is used again.
    given_up: Vec<SocketAddr>,
    /// Since when the destination has owed an answer and acknowledged nothing.
    stalled_since: Option<Instant>,
    /// The source's FIN was passed to the destination: the source's stream is done.
    destination_shut: bool,
    /// The destination's FIN was passed to the source.
    source_shut: bool,
    reply: Reply,
    /// Both directions ended cleanly: nothing to reset when dropped.
    finished: bool,
    events: Vec<(u32, u64)>,
}

impl<'a> Session<'a> {
    /// A session for `src`, not yet connected, waiting on `epoll`: the driver connects to the
    /// targets from the first and calls [`Session::adopt`].
    pub(crate) fn new(src: TcpStream, s: &'a Config, epoll: &'a Epoll) -> Result<Self, RelayError> {
        if s.targets.is_empty() {
            return Err(RelayError::Config("no destination"));
        }
        if s.max_unacked == 0 {
            return Err(RelayError::Config(
                "max_unacked is 0: nothing could ever be forwarded",
            ));
        }
        let peer = src.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        // New bytes (edge-triggered: the queue only grows at its tail, past the peek offset) and
        // room for the reply.
        epoll
            .add(
                src.as_fd(),
                (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT | libc::EPOLLET) as u32,
                SOURCE,
            )
            .map_err(io_err("epoll_ctl"))?;
        let cur = PeekCursor::new(src, peek::Config { mode: s.mode })?;
        let stats = Report {
            peer,
            method: cur.mode().name().to_owned(),
            fallback_reason: cur.fallback_reason().map(str::to_owned),
            ..Report::default()
        };
        Ok(Session {
            link: Link { s, epoll },
            cur,
            dest: None,
            stats,
            buf: Vec::new(),
            pending: 0..0,
            eof: false,
            source_reset: None,
            failed: None,
            failover: None,
            given_up: Vec::new(),
            stalled_since: None,
            destination_shut: false,
            source_shut: false,
            reply: Reply::default(),
            finished: false,
            events: Vec::with_capacity(Epoll::MAX_EVENTS),
        })
    }

    /// What to do first: connect to the targets, in order.
    pub(crate) fn start(&self) -> Next {
        Next::Connect((0..self.link.s.targets.len()).collect())
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
    /// `setsockopt` and `epoll_ctl` errors.
    pub(crate) fn adopt(&mut self, stream: TcpStream, target: usize) -> Result<(), RelayError> {
        let dest = self.link.adopt(stream, target, self.cur.consumed())?;
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

    /// The source's stream is acknowledged end to end (all it sent, up to its FIN or its reset).
    fn forward_complete(&self) -> bool {
        self.eof && self.cur.outstanding() == 0
    }

    /// Does all it can without blocking, both ways (consume what was acknowledged, write what
    /// it peeked, peek more; copy the reply) and says what it waits for.
    ///
    /// # Errors
    /// The source's failure, the destination's after the source's stream was acknowledged
    /// whole, or a call on the destination that is not the destination failing.
    pub(crate) fn step(&mut self) -> Result<Next, RelayError> {
        let s = self.link.s;
        loop {
            if let Some(why) = self.failed.take() {
                if self.destination_shut {
                    // Only its reply was left: no other destination can give that one.
                    return Err(RelayError::ReplyCut {
                        target: s.targets[self.dest().target],
                        why,
                        relayed: self.cur.consumed(),
                    });
                }
                return Ok(Next::Connect(self.failing_over(why)?));
            }
            let unanswered = self.observe()?;
            let stalled = self.stalled_since.map_or(Duration::ZERO, |t| t.elapsed());
            if let Some(why) = unanswered.expired(stalled, s.ack_timeout) {
                self.failed = Some(why);
                continue;
            }
            if self.forward_complete() && !self.destination_shut {
                self.pass_the_source_end()?;
            }
            if !self.destination_shut {
                self.forward()?;
            }
            self.backward();
            if self.failed.is_some() || (self.forward_complete() && !self.destination_shut) {
                continue;
            }
            if self.destination_shut && self.reply.done {
                return Ok(Next::Done);
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

    /// The source's stream is acknowledged end to end: passes its end on. Its FIN as a FIN, the
    /// reply still to come; a reset as [`RelayError::SourceReset`] (both connections reset when
    /// the session drops).
    fn pass_the_source_end(&mut self) -> Result<(), RelayError> {
        let relayed = self.cur.consumed();
        if let Some(source) = self.source_reset.take() {
            return Err(RelayError::SourceReset { relayed, source });
        }
        self.destination_shut = true;
        let _ = self.dest().stream.shutdown(Shutdown::Write);
        // Nothing more goes forward: its buffer goes (a crowd of connections waiting on their
        // replies holds none).
        self.buf = Vec::new();
        Ok(())
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
                if self.buf.is_empty() {
                    self.buf = vec![0u8; BUF];
                }
                let room = usize::try_from(s.max_unacked - self.cur.outstanding())
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                match self
                    .cur
                    .peek_with(&mut self.buf[..room], libc::MSG_DONTWAIT)
                {
                    Ok(0) => {
                        self.source_ended(None);
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
                    // The kernel gives a connection's error only once no byte is left before it:
                    // every byte the source's TCP took was peeked by now.
                    Err(e) => {
                        self.source_ended(Some(e.into()));
                        return Ok(());
                    }
                }
            }
            let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            let data = &self.buf[self.pending.clone()];
            match sys::net::sendto(self.dest().stream.as_fd(), data, flags, None) {
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

    /// Copies the destination's reply to the source until one side would block; passes the
    /// destination's FIN on once read. A destination's error is its failure (`failed`); a
    /// source that cannot be written to any more ended without its FIN (`source_reset`), which
    /// the forward direction passes on once every byte its TCP took is acknowledged.
    fn backward(&mut self) {
        let Some(dest) = &self.dest else { return };
        // Once the source has the destination's end, or its own connection is cut, nothing more
        // can reach it.
        if self.reply.done || self.source_reset.is_some() {
            return;
        }
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        loop {
            if self.reply.pending.is_empty() {
                if self.reply.buf.is_empty() {
                    self.reply.buf = vec![0u8; BUF];
                }
                match sys::net::recv(dest.stream.as_fd(), &mut self.reply.buf, libc::MSG_DONTWAIT) {
                    Ok(0) => {
                        if end_is_fin(&dest.stream, self.destination_shut) {
                            self.source_shut = true;
                            self.reply = Reply {
                                done: true,
                                ..Reply::default()
                            };
                            let _ = self.cur.get_ref().shutdown(Shutdown::Write);
                        } else {
                            self.failed = Some("connection reset".to_owned());
                        }
                        return;
                    }
                    Ok(n) => self.reply.pending = 0..n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.failed = Some(e.to_string());
                        return;
                    }
                }
            }
            let data = &self.reply.buf[self.reply.pending.clone()];
            match sys::net::sendto(self.cur.get_ref().as_fd(), data, flags, None) {
                Ok(w) => self.reply.pending.start += w,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.source_reset = Some(e);
                    self.reply.pending = 0..0;
                    return;
                }
            }
        }
    }

    /// The source's stream ended at the peek offset: with its FIN, or cut (`error`, what the
    /// peek returned).
    fn source_ended(&mut self, error: Option<io::Error>) {
        self.eof = true;
        if self.source_reset.is_none() {
            self.source_reset = error.or_else(|| self.closed_without_fin());
        }
    }

    /// A plain end of the peeks can still be a reset: the kernel reports a connection's error to
    /// one call only, and a write of the reply to the source may have taken it. The state tells:
    /// closed (`TCP_CLOSE`) although no FIN went to the source is a reset or a timeout; after
    /// the source's FIN alone it is `CLOSE_WAIT`.
    fn closed_without_fin(&self) -> Option<io::Error> {
        (!end_is_fin(self.cur.get_ref(), self.source_shut)).then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed by a reset or a timeout whose error a write took",
            )
        })
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
            let failure = self
                .dest()
                .failure(self.destination_shut)
                .map_err(io_err("recvmsg(MSG_ERRQUEUE) of the destination"))?;
            self.failed = self.failed.take().or(failure);
        }
        Ok(self.events.len())
    }

    /// The destination failed: take its last acknowledgements, reset it, give it up, and rewind
    /// the cursor to the first unacknowledged byte; returns the targets left, in turn from the
    /// next one. Its reply not yet written to the source is dropped with it.
    ///
    /// # Errors
    /// [`RelayError::DestinationFailed`] when none is left.
    fn failing_over(&mut self, why: String) -> Result<Vec<usize>, RelayError> {
        let old = self.dest.take().expect("connected");
        // TCP_INFO stays readable after a reset: its acknowledged count is final.
        if let Ok(info) = tcp_info(&old.stream) {
            let _ = old.consume_acked(&info, &mut self.cur);
        }
        let at = self.cur.consumed();
        let failed = old.target;
        let target = self.link.s.targets[failed];
        // A reset, not a FIN: the part it got must not pass for the whole stream. Closing it
        // takes it out of the epoll set.
        reset(&old.stream);
        drop(old);
        self.reply.pending = 0..0;
        self.given_up.push(target);
        let targets = &self.link.s.targets;
        let left: Vec<usize> = (1..=targets.len())
            .map(|k| (failed + k) % targets.len())
            .filter(|&i| !self.given_up.contains(&targets[i]))
            .collect();
        if left.is_empty() {
            return Err(RelayError::DestinationFailed {
                target,
                why,
                acknowledged: at,
            });
        }
        self.stats.resent += self.cur.peeked() - at;
        self.cur.rewind(at)?;
        self.failover = Some((target, why, at));
        Ok(left)
    }

    /// Ends the session after [`Next::Done`]: both directions ended, every byte of the source's
    /// stream acknowledged. Returns the report.
    pub(crate) fn finish(mut self) -> Report {
        self.finished = true;
        self.stats.bytes = self.cur.consumed();
        self.stats.peek = self.cur.counters();
        std::mem::take(&mut self.stats)
    }
}

impl Link<'_> {
    /// Registers a new destination with the epoll: room for the source's bytes, its
    /// acknowledgement notifications and errors, and its reply.
    fn adopt(&self, stream: TcpStream, target: usize, base: u64) -> Result<Dest, RelayError> {
        if let Some(b) = self.s.dest_sndbuf {
            let b = i32::try_from(b).unwrap_or(i32::MAX);
            // Past net.core.wmem_max with CAP_NET_ADMIN (SO_SNDBUFFORCE), else capped there.
            let fd = stream.as_fd();
            sys::sockopt::set_send_buffer(fd, b).map_err(io_err("setsockopt(SO_SNDBUF)"))?;
        }
        let ack_events = ask_ack_notifications(&stream).is_ok();
        self.epoll
            .add(
                stream.as_fd(),
                (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET)
                    as u32,
                DESTINATION,
            )
            .map_err(io_err("epoll_ctl"))?;
        Ok(Dest {
            stream,
            target,
            base,
            ack_events,
        })
    }
}

impl Drop for Session<'_> {
    /// A session that did not end both ways cleanly (an error, the source's reset, the async
    /// relay's future dropped, a drain that ran out of time) resets both connections: a FIN
    /// would tell either side that what it got was whole.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(dest) = &self.dest {
            reset(&dest.stream);
        }
        reset(self.cur.get_ref());
    }
}

/// Aborts `stream`'s connection now: a reset to the peer, whichever duplicates of the
/// descriptor a reverse copy still holds (they wake with an error, not an end).
fn reset(stream: &TcpStream) {
    let _ = sys::net::disconnect(stream.as_fd());
}

/// Relays one accepted connection until both directions have ended: the source's stream
/// acknowledged end to end and its FIN passed to the destination, the destination's reply
/// copied back and its FIN passed to the source.
///
/// One thread, one epoll: edge-triggered `EPOLLIN` on the source says bytes arrived (past the
/// peek offset, as the queue only grows at its tail), `EPOLLERR` on the destination says an
/// acknowledgement notification or an error arrived, `EPOLLOUT` on either that its send buffer
/// has room again, `EPOLLIN` on the destination that its reply has bytes. After any wake the
/// relay does all it can without blocking and waits again: with a backstop timer while bytes
/// are outstanding, without one while none are (nothing can time out then).
///
/// # Errors
/// [`RelayError::NoDestination`] when no destination accepts within the connect timeout (at
/// the start or after a failure), [`RelayError::DestinationFailed`] when the last destination
/// left failed, [`RelayError::SourceReset`] when the source's connection ended without its FIN,
/// [`RelayError::ReplyCut`] when the destination's reply did, [`RelayError::Io`] when a call
/// fails. Bytes the last destination acknowledged are in [`Report`] only on success; on an error
/// they were consumed from the source as far as acknowledged, and both connections are reset.
pub fn relay(src: TcpStream, config: Config) -> Result<Report, RelayError> {
    let s = &config;
    let epoll = Epoll::new().map_err(io_err("epoll_create1"))?;
    let mut session = Session::new(src, s, &epoll)?;
    let mut next = session.start();
    loop {
        match next {
            Next::Done => return Ok(session.finish()),
            Next::Connect(targets) => {
                let (stream, target) = connect(s, &targets)?;
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

/// Connects to `targets` (indices into [`Config::targets`]) in turn, for at most
/// `connect_timeout`; returns the stream and its target's index.
fn connect(s: &Config, targets: &[usize]) -> Result<(TcpStream, usize), RelayError> {
    let mut attempts = Attempts::new(s, targets);
    while let Some((k, target, left)) = attempts.next() {
        match TcpStream::connect_timeout(&target, left) {
            Ok(stream) => return Ok((stream, k)),
            Err(e) => attempts.failed(k, &e),
        }
        if let Some(pause) = attempts.pause() {
            std::thread::sleep(pause);
        }
    }
    Err(attempts.no_destination())
}

/// The targets a connect tries, in turn until the connect timeout, and what each said: the
/// bookkeeping of both relays' connects.
pub(crate) struct Attempts<'a> {
    s: &'a Config,
    targets: &'a [usize],
    tried: usize,
    deadline: Instant,
    /// The last error of each target, in [`Config::targets`] order.
    errors: Vec<Option<String>>,
}

impl<'a> Attempts<'a> {
    pub(crate) fn new(s: &'a Config, targets: &'a [usize]) -> Self {
        Attempts {
            s,
            targets,
            tried: 0,
            deadline: Instant::now() + s.connect_timeout,
            errors: vec![None; s.targets.len()],
        }
    }

    /// The next target to try (its index and address) and the time left for it, until the
    /// deadline passed after at least one try.
    pub(crate) fn next(&mut self) -> Option<(usize, SocketAddr, Duration)> {
        if self.targets.is_empty() || (self.tried > 0 && Instant::now() >= self.deadline) {
            return None;
        }
        let k = self.targets[self.tried % self.targets.len()];
        self.tried += 1;
        let left = self.deadline.saturating_duration_since(Instant::now());
        Some((k, self.s.targets[k], left.max(Duration::from_millis(10))))
    }

    /// Target `k` refused or did not answer.
    pub(crate) fn failed(&mut self, k: usize, e: &dyn std::fmt::Display) {
        self.errors[k] = Some(format!("{}: {e}", self.s.targets[k]));
    }

    /// After each round over the targets, a pause: a refusing target answers at once.
    pub(crate) fn pause(&self) -> Option<Duration> {
        (self.tried % self.targets.len() == 0 && Instant::now() < self.deadline)
            .then_some(Duration::from_millis(100))
    }

    /// [`RelayError::NoDestination`] with the last error of each target.
    pub(crate) fn no_destination(self) -> RelayError {
        RelayError::NoDestination {
            timeout: self.s.connect_timeout,
            errors: self
                .errors
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// How [`serve`] (and `zcnet::tokio::relay::serve`) takes connections.
#[derive(Clone, Debug)]
pub struct Serve {
    /// Connections relayed at once, each counted until both its directions ended; a newcomer
    /// beyond them is refused (closed at once, [`Event::Refused`]).
    pub max_connections: usize,
    /// Relay this many connections (refused ones do not count), then stop accepting and return
    /// once they ended; `None`: until stopped.
    pub count: Option<u64>,
}

impl Serve {
    /// Up to `max_connections` at once, for as long as it runs.
    pub fn new(max_connections: usize) -> Serve {
        Serve {
            max_connections,
            count: None,
        }
    }
}

/// What a serving relay tells as it goes.
#[derive(Debug)]
pub enum Event {
    /// A connection ended: its report, or why it was cut.
    Ended {
        /// The source's address.
        from: SocketAddr,
        /// What the relay did.
        result: Result<Report, RelayError>,
    },
    /// A connection was refused: [`Serve::max_connections`] were being relayed.
    Refused {
        /// The source's address.
        from: SocketAddr,
    },
    /// `accept` failed for want of descriptors or memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`): the first failure of a burst. Live connections go on; newcomers wait in the
    /// listen queue while the relay retries, backing off from 5 ms to 1 s (as Go's `net/http`
    /// does), and sooner when a connection ends.
    AcceptStalled {
        /// The error.
        error: io::Error,
        /// Connections live at the time.
        live: usize,
    },
    /// `accept` works again after a burst of failures.
    AcceptResumed {
        /// Failed accepts in the burst.
        failures: u64,
        /// How long it lasted.
        waited: Duration,
    },
    /// Newcomers wait in the listen queue: the connections live use every descriptor
    /// `RLIMIT_NOFILE` leaves (each needs [`DESCRIPTORS_PER_CONNECTION`]), so one more could not
    /// be relayed whole. Told once per time it happens.
    DescriptorsFull {
        /// Connections live.
        live: usize,
        /// The soft `RLIMIT_NOFILE`.
        limit: u64,
    },
    /// The drain after a stop ran out of time: these connections were reset.
    DrainTimedOut {
        /// Connections reset.
        live: usize,
    },
}

/// Descriptors a relayed connection holds at most: the source, the destination and the epoll
/// set (a failover closes the destination that failed before it connects the next).
pub const DESCRIPTORS_PER_CONNECTION: u64 = 3;

/// Descriptors kept free for everything else a process does (the listener, a runtime, logs).
const DESCRIPTORS_SPARE: u64 = 32;

/// How many connections the descriptors `RLIMIT_NOFILE` leaves can hold, beyond those open now
/// (read once, when a serve starts: counting them at each accept would cost as much as the
/// descriptors open), and the limit; `None` without a limit to read or none set.
pub(crate) fn descriptor_room() -> Option<(usize, u64)> {
    let (Some(soft), _) = sys::process::nofile_limit().ok()? else {
        return None;
    };
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let room = soft.saturating_sub(open + DESCRIPTORS_SPARE) / DESCRIPTORS_PER_CONNECTION;
    Some((usize::try_from(room).unwrap_or(usize::MAX), soft))
}

/// Whether a failed `accept` is for want of resources, which pass (`EMFILE`, `ENFILE`,
/// `ENOMEM`, `ENOBUFS`), rather than an error of the listener.
pub(crate) fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
    )
}

/// Whether a failed `accept` concerns only the connection it would have returned (reset or
/// aborted before it was taken, refused by a filter): take the next.
pub(crate) fn lost_newcomer(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPERM | libc::EPROTO | libc::EINTR)
    )
}

/// The back-off of a burst of failed accepts: 5 ms, doubling, at most 1 s.
pub(crate) struct Backoff {
    failures: u64,
    since: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            failures: 0,
            since: None,
        }
    }

    /// One more failure: the pause before the next try, and whether it starts a burst.
    pub(crate) fn failed(&mut self) -> (Duration, bool) {
        let first = self.since.is_none();
        self.since.get_or_insert_with(Instant::now);
        self.failures += 1;
        let ms = 5u64 << (self.failures - 1).min(8);
        (Duration::from_millis(ms.min(1000)), first)
    }

    /// An accept worked: the burst it ends, if there was one.
    pub(crate) fn worked(&mut self) -> Option<Event> {
        let since = self.since.take()?;
        let failures = std::mem::take(&mut self.failures);
        Some(Event::AcceptResumed {
            failures,
            waited: since.elapsed(),
        })
    }
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
    /// Connections relayed (accepted and not refused).
    pub relayed: u64,
    /// Connections closed at once because [`Serve::max_connections`] were being relayed.
    pub refused: u64,
    /// Connections that ended in an error.
    pub failed: u64,
    /// Connections reset because the drain after a stop ran out of time (async relay only).
    pub reset_at_drain: u64,
    /// Failed accepts for want of descriptors or memory (each burst told by
    /// [`Event::AcceptStalled`]).
    pub accept_failures: u64,
}

/// Accepts connections on `listener` and relays each on its own thread (both directions, to
/// their ends), as [`Serve`] says; `event` is told of each connection's end and of trouble
/// accepting. Out of descriptors or memory it keeps every live connection and backs off
/// ([`Event::AcceptStalled`]); it accepts no more connections at once than `RLIMIT_NOFILE`
/// leaves descriptors for ([`DESCRIPTORS_PER_CONNECTION`] each; raise the soft limit to the hard
/// one first, as `zcnet relay` does), so that every connection it takes it can relay whole.
/// Returns once [`Serve::count`] connections were relayed and ended (it waits for each, however
/// long: the async relay's serve bounds that with a drain timeout).
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails for another reason than a lost newcomer or a want
/// of resources, [`RelayError::Config`] for `max_connections` 0.
pub fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    how: &Serve,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    check_max_connections(how.max_connections)?;
    let event = Arc::new(event);
    let live = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut handles: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut served = Served::default();
    let mut backoff = Backoff::new();
    let mut full = false;
    let room = descriptor_room();
    while how.count.is_none_or(|c| served.relayed < c) {
        // Room for one more in the descriptors: else the newcomer waits in the listen queue.
        if let Some((room, limit)) = room
            && live.load(Ordering::SeqCst) >= room
        {
            if !full {
                event(Event::DescriptorsFull {
                    live: live.load(Ordering::SeqCst),
                    limit,
                });
                full = true;
            }
            std::thread::sleep(Duration::from_millis(10));
            handles.retain(|h| !h.is_finished());
            continue;
        }
        full = false;
        let (src, from) = match listener.accept() {
            Ok(a) => a,
            Err(e) if out_of_resources(&e) => {
                served.accept_failures += 1;
                let (pause, first) = backoff.failed();
                if first {
                    let live = live.load(Ordering::SeqCst);
                    event(Event::AcceptStalled { error: e, live });
                }
                std::thread::sleep(pause);
                continue;
            }
            Err(e) if lost_newcomer(&e) => continue,
            Err(e) => return Err(io_err("accept")(e)),
        };
        if let Some(resumed) = backoff.worked() {
            event(resumed);
        }
        if live.load(Ordering::SeqCst) >= how.max_connections {
            served.refused += 1;
            reset(&src);
            event(Event::Refused { from });
            continue;
        }
        served.relayed += 1;
        live.fetch_add(1, Ordering::SeqCst);
        let (config, live, failed, event) =
            (config.clone(), live.clone(), failed.clone(), event.clone());
        handles.push(std::thread::spawn(move || {
            let result = relay(src, Config::clone(&config));
            live.fetch_sub(1, Ordering::SeqCst);
            if result.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            event(Event::Ended { from, result });
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
    use std::io::Read as _;

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

    /// A connected pair on loopback: (ours, the peer's).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (ours, l.accept().unwrap().0)
    }

    /// Waits (at most 5 s) until `stream`'s connection is in `state`.
    fn wait_for(stream: &TcpStream, state: TcpState) {
        for _ in 0..500 {
            if tcp_info(stream).unwrap().state == state {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never {state:?}");
    }

    #[test]
    fn an_end_read_after_a_reset_whose_error_was_taken_is_no_fin() {
        let (ours, peer) = pair();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        wait_for(&ours, TcpState::Close);
        // A write (or SO_ERROR) took the reset: a read now sees a plain end.
        assert!(ours.take_error().unwrap().is_some());
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        assert!(!end_is_fin(&ours, false), "a reset passed on as a FIN");
    }

    #[test]
    fn a_fin_is_passed_on_also_after_the_relays_own() {
        let (ours, peer) = pair();
        peer.shutdown(Shutdown::Write).unwrap();
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        assert!(end_is_fin(&ours, false));
        // The relay sent its FIN first (the source's end passed on), then the peer's came: the
        // connection is closed, cleanly.
        let (ours, peer) = pair();
        ours.shutdown(Shutdown::Write).unwrap();
        assert_eq!((&peer).read(&mut [0u8; 1]).unwrap(), 0);
        drop(peer);
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        wait_for(&ours, TcpState::Close);
        assert!(end_is_fin(&ours, true));
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
