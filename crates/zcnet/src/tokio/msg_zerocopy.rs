//! `MSG_ZEROCOPY` on tokio: see [`ZeroCopySender`].

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use ::tokio::io::Interest;
use ::tokio::io::unix::AsyncFd;

use super::IntoStdSocket;
use crate::auto::Choice;
use crate::loan::DeferredKick;
use crate::loan::{OwnedBuf, Returned, SendError};
use crate::msg_zerocopy::{
    self as sync, Blocking, Config, Counters, ExclusiveSocket, Mode, SendFlags, ZeroCopyError,
};
use crate::sys::{self, reactor::Registered, reactor::register};

/// The private epoll set's tokens.
const SOCKET: u64 = 0;
const STALL: u64 = 1;

/// [`crate::msg_zerocopy::ZeroCopySender`] on tokio: `send(buf).await` waits for room in the
/// socket, loans the buffer with `MSG_ZEROCOPY` (or copies it, by the same rules: threshold,
/// copied policy, [`Mode::Auto`](crate::msg_zerocopy::Mode::Auto)), and the buffer comes back
/// with its completion, which wakes the task: the kernel reports completions on the socket's
/// error queue, signalled as `EPOLLERR` (tokio's `Interest::ERROR`; see below for why it is not
/// waited on through tokio's readiness of the socket itself).
///
/// Take buffers back with [`wait_returned`](Self::wait_returned) (awaits the next one),
/// [`returned`](Self::returned) (what is back already) or after [`drain`](Self::drain).
///
/// Dropping the sender with buffers in flight waits up to 500 ms, on the thread that drops it,
/// for their completions (usually microseconds), then leaks what the kernel still holds rather
/// than free memory it may read: `drain` first where that matters.
///
/// # Why not `AsyncFd` on the socket
/// mio reports `EPOLLOUT` together with `EPOLLERR` as "write closed", which tokio keeps as a
/// final state: after the first completion that arrives while the socket is writable, a
/// socket's `writable()` never waits again, and a send loop spins on `EAGAIN` (ours did). So the
/// socket is watched through a private epoll set (`EPOLLOUT | EPOLLET`; `EPOLLERR` always), and
/// that set's fd is what tokio waits on: each wake-up says which of the two it was.
///
/// The sender owns its socket, as the synchronous one does ([`ExclusiveSocket`]): a borrowed
/// socket does not compile, a second sender on another descriptor of the same socket is
/// refused ([`ZeroCopyError::SocketInUse`]).
/// ```compile_fail,E0277
/// # async fn f(s: &tokio::net::TcpStream) {
/// use zcnet::tokio::ZeroCopySender;
/// let tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(s, Default::default()).unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct ZeroCopySender<S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf> {
    inner: sync::ZeroCopySender<S, B>,
    /// The private epoll set watching the socket (token 0) and `stall` (token 1), registered
    /// with the reactor.
    events: AsyncFd<Registered<sys::event::Epoll>>,
    /// Armed while awaiting completions: when none came for a while, the wait kicks the
    /// kernel's deferred frees (see [`crate::loan::kick_deferred_frees`]). A timerfd in the
    /// set rather than a tokio timer, so a runtime without a time driver works.
    stall: sys::event::TimerFd,
    /// What the last look at the set found (kept: a send that waits often reuses it).
    seen: Vec<(u32, u64)>,
}

