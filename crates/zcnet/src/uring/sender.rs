//! [`UringSender`]: the sender, its queue and window, what comes back (`Collect`), the ring it
//! opens and the socket it checks.

use super::config::*;
use super::error::*;
use crate::auto::{Choice, Decider, SendPath};
use crate::loan::Claim;
use crate::loan::pool::{Pool, PoolBuf};
use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
use crate::sys::uring::{Finish, Finished, Resent, SendOp, Way};
use crate::sys::{self, uring::SendRing};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

/// Sends owned buffers on a socket through io_uring and gives each back after the kernel is done
/// with it (see the module docs).
///
/// The socket is the sender's alone ([`ExclusiveSocket`]: owned, not borrowed): a second
/// sender on a stream would put its bytes between this one's.
///
/// ```compile_fail,E0277
/// use zcnet::uring::{Config, UringSender};
/// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// let tx: UringSender<_, Vec<u8>> = UringSender::new(&socket, Config::default()).unwrap();
/// ```
#[doc(alias("IORING_OP_SEND_ZC", "IORING_OP_SENDMSG_ZC", "io_uring_prep_send_zc"))]
pub struct UringSender<S: ExclusiveSocket, B: OwnedBuf> {
    ring: Ring<B>,
    socket: S,
    /// `socket`'s descriptor, open while the sender owns it.
    fd: RawFd,
    config: Config,
    mode: Mode,
    fallback: Option<String>,
    stream: bool,
    queued: usize,
    returned: VecDeque<Returned<B>>,
    /// An empty queue with room, for [`UringSender::resend_returned`] to swap with `returned`.
    spare: VecDeque<Returned<B>>,
    /// [`UringSender::send_to`] was used: [`UringSender::send`] would not send its buffers
    /// where they went.
    sent_to: bool,
    counters: Counters,
    /// Zero-copy sends use the registered pool.
    fixed: bool,
    /// [`Mode::Auto`](super::Mode::Auto)'s decisions.
    /// Boxed: its tables are kilobytes, and the fields every send reads stay close together
    /// without them.
    auto: Option<Box<Decider>>,
    /// When a stalled wait for completions kicks the kernel's deferred frees.
    kick: crate::loan::DeferredKick,
    /// The socket's place among the sockets senders of this process hold.
    _claim: Option<Claim>,
    /// [`UringSender::close`] waited already: the drop does not.
    closed: bool,
    /// Buffers back that [`UringSender::resend_returned`] offers and sends through `send`
    /// (see `Collect::elsewhere`); empty between calls.
    elsewhere: Vec<Returned<B>>,
}

impl<S: ExclusiveSocket, B: OwnedBuf> UringSender<S, B> {
    /// A sender on `socket` (connected for [`UringSender::send`]; any for
    /// [`UringSender::send_to`]). Zero-copy modes fall back to copying, with
    /// [`UringSender::fallback_reason`] saying why, where the kernel lacks `SEND_ZC`. Where
    /// `RLIMIT_MEMLOCK` refuses the ring within a second of this process closing another, it
    /// blocks until the kernel has freed that one (some milliseconds), at most that second.
    ///
    /// # Errors
    /// [`UringError::NoPool`](super::UringError::NoPool) for [`Mode::ZeroCopyFixed`](super::Mode::ZeroCopyFixed) (use [`UringSender::with_pool`]),
    /// [`UringError::Unsupported`](super::UringError::Unsupported), [`UringError::Window`](super::UringError::Window), [`UringError::SocketInUse`](super::UringError::SocketInUse) when
    /// another sender of this process holds the socket through another descriptor of it.
    pub fn new(socket: S, config: Config) -> Result<Self, NewError<S, UringError>> {
        if config.mode == Mode::ZeroCopyFixed {
            return Err(NewError {
                error: UringError::NoPool,
                socket,
            });
        }
        Self::build(socket, config, None)
    }

