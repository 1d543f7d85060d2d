//! One relayed connection as a state machine ([`Session`]), both directions: the source's bytes
//! peeked, written, dropped once acknowledged; failover; the reply copied back; ends passed on.
//! Its driver (the blocking [`relay`](super::relay) or the async one) does the waiting.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::ack::{Dest, Marks, Unanswered, ask_ack_notifications, end_is_fin};
use super::{Config, Failover, RelayError, Report, io_err};
use crate::peek::{self, PeekCursor};
use crate::sys::{self, event::Epoll};
use crate::tcp_info::tcp_info;

mod reply;
mod stash;

use stash::{BUF, Flow, Reply, SCRATCH, Stash};

/// Epoll tokens: a session's two sockets are its token with this bit clear (the source) and
/// set (the destination).
pub(crate) const DESTINATION: u64 = 1;

/// Without acknowledgement notifications, how often `TCP_INFO` is read while bytes are
/// unacknowledged.
const ACK_POLL: Duration = Duration::from_millis(1);

/// With them, a backstop, only while segments are in flight: the kernel marks the last byte of
/// a write only if its segment is still in the write queue when `tcp_sendmsg` ends
/// (`tcp_tx_timestamp`), so a write sent out whole at once gets no notification. Mid-stream the
/// next write's covers it; at the bound or the end of the stream only this timer does (the
/// failover test caught one such stall: a stream acknowledged in full, then five seconds of
/// silence). It starts at this and doubles while nothing is acknowledged, up to half the
/// acknowledgement timeout (a destination that takes a byte now and then through a nearly
/// closed window keeps segments in flight for as long as it stalls). With nothing in flight (the destination's window closed: what the
/// relay wrote waits in its send queue, where the kernel did mark it) the notification or room
/// in the send buffer (`EPOLLOUT`) wakes the session; only a look at its window probes
/// ([`Unanswered`]) every half [`Config::ack_timeout`] remains, for a destination that dies
/// while its window is closed (`TCP_USER_TIMEOUT` would do it without a clock, but aborts
/// connections whose probes are answered too: tried, the stalled destination of the relay tests
/// was cut after one timeout).
const ACK_BACKSTOP: Duration = Duration::from_millis(2);

/// Outstanding bytes from which every peek looks at `TCP_INFO` first and every write asks for
/// its acknowledgement's notification (at most: less for a small `max_unacked` or receive
/// buffer, see [`Session::eager_at`]). Below, with the peek offset, the acknowledged bytes stay
/// in the source's queue until this much is outstanding, the source's stream ends, or the
/// connection has been quiet for [`LAZY`]: a stream takes what the destination acknowledged as
/// it goes, and an exchange of small requests costs no `getsockopt`, no notification and no
/// consume of its own (a notification costs two `recvmsg`, and its look a `getsockopt` and a
/// `recv`: with them, a 1 KiB exchange took twelve calls where a copying relay makes six). The
/// discard method looks every time, as it re-reads what is not consumed.
const OBSERVE_AT: u64 = 64 * 1024;

/// How long after a look at `TCP_INFO` the next comes at the latest while bytes are outstanding
/// (at most half the acknowledgement timeout): acknowledged bytes below
/// [`Session::eager_at`] wait no longer in the source's queue, and a destination that died
/// behind a trickle of small writes starts its stall clock.
const LAZY: Duration = Duration::from_secs(1);

/// Peeks since the last look from which acknowledgements are taken as they come, whatever the
/// bytes: the source's queue is charged by its buffers (an skb's truesize), not by its bytes,
/// and a stream of small segments from a real NIC closes the source's window long before
/// [`Session::eager_at`] bytes (100-byte segments can cost 2 KiB each).
const PEEKS_AT: u32 = 16;

/// What a connection's destinations share across failovers.
pub(crate) struct Link<'a> {
    s: &'a Config,
    /// The session's epoll set: its driver's (the blocking relay's, the async relay's, which
    /// watches it too, or an event loop's, shared by its sessions), borrowed for the session's
    /// life.
    epoll: &'a Epoll,
    /// The session's epoll token (its [`DESTINATION`] bit clear).
    token: u64,
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

