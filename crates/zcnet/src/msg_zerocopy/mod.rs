//! `MSG_ZEROCOPY` sends (Linux 4.14 TCP, 5.0 UDP): the kernel pins the sender's pages instead of
//! copying them and reports on the socket error queue when they may be reused.
//!
//! [`ZerocopySender`] takes ownership of each buffer it sends and gives it back with the
//! completion that frees it ([`Returned`]), tracking ids across wrap-around and calls that carry
//! part of a buffer. Small buffers go by copy (below a threshold), `ENOBUFS` falls back to a
//! copying send, and a policy decides what to do when the kernel reports it copied anyway.
//!
//! # References
//! - `send(2)`, `socket(7)` (`SO_ZEROCOPY`)
//! - the kernel's `Documentation/networking/msg_zerocopy.rst`

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::errqueue::{self, Completion, Entry};
use crate::sys::{self, abi};

mod tracker;
pub use crate::sys::owned_buf::OwnedBuf;
pub use tracker::{Returned, Tracker};

/// Errors of enabling or using `MSG_ZEROCOPY`.
#[derive(Debug, thiserror::Error)]
pub enum ZerocopyError {
    /// The kernel or this socket type does not support the feature.
    #[error("{feature} is not supported: {reason}")]
    Unsupported {
        /// The missing feature (`SO_ZEROCOPY`, ...).
        feature: &'static str,
        /// Why, as the kernel said it.
        reason: String,
    },
    /// No completion arrived in time; the buffer stays loaned to the kernel and was leaked.
    #[error("no MSG_ZEROCOPY completion within {0:?} (the buffer was leaked, not freed)")]
    Timeout(Duration),
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// The call that failed.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> ZerocopyError {
    move |source| ZerocopyError::Io { op, source }
}

/// `setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1)`: without it `MSG_ZEROCOPY` is silently ignored.
///
/// # Errors
/// [`ZerocopyError::Unsupported`] on `ENOPROTOOPT`/`EOPNOTSUPP` (kernel or socket type without
/// zero-copy send), [`ZerocopyError::Io`] otherwise.
#[doc(alias = "SO_ZEROCOPY")]
pub fn enable(socket: &impl AsFd) -> Result<(), ZerocopyError> {
    match sys::setsockopt(socket.as_fd(), libc::SOL_SOCKET, abi::SO_ZEROCOPY, &1i32) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP)) => {
            Err(ZerocopyError::Unsupported {
                feature: "SO_ZEROCOPY",
                reason: e.to_string(),
            })
        }
        Err(e) => Err(io_err("setsockopt(SO_ZEROCOPY)")(e)),
    }
}

