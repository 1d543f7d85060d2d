//! A cursor over a TCP socket's receive queue: `SO_PEEK_OFF` (TCP over IPv4 since Linux 6.9,
//! IPv6 since 6.10).
//!
//! [`PeekCursor::peek`] returns the bytes after those already peeked, leaving everything in the
//! kernel's queue; [`PeekCursor::consume`] drops acknowledged bytes from the head without
//! copying them (`recv(MSG_TRUNC)`, which the kernel also subtracts from the peek offset);
//! [`PeekCursor::rewind`] moves the peek position back to re-read (a retransmission). The
//! position model is two stream offsets, `consumed <= peeked`, checked on every call.
//!
//! Where the kernel refuses `SO_PEEK_OFF` on TCP, the same semantics come from
//! [`Method::DiscardBuffer`]: each peek reads the `peeked - consumed` bytes already peeked into a
//! discard buffer, followed by the new bytes, the cost the feature removes (counted in
//! [`PeekCounters::reread_bytes`]), and sets `SO_RCVLOWAT` so that a blocking peek waits for a
//! byte beyond them.
//!
//! # References
//! - `socket(7)` (`SO_PEEK_OFF`, `SO_RCVLOWAT`), `recv(2)` (`MSG_PEEK`, `MSG_TRUNC` on TCP),
//!   `tcp(7)`
//! - Linux commit "tcp: add support for SO_PEEK_OFF socket option" (6.9)

use std::io::{self, IoSliceMut};
use std::os::fd::AsFd;

use crate::sys::{self, abi};

/// How peeks skip the bytes already peeked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Method {
    /// `SO_PEEK_OFF`: the kernel keeps the offset.
    PeekOffset,
    /// `MSG_PEEK` into a discard buffer for the bytes already peeked.
    DiscardBuffer,
}

impl Method {
    /// `peek-offset` or `discard-buffer`.
    pub fn name(self) -> &'static str {
        match self {
            Method::PeekOffset => "peek-offset",
            Method::DiscardBuffer => "discard-buffer",
        }
    }
}

/// What a cursor did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PeekCounters {
    /// Peek calls that returned data.
    pub peek_calls: u64,
    /// New bytes returned by peeks (re-reads after a rewind included).
    pub peeked_bytes: u64,
    /// Bytes the discard-buffer method read again to skip them.
    pub reread_bytes: u64,
    /// Bytes dropped from the head of the queue.
    pub consumed_bytes: u64,
    /// Rewinds.
    pub rewinds: u64,
}

