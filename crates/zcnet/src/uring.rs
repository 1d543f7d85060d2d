//! io_uring zero-copy sends: `IORING_OP_SEND_ZC` (Linux 6.0) and `IORING_OP_SENDMSG_ZC` (6.1).
//!
//! A zero-copy request produces two completions: the result (bytes sent or `-errno`, with
//! `IORING_CQE_F_MORE` when a notification follows) and the notification
//! (`IORING_CQE_F_NOTIF`), after which the kernel no longer reads the buffer. [`UringSender`]
//! owns each buffer from submission until both have arrived, in either order, and follows
//! `F_MORE` rather than the result: a failed request can still be notified. Every request sets
//! `IORING_SEND_ZC_REPORT_USAGE` (6.2; retried without it on older kernels), so each returned
//! buffer says whether the kernel copied it after all (`IORING_NOTIF_USAGE_ZC_COPIED`).
//!
//! Requests stay in flight in a window and are submitted in batches; the sender waits only when
//! the window is full, and then for whatever completes, never once per notification.
//!
//! With [`Mode::ZcFixed`] the buffers come from a [`Pool`] registered with the ring
//! (`IORING_REGISTER_BUFFERS`, `IORING_RECVSEND_FIXED_BUF`): the kernel pins the pool's pages
//! once instead of on every send. Registration counts against `RLIMIT_MEMLOCK` unless the caller
//! has `CAP_IPC_LOCK`; the need is checked before registering.
//!
//! [`Mode::Copy`] sends with `IORING_OP_SEND` / `IORING_OP_SENDMSG` through the same API, for
//! A/B comparisons and as the fallback where `SEND_ZC` is missing.
//!
//! # Example
//! ```no_run
//! use std::net::UdpSocket;
//! use zcnet::uring::{Config, Mode, UringSender};
//!
//! let sock = UdpSocket::bind("127.0.0.1:0")?;
//! sock.connect("127.0.0.1:9")?;
//! let mut tx = UringSender::new(sock, Config { mode: Mode::Zc, ..Config::default() })?;
//! if let Some(why) = tx.fallback_reason() {
//!     eprintln!("io_uring: {why}");
//! }
//! tx.send(vec![7u8; 64000]).map_err(|e| e.error)?;
//! tx.drain(std::time::Duration::from_secs(1))?;
//! for r in tx.returned() {
//!     println!("{} bytes, copied: {:?}, error: {:?}", r.sent, r.copied, r.error);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # References
//! - `io_uring_prep_send_zc(3)`, `io_uring_prep_sendmsg_zc(3)`, `io_uring_register_buffers(3)`
//!   (liburing)
//! - the kernel's `io_uring/net.c` and `Documentation/networking/msg_zerocopy.rst`

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::sys::{self, uring::SendRing};

pub use crate::sys::owned_buf::OwnedBuf;
pub use crate::sys::uring::{Finished, Pool, PoolBuf, SendOp};

/// How a [`UringSender`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `IORING_OP_SEND` / `SENDMSG`: the kernel copies; the buffer comes back at the result.
    Copy,
    /// `IORING_OP_SEND_ZC` / `SENDMSG_ZC`: the buffer comes back at the notification.
    Zc,
    /// `SEND_ZC` with `IORING_RECVSEND_FIXED_BUF`: buffers of a registered [`Pool`].
    ZcFixed,
}

impl Mode {
    /// `copy`, `zc`, `zc-fixed`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Zc => "zc",
            Mode::ZcFixed => "zc-fixed",
        }
    }
}

/// Settings of a [`UringSender`].
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The mode asked for; [`UringSender::mode`] says what is used.
    pub mode: Mode,
    /// Submission queue entries (completion queue: twice as many).
    pub entries: u32,
    /// Requests in flight at most (result or notification outstanding); at most `entries`.
    pub window: usize,
    /// Requests queued before one `io_uring_enter` submits them.
    pub batch: usize,
    /// How long a send waits for room in the window before failing with `TimedOut`.
    pub stall_timeout: Duration,
    /// Send by copy even where zero-copy works (tests, comparisons).
    pub force_copy: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::Zc,
            entries: 256,
            window: 128,
            batch: 16,
            stall_timeout: Duration::from_secs(10),
            force_copy: false,
        }
    }
}

/// Errors of setting up a [`UringSender`].
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// `io_uring_setup` failed (no io_uring, `kernel.io_uring_disabled`, seccomp, ...).
    #[error("io_uring_setup: {0} (io_uring needs Linux 5.6+ and kernel.io_uring_disabled = 0)")]
    Setup(#[source] io::Error),
    /// Registering the pool would exceed `RLIMIT_MEMLOCK`.
    #[error(
        "registering {need} bytes of send buffers needs RLIMIT_MEMLOCK >= {need} bytes, but the \
         limit is {limit} bytes: raise it (`ulimit -l {need_kib}`, limits.conf) or run with \
         CAP_IPC_LOCK"
    )]
    Memlock {
        /// Bytes the registration pins.
        need: u64,
        /// `need` in KiB, as `ulimit -l` takes it.
        need_kib: u64,
        /// The soft limit.
        limit: u64,
    },
    /// The kernel refused the registration.
    #[error("io_uring_register(IORING_REGISTER_BUFFERS) of {bytes} bytes: {source}")]
    Register {
        /// Bytes registered.
        bytes: usize,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// [`Mode::ZcFixed`] without a pool.
    #[error("zc-fixed sends need a registered pool: build the sender with UringSender::with_pool")]
    NoPool,
    /// The window does not fit the ring.
    #[error("window {window} must be between 1 and the ring's {entries} entries")]
    Window {
        /// The window asked for.
        window: usize,
        /// The ring's entries.
        entries: u32,
    },
}