/// Sends `len` bytes once with `MSG_ZEROCOPY` on `socket`, which must have `SO_ZEROCOPY`
/// enabled and no earlier zero-copy sends (so this send's id is 0), and waits for its
/// completion. The buffer is owned here and freed only after the completion; on timeout it is
/// leaked.
pub(crate) fn send_once(
    socket: &impl AsFd,
    dest: Option<&SocketAddr>,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZerocopyError> {
    let buf = vec![0xa5_u8; len];
    sys::sendto(socket.as_fd(), &buf, abi::MSG_ZEROCOPY, dest)
        .map_err(io_err("sendto(MSG_ZEROCOPY)"))?;
    let deadline = Instant::now() + timeout;
    loop {
        for entry in errqueue::read_all(socket).map_err(io_err("recvmsg(MSG_ERRQUEUE)"))? {
            match entry {
                Entry::Zerocopy(c) if c.contains(0) => {
                    drop(buf);
                    return Ok(c);
                }
                // Another queued error (an ICMP error for UDP, say) is not our completion.
                _ => {}
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            std::mem::forget(buf);
            return Err(ZerocopyError::Timeout(timeout));
        }
        // POLLERR is always reported; ask for nothing else.
        sys::poll(
            socket.as_fd(),
            0,
            Some(left.min(Duration::from_millis(100))),
        )
        .map_err(io_err("poll"))?;
    }
}

/// Sends one `len`-byte datagram to `dest` with `MSG_ZEROCOPY` from a fresh UDP socket (in the
/// calling thread's network namespace) and returns its completion.
///
/// This answers "does a zero-copy send to this destination really avoid the copy?": the
/// completion's [`Completion::copied`] is the kernel's word on it.
///
/// # Errors
/// [`ZerocopyError::Unsupported`] when the kernel has no UDP zero-copy (before 5.0), a timeout
/// when no completion comes, or the failing call.
pub fn udp_send_once(
    dest: SocketAddr,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZerocopyError> {
    let bind: SocketAddr = if dest.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let socket = UdpSocket::bind(bind).map_err(io_err("bind"))?;
    enable(&socket)?;
    send_once(&socket, Some(&dest), len, timeout)
}

/// What to do when completions say the kernel copied after all (loopback, veth into a local
/// socket: the deferred copy can cost more than a plain send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopiedPolicy {
    /// Keep sending with `MSG_ZEROCOPY`.
    Keep,
    /// Stop using `MSG_ZEROCOPY` on this socket.
    Disable,
    /// Send the next `n` buffers by copy, then try zero-copy again (adaptive).
    RetryAfter(u64),
}

impl Default for CopiedPolicy {
    /// Adaptive: 1024 copying sends after each copied completion, then a new try.
    fn default() -> Self {
        CopiedPolicy::RetryAfter(1024)
    }
}

/// What a [`ZerocopySender`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendCounters {
    /// Send calls made with `MSG_ZEROCOPY` (each takes one completion id).
    pub zerocopy_calls: u64,
    /// Bytes sent by those calls.
    pub zerocopy_bytes: u64,
    /// Send calls made by copy (below the threshold, zero-copy off, or after `ENOBUFS`).
    pub copy_calls: u64,
    /// Bytes sent by copy.
    pub copy_bytes: u64,
    /// Zero-copy calls whose completion has arrived.
    pub completed_calls: u64,
    /// Completed calls the kernel flagged as copied (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied_calls: u64,
    /// `ENOBUFS` answers (optmem or locked-memory limit) that fell back to a copying send.
    pub enobufs_fallbacks: u64,
    /// Times the copied policy switched zero-copy off.
    pub policy_disables: u64,
    /// Other errors read from the error queue (ICMP errors for UDP, ...).
    pub queued_errors: u64,
}

impl SendCounters {
    /// Completed zero-copy calls not flagged copied, as a fraction of completed calls.
    pub fn not_copied_share(&self) -> Option<f64> {
        (self.completed_calls > 0).then(|| {
            (self.completed_calls - self.copied_calls) as f64 / self.completed_calls as f64
        })
    }

    /// Fraction of the bytes sent that went with `MSG_ZEROCOPY` and were not reported copied
    /// (estimated per call: calls flagged copied count their share of the zero-copy bytes).
    pub fn zero_copy_share(&self) -> f64 {
        let total = self.zerocopy_bytes + self.copy_bytes;
        match (total, self.not_copied_share()) {
            (0, _) | (_, None) => 0.0,
            (t, Some(s)) => self.zerocopy_bytes as f64 * s / t as f64,
        }
    }
}

/// How a [`ZerocopySender`] behaves.
#[derive(Clone, Copy, Debug)]
pub struct SenderConfig {
    /// Buffers smaller than this go by copy (default 16 KiB; the kernel documentation puts the
    /// break-even near 10 KB).
    pub threshold: usize,
    /// What to do about completions flagged copied.
    pub policy: CopiedPolicy,
    /// Use `MSG_ZEROCOPY` at all (false: the copying twin, with the same API).
    pub zerocopy: bool,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            threshold: DEFAULT_THRESHOLD,
            policy: CopiedPolicy::default(),
            zerocopy: true,
        }
    }
}

/// Default size below which a send copies: 16 KiB.
pub const DEFAULT_THRESHOLD: usize = 16 * 1024;

/// Identifies a borrowed send ([`ZerocopySender::send_borrowed`]) until its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BorrowToken(pub u64);

/// What the tracker holds for a send: an owned buffer, or the token of a borrowed one.
#[derive(Debug)]
enum Slot<B> {
    Owned(B),
    Borrowed(BorrowToken),
}

/// A failed send. `buf` is the buffer when none of it was loaned to the kernel; when part of it
/// was, the buffer comes back later through [`ZerocopySender::returned`] like any other.
#[derive(Debug, thiserror::Error)]
#[error("send failed after {sent} of {len} bytes: {error}")]
pub struct SendError<B> {
    /// The kernel's error (`ECONNRESET`, `EPIPE`, ...).
    #[source]
    pub error: io::Error,
    /// Bytes of this buffer sent before the error.
    pub sent: usize,
    /// Length of the buffer.
    pub len: usize,
    /// The buffer, if the kernel holds none of it.
    pub buf: Option<B>,
}

/// A sender that loans owned buffers to the kernel with `MSG_ZEROCOPY` and gives each back
/// with the completion that frees it.
///
/// Sends block as the socket does (a non-blocking socket is waited on with `poll`). Reaping is
/// never blocking: call [`reap`](Self::reap) from an event loop when the socket reports
/// `POLLERR` (always reported, no need to ask for it), or [`drain`](Self::drain) to wait for
/// everything in flight. The socket must not have made zero-copy sends before (ids start at 0).
///
/// Dropping the sender with buffers still in flight waits briefly for their completions and then
/// leaks what remains rather than free memory the kernel may still read.
#[derive(Debug)]
pub struct ZerocopySender<S: AsFd, B: OwnedBuf> {
    socket: S,
    tracker: Tracker<Slot<B>>,
    ready: std::collections::VecDeque<Returned<B>>,
    borrowed_done: Vec<BorrowToken>,
    next_token: u64,
    config: SenderConfig,
    /// Why zero-copy is off for good, if it is.
    disabled: Option<String>,
    copy_for: u64,
    counters: SendCounters,
}