    /// Everything that can fail first, the socket changed last (`UDP_SEGMENT`), the sender made
    /// when nothing can fail any more: a refusal hands the socket back as it was given.
    fn build(
        socket: S,
        config: Config,
        pool: Option<&Pool>,
    ) -> Result<Self, NewError<S, UringError>> {
        macro_rules! refuse {
            ($e:expr) => {
                return Err(NewError { error: $e, socket })
            };
        }
        if config.window == 0 || config.window > config.entries as usize {
            refuse!(UringError::Window {
                window: config.window,
                entries: config.entries,
            });
        }
        if let Err(e) = check_socket(socket.as_fd(), config.segment.is_some()) {
            refuse!(e);
        }
        let claim = match Claim::take(socket.as_fd()) {
            Ok(c) => c,
            Err(None) => refuse!(UringError::SocketInUse {
                reason: crate::loan::IN_USE,
            }),
            Err(Some(e)) => refuse!(UringError::Fstat(e)),
        };
        let mut ring = match open_ring(config.entries, config.setup) {
            Ok(r) => r,
            Err(e) => refuse!(e),
        };
        ring.register_file(socket.as_fd());
        let ty = sys::sockopt::socket_type(socket.as_fd()).unwrap_or(0);
        let (mode, fallback) = match config.mode {
            Mode::Copy => (Mode::Copy, None),
            m => match ring.probe() {
                Ok(ops) if ops.send_zc && ops.sendmsg_zc => (m, None),
                Ok(ops) if ops.send_zc => (
                    m,
                    Some("IORING_OP_SENDMSG_ZC is missing (Linux 6.1): send_to copies".to_owned()),
                ),
                Ok(_) => (
                    Mode::Copy,
                    Some(
                        "IORING_OP_SEND_ZC is missing (needs Linux 6.0): sending by copy \
                         (IORING_OP_SEND)"
                            .to_owned(),
                    ),
                ),
                Err(e) => (
                    Mode::Copy,
                    Some(format!(
                        "IORING_REGISTER_PROBE failed ({e}; needs Linux 5.6): sending by copy"
                    )),
                ),
            },
        };
        let mut auto = (mode == Mode::Auto).then(|| {
            Box::new(Decider::new(Choice::for_socket(
                SendPath::UringZc,
                &socket,
                config.segment,
            )))
        });
        let mut fixed = mode == Mode::ZeroCopyFixed;
        if let Some(pool) = pool {
            // Auto registers the pool where the limit allows, and sends from it by zero copy.
            if mode == Mode::Auto
                && memlock_check(pool.region_len() as u64).is_ok()
                && ring.register(&pool.0).is_ok()
            {
                fixed = true;
                // The route and its device as found above, for the registered path.
                auto = auto
                    .map(|d| Box::new(Decider::new(d.choice().for_path(SendPath::UringZcFixed))));
            }
            if mode == Mode::ZeroCopyFixed {
                let registered = memlock_check(pool.region_len() as u64).and_then(|()| {
                    ring.register(&pool.0)
                        .map_err(|source| match source.raw_os_error() {
                            Some(libc::ENOMEM) => memlock_check_failed(pool.region_len() as u64),
                            _ => UringError::Io {
                                call: "io_uring_register(IORING_REGISTER_BUFFERS)",
                                bytes: pool.region_len(),
                                source,
                            },
                        })
                });
                if let Err(e) = registered {
                    refuse!(e);
                }
            }
        }
        let stream = ty == libc::SOCK_STREAM;
        if stream {
            ring.keep_order();
        }
        // The only change to the socket, and the last step that can fail: a sender refused
        // earlier (no io_uring, say) leaves the caller's socket sending single datagrams as
        // before.
        if let Some(segment) = config.segment
            && let Err(e) = crate::udp_gso::set_segment(&socket, Some(segment))
        {
            refuse!(UringError::Unsupported {
                feature: "UDP_SEGMENT",
                reason: e.reason(),
            });
        }
        Ok(UringSender {
            fd: socket.as_fd().as_raw_fd(),
            fixed,
            auto,
            ring,
            socket,
            config,
            mode,
            fallback,
            stream,
            queued: 0,
            closed: false,
            elsewhere: Vec::new(),
            returned: VecDeque::new(),
            spare: VecDeque::new(),
            sent_to: false,
            counters: Counters::default(),
            kick: crate::loan::DeferredKick::default(),
            _claim: Some(claim),
        })
    }

    /// The mode in use (the configured one, or [`Mode::Copy`](super::Mode::Copy) after a fallback).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Why the sender copies where zero-copy was asked for (one line), if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// In [`Mode::Auto`](super::Mode::Auto): the path, route and prior threshold, the profile they came from, and
    /// what each size class learned (built when asked: keep it off the path of every send).
    pub fn auto_choice(&self) -> Option<Choice> {
        self.auto.as_deref().map(Decider::choice)
    }

