//! `MSG_ZEROCOPY` sends (Linux 4.14 TCP, 5.0 UDP): the kernel pins the sender's pages instead of
//! copying them and reports on the socket error queue when they may be reused.
//!
//! This module starts with the pieces the probe and the labs need: enabling `SO_ZEROCOPY` and
//! a one-shot send on a fresh socket that waits for its own completion. The streaming sender
//! with owned buffers builds on them.
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
        sys::poll(socket.as_fd(), 0, left.as_millis().clamp(1, 100) as i32)
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

/// What a [`StaticSender`] has done so far.
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
}

impl SendCounters {
    /// Completed zero-copy calls not flagged copied, as a fraction of completed calls.
    pub fn not_copied_share(&self) -> Option<f64> {
        (self.completed_calls > 0).then(|| {
            (self.completed_calls - self.copied_calls) as f64 / self.completed_calls as f64
        })
    }
}

/// A `MSG_ZEROCOPY` sender of immutable `'static` data, such as a pattern generated once.
///
/// Data that is never freed and never changes can be loaned to the kernel without tracking
/// which call it belongs to, so this sender is safe without owning buffers; it still reaps the
/// error queue, counting completions and the copies the kernel reports. Sends of fewer than
/// `threshold` bytes use a plain copying send (the kernel documentation puts the break-even
/// near 10 KB).
#[derive(Debug)]
pub struct StaticSender<S: AsFd> {
    socket: S,
    zerocopy: bool,
    threshold: usize,
    counters: SendCounters,
}

/// Default size below which a send copies: 16 KiB.
pub const DEFAULT_THRESHOLD: usize = 16 * 1024;

impl<S: AsFd> StaticSender<S> {
    /// A sender on `socket`; with `zerocopy`, `SO_ZEROCOPY` is enabled first.
    ///
    /// # Errors
    /// [`ZerocopyError::Unsupported`] when zero-copy was asked for and the kernel refuses it.
    pub fn new(socket: S, zerocopy: bool) -> Result<Self, ZerocopyError> {
        if zerocopy {
            enable(&socket)?;
        }
        Ok(StaticSender {
            socket,
            zerocopy,
            threshold: DEFAULT_THRESHOLD,
            counters: SendCounters::default(),
        })
    }

    /// Sets the size below which sends copy.
    pub fn set_threshold(&mut self, bytes: usize) {
        self.threshold = bytes;
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Counters so far.
    pub fn counters(&self) -> SendCounters {
        self.counters
    }

    /// One `send(2)` of `data` (blocking as the socket is), with `MSG_ZEROCOPY` when enabled and
    /// `data` is at least the threshold; `extra_flags` are added (`MSG_EOR`, ...). Returns the
    /// bytes sent, which for TCP may be fewer than asked.
    ///
    /// # Errors
    /// The `send` error (`EPIPE`, `ECONNRESET`, ...). `ENOBUFS` is not an error: the call is
    /// repeated as a copying send and counted.
    pub fn send(&mut self, data: &'static [u8], extra_flags: i32) -> io::Result<usize> {
        let c = &mut self.counters;
        if self.zerocopy && data.len() >= self.threshold {
            match sys::sendto(
                self.socket.as_fd(),
                data,
                abi::MSG_ZEROCOPY | extra_flags,
                None,
            ) {
                Ok(n) => {
                    c.zerocopy_calls += 1;
                    c.zerocopy_bytes += n as u64;
                    return Ok(n);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => c.enobufs_fallbacks += 1,
                Err(e) => return Err(e),
            }
        }
        let n = sys::sendto(self.socket.as_fd(), data, extra_flags, None)?;
        c.copy_calls += 1;
        c.copy_bytes += n as u64;
        Ok(n)
    }

    /// Reads every completion now queued, without blocking; returns how many calls completed.
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub fn reap(&mut self) -> io::Result<u64> {
        let mut done = 0;
        for entry in errqueue::read_all(&self.socket)? {
            if let Entry::Zerocopy(c) = entry {
                done += c.count();
                if c.copied {
                    self.counters.copied_calls += c.count();
                }
            }
        }
        self.counters.completed_calls += done;
        Ok(done)
    }

    /// Waits up to `timeout` until every zero-copy call has completed; returns whether all did.
    ///
    /// # Errors
    /// The `poll` or `recvmsg` error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap()?;
            if self.counters.completed_calls >= self.counters.zerocopy_calls {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            sys::poll(
                self.socket.as_fd(),
                0,
                left.as_millis().clamp(1, 100) as i32,
            )?;
        }
    }
}