/// A send that could not be queued; the buffer comes back with the error.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct SendError<B> {
    /// What went wrong.
    #[source]
    pub error: io::Error,
    /// The buffer, never handed to the kernel.
    pub buf: B,
}

/// A buffer given back: the kernel no longer reads it.
#[derive(Debug)]
pub struct Returned<B> {
    /// The buffer.
    pub buf: B,
    /// Bytes the kernel accepted (all of them unless `error`).
    pub sent: usize,
    /// The request's error (`-errno` of its result CQE), if any.
    pub error: Option<io::Error>,
    /// Sent with a zero-copy opcode.
    pub zero_copy: bool,
    /// What the notification said: `Some(true)` copied, `Some(false)` really zero-copy, `None`
    /// not known (copy mode, no notification, or a kernel without usage reports).
    pub copied: Option<bool>,
}

/// What a [`UringSender`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UringCounters {
    /// Requests queued.
    pub requests: u64,
    /// Of those, with a zero-copy opcode.
    pub zc_requests: u64,
    /// Of those, with a registered buffer.
    pub fixed_requests: u64,
    /// Buffers returned.
    pub returned: u64,
    /// Bytes the kernel accepted, over returned buffers.
    pub bytes: u64,
    /// Returned zero-copy buffers whose notification said "copied".
    pub copied: u64,
    /// Returned zero-copy buffers whose notification said "not copied".
    pub not_copied: u64,
    /// Bytes of the `not_copied` buffers.
    pub not_copied_bytes: u64,
    /// Returned buffers whose request failed.
    pub errors: u64,
    /// `io_uring_enter` calls that waited for room in the window.
    pub window_waits: u64,
}

impl UringCounters {
    /// Share of the bytes sent that went out without a copy, from the notifications' usage
    /// reports (`0.0` in copy mode, when nothing was sent, or without reports).
    pub fn zero_copy_share(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.not_copied_bytes as f64 / self.bytes as f64
        }
    }
}

/// Sends owned buffers on a socket through io_uring and gives each back after the kernel is done
/// with it (see the module docs).
pub struct UringSender<S: AsFd, B: OwnedBuf> {
    ring: SendRing<B>,
    socket: S,
    config: Config,
    mode: Mode,
    fallback: Option<String>,
    stream: bool,
    queued: usize,
    finished: Vec<Finished<B>>,
    returned: VecDeque<Returned<B>>,
    counters: UringCounters,
}

impl<S: AsFd, B: OwnedBuf> UringSender<S, B> {
    /// A sender on `socket` (connected for [`UringSender::send`]; any for
    /// [`UringSender::send_to`]). Zero-copy modes fall back to copying, with
    /// [`UringSender::fallback_reason`] saying why, where the kernel lacks `SEND_ZC`.
    ///
    /// # Errors
    /// [`UringError::NoPool`] for [`Mode::ZcFixed`] (use [`UringSender::with_pool`]),
    /// [`UringError::Setup`], [`UringError::Window`].
    pub fn new(socket: S, config: Config) -> Result<Self, UringError> {
        if config.mode == Mode::ZcFixed {
            return Err(UringError::NoPool);
        }
        Self::build(socket, config)
    }