    /// Signals `fd`, an eventfd, at every completion (`IORING_REGISTER_EVENTFD`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn register_eventfd(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ring.register_eventfd(fd)
    }

    /// Requests in flight at most.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn window(&self) -> usize {
        self.config.window
    }

    /// The oldest buffer given back and not yet taken, without waiting: what a loop that
    /// sends each buffer again as it comes back takes one at a time ([`UringSender::returned`]
    /// drains them all).
    #[inline]
    pub fn pop_returned(&mut self) -> Option<Returned<B>> {
        self.returned.pop_front()
    }

    /// The ring set-up the kernel granted (the registered ring fd from the first submission).
    pub fn setup(&self) -> RingSetup {
        RingSetup::from_raw(self.ring.setup())
    }

    /// Whether this buffer goes by zero copy (the mode, or auto's decision).
    ///
    /// # Errors
    /// A train of more segments than the kernel takes ([`Config::segment`](super::Config::segment)).
    /// At an edge of a learning round a pair uses, what is queued goes to the kernel and what
    /// completed is taken first, so that their cost counts in the round that chose their way:
    /// that submission's error.
    ///
    /// Decided by the buffer's length alone, which is all it takes.
    #[inline(always)]
    fn zero_copy(&mut self, len: usize) -> io::Result<bool> {
        // A fixed mode without trains, as most are: nothing to look at.
        if self.config.segment.is_none() && self.mode != Mode::Auto {
            return Ok(self.mode != Mode::Copy);
        }
        self.zero_copy_by(len)
    }

    /// [`UringSender::zero_copy`] with trains or [`Mode::Auto`](super::Mode::Auto).
    fn zero_copy_by(&mut self, len: usize) -> io::Result<bool> {
        if let Some(segment) = self.config.segment {
            segment.check_train(len)?;
        }
        if self.mode == Mode::Auto && self.auto.as_ref().is_some_and(|d| d.edge_is_measured(len)) {
            self.reap()?;
        }
        Ok(match (self.mode, &mut self.auto) {
            (Mode::Copy, _) => false,
            (Mode::Auto, Some(d)) => d.zero_copy(len),
            _ => true,
        })
    }

    /// Whether the kernel refused `IORING_SEND_ZC_REPORT_USAGE` (before Linux 6.2), leaving
    /// `copied` unknown.
    pub fn usage_unknown(&self) -> bool {
        self.ring.usage_refused()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// What was done so far.
    pub fn counters(&self) -> Counters {
        Counters {
            auto: crate::auto::Decider::counters_of(self.auto.as_deref()),
            ..self.counters
        }
    }

    /// Requests whose buffers are still held.
    pub fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    /// Buffers given back since the last call, in completion order.
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.returned.drain(..)
    }

    /// Queues `buf` for the connected socket (`SEND_ZC`, or `SEND` in copy mode); queued
    /// requests go to the kernel a batch at a time, and all of them at [`UringSender::flush`],
    /// [`UringSender::reap`] or [`UringSender::drain`]. Stream sends
    /// carry `MSG_WAITALL`, so the kernel sends all or fails; a short result is sent on.
    ///
    /// # Errors
    /// The buffer comes back if it could not be queued: the window stayed full for
    /// `stall_timeout`, or the ring failed.
    #[inline]
    pub fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        let zc = match self.zero_copy(buf.bytes().len()) {
            Ok(zc) => zc,
            Err(error) => {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        };
        let op = if zc { SendOp::SendZc } else { SendOp::Send };
        self.queue(buf, op, None, zc && self.fixed)
    }

    /// Sends `buf` to `dest` (`SENDMSG_ZC`, or `SENDMSG` in copy mode), for unconnected
    /// datagram sockets.
    ///
    /// # Errors
    /// As [`UringSender::send`].
    pub fn send_to(&mut self, buf: B, dest: SocketAddr) -> Result<(), SendError<B>> {
        self.sent_to = true;
        let op = match self.zero_copy(buf.bytes().len()) {
            Ok(true) => SendOp::SendMsgZc,
            Ok(false) => SendOp::SendMsg,
            Err(error) => {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        };
        self.queue(buf, op, Some(dest), false)
    }

    #[inline]
    fn queue(
        &mut self,
        buf: B,
        op: SendOp,
        dest: Option<SocketAddr>,
        fixed: bool,
    ) -> Result<(), SendError<B>> {
        // A full batch goes to the kernel before this buffer joins the queue, so that a failed
        // submission can still hand this buffer back.
        let ready = if self.queued >= self.config.batch {
            self.flush()
        } else {
            Ok(())
        };
        if let Err(error) = ready.and_then(|()| self.make_room()) {
            return Err(SendError {
                error,
                sent: 0,
                buf,
            });
        }
        let req = sys::uring::SendRequest {
            op,
            fixed,
            dest,
            flags: if self.stream { libc::MSG_WAITALL } else { 0 },
            report_usage: true,
        };
        self.ring
            .push(self.fd, buf, req)
            .map_err(|(buf, error)| SendError {
                error,
                sent: 0,
                buf,
            })?;
        self.counters.requests += 1;
        self.counters.zero_copy_requests += u64::from(op != SendOp::Send && op != SendOp::SendMsg);
        self.counters.fixed_requests += u64::from(fixed);
        self.queued += 1;
        Ok(())
    }

    /// Waits until the window has room, reaping as completions come.
    #[inline(always)]
    fn make_room(&mut self) -> io::Result<()> {
        if self.ring.in_flight() < self.config.window {
            return Ok(());
        }
        self.wait_for_room()
    }

    /// [`UringSender::make_room`] with the window full.
    fn wait_for_room(&mut self) -> io::Result<()> {
        // What completed during the last submission is in the ring already: taking it needs no
        // system call (the requests queued since go with the next batch).
        self.collect()?;
        if self.ring.in_flight() < self.config.window {
            return Ok(());
        }
        self.reap()?;
        let deadline = Instant::now() + self.config.stall_timeout;
        while self.ring.in_flight() >= self.config.window {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} io_uring sends still in flight after {:?}",
                        self.ring.in_flight(),
                        self.config.stall_timeout
                    ),
                ));
            }
            self.counters.window_waits += 1;
            self.queued = 0;
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        Ok(())
    }

    /// Submits what is queued.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn flush(&mut self) -> io::Result<()> {
        self.queued = 0;
        self.ring.submit().map(drop)
    }

    /// Submits what is queued and collects what completed, without waiting; returns how many
    /// buffers came back. Call it when the ring or socket is readable, or now and then.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn reap(&mut self) -> io::Result<usize> {
        self.flush()?;
        self.collect()
    }

    fn collect(&mut self) -> io::Result<usize> {
        self.collect_again(usize::MAX, |_: &mut B| false)
            .map(|(back, _)| back)
    }

    /// [`UringSender::collect`] of at most `limit` buffers, sending again from its slot each that
    /// finished whole and that `again` keeps (see [`UringSender::resend_returned`]); how many
    /// came back, and how many of them went again.
    #[inline(always)]
    fn collect_again(
        &mut self,
        limit: usize,
        again: impl FnMut(&mut B) -> bool,
    ) -> io::Result<(usize, usize)> {
        if self.returned.is_empty() {
            // Back to its first entries: a caller that takes each buffer as it comes back keeps
            // the queue short, and its entries then stay the same few cache lines instead of
            // walking the whole capacity (a line the kernel's work evicted, a miss a buffer).
            self.returned.clear();
        }
        let before = self.counters.returned;
        let mut back = Collect {
            counters: &mut self.counters,
            auto: self.auto.as_deref_mut(),
            returned: &mut self.returned,
            elsewhere: &mut self.elsewhere,
            defer_next: false,
            can_defer: !self.sent_to,
            fixed: self.fixed,
            again,
            resent: 0,
            taken: 0,
            limit,
        };
        let done = self.ring.complete(&mut back);
        let resent = back.resent;
        // Its counts go in as it ends.
        drop(back);
        // Their SQEs wait for the next submission, as those of `send` do.
        self.queued += resent;
        done?;
        Ok(((self.counters.returned - before) as usize, resent))
    }

    /// Sends each buffer again as it comes back, without handing it out: what a loop that
    /// sends every buffer again (refilled or not) does with [`UringSender::pop_returned`] and
    /// [`UringSender::send`], with a buffer's trip through the queue of returned buffers, the
    /// free slots and the checks of `send` left out.
    ///
    /// Collects up to a batch ([`Config::batch`](super::Config::batch)) of the buffers that
    /// came back (entering the kernel for them when none are in, and then waiting up to `wait`
    /// for the first while buffers are loaned), offers `again` each that came back whole (no
    /// error), in completion order, and submits the requests of those it keeps before it
    /// returns: `true` sends the buffer again as [`UringSender::send`] or
    /// [`UringSender::send_to`] sent it the last time (the same destination; its bytes as
    /// `again` left them). The kernel is done with a buffer before `again` sees it: it may
    /// write it. Returns how many went again.
    ///
    /// Buffers already in [`UringSender::returned`] when it is called (back from an earlier
    /// [`UringSender::reap`], say) are offered first, in their order, and those kept go through
    /// [`UringSender::send`] (issue 62 item 7: they were skipped, and a loop built on this call
    /// alone let them pile up).
    ///
    /// The rest stay in [`UringSender::returned`]: those `again` declines, those that came back
    /// with an error, one that cannot go as `again` left it (over 4 GiB, or a fixed send's
    /// bytes out of the registered pool: it comes back with `EINVAL`, counted in `errors`, its
    /// `sent` that of the send before), and those that came back while the kept ones went
    /// through `send` (below), which the next call offers.
    ///
    /// On a datagram socket without trains ([`Config::segment`](super::Config::segment)), a
    /// kept buffer goes again from the ring's slot, in every mode: [`Mode::Auto`](super::Mode::Auto)
    /// decides per buffer there, zero copy (from the registered pool where the bytes lie in it)
    /// or copy, as `send` would (issue 63), and at the edge of a round a pair measures sends it
    /// through `send`, which takes the completions queued first. With trains and on a stream
    /// socket a kept buffer goes through [`UringSender::send`] (the train's check, the stream's
    /// order): the same result, without the saving; there a sender that has used
    /// [`UringSender::send_to`] is not offered its buffers (`send` would not know where they
    /// go): they stay in [`UringSender::returned`].
    ///
    /// Should `again` panic, the buffers being handed back at that moment are dropped (the
    /// kernel was done with them) or stay loaned (counted by [`crate::loan::leaked_buffers`]
    /// when the sender drops), never freed while the kernel might read them.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn resend_returned(
        &mut self,
        wait: Duration,
        mut again: impl FnMut(&mut B) -> bool,
    ) -> io::Result<usize> {
        let in_place = self.config.segment.is_none() && !self.stream;
        let via_send = !in_place && !self.sent_to;
        let mut resent = 0;
        // What came back before this call: out of its slot, it goes as any buffer does (none
        // is there in a loop built on this call alone, which pays one check).
        if !self.returned.is_empty() && !self.sent_to {
            resent += self.resend_taken(0, &mut again);
        }
        let mut entered = false;
        let mut deadline = None;
        loop {
            // A batch at a time, counting what is queued already: one submission takes it.
            let limit = self.config.batch.saturating_sub(self.queued).max(1);
            let back = if in_place {
                let (back, n) = self.collect_again(limit, &mut again)?;
                resent += n;
                if !self.elsewhere.is_empty() {
                    resent += self.resend_elsewhere();
                }
                back
            } else {
                let before = self.returned.len();
                let (back, _) = self.collect_again(limit, |_: &mut B| false)?;
                if via_send {
                    resent += self.resend_taken(before, &mut again);
                }
                back
            };
            if back > 0 || self.ring.in_flight() == 0 {
                break;
            }
            if !entered {
                // With `DEFER_TASKRUN` what completed is posted only when this thread enters
                // the kernel for events, as a submission does.
                self.flush()?;
                entered = true;
                continue;
            }
            if wait.is_zero() {
                break;
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + wait);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.queued = 0;
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        if self.queued > 0 {
            self.flush()?;
        }
        Ok(resent)
    }

    /// The buffers `again` kept and the collection sent elsewhere ([`Mode::Auto`]'s edges):
    /// through [`UringSender::send`] (never those of a sender that used `send_to`). How many
    /// went again.
    #[cold]
    fn resend_elsewhere(&mut self) -> usize {
        let mut resent = 0;
        let mut list = std::mem::take(&mut self.elsewhere);
        for r in list.drain(..) {
            match self.send(r.buf) {
                Ok(()) => resent += 1,
                Err(e) => self.returned.push_back(Returned {
                    buf: e.buf,
                    sent: 0,
                    error: Some(e.error),
                    zero_copy: false,
                    copied: None,
                }),
            }
        }
        // The allocation stays for the next time.
        self.elsewhere = list;
        resent
    }

    /// [`UringSender::resend_returned`]'s way through [`UringSender::send`]: each buffer in
    /// [`UringSender::returned`] from index `from` on (those before it are left as they are)
    /// that came back whole and that `again` keeps goes through `send`; the rest stay, in their
    /// order. How many went again.
    fn resend_taken(&mut self, from: usize, again: &mut impl FnMut(&mut B) -> bool) -> usize {
        // The queue is taken whole (what comes back while sending goes into the spare one):
        // those that stay go back to its end as it is walked, in their order, and end up before
        // the newcomers.
        let mut old = std::mem::replace(&mut self.returned, std::mem::take(&mut self.spare));
        let mut resent = 0;
        for i in 0..old.len() {
            let Some(mut r) = old.pop_front() else { break };
            // Only where it can go without waiting: a wait would collect the buffers that come
            // back meanwhile past `again`.
            if i < from
                || r.error.is_some()
                || self.ring.in_flight() >= self.config.window
                || !again(&mut r.buf)
            {
                old.push_back(r);
                continue;
            }
            match self.send(r.buf) {
                Ok(()) => resent += 1,
                Err(e) => old.push_back(Returned {
                    buf: e.buf,
                    sent: 0,
                    error: Some(e.error),
                    zero_copy: false,
                    copied: None,
                }),
            }
        }
        old.append(&mut self.returned);
        // Both queues keep their allocations for the next call.
        self.spare = std::mem::replace(&mut self.returned, old);
        resent
    }

    /// Ends the sender: submits what is queued, waits up to `timeout` for what the kernel still
    /// holds, and returns every buffer that came back and was not taken, with how many the
    /// kernel still held at the end (left to it, never freed: [`crate::loan::leaked_buffers`]).
    /// Unlike a drop, it waits as long as asked and says what it left.
    pub fn close(mut self, timeout: Duration) -> Closed<B> {
        let _ = self.drain(timeout);
        let returned = self.returned.drain(..).collect();
        let still_loaned = self.ring.in_flight();
        // The drop that follows waits no more: nothing it could wait for came in `timeout`.
        self.closed = true;
        Closed {
            returned,
            still_loaned,
        }
    }

    /// Submits what is queued, then waits up to `timeout` for a loaned buffer to come back and
    /// returns the oldest one that has (at once when one already has): what a fixed pool
    /// recycles with. `Ok(None)` when none came in time, or when nothing is loaned (none will).
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn wait_returned(&mut self, timeout: Duration) -> io::Result<Option<Returned<B>>> {
        let deadline = Instant::now() + timeout;
        self.reap()?;
        loop {
            if let Some(r) = self.returned.pop_front() {
                return Ok(Some(r));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if self.ring.in_flight() == 0 || left.is_zero() {
                return Ok(None);
            }
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
    }

    /// Sets how long a send waits for room in the window ([`Config::stall_timeout`](super::Config::stall_timeout)).
    pub fn set_stall_timeout(&mut self, timeout: Duration) {
        self.config.stall_timeout = timeout;
    }

    /// Submits everything and waits until every buffer is back, at most `timeout`. When none
    /// comes back for 100 ms it runs every CPU's deferred frees, at most once a second
    /// ([`crate::loan::kick_deferred_frees`], counted in `deferred_kicks`): a `SEND_ZC`
    /// notification waits for the free of what a receiver on this host read on another CPU.
    ///
    /// # Errors
    /// `TimedOut` naming how many are still loaned to the kernel, or `io_uring_enter`'s error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        self.reap()?;
        while self.ring.in_flight() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} buffers still loaned to the kernel by io_uring",
                        self.ring.in_flight()
                    ),
                ));
            }
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        Ok(())
    }
}

