//! `SO_PEEK_OFF` on tokio: see [`PeekCursor`].

use std::io;
use std::os::fd::AsFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{Interest, Ready};

use super::IntoStdSocket;
use crate::peek::{self as sync, Config, Counters, Mode, PeekError};
use crate::sys::reactor::{Registered, register};

/// [`crate::peek::PeekCursor`] on tokio: `peek(buf).await` waits until bytes beyond those
/// already peeked are queued (or the stream ends), then reads them without consuming them;
/// [`consume`](Self::consume) and [`rewind`](Self::rewind) are immediate, as in the synchronous
/// cursor.
#[derive(Debug)]
pub struct PeekCursor<S: AsFd + IntoStdSocket<Std = S>> {
    io: AsyncFd<Registered<sync::PeekCursor<S>>>,
}

impl<S: AsFd + IntoStdSocket<Std = S>> PeekCursor<S> {
    /// A cursor on `socket`, a connected TCP stream (tokio's or std's).
    ///
    /// # Errors
    /// As [`crate::peek::PeekCursor::new`]; `Io` when the socket cannot be made non-blocking or
    /// registered with the reactor.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn new<T>(socket: T, config: Config) -> Result<Self, PeekError>
    where
        T: IntoStdSocket<Std = S>,
    {
        // The kind first, before `O_NONBLOCK` changes the socket (issue 62).
        crate::peek::check(&socket)?;
        let socket = socket.into_std_socket().map_err(|source| PeekError::Io {
            call: "fcntl(O_NONBLOCK)",
            source,
        })?;
        let inner = sync::PeekCursor::new(socket, config)?;
        let io = register(inner, Interest::READABLE).map_err(|source| PeekError::Io {
            call: "epoll_ctl(EPOLL_CTL_ADD)",
            source,
        })?;
        Ok(PeekCursor { io })
    }

    fn inner(&self) -> &sync::PeekCursor<S> {
        &self.io.get_ref().0
    }

    /// How peeks are made (`SO_PEEK_OFF`, or re-reading into a discard buffer).
    pub fn mode(&self) -> Mode {
        self.inner().mode()
    }

    /// Why `SO_PEEK_OFF` is not used, if it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner().fallback_reason()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.inner().get_ref()
    }

    /// Bytes consumed from the stream so far.
    pub fn consumed(&self) -> u64 {
        self.inner().consumed()
    }

    /// Stream offset of the next byte to peek.
    pub fn peeked(&self) -> u64 {
        self.inner().peeked()
    }

    /// Bytes peeked and not yet consumed.
    pub fn outstanding(&self) -> u64 {
        self.inner().outstanding()
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.inner().counters()
    }

    /// Peeks the bytes after those already peeked into `buf`, awaiting them; 0 at the end of
    /// the stream.
    ///
    /// Cancellation: nothing is lost; a peek consumes nothing.
    ///
    /// # Errors
    /// The kernel's error.
    pub async fn peek(&mut self, buf: &mut [u8]) -> Result<usize, PeekError> {
        self.when_readable(|cur| cur.peek_with(buf, libc::MSG_DONTWAIT))
            .await
    }

    /// Consumes everything peeked so far, then awaits the next bytes and lends them until the
    /// next call; `None` at the end of the stream (see [`crate::peek::PeekCursor::recv`]).
    ///
    /// Cancellation: nothing is lost; the bytes consumed were lent by the last call.
    ///
    /// # Errors
    /// As the synchronous cursor's.
    pub async fn recv(&mut self) -> Result<Option<&[u8]>, PeekError> {
        let n = self
            .when_readable(|cur| cur.recv_step(libc::MSG_DONTWAIT))
            .await?;
        Ok((n > 0).then(|| self.io.get_ref().0.lent(n)))
    }

    /// Runs `step`, a non-blocking call of the cursor, until it does not find the queue empty,
    /// awaiting readability in between.
    async fn when_readable<T>(
        &mut self,
        mut step: impl FnMut(&mut sync::PeekCursor<S>) -> Result<T, PeekError>,
    ) -> Result<T, PeekError> {
        loop {
            let mut guard = self
                .io
                .readable_mut()
                .await
                .map_err(|source| PeekError::Io {
                    call: "epoll_wait",
                    source,
                })?;
            match step(&mut guard.get_inner_mut().0) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready_matching(Ready::READABLE);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// Drops `n` peeked bytes from the head of the queue (see
    /// [`crate::peek::PeekCursor::consume`]).
    ///
    /// # Errors
    /// As the synchronous cursor's.
    pub fn consume(&mut self, n: u64) -> Result<(), PeekError> {
        self.io.get_mut().0.consume(n)
    }

    /// Moves the peek offset back to stream offset `to` (see
    /// [`crate::peek::PeekCursor::rewind`]).
    ///
    /// # Errors
    /// As the synchronous cursor's.
    pub fn rewind(&mut self, to: u64) -> Result<(), PeekError> {
        self.io.get_mut().0.rewind(to)
    }
}
