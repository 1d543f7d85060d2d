//! Sending: a buffer taken, loaned or copied by its calls, and tracked until its completions
//! (`send(2)` with `MSG_ZEROCOPY`).

use std::io;

use crate::sys;

use super::calls::{Calls, InProgress};
use super::{
    Blocking, BorrowToken, ExclusiveSocket, OwnedBuf, Returned, SendError, SendFlags, Slot,
    ZeroCopySender,
};

impl<S: ExclusiveSocket, B: OwnedBuf> ZeroCopySender<S, B> {
    /// Borrowed sends whose memory the kernel no longer reads, in the order they were freed.
    pub fn completed_borrowed(&mut self) -> std::vec::Drain<'_, BorrowToken> {
        self.borrowed_done.drain(..)
    }

    /// The body of [`send_borrowed`](Self::send_borrowed), whose contract the caller upholds.
    pub(crate) fn send_borrowed_inner(
        &mut self,
        data: &[u8],
        flags: SendFlags,
    ) -> io::Result<BorrowToken> {
        debug_assert!(self.current.is_none(), "no owned buffer in progress");
        if self.cut {
            return Err(cut_error());
        }
        if let Some(segment) = self.config.segment {
            segment.check_train(data.len())?;
        }
        let token = BorrowToken(self.next_token);
        self.next_token += 1;
        // Zero copy wherever SO_ZEROCOPY is on (no threshold or policy); where it is not (copy
        // mode, refused), MSG_ZEROCOPY would copy and take no id, and the token would wait for
        // a completion that never comes: a copy, reported at once.
        let mut calls = Calls::new(flags, self.zerocopy_on);
        let outcome = calls
            .make(
                self.socket.as_fd(),
                data,
                &mut self.counters,
                Blocking::Wait(self.config.stall_timeout),
            )
            .unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()));
        if outcome.is_err() && calls.off > 0 && calls.off < data.len() {
            self.cut_stream();
        }
        let mut freed = Vec::new();
        self.tracker
            .push(Slot::Borrowed(token), calls.zc_calls, &mut freed);
        self.settle(freed);
        outcome.map(|()| token)
    }

    /// Sends `buf`, with `MSG_ZEROCOPY` when it is at least the threshold and zero-copy is on.
    /// The buffer comes back through [`returned`](Self::returned): at once when sent by copy,
    /// else once every call that carried part of it has completed. A TCP send that goes out in
    /// parts is continued until the whole buffer is sent.
    ///
    /// # Errors
    /// [`SendError`] with the kernel's error; it holds the buffer if none of it was loaned.
    pub fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        self.send_with(buf, SendFlags::empty())
    }

    /// [`send`](Self::send) with extra `send(2)` flags on every call for this buffer:
    /// [`SendFlags::EOR`] ends a record, so that a small header does not share segments with
    /// the page-aligned payload after it and a zero-copy receiver can map that payload.
    ///
    /// ```
    /// use std::net::{TcpListener, TcpStream};
    /// use zcnet::msg_zerocopy::{Config, SendFlags, ZeroCopySender};
    /// let l = TcpListener::bind("127.0.0.1:0")?;
    /// let mut tx = ZeroCopySender::new(TcpStream::connect(l.local_addr()?)?, Config::default())?;
    /// let _peer = l.accept()?;
    /// tx.send_with(vec![1u8; 100], SendFlags::EOR).map_err(|e| e.error)?; // a header
    /// tx.send(vec![2u8; 1 << 16]).map_err(|e| e.error)?; // its payload, in segments of its own
    /// # tx.drain(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    /// The sender decides which calls carry `MSG_ZEROCOPY`; a caller's would loan a buffer the
    /// sender gives back at once, and take a completion id it never counted:
    /// ```compile_fail,E0308
    /// # use std::net::{TcpListener, TcpStream};
    /// # use zcnet::msg_zerocopy::{Config, ZeroCopySender};
    /// # let l = TcpListener::bind("127.0.0.1:0").unwrap();
    /// # let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    /// let mut tx = ZeroCopySender::new(s, Config::default()).unwrap();
    /// tx.send_with(vec![1u8; 100], libc::MSG_ZEROCOPY).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_with(&mut self, buf: B, flags: SendFlags) -> Result<(), SendError<B>> {
        self.begin(buf, flags)?;
        self.advance(Blocking::Wait(self.config.stall_timeout))
            .map(drop)
    }

    /// Takes `buf` as the buffer in progress, deciding copy or zero copy for it.
    ///
    /// # Errors
    /// The error a partly loaned buffer ended with, reported again, with `buf` handed back.
    pub(crate) fn begin(&mut self, buf: B, flags: SendFlags) -> Result<(), SendError<B>> {
        debug_assert!(self.current.is_none(), "one buffer in progress at a time");
        if let Some(error) = self.pending_error.take() {
            return Err(SendError {
                error,
                sent: 0,
                buf,
            });
        }
        if self.cut {
            return Err(SendError {
                error: cut_error(),
                sent: 0,
                buf,
            });
        }
        let len = buf.bytes().len();
        if let Some(Err(e)) = self.config.segment.map(|s| s.check_train(len)) {
            return Err(SendError {
                error: e.into(),
                sent: 0,
                buf,
            });
        }
        // At an edge of a learning round a pair uses, the completions already queued are taken
        // first, so that their cost counts in the round that chose their way.
        if self.auto.as_ref().is_some_and(|d| d.edge_is_measured(len)) && !self.tracker.is_empty() {
            if let Err(error) = self.reap() {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        }
        let zerocopy = match &mut self.auto {
            Some(d) => self.disabled.is_none() && d.zero_copy(len),
            None => self.disabled.is_none() && self.copy_for == 0 && len >= self.config.threshold,
        };
        if !zerocopy {
            self.copy_for = self.copy_for.saturating_sub(1);
        }
        self.current = Some(InProgress {
            buf,
            calls: Calls::new(flags, zerocopy),
        });
        Ok(())
    }

    /// Whether a buffer is part-way through its calls (an async send that would block).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn in_progress(&self) -> bool {
        self.current.is_some()
    }

    /// Makes the send calls of the buffer in progress until all of it is sent (`Ok(true)`), or,
    /// with [`Blocking::Return`], until the socket would block (`Ok(false)`: the buffer stays in
    /// progress). Zero-copy calls that meet `ENOBUFS` send the rest by copy. A buffer of which
    /// something was loaned joins the tracker, and comes back with its completions.
    ///
    /// # Errors
    /// [`SendError`] with the kernel's error, holding the buffer if none of it was loaned.
    pub(crate) fn advance(&mut self, blocking: Blocking) -> Result<bool, SendError<B>> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(true);
        };
        let fd = self.socket.as_fd();
        let Some(outcome) = cur
            .calls
            .make(fd, cur.buf.bytes(), &mut self.counters, blocking)
        else {
            return Ok(false);
        };
        self.finish(outcome).map(|()| true)
    }

    /// Ends the buffer in progress, if any, with `error` (its wait failed): handed back if
    /// nothing of it was loaned, else tracked like a send that failed part-way.
    ///
    /// # Errors
    /// [`SendError`] holding the buffer when none of it was loaned.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn abort(&mut self, error: io::Error) -> Result<(), SendError<B>> {
        if self.current.is_none() {
            return Ok(());
        }
        self.finish(Err(error))
    }

    /// Hands back a buffer whose send failed (a [`SendError`]) as a [`Returned`] carrying the
    /// error, for a caller that cannot give it back itself; returns a copy of the error.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn give_back(&mut self, e: SendError<B>) -> io::Error {
        let copy = copy_error(&e.error);
        self.ready.push_back(Returned {
            buf: e.buf,
            sent: e.sent,
            error: Some(e.error),
            zero_copy: false,
            copied: None,
        });
        copy
    }

    /// The oldest buffer given back and not yet taken, without waiting: what a loop that
    /// sends each buffer again as it comes back takes one at a time
    /// ([`ZeroCopySender::returned`] drains them all).
    pub fn pop_returned(&mut self) -> Option<Returned<B>> {
        self.ready.pop_front()
    }

    /// A stream cut part-way through a buffer: its last close resets it, so that the peer sees it
    /// cut rather than a clean end, and every later send is refused, since its bytes would
    /// follow the cut as if nothing were missing (issue 62, the second and third adversarial
    /// passes), as the io_uring sender refuses bytes after a gap. A datagram socket loses one
    /// datagram, not a stream: nothing to do.
    fn cut_stream(&mut self) {
        if sys::sockopt::socket_type(self.socket.as_fd()).is_ok_and(|t| t == libc::SOCK_STREAM) {
            let _ = sys::sockopt::set_linger_zero(self.socket.as_fd());
            self.cut = true;
        }
    }

    /// Ends the buffer in progress with the calls' outcome.
    fn finish(&mut self, outcome: io::Result<()>) -> Result<(), SendError<B>> {
        let InProgress { buf, calls } = self.current.take().expect("a buffer in progress");
        let Calls {
            off,
            zc_calls: calls,
            ..
        } = calls;
        let len = buf.bytes().len();
        // A stream cut part-way through this buffer (a call failed, a stall timed out, after
        // some of it went) can never be whole again: its last close resets it, so that the
        // peer sees it cut rather than a clean end (issue 62, the second adversarial pass).
        if outcome.is_err() && off > 0 && off < len {
            self.cut_stream();
        }
        if calls == 0 {
            // Nothing loaned: the buffer is the caller's again at once.
            return match outcome {
                Ok(()) => {
                    self.ready.push_back(Returned {
                        buf,
                        sent: len,
                        error: None,
                        zero_copy: false,
                        copied: None,
                    });
                    Ok(())
                }
                Err(error) => Err(SendError {
                    error,
                    sent: off,
                    buf,
                }),
            };
        }
        // Part of the buffer is loaned: it comes back with its completion, carrying the error,
        // which the next send reports too.
        let failed = outcome.err().map(|e| {
            self.pending_error = Some(copy_error(&e));
            (e, off)
        });
        let mut freed = Vec::new();
        self.tracker
            .push(Slot::Owned(buf, failed), calls, &mut freed);
        self.settle(freed);
        Ok(())
    }
}

/// A second `io::Error` with the same errno (or kind and message): `io::Error` is not `Clone`.
pub(super) fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// What a send on a stream cut part-way through an earlier buffer says.
fn cut_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the stream was cut part-way through an earlier buffer: bytes sent after it would follow \
         the cut as if nothing were missing (the connection is reset at its close)",
    )
}