/// What a sender does with each buffer the ring hands back: counts it, tells the decider what
/// its notification said, and queues it for [`UringSender::returned`], or has the ring send it
/// again from its slot where `again` says so ([`UringSender::resend_returned`]).
///
/// The counts every buffer adds one to (`returned`, and `requests` for one sent again) are
/// `taken` and `resent`, added to the counters once, when the collection ends (also should
/// `again` panic).
struct Collect<'a, B, F> {
    counters: &'a mut Counters,
    auto: Option<&'a mut Decider>,
    returned: &'a mut VecDeque<Returned<B>>,
    /// Buffers `again` kept that [`Finish::way`] sent elsewhere (an edge of [`Mode::Auto`]'s
    /// rounds): [`UringSender::resend_returned`] sends them through [`UringSender::send`].
    elsewhere: &'a mut Vec<Returned<B>>,
    /// The next finished buffer is one of those.
    defer_next: bool,
    /// Whether a buffer may go elsewhere: not for a sender that used `send_to`, whose `send`
    /// would not know where it goes (its rounds' edges are then judged with the completions
    /// of the collection not yet read).
    can_defer: bool,
    /// Zero-copy sends use the registered pool.
    fixed: bool,
    again: F,
    /// How many went again from their slots.
    resent: usize,
    /// How many came back (went again or not), and how many this collection takes at most.
    taken: usize,
    limit: usize,
}

