//! The `send(2)` calls of one buffer: zero copy or copy, `ENOBUFS` sent on by copy, and a
//! socket that would block waited on (`poll(2)`) or handed back to an event loop.

use std::io;
use std::os::fd::BorrowedFd;

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
    pub(super) fn make(
        &mut self,
        fd: BorrowedFd<'_>,
        data: &[u8],
        counters: &mut Counters,
        blocking: Blocking,
    ) -> Option<io::Result<()>> {
        loop {
            if self.off == data.len() {
                return Some(Ok(()));
            }
            let zc = if self.zerocopy { abi::MSG_ZEROCOPY } else { 0 };
            let flags = self.flags.bits() | zc | libc::MSG_NOSIGNAL;
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
                    Blocking::Wait => {
                        if let Err(e) = sys::event::poll(fd, libc::POLLOUT, None) {
                            return Some(Err(e));
                        }
                    }
                },
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Whether a send call that would block waits (`poll`) or hands back to an event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    Wait,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Return,
}
