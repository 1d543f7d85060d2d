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
