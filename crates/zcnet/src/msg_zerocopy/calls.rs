//! The `send(2)` calls of one buffer: zero copy or copy, `ENOBUFS` sent on by copy, and a
//! socket that would block waited on (at most the stall timeout without progress), handed back
//! to an event loop, or (a non-blocking socket, before any byte went) reported as `WouldBlock`.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::{Counters, SendFlags};
use crate::sys;

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
    /// Under [`Blocking::Wait`] no send waits for ever (issue 62 item 2: a TCP socket whose peer
    /// did not read held the caller in `poll` for ever, `O_NONBLOCK` or not). A blocking socket
    /// waits in the kernel at most its `SO_SNDTIMEO`, which the sender sets to its stall
    /// timeout: `EAGAIN` from it means no byte was taken for that long, and fails with
    /// `TimedOut`. A non-blocking socket (`O_NONBLOCK`) fails with `WouldBlock` while nothing
    /// of the buffer went out; part-way through, it is waited on with `poll(2)` until no byte
    /// was taken for the stall timeout. A buffer of which some bytes went out is finished or
    /// failed, never left half-sent on the stream for a retry to repeat.
    pub(super) fn make(
        &mut self,
        fd: BorrowedFd<'_>,
        data: &[u8],
        counters: &mut Counters,
        blocking: Blocking,
    ) -> Option<io::Result<()>> {
        let mut stalled_since: Option<Instant> = None;
        loop {
            if self.off == data.len() {
                return Some(Ok(()));
            }
            let flags = self.flags.bits() | libc::MSG_NOSIGNAL;
            let sent = if self.zerocopy {
                // SAFETY: `data` is the bytes of a buffer this sender holds until the kernel's
                // completion for it is read (an `OwnedBuf` in its tracker, or a borrowed send
                // whose caller vouched for that in `send_borrowed`), leaked if it never comes.
                #[allow(unsafe_code)]
                let sent = unsafe { sys::net::sendto_zerocopy(fd, &data[self.off..], flags, None) };
                sent
            } else {
                sys::net::sendto(fd, &data[self.off..], flags, None)
            };
            match sent {
                Ok(n) => {
                    self.off += n;
                    stalled_since = None;
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
                        if !sys::net::is_nonblocking(fd).unwrap_or(true) {
                            // The kernel waited its SO_SNDTIMEO and took nothing.
                            return Some(Err(stalled(stall, self.off, data.len())));
                        }
                        if self.off == 0 {
                            return Some(Err(e));
                        }
                        let since = *stalled_since.get_or_insert_with(Instant::now);
                        let left = stall.saturating_sub(since.elapsed());
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
            "the socket took no byte for {stall:?} (the peer does not read?): {off} of {len} \
             bytes of the buffer sent (Config::stall_timeout)"
        ),
    )
}

/// Whether a send call that would block waits (at most the stall timeout without progress)
/// or hands back to an event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    Wait(Duration),
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Return,
}