/// A call that does not fit the position model.
#[derive(Debug, thiserror::Error)]
pub enum PeekError {
    /// `consume` beyond what was peeked.
    #[error("cannot consume {want} bytes: only {peeked} peeked bytes are unconsumed")]
    ConsumeBeyondPeeked {
        /// Bytes asked for.
        want: u64,
        /// `peeked - consumed`.
        peeked: u64,
    },
    /// `rewind` outside `[consumed, peeked]`.
    #[error("cannot rewind to {to}: the cursor holds bytes {consumed}..{peeked}")]
    RewindOutside {
        /// Position asked for.
        to: u64,
        /// First unconsumed byte.
        consumed: u64,
        /// Peek position.
        peeked: u64,
    },
    /// The connection ended inside the bytes being consumed.
    #[error("the connection ended {left} bytes short of the {want} to consume")]
    ShortConsume {
        /// Bytes asked for.
        want: u64,
        /// Bytes missing.
        left: u64,
    },
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

impl From<PeekError> for io::Error {
    fn from(e: PeekError) -> io::Error {
        match e {
            PeekError::Io { source, .. } => source,
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
        }
    }
}

/// A peek cursor over a connected TCP socket (see the module docs).
#[derive(Debug)]
pub struct PeekCursor<S: AsFd> {
    socket: S,
    method: Method,
    fallback: Option<String>,
    consumed: u64,
    peeked: u64,
    discard: Vec<u8>,
    lowat: i32,
    tcp: sys::TcpSocket,
    counters: PeekCounters,
}

impl<S: AsFd> PeekCursor<S> {
    /// A cursor with `SO_PEEK_OFF` where the kernel takes it, else the discard buffer with
    /// [`PeekCursor::fallback_reason`] saying why. Nothing may have been peeked on the socket
    /// through other means.
    ///
    /// # Errors
    /// Only for errors other than "not supported" from `setsockopt`.
    pub fn new(socket: S) -> Result<Self, PeekError> {
        let tcp = check(&socket)?;
        match sys::setsockopt(socket.as_fd(), libc::SOL_SOCKET, abi::SO_PEEK_OFF, &0i32) {
            Ok(()) => Ok(Self::build(socket, tcp, Method::PeekOffset, None)),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT | libc::EINVAL)
                ) =>
            {
                let why = format!(
                    "SO_PEEK_OFF refused on this TCP socket ({e}; TCP over IPv4 needs Linux 6.9, \
                     IPv6 6.10): peeking through a discard buffer"
                );
                Ok(Self::build(socket, tcp, Method::DiscardBuffer, Some(why)))
            }
            Err(source) => Err(PeekError::Io {
                op: "setsockopt(SO_PEEK_OFF)",
                source,
            }),
        }
    }

    /// A cursor with the given method (the discard buffer even where `SO_PEEK_OFF` works: for
    /// comparisons and tests).
    ///
    /// # Errors
    /// `setsockopt(SO_PEEK_OFF)` failing for [`Method::PeekOffset`].
    pub fn with_method(socket: S, method: Method) -> Result<Self, PeekError> {
        let tcp = check(&socket)?;
        let off = if method == Method::PeekOffset { 0 } else { -1 };
        sys::setsockopt(socket.as_fd(), libc::SOL_SOCKET, abi::SO_PEEK_OFF, &off).map_err(
            |source| PeekError::Io {
                op: "setsockopt(SO_PEEK_OFF)",
                source,
            },
        )?;
        Ok(Self::build(socket, tcp, method, None))
    }

    fn build(socket: S, tcp: sys::TcpSocket, method: Method, fallback: Option<String>) -> Self {
        PeekCursor {
            socket,
            method,
            fallback,
            consumed: 0,
            peeked: 0,
            discard: Vec::new(),
            lowat: 1,
            tcp,
            counters: PeekCounters::default(),
        }
    }

    /// The method in use.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Why the discard buffer is used where the offset was wanted, if it is.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Stream offset of the first byte still in the queue.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Stream offset of the next byte a peek returns.
    pub fn peeked(&self) -> u64 {
        self.peeked
    }

    /// Bytes peeked and not consumed: `peeked - consumed`.
    pub fn outstanding(&self) -> u64 {
        self.peeked - self.consumed
    }

    /// What was done so far.
    pub fn counters(&self) -> PeekCounters {
        self.counters
    }

    /// Copies bytes from `peeked` on into `buf`, leaving them queued, and advances `peeked`.
    /// Returns 0 at the end of the stream (the peer's FIN and nothing beyond `peeked`). Blocks as
    /// the socket does (`SO_RCVTIMEO` gives `WouldBlock`).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.peek_with(buf, 0)
    }

    /// [`PeekCursor::peek`] with extra `recv` flags (`MSG_DONTWAIT`).
    ///
    /// # Errors
    /// The kernel's error.
    pub fn peek_with(&mut self, buf: &mut [u8], flags: i32) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match self.method {
            Method::PeekOffset => sys::recv(self.socket.as_fd(), buf, libc::MSG_PEEK | flags)?,
            Method::DiscardBuffer => self.peek_discarding(buf, flags)?,
        };
        if n > 0 {
            self.peeked += n as u64;
            self.counters.peek_calls += 1;
            self.counters.peeked_bytes += n as u64;
        }
        Ok(n)
    }

    fn peek_discarding(&mut self, buf: &mut [u8], flags: i32) -> io::Result<usize> {
        let skip = usize::try_from(self.outstanding())
            .map_err(|_| io::Error::other("outstanding bytes exceed the address space"))?;
        if self.discard.len() < skip {
            self.discard.resize(skip, 0);
        }
        // Wait for a byte beyond those to skip: without this a blocking peek returns at once
        // with only the skipped bytes.
        let lowat = i32::try_from(skip + 1).unwrap_or(i32::MAX);
        if lowat != self.lowat {
            sys::setsockopt(
                self.socket.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                &lowat,
            )?;
            self.lowat = lowat;
        }
        // A second try only after seeing the FIN: bytes and FIN may have arrived between the
        // first recvmsg and the state check, and only a recvmsg after the FIN is definitive.
        let mut fin_seen = false;
        loop {
            let mut iov = [
                IoSliceMut::new(&mut self.discard[..skip]),
                IoSliceMut::new(&mut *buf),
            ];
            let got = sys::recv_vectored(self.socket.as_fd(), &mut iov, libc::MSG_PEEK | flags)?;
            self.counters.reread_bytes += got.min(skip) as u64;
            if got > skip {
                return Ok(got - skip);
            }
            // Only bytes already peeked: the end of the stream, or the wait ended first.
            if fin_seen {
                return Ok(0);
            }
            if !peer_closed(self.socket.as_fd())? {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "no byte beyond those peeked",
                ));
            }
            fin_seen = true;
        }
    }

    /// Drops `n` peeked bytes from the head of the queue without copying them
    /// (`recv(MSG_TRUNC)`).
    ///
    /// # Errors
    /// [`PeekError::ConsumeBeyondPeeked`] for `n > peeked - consumed`, the kernel's error, or
    /// [`PeekError::ShortConsume`] if the queue held fewer bytes.
    pub fn consume(&mut self, n: u64) -> Result<(), PeekError> {
        if n > self.outstanding() {
            return Err(PeekError::ConsumeBeyondPeeked {
                want: n,
                peeked: self.outstanding(),
            });
        }
        let mut left = n;
        while left > 0 {
            let chunk = left.min(1 << 30) as usize;
            let got = sys::tcp_discard(self.socket.as_fd(), self.tcp, chunk).map_err(|source| {
                PeekError::Io {
                    op: "recv(MSG_TRUNC)",
                    source,
                }
            })?;
            if got == 0 {
                return Err(PeekError::ShortConsume { want: n, left });
            }
            left -= got as u64;
            self.consumed += got as u64;
            self.counters.consumed_bytes += got as u64;
        }
        Ok(())
    }

    /// Moves the peek position back to `to` (`consumed <= to <= peeked`): the next peek returns
    /// the byte at stream offset `to` again.
    ///
    /// # Errors
    /// [`PeekError::RewindOutside`], or `setsockopt(SO_PEEK_OFF)`'s error.
    pub fn rewind(&mut self, to: u64) -> Result<(), PeekError> {
        if to < self.consumed || to > self.peeked {
            return Err(PeekError::RewindOutside {
                to,
                consumed: self.consumed,
                peeked: self.peeked,
            });
        }
        if self.method == Method::PeekOffset {
            let off = i32::try_from(to - self.consumed).map_err(|_| PeekError::Io {
                op: "setsockopt(SO_PEEK_OFF)",
                source: io::Error::new(io::ErrorKind::InvalidInput, "offset over 2 GiB"),
            })?;
            sys::setsockopt(
                self.socket.as_fd(),
                libc::SOL_SOCKET,
                abi::SO_PEEK_OFF,
                &off,
            )
            .map_err(|source| PeekError::Io {
                op: "setsockopt(SO_PEEK_OFF)",
                source,
            })?;
        }
        self.peeked = to;
        self.counters.rewinds += 1;
        Ok(())
    }
}

fn check(socket: &impl AsFd) -> Result<sys::TcpSocket, PeekError> {
    sys::check_tcp(socket.as_fd()).map_err(|source| PeekError::Io {
        op: "getsockopt(SO_PROTOCOL): a peek cursor needs a TCP socket",
        source,
    })
}

/// Whether the peer's FIN arrived (`tcpi_state` CLOSE_WAIT, LAST_ACK, CLOSING or CLOSE).
fn peer_closed(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    let (info, len) = sys::tcp_info(fd)?;
    const CLOSE: u8 = 7;
    const CLOSE_WAIT: u8 = 8;
    const LAST_ACK: u8 = 9;
    const CLOSING: u8 = 11;
    Ok(len > 0 && matches!(info.head[0], CLOSE | CLOSE_WAIT | LAST_ACK | CLOSING))
}
