//! TCP zero-copy receive on tokio: see [`TcpZeroCopyReceiver`].

use std::os::fd::AsFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncWrite, AsyncWriteExt, Interest, Ready};

use super::IntoStdSocket;
use crate::sys::reactor::{Registered, register};
use crate::tcp_rx::{self as sync, Config, Counters, Mode, Received, RxError, Step};

/// [`crate::tcp_rx::TcpZeroCopyReceiver`] on tokio: `recv().await` waits until the socket is
/// readable, then maps what it can (`getsockopt(TCP_ZEROCOPY_RECEIVE)`) and copies the rest,
/// with the same counters and fallback reason. [`Config::timeout`] is not used: bound a wait
/// with `tokio::time::timeout`.
#[derive(Debug)]
pub struct TcpZeroCopyReceiver<S: AsFd + IntoStdSocket<Std = S>> {
    io: AsyncFd<Registered<sync::TcpZeroCopyReceiver<S>>>,
}

impl<S: AsFd + IntoStdSocket<Std = S>> TcpZeroCopyReceiver<S> {
    /// A receiver on `socket`, a connected TCP stream (tokio's or std's).
    ///
    /// # Errors
    /// As [`crate::tcp_rx::TcpZeroCopyReceiver::new`]; `Io` when the socket cannot be made
    /// non-blocking or registered with the reactor.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn new<T>(socket: T, config: Config) -> Result<Self, RxError>
    where
        T: IntoStdSocket<Std = S>,
    {
        // The kind first, before `O_NONBLOCK` changes the socket (issue 62).
        crate::tcp_rx::check_kind(socket.as_fd())?;
        let socket = socket.into_std_socket().map_err(|source| RxError::Io {
            call: "fcntl(O_NONBLOCK)",
            source,
        })?;
        let inner = sync::TcpZeroCopyReceiver::new(
            socket,
            Config {
                timeout: None,
                ..config
            },
        )?;
        let io = register(inner, Interest::READABLE).map_err(|source| RxError::Io {
            call: "epoll_ctl(EPOLL_CTL_ADD)",
            source,
        })?;
        Ok(TcpZeroCopyReceiver { io })
    }

    fn inner(&self) -> &sync::TcpZeroCopyReceiver<S> {
        &self.io.get_ref().0
    }

    /// The mode in effect (see [`crate::tcp_rx::TcpZeroCopyReceiver::mode`]).
    pub fn mode(&self) -> Mode {
        self.inner().mode()
    }

    /// Why this receiver copies instead of mapping, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner().fallback_reason()
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.inner().counters()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.inner().get_ref()
    }

    /// Gives the socket back, out of the reactor and non-blocking, as the synchronous
    /// [`crate::tcp_rx::TcpZeroCopyReceiver::into_inner`] does (the window is unmapped): to
    /// half-close it, or hand it to `tokio::net::TcpStream::from_std` again.
    pub fn into_inner(self) -> S {
        self.io.into_inner().0.into_inner()
    }

    /// The next bytes, mapped then copied, in stream order: `Ok(None)` at end of stream. The
    /// slices stay valid until the next call (mapped pages are released then).
    ///
    /// Cancellation: nothing is lost; bytes are taken from the socket only in the step that
    /// returns them.
    ///
    /// # Errors
    /// As [`crate::tcp_rx::TcpZeroCopyReceiver::recv`]: a reset after every byte queued before
    /// it has been returned.
    pub async fn recv(&mut self) -> Result<Option<Received<'_>>, RxError> {
        loop {
            let mut guard = match self.io.readable_mut().await {
                Ok(g) => g,
                Err(source) => {
                    return Err(RxError::Receive {
                        received: self.counters().bytes(),
                        source,
                    });
                }
            };
            match guard.get_inner_mut().0.step(false)? {
                Step::Got => break,
                Step::End => return Ok(None),
                Step::WouldBlock => guard.clear_ready_matching(Ready::READABLE),
            }
        }
        Ok(Some(self.inner().last_received()))
    }

    /// Receives until end of stream, writing everything to `out`; returns the bytes.
    ///
    /// Cancellation: bytes already received and not yet written are lost with the future; use
    /// [`recv`](Self::recv) where a transfer must survive cancellation.
    ///
    /// # Errors
    /// As [`recv`](Self::recv), plus [`RxError::Write`].
    pub async fn copy_to<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        out: &mut W,
    ) -> Result<u64, RxError> {
        let mut total = 0u64;
        while let Some(r) = self.recv().await? {
            let n = r.len() as u64;
            for part in r.parts() {
                out.write_all(part).await.map_err(RxError::Write)?;
            }
            total += n;
        }
        out.flush().await.map_err(RxError::Write)?;
        Ok(total)
    }
}