    fn build(socket: S, config: Config) -> Result<Self, UringError> {
        if config.window == 0 || config.window > config.entries as usize {
            return Err(UringError::Window {
                window: config.window,
                entries: config.entries,
            });
        }
        let ring = SendRing::new(config.entries).map_err(UringError::Setup)?;
        let ty = sys::getsockopt_int(socket.as_fd(), libc::SOL_SOCKET, libc::SO_TYPE).unwrap_or(0);
        let (mode, fallback) = match (config.mode, config.force_copy) {
            (Mode::Copy, _) => (Mode::Copy, None),
            (_, true) => (
                Mode::Copy,
                Some("copying forced by the configuration (IORING_OP_SEND)".to_owned()),
            ),
            (m, false) => match ring.probe() {
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
        Ok(UringSender {
            ring,
            socket,
            config,
            mode,
            fallback,
            stream: ty == libc::SOCK_STREAM,
            queued: 0,
            finished: Vec::new(),
            returned: VecDeque::new(),
            counters: UringCounters::default(),
        })
    }

    /// The mode in use (the configured one, or [`Mode::Copy`] after a fallback).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Why the sender copies where zero-copy was asked for (one line), if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
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
    pub fn counters(&self) -> UringCounters {
        self.counters
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
    pub fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        let op = if self.mode == Mode::Copy {
            SendOp::Send
        } else {
            SendOp::SendZc
        };
        self.queue(buf, op, None, self.mode == Mode::ZcFixed)
    }

    /// Sends `buf` to `dest` (`SENDMSG_ZC`, or `SENDMSG` in copy mode), for unconnected
    /// datagram sockets.
    ///
    /// # Errors
    /// As [`UringSender::send`].
    pub fn send_to(&mut self, buf: B, dest: SocketAddr) -> Result<(), SendError<B>> {
        let op = if self.mode == Mode::Copy {
            SendOp::SendMsg
        } else {
            SendOp::SendMsgZc
        };
        self.queue(buf, op, Some(dest), false)
    }

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
            return Err(SendError { error, buf });
        }
        let req = sys::uring::SendRequest {
            op,
            fixed,
            dest,
            flags: if self.stream { libc::MSG_WAITALL } else { 0 },
            report_usage: true,
        };
        self.ring
            .push(self.socket.as_fd(), buf, req)
            .map_err(|(buf, error)| SendError { error, buf })?;
        self.counters.requests += 1;
        self.counters.zc_requests += u64::from(op != SendOp::Send && op != SendOp::SendMsg);
        self.counters.fixed_requests += u64::from(fixed);
        self.queued += 1;
        Ok(())
    }

    /// Waits until the window has room, reaping as completions come.
    fn make_room(&mut self) -> io::Result<()> {
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
            self.ring.wait(left.min(Duration::from_millis(100)))?;
            self.collect()?;
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
        let n = self.ring.complete(&mut self.finished)?;
        for f in self.finished.drain(..) {
            let c = &mut self.counters;
            c.returned += 1;
            c.bytes += f.sent as u64;
            c.errors += u64::from(f.error.is_some());
            match f.copied {
                Some(true) => c.copied += 1,
                Some(false) => {
                    c.not_copied += 1;
                    c.not_copied_bytes += f.sent as u64;
                }
                None => {}
            }
            self.returned.push_back(Returned {
                buf: f.buf,
                sent: f.sent,
                error: f.error,
                zero_copy: f.zero_copy,
                copied: f.copied,
            });
        }
        Ok(n)
    }

    /// Submits everything and waits until every buffer is back, at most `timeout`.
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
            self.ring.wait(left.min(Duration::from_millis(100)))?;
            self.collect()?;
        }
        Ok(())
    }
}

impl<S: AsFd> UringSender<S, PoolBuf> {
    /// A sender whose buffers come from `pool`; in [`Mode::ZcFixed`] the pool is registered with
    /// the ring first.
    ///
    /// # Errors
    /// [`UringError::Memlock`] when the registration would exceed `RLIMIT_MEMLOCK` (checked
    /// before trying; root has `CAP_IPC_LOCK` and is exempt), [`UringError::Register`] when the
    /// kernel refuses it, and the errors of [`UringSender::new`].
    pub fn with_pool(socket: S, config: Config, pool: &Pool) -> Result<Self, UringError> {
        let mut tx = Self::build(socket, config)?;
        if tx.mode == Mode::ZcFixed {
            memlock_check(pool.region_len() as u64)?;
            tx.ring
                .register(pool)
                .map_err(|source| match source.raw_os_error() {
                    Some(libc::ENOMEM) => memlock_check_failed(pool.region_len() as u64),
                    _ => UringError::Register {
                        bytes: pool.region_len(),
                        source,
                    },
                })?;
        }
        Ok(tx)
    }
}

/// Errors with [`UringError::Memlock`] if pinning `need` bytes would exceed this process's
/// `RLIMIT_MEMLOCK` (`CAP_IPC_LOCK` exempts it).
///
/// # Errors
/// [`UringError::Memlock`].
pub fn memlock_check(need: u64) -> Result<(), UringError> {
    if sys::has_cap_ipc_lock() {
        return Ok(());
    }
    match sys::memlock_limit() {
        Ok((Some(limit), _)) if need > limit => Err(UringError::Memlock {
            need,
            need_kib: need.div_ceil(1024),
            limit,
        }),
        _ => Ok(()),
    }
}

/// The kernel said ENOMEM although the up-front check passed (memory already locked by this
/// user elsewhere counts too): the same message, with the limit as it stands.
fn memlock_check_failed(need: u64) -> UringError {
    let limit = sys::memlock_limit().ok().and_then(|l| l.0).unwrap_or(0);
    UringError::Memlock {
        need,
        need_kib: need.div_ceil(1024),
        limit,
    }
}

impl<S: AsFd, B: OwnedBuf> Drop for UringSender<S, B> {
    fn drop(&mut self) {
        if self.ring.in_flight() > 0 {
            // Give the kernel a moment; what it still holds is leaked by the ring, not freed.
            let _ = self.drain(Duration::from_millis(500));
        }
    }
}