impl<S: AsFd, B: OwnedBuf> ZerocopySender<S, B> {
    /// A sender on `socket` (connected TCP or UDP). Enables `SO_ZEROCOPY`; where the kernel
    /// refuses it, the sender copies and [`fallback_reason`](Self::fallback_reason) says why.
    ///
    /// # Errors
    /// The `setsockopt` error other than "unsupported".
    pub fn new(socket: S, config: SenderConfig) -> Result<Self, ZerocopyError> {
        let disabled = if !config.zerocopy {
            Some("copy mode requested".to_owned())
        } else {
            match enable(&socket) {
                Ok(()) => None,
                Err(ZerocopyError::Unsupported { reason, .. }) => {
                    Some(format!("SO_ZEROCOPY refused: {reason}"))
                }
                Err(e) => return Err(e),
            }
        };
        Ok(ZerocopySender {
            socket,
            tracker: Tracker::default(),
            ready: Default::default(),
            borrowed_done: Vec::new(),
            next_token: 0,
            config,
            disabled,
            copy_for: 0,
            counters: SendCounters::default(),
        })
    }

    /// Why this sender copies everything, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.disabled.as_deref()
    }

    /// The socket (poll it for `POLLERR` to know when to [`reap`](Self::reap)).
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Counters so far.
    pub fn counters(&self) -> SendCounters {
        self.counters
    }

    /// Buffers the kernel still holds.
    pub fn in_flight(&self) -> usize {
        self.tracker.len()
    }

    /// Buffers given back so far and not yet taken, in the order they were freed.
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.ready.drain(..)
    }

    /// Moves freed slots to where their owners find them.
    fn settle(&mut self, freed: Vec<Returned<Slot<B>>>) {
        for r in freed {
            match r.buf {
                Slot::Owned(buf) => self.ready.push_back(Returned {
                    buf,
                    zerocopy: r.zerocopy,
                    copied: r.copied,
                }),
                Slot::Borrowed(token) => self.borrowed_done.push(token),
            }
        }
    }

    /// Borrowed sends whose memory the kernel no longer reads, in the order they were freed.
    pub fn completed_borrowed(&mut self) -> std::vec::Drain<'_, BorrowToken> {
        self.borrowed_done.drain(..)
    }

    /// The zero-copy calls for `data`, until all of it is sent; `ENOBUFS` sends the rest by copy.
    /// Returns the zero-copy calls made and the outcome (error and bytes sent before it).
    fn send_zc_calls(&mut self, data: &[u8], flags: i32) -> (u64, Result<(), (io::Error, usize)>) {
        let len = data.len();
        let mut off = 0;
        let mut calls = 0u64;
        let result = loop {
            if off == len {
                break Ok(());
            }
            match self.send_call(&data[off..], abi::MSG_ZEROCOPY | flags) {
                Ok(n) => {
                    calls += 1;
                    off += n;
                    self.counters.zerocopy_calls += 1;
                    self.counters.zerocopy_bytes += n as u64;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // optmem or locked memory exhausted: never wait for a completion that may
                    // not come; the rest goes by copy.
                    self.counters.enobufs_fallbacks += 1;
                    break self
                        .copy_all(&data[off..], flags)
                        .map_err(|(e, n)| (e, off + n));
                }
                Err(e) => break Err((e, off)),
            }
        };
        (calls, result)
    }

    /// The body of [`send_borrowed`](Self::send_borrowed), whose contract the caller upholds.
    pub(crate) fn send_borrowed_inner(
        &mut self,
        data: &[u8],
        flags: i32,
    ) -> io::Result<BorrowToken> {
        let token = BorrowToken(self.next_token);
        self.next_token += 1;
        let (calls, result) = self.send_zc_calls(data, flags);
        let mut freed = Vec::new();
        self.tracker.push(Slot::Borrowed(token), calls, &mut freed);
        self.settle(freed);
        result.map(|()| token).map_err(|(e, _)| e)
    }

    /// One send call, retrying `EINTR` and waiting out `EAGAIN`.
    fn send_call(&self, data: &[u8], flags: i32) -> io::Result<usize> {
        loop {
            match sys::sendto(self.socket.as_fd(), data, flags | libc::MSG_NOSIGNAL, None) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    sys::poll(self.socket.as_fd(), libc::POLLOUT, None)?;
                }
                r => return r,
            }
        }
    }

    /// Sends all of `data` by copy.
    fn copy_all(&mut self, data: &[u8], flags: i32) -> Result<(), (io::Error, usize)> {
        let mut off = 0;
        while off < data.len() {
            let n = self.send_call(&data[off..], flags).map_err(|e| (e, off))?;
            self.counters.copy_calls += 1;
            self.counters.copy_bytes += n as u64;
            off += n;
        }
        Ok(())
    }

    /// Sends `buf`, with `MSG_ZEROCOPY` when it is at least the threshold and zero-copy is on.
    /// The buffer comes back through [`returned`](Self::returned): at once when sent by copy,
    /// else once every call that carried part of it has completed. A TCP send that goes out in
    /// parts is continued until the whole buffer is sent.
    ///
    /// # Errors
    /// [`SendError`] with the kernel's error; it holds the buffer if none of it was loaned.
    pub fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        self.send_with(buf, 0)
    }

    /// [`send`](Self::send) with extra `send(2)` flags on every call for this buffer: `MSG_EOR`
    /// ends a record, so that a small header does not share segments with the page-aligned
    /// payload after it and a zero-copy receiver can map that payload.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_with(&mut self, buf: B, flags: i32) -> Result<(), SendError<B>> {
        let len = buf.bytes().len();
        let zerocopy =
            self.disabled.is_none() && self.copy_for == 0 && len >= self.config.threshold;
        if !zerocopy {
            self.copy_for = self.copy_for.saturating_sub(1);
            return match self.copy_all(buf.bytes(), flags) {
                Ok(()) => {
                    self.ready.push_back(Returned {
                        buf,
                        zerocopy: false,
                        copied: false,
                    });
                    Ok(())
                }
                Err((error, sent)) => Err(SendError {
                    error,
                    sent,
                    len,
                    buf: Some(buf),
                }),
            };
        }
        // Zero-copy calls until all is sent; ENOBUFS sends the rest by copy.
        let (calls, result) = {
            let data = buf.bytes();
            self.send_zc_calls(data, flags)
        };
        let mut freed = Vec::new();
        match result {
            Err((error, sent)) if calls == 0 => Err(SendError {
                error,
                sent,
                len,
                buf: Some(buf),
            }),
            result => {
                self.tracker.push(Slot::Owned(buf), calls, &mut freed);
                self.settle(freed);
                result.map_err(|(error, sent)| SendError {
                    error,
                    sent,
                    len,
                    buf: None,
                })
            }
        }
    }

    /// Reads every completion now queued, without blocking; returns how many buffers it freed
    /// (take them with [`returned`](Self::returned)).
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub fn reap(&mut self) -> io::Result<usize> {
        let mut freed = Vec::new();
        for entry in errqueue::read_all(&self.socket)? {
            match entry {
                Entry::Zerocopy(c) => {
                    self.counters.completed_calls += c.count();
                    if c.copied {
                        self.counters.copied_calls += c.count();
                        self.on_copied();
                    }
                    self.tracker.complete(c, &mut freed);
                }
                Entry::Other { .. } => self.counters.queued_errors += 1,
            }
        }
        let n = freed.len();
        self.settle(freed);
        Ok(n)
    }

    fn on_copied(&mut self) {
        match self.config.policy {
            CopiedPolicy::Keep => {}
            CopiedPolicy::Disable => {
                if self.disabled.is_none() {
                    self.counters.policy_disables += 1;
                    self.disabled =
                        Some("the kernel copied zero-copy sends (policy: disable)".into());
                }
            }
            CopiedPolicy::RetryAfter(n) => {
                if self.copy_for == 0 {
                    self.counters.policy_disables += 1;
                }
                self.copy_for = n;
            }
        }
    }

    /// Waits up to `timeout` until every buffer has come back.
    ///
    /// # Errors
    /// `TimedOut` with the count still in flight (they stay loaned), or the `poll`/`recvmsg`
    /// error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap()?;
            if self.tracker.is_empty() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} buffers still loaned to the kernel", self.tracker.len()),
                ));
            }
            sys::poll(
                self.socket.as_fd(),
                0,
                Some(left.min(Duration::from_millis(100))),
            )?;
        }
    }
}

impl<S: AsFd, B: OwnedBuf> Drop for ZerocopySender<S, B> {
    fn drop(&mut self) {
        if self.tracker.is_empty() {
            return;
        }
        let _ = self.drain(Duration::from_millis(500));
        // What the kernel still holds must not be freed under it. (Borrowed memory is the
        // caller's, under the contract of `send_borrowed`.)
        for slot in self.tracker.abandon() {
            std::mem::forget(slot);
        }
    }
}
