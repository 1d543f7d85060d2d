//! The `send(2)` calls of one buffer: zero copy or copy, `ENOBUFS` sent on by copy, and a
//! socket that would block waited on (`poll(2)`, at most the stall timeout), handed back to an
//! event loop, or (a non-blocking socket, before any byte went) reported as `WouldBlock`.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::{Counters, SendFlags};
use crate::sys::{self, abi};

/// A buffer part-way through its send calls.
#[derive(Debug)]
pub(super) struct InProgress<B> {
    pub(super) buf: B,
    pub(super) calls: Calls,
}

/// How far the send calls of one buffer (owned or borrowed) have gone.
#[derive(Debug)]
pub(super) struct Calls {
    pub(super) flags: SendFlags,
    /// Bytes sent so far.
    pub(super) off: usize,
    /// Zero-copy calls that carried part of it (their ids are the tracker's next ones).
    pub(super) zc_calls: u64,
    /// Whether the next call asks for zero copy (false from the start, or after `ENOBUFS`).
    pub(super) zerocopy: bool,
}

impl Calls {
    pub(super) fn new(flags: SendFlags, zerocopy: bool) -> Calls {
        Calls {
            flags,
            off: 0,
            zc_calls: 0,
            zerocopy,
        }
    }

    /// Makes the send calls for the rest of `data` on `fd`: `Some(outcome)` when all of it is
    /// sent or a call failed, `None` when the socket would block under [`Blocking::Return`].
    /// Zero-copy calls that meet `ENOBUFS` send the rest by copy.
    ///
    /// Every call carries `MSG_DONTWAIT`, so that no call blocks in the kernel for longer than
    /// this sender allows (issue 62 item 2: a blocking or non-blocking TCP socket whose peer did
    /// not read held the caller in `poll` for ever). Under [`Blocking::Wait`], a socket that
    /// would block fails with `WouldBlock` if it is non-blocking (`O_NONBLOCK`) and nothing of
    /// the buffer went out yet; otherwise it is waited on, at most the stall timeout in all
    /// from the first wait of this call (a peer that reads a trickle cannot stretch it), then
    /// fails with `TimedOut`: a buffer of which some bytes went out is finished or failed, never
    /// left half-sent on the stream for a retry to repeat.
    pub(super) fn make(
        &mut self,
        fd: BorrowedFd<'_>,
        data: &[u8],
        counters: &mut Counters,
        blocking: Blocking,
    ) -> Option<io::Result<()>> {
        let mut deadline: Option<Instant> = None;
        loop {
            if self.off == data.len() {
                return Some(Ok(()));
            }
            let zc = if self.zerocopy { abi::MSG_ZEROCOPY } else { 0 };
            let flags = self.flags.bits() | zc | libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
            match sys::net::sendto(fd, &data[self.off..], flags, None) {
                Ok(n) => {
                    self.off += n;
                    if self.zerocopy {
                        self.zc_calls += 1;
                        counters.loaned_calls += 1;
                        counters.loaned_bytes += n as u64;
                    } else {
                        counters.copy_calls += 1;
                        counters.copy_bytes += n as u64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if self.zerocopy && e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // optmem or locked memory exhausted: never wait for a completion that may
                    // not come; the rest goes by copy.
                    counters.enobufs_fallbacks += 1;
                    self.zerocopy = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match blocking {
                    Blocking::Return => return None,
                    Blocking::Wait(stall) => {
                        if self.off == 0 && sys::net::is_nonblocking(fd).unwrap_or(false) {
                            return Some(Err(e));
                        }
                        let until = *deadline.get_or_insert_with(|| Instant::now() + stall);
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Some(Err(stalled(stall, self.off, data.len())));
                        }
                        if let Err(e) = sys::event::poll(fd, libc::POLLOUT, Some(left)) {
                            return Some(Err(e));
                        }
                    }
                },
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The error of a send that found no room in the socket for its stall timeout.
fn stalled(stall: Duration, off: usize, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "no room in the socket's send buffer for {stall:?} (the peer does not read?): {off} \
             of {len} bytes of the buffer sent (Config::stall_timeout)"
        ),
    )
}

/// Whether a send call that would block waits (`poll`, at most the stall timeout) or hands
/// back to an event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    Wait(Duration),
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Return,
}