impl<S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf> ZeroCopySender<S, B> {
    /// A sender on `socket`, a connected TCP stream or UDP socket (tokio's or std's), with the
    /// synchronous sender's [`Config`].
    ///
    /// # Errors
    /// As [`crate::msg_zerocopy::ZeroCopySender::new`]; `Io` when the socket cannot be made
    /// non-blocking or registered with the reactor. Whatever fails, the socket is left as it
    /// was found (`SO_ZEROCOPY`, `UDP_SEGMENT`) and closed: the synchronous constructor, which
    /// hands it back in its error, is for a caller who wants it again.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled (as `AsyncFd::new`).
    pub fn new<T>(socket: T, config: Config) -> Result<Self, ZeroCopyError>
    where
        T: IntoStdSocket<Std = S>,
    {
        // The kind first, before `O_NONBLOCK` changes the socket (issue 62).
        crate::msg_zerocopy::sender::check_kind(socket.as_fd())?;
        let socket = socket
            .into_std_socket()
            .map_err(|source| ZeroCopyError::Io {
                call: "fcntl(O_NONBLOCK)",
                source,
            })?;
        // Everything that can fail without changing the socket first; the synchronous
        // constructor last, which puts back what it changed when it fails.
        let stall = sys::event::TimerFd::new().map_err(|source| ZeroCopyError::Io {
            call: "timerfd_create",
            source,
        })?;
        let events = sys::event::Epoll::new()
            .and_then(|ep| {
                let watch = (libc::EPOLLOUT | libc::EPOLLET) as u32;
                ep.add(socket.as_fd(), watch, SOCKET)?;
                ep.add(stall.as_fd(), (libc::EPOLLIN | libc::EPOLLET) as u32, STALL)?;
                register(ep, Interest::READABLE)
            })
            .map_err(|source| ZeroCopyError::Io {
                call: "epoll_ctl(EPOLL_CTL_ADD)",
                source,
            })?;
        let inner = sync::ZeroCopySender::new(socket, config).map_err(|e| e.error)?;
        Ok(ZeroCopySender {
            inner,
            events,
            stall,
            seen: Vec::with_capacity(sys::event::Epoll::MAX_EVENTS),
        })
    }

    fn inner(&self) -> &sync::ZeroCopySender<S, B> {
        &self.inner
    }

    fn inner_mut(&mut self) -> &mut sync::ZeroCopySender<S, B> {
        &mut self.inner
    }

    /// Awaits an event of the socket in `mask` (`EPOLLOUT`, `EPOLLERR`), or with `stall` the
    /// stall timer's expiry; socket events of the other kind seen meanwhile are consumed
    /// (edge-triggered: the next change is a new event).
    async fn event(&mut self, mask: u32, stall: bool) -> io::Result<()> {
        loop {
            let mut guard = self.events.readable_mut().await?;
            guard.get_inner().0.wait(&mut self.seen, Duration::ZERO)?;
            // Every event was taken (two fds, both edge-triggered, room for eight): the set is
            // empty now, and its fd is readable again only with a new event.
            guard.clear_ready();
            let hit = |&(ev, token): &(u32, u64)| match token {
                SOCKET => ev & mask != 0,
                _ => stall,
            };
            if self.seen.iter().any(hit) {
                return Ok(());
            }
        }
    }

    /// The mode in effect (see [`crate::msg_zerocopy::ZeroCopySender::mode`]).
    pub fn mode(&self) -> Mode {
        self.inner.mode()
    }

