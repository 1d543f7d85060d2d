//! [`UringSender`]: the sender, its queue and window. Apart, by job: how it is built (`build`:
//! the checks, the ring it opens, the pool it registers), what comes back (`collect`), sending
//! what came back again (`resend`), and what is left when it drops (`orphan`).

use super::config::*;
use super::engine::{Finish, Finished, SendOp};
use super::error::*;
use crate::auto::{Choice, Decider, SendPath};
use crate::loan::Claim;
use crate::loan::pool::{Pool, PoolBuf};
use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
use crate::sys;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

mod build;
mod collect;
mod orphan;
mod resend;
mod ring;

use ring::Ring;

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
        let req = super::engine::SendRequest {
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