impl<B, F> Drop for Collect<'_, B, F> {
    fn drop(&mut self) {
        self.counters.returned += self.taken as u64;
        self.counters.requests += self.resent as u64;
        self.counters.resent_in_place += self.resent as u64;
    }
}

impl<B, F: FnMut(&mut B) -> bool> Finish<B> for Collect<'_, B, F> {
    #[inline(always)]
    fn finish(&mut self, f: Finished<B>) {
        let (sent, copied) = (f.sent, f.copied);
        let (failed, memlock) = (f.error.is_some(), f.memlock_fallback);
        let r = Returned {
            buf: f.buf,
            sent,
            error: f.error,
            zero_copy: f.zero_copy,
            copied,
        };
        if self.defer_next {
            self.defer_next = false;
            self.elsewhere.push(r);
        } else {
            // The buffer goes into its slot first, before the calls below (the decider's)
            // would have it kept on the stack across them.
            push_back_in_place(self.returned, r);
        }
        self.count(sent, failed, memlock, copied);
    }

    /// [`Mode::Auto`] decides per buffer, as [`UringSender::send`] does, from the same slot;
    /// at the edge of a round that a pair measures, the buffer goes through `send` instead,
    /// which takes the completions queued first so that their cost counts in the round that
    /// chose their way (issue 63: the in-place resend was off in `Mode::Auto`, which fell to
    /// 0.51-0.76 of zc-fixed while choosing zero copy 99 % of the time).
    #[inline(always)]
    fn way(&mut self, len: usize) -> Way {
        let Some(d) = self.auto.as_deref_mut() else {
            return Way::AsBefore;
        };
        if self.can_defer && d.edge_is_measured(len) {
            self.defer_next = true;
            return Way::Elsewhere;
        }
        if d.zero_copy(len) {
            Way::ZeroCopy { fixed: self.fixed }
        } else {
            Way::Copy
        }
    }

    #[inline(always)]
    fn full(&self) -> bool {
        self.taken >= self.limit
    }

    #[inline(always)]
    fn again(&mut self, buf: &mut B) -> bool {
        (self.again)(buf)
    }

    #[inline(always)]
    fn resent(&mut self, r: Resent) {
        self.count(r.sent, false, r.memlock_fallback, r.copied);
        let c = &mut *self.counters;
        c.zero_copy_requests += u64::from(r.op.zero_copy());
        c.fixed_requests += u64::from(r.fixed);
        self.resent += 1;
    }
}

