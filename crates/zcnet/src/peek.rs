//! A cursor over a TCP socket's receive queue: `SO_PEEK_OFF` (TCP over IPv4 since Linux 6.9,
//! IPv6 in a later kernel; [`support`] says what this one does).
//!
//! [`PeekCursor::peek`] returns the bytes after those already peeked, leaving everything in the
//! kernel's queue; [`PeekCursor::consume`] drops acknowledged bytes from the head without
//! copying them (`recv(MSG_TRUNC)`, which the kernel also subtracts from the peek offset);
//! [`PeekCursor::rewind`] moves the peek position back to re-read (a retransmission). The
//! position model is two stream offsets, `consumed <= peeked`, checked on every call.
//!
//! Where the kernel refuses `SO_PEEK_OFF` on TCP, the same semantics come from
//! [`Mode::Copy`]: each peek reads the `peeked - consumed` bytes already peeked into a
//! discard buffer, followed by the new bytes, the cost the feature removes (counted in
//! [`Counters::reread_bytes`]), and sets `SO_RCVLOWAT` so that a blocking peek waits for a
//! byte beyond them.
//!
//! # References
//! - `socket(7)` (`SO_PEEK_OFF`, `SO_RCVLOWAT`), `recv(2)` (`MSG_PEEK`, `MSG_TRUNC` on TCP),
//!   `tcp(7)`
//! - Linux commit "tcp: add support for SO_PEEK_OFF socket option" (6.9)

use std::io::{self, IoSliceMut};
use std::os::fd::AsFd;

use crate::support::{Check, CheckId, Probe, Status, tcp_pair, wait_readable};
use crate::sys::{self};
use std::io::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

/// How peeks skip the bytes already peeked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Mode {
    /// `SO_PEEK_OFF`: the kernel keeps the offset (the zero-copy side: nothing is read twice).
    /// Where the kernel refuses it on this socket, the cursor peeks as [`Mode::Copy`] and
    /// [`PeekCursor::fallback_reason`] says why, as every zero-copy mode falls back.
    #[default]
    #[doc(alias = "SO_PEEK_OFF")]
    #[serde(rename = "PeekOffset")]
    ZeroCopy,
    /// `MSG_PEEK` into a discard buffer for the bytes already peeked (the copying twin).
    #[doc(alias = "MSG_PEEK")]
    #[serde(rename = "DiscardBuffer")]
    Copy,
}

impl Mode {
    /// `peek-offset` or `discard-buffer`: what each mode does, as the CLI and the reports say.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "peek-offset",
            Mode::Copy => "discard-buffer",
        }
    }
}

/// How a [`PeekCursor`] is set up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Which method: [`Mode::ZeroCopy`] (falling back to [`Mode::Copy`]) by default.
    pub mode: Mode,
}

/// What a cursor did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Peek calls that returned data.
    pub peek_calls: u64,
    /// New bytes returned by peeks (re-reads after a rewind included).
    pub peeked_bytes: u64,
    /// Bytes the discard-buffer method read again to skip them.
    pub reread_bytes: u64,
    /// Bytes dropped from the head of the queue.
    pub consumed_bytes: u64,
    /// Calls that dropped them (`recv(MSG_TRUNC)`).
    pub consumes: u64,
    /// Rewinds.
    pub rewinds: u64,
}