/// One relayed connection as a state machine, without a wait of its own: the blocking
/// [`relay`](super::relay) and the async `zcnet::tokio::relay` drive the same steps, both
/// directions.
pub(crate) struct Session<'a> {
    link: Link<'a>,
    cur: PeekCursor<TcpStream>,
    dest: Option<Dest>,
    stats: Report,
    /// Peeked and not yet written to the destination.
    pending: Stash,
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
    /// Segments in flight at the last look, and the backstop's next wait while they are.
    in_flight: bool,
    /// A write asked for its acknowledgement's notification since the last look that found
    /// nothing in flight.
    marked: bool,
    /// When `TCP_INFO` was last read, and the peeks since.
    looked_at: Instant,
    peeks_since_look: u32,
    /// Outstanding bytes from which acknowledgements are taken as they come: [`OBSERVE_AT`], or
    /// less for a small `max_unacked` (half of it) or receive buffer of the source's (a quarter).
    eager_at: u64,
    /// The source may have bytes past the peek offset, the destination reply bytes: set by
    /// their events (edge-triggered), cleared when a read would block, so that a step makes no
    /// read that cannot return anything.
    source_readable: bool,
    reply_readable: bool,
    /// The source's or the destination's end (FIN, reset) was announced (`EPOLLRDHUP`,
    /// `EPOLLHUP`): a short read no longer means drained, as the end behind the bytes brings no
    /// edge of its own.
    source_end_seen: bool,
    reply_end_seen: bool,
    /// Acknowledgements may have come since the last look at `TCP_INFO` (a notification or an
    /// error of the destination, a timer, a new destination).
    acks_due: bool,
    backstop: Duration,
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
    /// A session for `src`, not yet connected, waiting on `epoll` with `token` (its lowest bit
    /// clear): the driver connects to the targets from the first and calls [`Session::adopt`].
    pub(crate) fn new(
        src: TcpStream,
        s: &'a Config,
        epoll: &'a Epoll,
        token: u64,
    ) -> Result<Self, RelayError> {
        debug_assert_eq!(token & DESTINATION, 0);
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
                token,
            )
            .map_err(io_err("epoll_ctl"))?;
        let cur = PeekCursor::new(src, peek::Config { mode: s.mode })?;
        // A quarter of the source's receive buffer: unconsumed bytes never close its window.
        let rcvbuf = sys::sockopt::receive_buffer(cur.get_ref().as_fd()).unwrap_or(0);
        let eager_at = OBSERVE_AT
            .min(s.max_unacked / 2)
            .min(u64::try_from(rcvbuf / 4).unwrap_or(0));
        let stats = Report {
            peer,
            method: cur.mode().name().to_owned(),
            fallback_reason: cur.fallback_reason().map(str::to_owned),
            ..Report::default()
        };
        Ok(Session {
            link: Link { s, epoll, token },
            cur,
            dest: None,
            stats,
            pending: Stash::default(),
            eof: false,
            source_reset: None,
            failed: None,
            failover: None,
            given_up: Vec::new(),
            stalled_since: None,
            in_flight: false,
            marked: false,
            looked_at: Instant::now(),
            peeks_since_look: 0,
            eager_at,
            source_readable: true,
            reply_readable: true,
            source_end_seen: false,
            reply_end_seen: false,
            acks_due: true,
            backstop: ACK_BACKSTOP,
            destination_shut: false,
            source_shut: false,
            reply: Reply::default(),
            finished: false,
            // Grown by the first `woke`: a session of an event loop never has one.
            events: Vec::new(),
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
        if progressed {
            self.backstop = ACK_BACKSTOP;
        }
        self.in_flight = info.unacked > 0;
        self.marked &= self.in_flight;
        self.acks_due = false;
        self.looked_at = Instant::now();
        self.peeks_since_look = 0;
        Ok(unanswered)
    }

    /// Whether a step looks at `TCP_INFO`: acknowledgements may have come, the source's stream
    /// ended (its end waits for the last of them), much is outstanding, the stall clock runs,
    /// or the kernel gives no notifications.
    fn look(&self) -> bool {
        self.acks_due
            || self.eof
            || self.stalled_since.is_some()
            || self.eager()
            || self.dest().marks == Marks::None
            // The discard method re-reads what is not consumed, with SO_RCVLOWAT past it.
            || self.cur.mode() != peek::Mode::ZeroCopy
    }

    /// Takes `stream`, connected to target `target`, as the destination.
    ///
    /// # Errors
    /// `setsockopt` and `epoll_ctl` errors.
    pub(crate) fn adopt(&mut self, stream: TcpStream, target: usize) -> Result<(), RelayError> {
        let dest = self.link.adopt(stream, target, self.cur.consumed())?;
        if dest.marks == Marks::None {
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
        self.pending = Stash::default();
        // The rewind made the bytes past the resume point unpeeked again: a FIN seen before the
        // failure comes after them (without this, a destination failing after the source's end
        // lost the rest: the stream "ended" at the resume point).
        self.eof = false;
        self.stalled_since = None;
        self.marked = false;
        self.source_readable = true;
        self.reply_readable = true;
        self.reply_end_seen = false;
        self.acks_due = true;
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
            if self.look() {
                let unanswered = self.observe()?;
                let stalled = self.stalled_since.map_or(Duration::ZERO, |t| t.elapsed());
                if let Some(why) = unanswered.expired(stalled, s.ack_timeout) {
                    self.failed = Some(why);
                    continue;
                }
            }
            if self.forward_complete() && !self.destination_shut {
                self.pass_the_source_end()?;
            }
            let ended_before = self.eof;
            if !self.destination_shut {
                self.forward()?;
            }
            self.backward();
            // The source's end just read: look again now (its FIN waits for the last
            // acknowledgements, which writes below the mark asked no notification of).
            let just_ended = self.eof && !ended_before && !self.destination_shut;
            if self.failed.is_some()
                || just_ended
                || (self.forward_complete() && !self.destination_shut)
            {
                continue;
            }
            if self.destination_shut && self.reply.done {
                return Ok(Next::Done);
            }
            return Ok(Next::Wait(self.wait()));
        }
    }

    /// How long the driver may wait for an event: without one, until the stall clock expires
    /// or the backstop is due (segments in flight whose acknowledgement may come without a
    /// notification), or, without notifications at all, the next look at `TCP_INFO`. With
    /// nothing outstanding nothing can time out: only an event brings work.
    fn wait(&mut self) -> Option<Duration> {
        if self.cur.outstanding() == 0 {
            return None;
        }
        if self.dest().marks == Marks::None {
            // Also when the kernel refused a marked write's control message and the socket
            // option after it.
            self.stats.ack_polling = true;
            return Some(ACK_POLL);
        }
        // Once the stall is older than the timeout without expiring (its TCP is not silent),
        // the coarse look below re-checks it: a deadline in the past would spin.
        let stall = self.stalled_since.and_then(|t| {
            let limit = self.link.s.ack_timeout + Duration::from_millis(1);
            Some(limit.saturating_sub(t.elapsed())).filter(|d| !d.is_zero())
        });
        let coarse = self.link.s.ack_timeout / 2;
        // Acknowledgements wanted soon: a write asked for one, the source's end waits for them,
        // or the stall clock runs. Otherwise only the bytes' lingering in the source's queue.
        let urgent = self.marked || self.eof || self.stalled_since.is_some();
        let backstop = if self.in_flight && urgent {
            let b = self.backstop.min(coarse);
            self.backstop = (self.backstop * 2).min(coarse);
            Some(b)
        } else if urgent {
            Some(coarse)
        } else {
            // From the last look, not from now: a session stepped often still looks.
            let next = self.looked_at + LAZY.min(coarse);
            Some(next.saturating_duration_since(Instant::now()))
        };
        match (stall, backstop) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
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
        Ok(())
    }

    /// Writes what was peeked and peeks more while there is room, until one side would block.
    fn forward(&mut self) -> Result<(), RelayError> {
        let s = self.link.s;
        // The step looked at TCP_INFO just before.
        let mut observed = true;
        loop {
            if !self.pending.is_empty() {
                let mark = self.mark();
                let dest = self.dest.as_mut().expect("connected");
                match dest.send(self.pending.rest(), mark) {
                    Ok(w) => {
                        self.pending.wrote(w);
                        self.stats.written += w as u64;
                        // Until a look says otherwise: the backstop counts on it.
                        self.in_flight = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.failed = Some(e.to_string());
                        return Ok(());
                    }
                }
                continue;
            }
            // Acknowledgements arrive while this loop runs: without taking them before each
            // peek the source queue (and the discard method's re-reading) grows with every
            // write the destination accepts.
            if !std::mem::replace(&mut observed, false) && self.look() {
                self.observe()?;
            }
            if self.eof || !self.source_readable || self.cur.outstanding() >= s.max_unacked {
                return Ok(());
            }
            let room = usize::try_from(s.max_unacked - self.cur.outstanding())
                .unwrap_or(usize::MAX)
                .min(BUF);
            let flow = SCRATCH.with_borrow_mut(|buf| self.peek_and_write(&mut buf[..room]))?;
            if let Flow::Stop = flow {
                return Ok(());
            }
        }
    }

    /// Peeks into `buf` and writes what it got; keeps what the write left (`pending`).
    fn peek_and_write(&mut self, buf: &mut [u8]) -> Result<Flow, RelayError> {
        let n = match self.cur.peek_with(buf, libc::MSG_DONTWAIT) {
            Ok(0) => {
                self.source_ended(None);
                return Ok(Flow::Stop);
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The discard method's SO_RCVLOWAT lies past the bytes it re-reads, and what a
                // consume frees brings no event: it peeks at every step, as before.
                self.source_readable = self.cur.mode() != peek::Mode::ZeroCopy;
                return Ok(Flow::Stop);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(Flow::More),
            // The kernel gives a connection's error only once no byte is left before it: every
            // byte the source's TCP took was peeked by now.
            Err(e) => {
                self.source_ended(Some(e.into()));
                return Ok(Flow::Stop);
            }
        };
        self.peeks_since_look += 1;
        if self.link.s.sample_unacked {
            self.stats.unacked_samples.push(self.cur.outstanding());
        }
        // Less than asked for: all there was (the next bytes bring an event of their own). Not
        // for the discard method, whose peek from the head may stop short of what is queued.
        let offset = self.cur.mode() == peek::Mode::ZeroCopy;
        if n < buf.len() && offset && !self.source_end_seen {
            self.source_readable = false;
        }
        let mut at = 0;
        while at < n {
            let mark = self.mark();
            match self
                .dest
                .as_mut()
                .expect("connected")
                .send(&buf[at..n], mark)
            {
                Ok(w) => {
                    at += w;
                    self.stats.written += w as u64;
                    self.in_flight = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The failover rewinds to the first unacknowledged byte: nothing to keep.
                    self.failed = Some(e.to_string());
                    return Ok(Flow::Stop);
                }
            }
        }
        if at < n {
            self.pending = Stash {
                bytes: buf[at..n].to_vec(),
                at: 0,
            };
            return Ok(Flow::Stop);
        }
        Ok(Flow::More)
    }

    /// Whether the next write to the destination asks for its acknowledgement's notification:
    /// much is outstanding, or the source's end is behind these bytes. Notes that one did.
    fn mark(&mut self) -> bool {
        let mark = self.eager() || self.source_end_seen;
        self.marked |= mark;
        mark
    }

    /// Whether acknowledgements are taken as they come: [`Session::eager_at`] bytes or
    /// [`PEEKS_AT`] peeks outstanding since the last look.
    fn eager(&self) -> bool {
        self.cur.outstanding() >= self.eager_at || self.peeks_since_look >= PEEKS_AT
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
        let events = std::mem::take(&mut self.events);
        // None: the wait timed out, a timer's step.
        self.acks_due |= events.is_empty();
        let r = events
            .iter()
            .try_for_each(|&(ev, token)| self.event(token & DESTINATION != 0, ev));
        self.events = events;
        r.map(|()| self.events.len())
    }

    /// An event of the source's socket or (`destination`) the destination's: what may be read
    /// now, and the destination's notifications or failure.
    ///
    /// # Errors
    /// Reading the destination's error queue.
    pub(crate) fn event(&mut self, destination: bool, ev: u32) -> Result<(), RelayError> {
        let readable = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        let end = (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        if !destination {
            self.source_readable |= ev & readable != 0;
            self.source_end_seen |= ev & end != 0;
            return Ok(());
        }
        let ended = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP) as u32;
        self.reply_readable |= ev & ended != 0;
        self.reply_end_seen |= ev & (libc::EPOLLRDHUP | libc::EPOLLHUP) as u32 != 0;
        if ev & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
            self.acks_due = true;
            self.destination_error()?;
        }
        Ok(())
    }

    /// The deadline the session asked for passed: a step looks at `TCP_INFO`.
    pub(crate) fn timer(&mut self) {
        self.acks_due = true;
    }

    /// The destination's socket reported `EPOLLERR` or `EPOLLHUP`: takes its acknowledgement
    /// notifications, and its failure if it failed.
    ///
    /// # Errors
    /// Reading the destination's error queue.
    pub(crate) fn destination_error(&mut self) -> Result<(), RelayError> {
        let Some(dest) = &self.dest else {
            return Ok(());
        };
        let failure = dest
            .failure(self.destination_shut)
            .map_err(io_err("recvmsg(MSG_ERRQUEUE) of the destination"))?;
        self.failed = self.failed.take().or(failure);
        Ok(())
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
        self.reply.pending = Stash::default();
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
        let marks = ask_ack_notifications(&stream);
        self.epoll
            .add(
                stream.as_fd(),
                (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET)
                    as u32,
                self.token | DESTINATION,
            )
            .map_err(io_err("epoll_ctl"))?;
        Ok(Dest {
            stream,
            target,
            base,
            marks,
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
pub(super) fn reset(stream: &TcpStream) {
    let _ = sys::net::disconnect(stream.as_fd());
}