impl<B, F> Collect<'_, B, F> {
    /// Counts a buffer back: `sent` bytes, whether it `failed`, went by copy after a refused
    /// pin (`memlock`), and what the kernel said of copying.
    #[inline(always)]
    fn count(&mut self, sent: usize, failed: bool, memlock: bool, copied: Option<bool>) {
        self.taken += 1;
        let c = &mut *self.counters;
        c.bytes += sent as u64;
        c.errors += u64::from(failed);
        c.memlock_fallbacks += u64::from(memlock);
        match copied {
            Some(true) => {
                c.copied += 1;
                if let Some(d) = &mut self.auto {
                    d.copied();
                }
            }
            Some(false) => {
                c.not_copied += 1;
                c.not_copied_bytes += sent as u64;
                if let Some(d) = &mut self.auto {
                    d.not_copied();
                }
            }
            None => {}
        }
    }
}

/// `q.push_back(x)`, storing `x` straight into its slot when `q` has room. `push_back` may grow,
/// which is a call: the compiler keeps the value in a stack slot across it, written field by
/// field, and copies it into place with loads wider than those stores, which the CPU cannot
/// forward (a store-forwarding stall per buffer; `perf annotate` of the sender's `finish` put
/// 58 % of its samples on one such load, issue 51). Growing is out of line.
#[inline(always)]
fn push_back_in_place<T>(q: &mut VecDeque<T>, x: T) {
    #[cold]
    #[inline(never)]
    fn grow<T>(q: &mut VecDeque<T>, x: T) {
        q.push_back(x);
    }
    if q.len() < q.capacity() {
        q.push_back(x);
    } else {
        grow(q, x);
    }
}