impl crate::ZeroCopyCounters for Counters {
    /// New bytes peeked (with `SO_PEEK_OFF` nothing is read twice).
    fn zero_copy_bytes(&self) -> u64 {
        self.peeked_bytes
    }
    /// Bytes the discard-buffer method read again to skip them.
    fn copied_bytes(&self) -> u64 {
        self.reread_bytes
    }
    /// A cursor's method is fixed when it is made ([`PeekCursor::fallback_reason`] says when
    /// that was a fallback); nothing falls back per call.
    fn fallbacks(&self) -> u64 {
        0
    }
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
    #[error("{call} failed")]
    Io {
        /// The call.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

impl PeekError {
    /// The kind of the kernel's error ([`PeekError::Io`]), or `InvalidInput` for a call that
    /// does not fit the position model: what a caller matches `WouldBlock` and `Interrupted`
    /// on, as on an `io::Error`.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            PeekError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidInput,
        }
    }
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
#[doc(alias("SO_PEEK_OFF", "MSG_PEEK"))]
pub struct PeekCursor<S: AsFd> {
    /// The socket's place among the sockets cursors of this process hold.
    _claim: crate::loan::Claim,
    socket: S,
    method: Mode,
    fallback: Option<String>,
    consumed: u64,
    peeked: u64,
    discard: Vec<u8>,
    /// What [`PeekCursor::recv`] lends.
    lend: Vec<u8>,
    lowat: i32,
    counters: Counters,
}

impl<S: AsFd> PeekCursor<S> {
    /// A cursor over `socket`, a connected TCP socket on which nothing has been peeked by other
    /// means, with the method `config.mode` says.
    ///
    /// # Errors
    /// [`PeekError::Io`] for a socket that is not TCP, and other `setsockopt` errors.
    pub fn new(socket: S, config: Config) -> Result<Self, PeekError> {
        check(&socket)?;
        let claim = crate::loan::Claim::peek(socket.as_fd()).map_err(|e| PeekError::Io {
            call: "taking the socket for this cursor (one cursor a socket: two would share its \
                   one SO_PEEK_OFF)",
            source: e.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EBUSY)),
        })?;
        let set = |off: i32| sys::sockopt::set_peek_offset(socket.as_fd(), off);
        let unsupported = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT | libc::EINVAL)
            )
        };
        let (method, fallback) = match config.mode {
            Mode::Copy => match set(-1) {
                // A kernel without SO_PEEK_OFF on TCP (before 6.9 for IPv4) has no offset in
                // use: the discard buffer is all there is, and that is what was asked for.
                Ok(()) => (Mode::Copy, None),
                Err(e) if unsupported(&e) => (Mode::Copy, None),
                Err(e) => return Err(io_err("setsockopt(SO_PEEK_OFF, -1)")(e)),
            },
            Mode::ZeroCopy => match set(0) {
                Ok(()) => (Mode::ZeroCopy, None),
                Err(e) if unsupported(&e) => (
                    Mode::Copy,
                    Some(format!(
                        "SO_PEEK_OFF refused on this TCP socket ({e}; TCP over IPv4 needs Linux \
                         6.9, IPv6 a later kernel): peeking through a discard buffer"
                    )),
                ),
                Err(e) => return Err(io_err("setsockopt(SO_PEEK_OFF)")(e)),
            },
        };
        Ok(PeekCursor {
            _claim: claim,
            socket,
            method,
            fallback,
            consumed: 0,
            peeked: 0,
            discard: Vec::new(),
            lend: Vec::new(),
            lowat: 1,
            counters: Counters::default(),
        })
    }

    /// The mode in use: [`Mode::ZeroCopy`], or [`Mode::Copy`] asked for or fallen back to.
    pub fn mode(&self) -> Mode {
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
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Copies bytes from `peeked` on into `buf`, leaving them queued, and advances `peeked`.
    /// Returns 0 at the end of the stream (the peer's FIN and nothing beyond `peeked`). Blocks as
    /// the socket does (`SO_RCVTIMEO` gives `WouldBlock`).
    ///
    /// Peeked bytes stay in the socket's receive buffer until consumed: once unconsumed bytes
    /// fill the receive window, the peer can send nothing more, and a blocking `peek` past them
    /// waits for ever, even after the peer's FIN (which cannot arrive behind the full window).
    /// Consume what you have peeked before you peek that far (a relay consumes what its
    /// destination acknowledged), or give the socket `SO_RCVTIMEO` or make it non-blocking.
    ///
    /// # Errors
    /// [`PeekError::Io`], the kernel's error (`WouldBlock` under `SO_RCVTIMEO`: see [`PeekError::kind`]).
    pub fn peek(&mut self, buf: &mut [u8]) -> Result<usize, PeekError> {
        self.peek_with(buf, 0)
    }

    /// [`PeekCursor::peek`] with extra `recv` flags (`MSG_DONTWAIT`).
    ///
    /// # Errors
    /// [`PeekError::Io`], the kernel's error.
    pub fn peek_with(&mut self, buf: &mut [u8], flags: i32) -> Result<usize, PeekError> {
        self.peek_raw(buf, flags).map_err(io_err("recv(MSG_PEEK)"))
    }

    fn peek_raw(&mut self, buf: &mut [u8], flags: i32) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match self.method {
            Mode::ZeroCopy => sys::net::recv(self.socket.as_fd(), buf, libc::MSG_PEEK | flags)?,
            _ => self.peek_discarding(buf, flags)?,
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
            sys::sockopt::set_receive_low_water(self.socket.as_fd(), lowat)?;
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
            let got =
                sys::net::recv_vectored(self.socket.as_fd(), &mut iov, libc::MSG_PEEK | flags)?;
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
            let got = sys::net::tcp_discard(self.socket.as_fd(), chunk)
                .map_err(io_err("recv(MSG_TRUNC)"))?;
            if got == 0 {
                return Err(PeekError::ShortConsume { want: n, left });
            }
            left -= got as u64;
            self.consumed += got as u64;
            self.counters.consumed_bytes += got as u64;
            self.counters.consumes += 1;
        }
        Ok(())
    }

    /// The cursor as a plain stream receiver: consumes everything peeked so far (what the last
    /// `recv` lent, and any [`peek`](Self::peek) since), then waits for the next bytes, up to
    /// 64 KiB, and lends them until the next call; `None` at the end of the stream. For a reader
    /// that drains the queue as it goes; the relay instead peeks ahead and consumes later.
    ///
    /// # Errors
    /// As [`consume`](Self::consume), and the kernel's error of the peek.
    pub fn recv(&mut self) -> Result<Option<&[u8]>, PeekError> {
        let n = self.recv_step(0)?;
        Ok((n > 0).then(|| &self.lend[..n]))
    }

    /// [`recv`](Self::recv)'s work, with extra `recv` flags: the bytes lent are `lent(n)`.
    pub(crate) fn recv_step(&mut self, flags: i32) -> Result<usize, PeekError> {
        const LEND: usize = 64 * 1024;
        self.consume(self.outstanding())?;
        let mut lend = std::mem::take(&mut self.lend);
        lend.resize(LEND, 0);
        let got = self.peek_with(&mut lend, flags);
        self.lend = lend;
        got
    }

    /// The first `n` bytes [`recv_step`](Self::recv_step) peeked.
    #[cfg(feature = "tokio")]
    pub(crate) fn lent(&self, n: usize) -> &[u8] {
        &self.lend[..n]
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
        if self.method == Mode::ZeroCopy {
            let off = i32::try_from(to - self.consumed).map_err(|_| PeekError::Io {
                call: "setsockopt(SO_PEEK_OFF)",
                source: io::Error::new(io::ErrorKind::InvalidInput, "offset over 2 GiB"),
            })?;
            sys::sockopt::set_peek_offset(self.socket.as_fd(), off).map_err(|source| {
                PeekError::Io {
                    call: "setsockopt(SO_PEEK_OFF)",
                    source,
                }
            })?;
        }
        self.peeked = to;
        self.counters.rewinds += 1;
        Ok(())
    }
}

