//! One `MSG_ZEROCOPY` send and its completion, waited for: what the support checks and
//! [`udp_send_once`] ask of the kernel.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::error::io_err;
use super::{ZeroCopyError, enable};
use crate::errqueue::{self, Completion, Entry};
use crate::sys;

/// Sends `len` bytes once with `MSG_ZEROCOPY` on `socket`, which must have `SO_ZEROCOPY`
/// enabled and no earlier zero-copy sends (so this send's id is 0), and waits for its
/// completion. The buffer is owned here and freed only after the completion; on timeout it is
/// leaked.
pub(crate) fn send_once(
    socket: &impl AsFd,
    dest: Option<&SocketAddr>,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZeroCopyError> {
    let buf = vec![0xa5_u8; len];
    // SAFETY: `buf` is owned here until the completion is read below, and leaked (never freed)
    // when it does not come in time.
    #[allow(unsafe_code)]
    let sent = unsafe { sys::net::sendto_zerocopy(socket.as_fd(), &buf, 0, dest) };
    sent.map_err(io_err("sendto(MSG_ZEROCOPY)"))?;
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
            return Err(ZeroCopyError::Timeout(timeout));
        }
        // POLLERR is always reported; ask for nothing else.
        sys::event::poll(
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
/// [`ZeroCopyError::Unsupported`] when the kernel has no UDP zero-copy (before 5.0), a timeout
/// when no completion comes, or the failing call.
pub fn udp_send_once(
    dest: SocketAddr,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZeroCopyError> {
    let bind: SocketAddr = if dest.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let socket = UdpSocket::bind(bind).map_err(io_err("bind"))?;
    enable(&socket)?;
    send_once(&socket, Some(&dest), len, timeout)
}