impl<S: ExclusiveSocket> UringSender<S, PoolBuf> {
    /// A sender whose buffers come from `pool`; in [`Mode::ZeroCopyFixed`](super::Mode::ZeroCopyFixed) the pool is registered with
    /// the ring first.
    ///
    /// # Errors
    /// [`UringError::Memlock`](super::UringError::Memlock) when the registration would exceed `RLIMIT_MEMLOCK` (checked
    /// before trying; root has `CAP_IPC_LOCK` and is exempt), [`UringError::Io`](super::UringError::Io) when the
    /// kernel refuses it, and the errors of [`UringSender::new`].
    pub fn with_pool(
        socket: S,
        config: Config,
        pool: &Pool,
    ) -> Result<Self, NewError<S, UringError>> {
        Self::build(socket, config, Some(pool))
    }
}

/// How long after this process closed a ring the kernel may still count the ring's pages as
/// locked memory: it frees a closed ring in a worker, once its last requests are done.
pub(super) const RING_TEARDOWN: Duration = Duration::from_secs(1);

/// `io_uring_setup(2)` for a sender. Under a tight `RLIMIT_MEMLOCK` the pages of a ring this
/// process has just closed may still be counted (the kernel frees it later, in a worker): an
/// `ENOMEM` within [`RING_TEARDOWN`] of a close is tried again until then, so that a program
/// that replaces one ring by another (a bench run after run) is not refused at random.
pub(super) fn open_ring<B: OwnedBuf>(
    entries: u32,
    setup: RingSetup,
) -> Result<Ring<B>, UringError> {
    loop {
        match SendRing::new(entries, setup.raw()) {
            Err(e)
                if e.raw_os_error() == Some(libc::ENOMEM)
                    && last_close().is_some_and(|t| t.elapsed() < RING_TEARDOWN) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r.map(Ring).map_err(setup_error),
        }
    }
}

/// A sender's ring, whose close this process remembers ([`last_close`]).
pub(super) struct Ring<B: OwnedBuf>(SendRing<B>);

impl<B: OwnedBuf> std::ops::Deref for Ring<B> {
    type Target = SendRing<B>;
    fn deref(&self) -> &SendRing<B> {
        &self.0
    }
}

impl<B: OwnedBuf> std::ops::DerefMut for Ring<B> {
    fn deref_mut(&mut self) -> &mut SendRing<B> {
        &mut self.0
    }
}