fn io_err(call: &'static str) -> impl FnOnce(io::Error) -> PeekError {
    move |source| PeekError::Io { call, source }
}

/// The kind of socket a cursor takes (docs/api.md, "Socket kinds"): checked by the sync
/// constructor and, before it changes the socket, by the tokio twin's.
pub(crate) fn check(socket: &impl AsFd) -> Result<(), PeekError> {
    // The cause says what was wrong (another family or protocol, a listener, not connected, or
    // getsockopt's error): this names only the step, as every `Io` does.
    crate::socket_kind::check(socket.as_fd(), crate::socket_kind::Need::TCP).map_err(io_err(
        "the socket check (a peek cursor reads a connected TCP stream, IPv4 or IPv6)",
    ))
}

/// Drops up to `len` bytes from the head of `socket`'s receive queue without copying them
/// (`recv(MSG_TRUNC)` on TCP, Linux 4.3); returns how many were dropped (0 at end of stream).
/// Blocks as the socket does.
///
/// # Errors
/// `InvalidInput` when `socket` is not a TCP socket (checked on every call: on other sockets
/// `MSG_TRUNC` means something else), or `recv`'s error.
#[doc(alias = "MSG_TRUNC")]
pub fn discard(socket: &impl AsFd, len: usize) -> io::Result<usize> {
    sys::net::tcp_discard(socket.as_fd(), len)
}

