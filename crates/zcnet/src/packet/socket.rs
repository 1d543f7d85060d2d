//! The copying twin of the receive ring: one `recvfrom(2)` per frame.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use super::{PacketError, Statistics, add_statistics, packet_socket, sys_err};
use crate::sys::{self, abi};

/// The copying twin of [`RxRing`](super::RxRing): a packet socket bound to one interface, read with one
/// `recvfrom(2)` per frame, which copies the frame out of the socket's queue (`packet(7)`).
/// The queue is bounded by `SO_RCVBUF` counted in socket-buffer memory (`truesize`, several
/// hundred bytes even for a small frame); what does not fit is dropped and counted in
/// `PACKET_STATISTICS`.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    totals: Statistics,
}

/// One frame read by [`Socket::recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The frame's length on the link (more than `len` when the buffer was shorter).
    pub original: usize,
}

impl Socket {
    /// Opens a packet socket on `iface` receiving every protocol (`ETH_P_ALL`), with a receive
    /// queue of `rcvbuf` bytes when given (`SO_RCVBUFFORCE`, past `net.core.rmem_max` with
    /// `CAP_NET_ADMIN`; else `SO_RCVBUF`, which the kernel caps at `rmem_max`).
    ///
    /// # Errors
    /// No privilege, unknown interface, or a failed call.
    pub fn new(iface: &str, rcvbuf: Option<usize>) -> Result<Socket, PacketError> {
        let index = sys::net::if_nametoindex(iface)
            .map_err(|_| PacketError::NoInterface(iface.to_owned()))?;
        let fd = packet_socket()?;
        if let Some(bytes) = rcvbuf {
            // The kernel doubles the value for its bookkeeping; ask for half.
            let half = i32::try_from(bytes / 2).unwrap_or(i32::MAX);
            sys::sockopt::set_receive_buffer(fd.as_fd(), half)
                .map_err(sys_err("setsockopt(SO_RCVBUF)"))?;
        }
        sys::net::bind_packet(fd.as_fd(), index, abi::ETH_P_ALL)
            .map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(Socket {
            fd,
            totals: Statistics::default(),
        })
    }

    /// Copies the next frame into `buf` (cut at its length), waiting up to `timeout` (`None`:
    /// forever) when the queue is empty; `Ok(None)` when the time ran out. While frames are
    /// queued this is one `recvfrom(MSG_DONTWAIT | MSG_TRUNC)` per frame; `poll(2)` only when
    /// the queue is empty.
    ///
    /// # Errors
    /// `recvfrom`'s or `poll`'s error.
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<Option<Received>, PacketError> {
        let mut waited = false;
        loop {
            match sys::net::recv(self.fd.as_fd(), buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC) {
                Ok(original) => {
                    return Ok(Some(Received {
                        len: original.min(buf.len()),
                        original,
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if waited {
                        return Ok(None);
                    }
                    match sys::event::poll(self.fd.as_fd(), libc::POLLIN, timeout) {
                        Ok(_) => waited = true,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
                        Err(e) => {
                            return Err(PacketError::Io {
                                call: "poll",
                                source: e,
                            });
                        }
                    }
                }
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "recvfrom(AF_PACKET)",
                        source: e,
                    });
                }
            }
        }
    }

    /// Counters since the socket was opened (`PACKET_STATISTICS`: frames that reached the
    /// socket, dropped ones included, and drops for a full queue; no freezes without a ring).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn statistics(&mut self) -> Result<Statistics, PacketError> {
        add_statistics(self.fd.as_fd(), &mut self.totals)
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