    /// Why this sender copies everything, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner().fallback_reason()
    }

    /// In [`Mode::Auto`](crate::msg_zerocopy::Mode::Auto): the prior, its profile, and what each
    /// size class learned.
    pub fn auto_choice(&self) -> Option<Choice> {
        self.inner().auto_choice()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.inner().get_ref()
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.inner().counters()
    }

    /// Buffers the kernel still holds, and the one part-way out if a send future was dropped.
    pub fn in_flight(&self) -> usize {
        self.inner().in_flight() + usize::from(self.inner().in_progress())
    }

    /// Sends `buf` (see [`crate::msg_zerocopy::ZeroCopySender::send`]); returns once every byte
    /// of it is with the kernel, not when the buffer is back.
    ///
    /// Cancellation: once its first call is made, the buffer belongs to the sender: a future
    /// dropped with the buffer part-way out leaves it there, the next `send` or `drain` sends the
    /// rest of it first, and it comes back through [`returned`](Self::returned) as any other. A
    /// future dropped earlier (while it was finishing such an earlier buffer) drops `buf`
    /// unsent, as the future owned it.
    ///
    /// # Errors
    /// [`SendError`], holding `buf` when none of it was loaned. An earlier buffer that a
    /// dropped future left part-way and that now fails comes back through `returned` with its
    /// error, which this call returns with `buf`.
    pub async fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        self.send_with(buf, SendFlags::empty()).await
    }

    /// [`send`](Self::send) with extra `send(2)` flags ([`SendFlags::EOR`], ...: those that
    /// leave the sender's bookkeeping intact, see [`SendFlags`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use zcnet::msg_zerocopy::SendFlags;
    /// use zcnet::tokio::ZeroCopySender;
    /// let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let s = tokio::net::TcpStream::connect(l.local_addr()?).await?;
    /// let _peer = l.accept().await?;
    /// let mut tx = ZeroCopySender::new(s, Default::default())?;
    /// tx.send_with(vec![1u8; 100], SendFlags::EOR).await.map_err(|e| e.error)?;
    /// tx.drain().await?;
    /// # Ok(())
    /// # }
    /// ```
    /// A raw `int` of flags, `MSG_ZEROCOPY` among them, does not compile:
    /// ```compile_fail,E0308
    /// # async fn f(s: tokio::net::TcpStream) {
    /// use zcnet::tokio::ZeroCopySender;
    /// let mut tx = ZeroCopySender::new(s, Default::default()).unwrap();
    /// tx.send_with(vec![1u8; 100], libc::MSG_ZEROCOPY).await.unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_with(&mut self, buf: B, flags: SendFlags) -> Result<(), SendError<B>> {
        if let Err(e) = self.drive().await {
            let error = self.inner_mut().give_back(e);
            return Err(SendError {
                error,
                sent: 0,
                buf,
            });
        }
        self.inner_mut().begin(buf, flags)?;
        self.drive().await
    }

    /// Makes the calls of the buffer in progress, awaiting writability, until it is all sent.
    async fn drive(&mut self) -> Result<(), SendError<B>> {
        loop {
            if self.inner.advance(Blocking::Return)? {
                return Ok(());
            }
            // EAGAIN: the socket will say when it has room (an EPOLLOUT edge).
            if let Err(e) = self.event(libc::EPOLLOUT as u32, false).await {
                return self.inner.abort(e);
            }
        }
    }

    /// Reads the completions queued now, without waiting; returns how many buffers they freed.
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub fn reap(&mut self) -> io::Result<usize> {
        self.inner_mut().reap()
    }

    /// Buffers back so far and not yet taken, oldest first (call [`reap`](Self::reap) first to
    /// collect what completed without waiting). Dropping the iterator drops what it has not
    /// yielded.
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.inner_mut().returned()
    }

    /// The next buffer back, awaiting its completion; `Ok(None)` when nothing is loaned.
    ///
    /// Cancellation: nothing is lost; a completion read meanwhile is kept for the next call.
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub async fn wait_returned(&mut self) -> io::Result<Option<Returned<B>>> {
        loop {
            if let Some(r) = self.inner_mut().pop_returned() {
                return Ok(Some(r));
            }
            if self.inner().in_flight() == 0 {
                return Ok(None);
            }
            self.completions().await?;
        }
    }

    /// Finishes the buffer a dropped send left part-way, if any, then awaits every completion;
    /// the buffers are then in [`returned`](Self::returned). A peer that never reads holds its
    /// buffers (the kernel still needs them for retransmission): bound the wait with
    /// `tokio::time::timeout` where that can happen.
    ///
    /// Cancellation: nothing is lost; buffers stay loaned or come back as usual.
    ///
    /// # Errors
    /// The error of the part-way send (its buffer comes back with it), or of `recvmsg`.
    pub async fn drain(&mut self) -> io::Result<()> {
        if let Err(e) = self.drive().await {
            return Err(self.inner_mut().give_back(e));
        }
        while self.inner().in_flight() > 0 {
            self.completions().await?;
        }
        Ok(())
    }

    /// Ends the sender after awaiting its loans for at most `timeout` (a tokio timer: the
    /// runtime needs its time driver): the buffers back and not taken, and how many the kernel
    /// still held (left to it, never freed: [`crate::loan::leaked_buffers`]). A drop never
    /// waits on a runtime's thread; this is the way to wait, and to learn what was left.
    pub async fn close(mut self, timeout: std::time::Duration) -> crate::loan::Closed<B> {
        let _ = ::tokio::time::timeout(timeout, self.drain()).await;
        let ZeroCopySender { inner, .. } = self;
        inner.close(std::time::Duration::ZERO)
    }

    /// Awaits completions until at least one buffer is freed (or nothing is loaned). A wait
    /// that stalls kicks the kernel's deferred frees, as the synchronous `drain` does.
    async fn completions(&mut self) -> io::Result<usize> {
        loop {
            let n = self.inner.reap()?;
            if n > 0 || self.inner.in_flight() == 0 {
                return Ok(n);
            }
            self.inner.kick_if_stalled();
            // Every completion queued is an EPOLLERR edge; the timer brings the next look. It
            // is left armed when the wait ends otherwise (or its future is dropped): its one
            // late edge wakes a later wait, which looks again or ignores it.
            self.stall.arm(DeferredKick::STALL)?;
            self.event(libc::EPOLLERR as u32, true).await?;
        }
    }
}