/// Whether the peer's FIN arrived (`tcpi_state` CLOSE_WAIT, LAST_ACK, CLOSING or CLOSE).
fn peer_closed(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    Ok(crate::tcp_info::tcp_info(&fd)?.state.peer_closed())
}

// ---------------------------------------------------------------------------------------------
// Support: this mechanism's own checks, run once per process.

/// What this kernel allows of `SO_PEEK_OFF` on TCP: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `peek.tcp_ipv4` (Linux 6.9).
    pub ipv4: Check,
    /// `peek.tcp_ipv6` (after IPv4).
    pub ipv6: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.ipv4.clone(), self.ipv6.clone()]
    }

    /// The check for `socket`'s address family.
    pub fn for_family(&self, ipv6: bool) -> &Check {
        if ipv6 { &self.ipv6 } else { &self.ipv4 }
    }
}

/// Whether `SO_PEEK_OFF` works on TCP over IPv4 and over IPv6 (two peeks must advance); once per
/// process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        ipv4: peek_check(false),
        ipv6: peek_check(true),
    })
}

fn peek_check(v6: bool) -> Check {
    let (id, fam) = if v6 {
        (CheckId::PeekIpv6, "IPv6")
    } else {
        (CheckId::PeekIpv4, "IPv4")
    };
    let mut p = Probe::new(id);
    let (client, server) = match tcp_pair(v6) {
        Ok(pair) => pair,
        Err(e) => {
            let need = if v6 {
                "needs an IPv6 loopback address (::1)"
            } else {
                "needs an IPv4 loopback address (127.0.0.1)"
            };
            return p.failed(&format!("TCP pair on {fam} loopback"), &e, need);
        }
    };
    p.step("setsockopt(SO_PEEK_OFF, 0)");
    if let Err(e) = sys::sockopt::set_peek_offset(server.as_fd(), 0) {
        return p.failed(
            &format!("setsockopt(SO_PEEK_OFF) on TCP/{fam}"),
            &e,
            "TCP support came in Linux 6.9 (IPv4) and later for IPv6",
        );
    }
    p.step("send 8 bytes; recv(MSG_PEEK, 4) twice");
    let peek_twice = || -> io::Result<([u8; 4], [u8; 4])> {
        (&client).write_all(b"abcdefgh")?;
        // Wait until all 8 bytes are queued, so the second peek has something to find.
        let mut probe = [0u8; 8];
        sys::sockopt::set_peek_offset(server.as_fd(), -1)?;
        for _ in 0..200 {
            wait_readable(&server)?;
            if sys::net::recv(server.as_fd(), &mut probe, libc::MSG_PEEK)? == 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        sys::sockopt::set_peek_offset(server.as_fd(), 0)?;
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        sys::net::recv(server.as_fd(), &mut a, libc::MSG_PEEK)?;
        sys::net::recv(server.as_fd(), &mut b, libc::MSG_PEEK)?;
        Ok((a, b))
    };
    match peek_twice() {
        Ok((a, b)) if &a == b"abcd" && &b == b"efgh" => p.ok(format!(
            "SO_PEEK_OFF works on TCP over {fam}: successive peeks advance"
        )),
        Ok((a, b)) => p.done(
            Status::Unavailable,
            format!(
                "SO_PEEK_OFF accepted on TCP/{fam} but peeks read {:?} then {:?} (offset ignored)",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ),
            None,
        ),
        Err(e) => p.failed("peek", &e, ""),
    }
}