impl<B: OwnedBuf> Drop for Ring<B> {
    fn drop(&mut self) {
        // The ring's fd closes right after, when the field drops.
        *LAST_CLOSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// When this process last closed a sender's ring (see [`last_close`]).
static LAST_CLOSE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// When this process last closed a sender's ring. The kernel frees a closed ring, and takes its
/// pages off the user's locked memory (`RLIMIT_MEMLOCK`), later, in a worker: a ring set up
/// right after may be refused (`ENOMEM`) for memory that is about to come back.
fn last_close() -> Option<Instant> {
    *LAST_CLOSE.lock().unwrap_or_else(|e| e.into_inner())
}

/// An async twin's sender, dropped with loans out: the reaper thread drives its ring (which has
/// no single issuer: `tokio::UringSender` sets it up so) until every buffer is back.
#[cfg(feature = "tokio")]
impl<S: ExclusiveSocket, B: OwnedBuf> crate::loan::orphans::Orphan for UringSender<S, B> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    fn events(&self) -> i16 {
        libc::POLLIN
    }

    fn collect(&mut self) -> io::Result<usize> {
        self.reap()?;
        // The buffers the kernel is done with are freed here.
        self.returned.clear();
        Ok(self.in_flight())
    }

    fn abandon(mut self: Box<Self>) {
        // The drop then waits for nothing, and counts what the ring still holds.
        self.closed = true;
    }

    fn wait_all(&mut self, timeout: Duration) -> bool {
        let _ = self.drain(timeout);
        self.returned.clear();
        true
    }
}

impl<S: ExclusiveSocket, B: OwnedBuf> Drop for UringSender<S, B> {
    fn drop(&mut self) {
        if self.ring.in_flight() == 0 {
            return;
        }
        // At most DROP_WAIT, and not at all on an async runtime's thread (crate::loan's rule)
        // or after `close`, which waited already.
        let wait = crate::loan::drop_wait();
        if !wait.is_zero() && !self.closed {
            let _ = self.drain(wait);
        }
        if self.ring.in_flight() == 0 {
            return;
        }
        // Still loaned (issue 62, the adversarial pass: the ring closed here, the kernel
        // cancelled its requests, and a stream's peer saw a clean end part-way). A ring that
        // any thread may drive goes, with the socket's claim, to a thread that drives it until
        // every buffer is back; the ring holds the socket (a registered file) until then, so
        // the stream ends whole. The swap costs an `io_uring_setup` of one entry, here only.
        // Only where the socket is the ring's registered file: a request of a stream's chain
        // still to be launched names it so, not by the descriptor that closes with the sender.
        let granted = self.ring.setup();
        if !self.closed
            && !granted.single_issuer
            && !granted.defer_taskrun
            && granted.registered_file
            && let Ok(empty) = open_ring::<B>(1, RingSetup::default())
        {
            let ring = std::mem::replace(&mut self.ring, empty);
            crate::loan::orphans::adopt_waiting(Box::new(RingOrphan {
                ring,
                _claim: self._claim.take(),
                kick: crate::loan::DeferredKick::default(),
                completed: 0,
            }));
            return;
        }
        // A ring bound to this thread: what it still holds the ring leaks, not frees, counted;
        // a stream whose requests the close cancels is reset, so that its peer sees it cut.
        if self.stream {
            let _ = sys::sockopt::set_linger_zero(self.socket.as_fd());
        }
        crate::loan::note_leaked(self.ring.in_flight());
    }
}

/// The ring of a dropped synchronous sender, with loans out, for a thread of its own
/// ([`crate::loan::orphans::adopt_waiting`]): driven until every buffer is back, each freed as
/// it comes.
struct RingOrphan<B: OwnedBuf> {
    ring: Ring<B>,
    /// The socket stays this sender's until the ring is done with it.
    _claim: Option<Claim>,
    kick: crate::loan::DeferredKick,
    completed: u64,
}

/// Frees what the ring hands back.
struct Discard(u64);

impl<B> Finish<B> for Discard {
    fn finish(&mut self, f: Finished<B>) {
        self.0 += 1;
        drop(f);
    }
}

impl<B: OwnedBuf> crate::loan::orphans::Orphan for RingOrphan<B> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    fn events(&self) -> i16 {
        libc::POLLIN
    }

    fn collect(&mut self) -> io::Result<usize> {
        let mut d = Discard(0);
        self.ring.complete(&mut d)?;
        self.completed += d.0;
        Ok(self.ring.in_flight())
    }

    fn abandon(self: Box<Self>) {
        // The ring's drop leaves what it holds to the kernel.
        crate::loan::note_leaked(self.ring.in_flight());
    }

    fn wait_all(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.collect().is_ok_and(|n| n > 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            let step = left.min(crate::loan::DeferredKick::STALL);
            if left.is_zero() || self.ring.wait(step).is_err() {
                break;
            }
            self.kick.kick_if_stalled(self.completed);
        }
        true
    }
}

/// What a socket must be for a sender: a connected TCP stream or a UDP socket (connected for
/// `send`, any for `send_to`), IPv4 or IPv6; UDP where it is to send GSO trains.
pub(super) fn check_socket(fd: BorrowedFd<'_>, trains: bool) -> Result<(), UringError> {
    let (need, what) = match trains {
        true => (
            crate::socket_kind::Need {
                tcp: false,
                ..crate::socket_kind::Need::TCP_OR_UDP
            },
            "not a UDP socket: GSO trains (Config::segment) are UDP's",
        ),
        false => (
            crate::socket_kind::Need::TCP_OR_UDP,
            "the io_uring sender needs a connected TCP stream or a UDP socket, IPv4 or IPv6",
        ),
    };
    crate::socket_kind::check(fd, need).map_err(|source| UringError::Socket { what, source })
}
