//! io_uring `SEND_ZC` on tokio: see [`UringSender`].

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use ::tokio::io::Interest;
use ::tokio::io::unix::AsyncFd;

use crate::auto::Choice;
use crate::loan::{ExclusiveSocket, OwnedBuf, Returned, SendError};
use crate::sys::{self, reactor::Registered, reactor::register};
use crate::uring::{self as sync, Config, Counters, Mode, Pool, PoolBuf, RingSetup, UringError};

/// [`crate::uring::UringSender`] on tokio: requests go to the ring as in the synchronous
/// sender, and completions wake the task through an eventfd registered with the ring
/// (`IORING_REGISTER_EVENTFD`, Linux 5.2) and watched by the reactor.
///
/// The ring is set up without `IORING_SETUP_SINGLE_ISSUER` and a registered ring fd, whatever
/// [`Config::setup`] asks: both tie the ring to the first thread that submits, and a
/// multi-threaded runtime moves a task between threads. `COOP_TASKRUN` stays as asked (on by
/// default): the completions' task work is queued with the eventfd signalled, and each reap
/// enters the kernel, which runs it (tested under a current-thread and a multi-thread runtime).
/// [`setup`](Self::setup) says what was granted.
pub struct UringSender<S: ExclusiveSocket + 'static, B: OwnedBuf> {
    /// The sender; `None` only once dropped or closed (its loans handed on).
    inner: Option<sync::UringSender<S, B>>,
    completions: AsyncFd<Registered<OwnedFd>>,
}

impl<S: ExclusiveSocket + 'static, B: OwnedBuf> std::fmt::Debug for UringSender<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringSender")
            .field("mode", &self.inner().mode())
            .field("in_flight", &self.inner().in_flight())
            .finish_non_exhaustive()
    }
}

/// The set-up an async sender can use (see [`UringSender`]).
fn async_setup(config: Config) -> Config {
    Config {
        setup: RingSetup {
            single_issuer: false,
            defer_taskrun: false,
            registered_ring_fd: false,
            ..config.setup
        },
        ..config
    }
}

fn with_eventfd<S: ExclusiveSocket + 'static, B: OwnedBuf>(
    mut inner: sync::UringSender<S, B>,
) -> Result<UringSender<S, B>, UringError> {
    let io = |call| move |source| UringError::Eventfd { call, source };
    let efd = sys::event::eventfd().map_err(io("eventfd"))?;
    inner
        .register_eventfd(efd.as_fd())
        .map_err(io("io_uring_register(IORING_REGISTER_EVENTFD)"))?;
    let completions = register(efd, Interest::READABLE).map_err(io("epoll_ctl(EPOLL_CTL_ADD)"))?;
    Ok(UringSender {
        inner: Some(inner),
        completions,
    })
}

impl<S: ExclusiveSocket + 'static, B: OwnedBuf> UringSender<S, B> {
    fn inner(&self) -> &sync::UringSender<S, B> {
        self.inner.as_ref().expect("a live sender")
    }

    fn inner_mut(&mut self) -> &mut sync::UringSender<S, B> {
        self.inner.as_mut().expect("a live sender")
    }

    /// A sender on `socket`, which it owns from now on (any socket type: the ring, not the
    /// reactor, does its I/O).
    ///
    /// # Errors
    /// As [`crate::uring::UringSender::new`], and `Io` when the eventfd cannot be made,
    /// registered with the ring, or registered with the reactor.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn new(socket: S, config: Config) -> Result<Self, UringError> {
        with_eventfd(sync::UringSender::new(socket, async_setup(config))?)
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        self.inner().mode()
    }

    /// Why the sender copies where zero copy was asked for, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner().fallback_reason()
    }

    /// In [`Mode::Auto`]: the prior, its profile, and what each size class learned.
    pub fn auto_choice(&self) -> Option<Choice> {
        self.inner().auto_choice()
    }

    /// The ring set-up the kernel granted.
    pub fn setup(&self) -> RingSetup {
        self.inner().setup()
    }

    /// What was done so far.
    pub fn counters(&self) -> Counters {
        self.inner().counters()
    }

    /// Requests whose buffers the kernel still holds.
    pub fn in_flight(&self) -> usize {
        self.inner().in_flight()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.inner().get_ref()
    }

    /// Buffers back so far and not yet taken (call [`reap`](Self::reap) first to collect
    /// without waiting).
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.inner_mut().returned()
    }

    /// Submits what is queued and collects what completed, without waiting.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn reap(&mut self) -> io::Result<usize> {
        self.inner_mut().reap()
    }

    /// Awaits the eventfd: at least one CQE was posted since it was last read.
    async fn completion(&mut self) -> io::Result<()> {
        let mut guard = self.completions.readable_mut().await?;
        // Reading resets the counter; a CQE posted after it writes it again, a new edge.
        sys::event::eventfd_read(guard.get_inner().0.as_fd())?;
        guard.clear_ready();
        Ok(())
    }

    /// Queues `buf` for the connected socket once the window has room, awaiting completions
    /// while it is full (see [`crate::uring::UringSender::send`]); the buffer comes back with
    /// its completion.
    ///
    /// Cancellation: dropped while awaiting room, the future drops `buf` unsent; once queued, the
    /// buffer is the sender's until it comes back.
    ///
    /// # Errors
    /// [`SendError`] with the buffer, when the ring fails.
    pub async fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        loop {
            let room = self
                .inner_mut()
                .reap()
                .map(|_| self.inner().in_flight() < self.inner().window());
            match room {
                Ok(true) => return self.inner_mut().send(buf),
                Ok(false) => {}
                Err(error) => {
                    return Err(SendError {
                        error,
                        sent: 0,
                        buf,
                    });
                }
            }
            if let Err(error) = self.completion().await {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        }
    }

    /// The next buffer back, awaiting its completion; `Ok(None)` when nothing is in flight.
    ///
    /// Cancellation: nothing is lost.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub async fn wait_returned(&mut self) -> io::Result<Option<Returned<B>>> {
        loop {
            if let Some(r) = self.inner_mut().pop_returned() {
                return Ok(Some(r));
            }
            self.inner_mut().reap()?;
            if let Some(r) = self.inner_mut().pop_returned() {
                return Ok(Some(r));
            }
            if self.inner().in_flight() == 0 {
                return Ok(None);
            }
            self.completion().await?;
        }
    }

    /// Sends buffers again as they come back, without handing them out, as the synchronous
    /// [`crate::uring::UringSender::resend_returned`] does (issue 63): awaits the first buffer
    /// back while any is loaned, offers `again` each that came back whole (a batch at most,
    /// those already back first), and submits those it keeps; returns how many went again
    /// (0 when `again` declined them all, or nothing is loaned and nothing was back).
    ///
    /// Cancellation: nothing is lost; a buffer `again` kept is queued before the call returns
    /// or is dropped, and what came back meanwhile is kept.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub async fn resend_returned(
        &mut self,
        mut again: impl FnMut(&mut B) -> bool,
    ) -> io::Result<usize> {
        loop {
            // Once `again` was asked about a buffer, this call is over: a declined buffer is
            // not asked about again in the same call.
            let mut asked = false;
            let n = self
                .inner_mut()
                .resend_returned(std::time::Duration::ZERO, |b| {
                    asked = true;
                    again(b)
                })?;
            if asked || self.inner().in_flight() == 0 {
                return Ok(n);
            }
            self.completion().await?;
        }
    }

    /// Submits everything and awaits every buffer back (then in [`returned`](Self::returned)).
    ///
    /// Cancellation: nothing is lost; what completed meanwhile is kept.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub async fn drain(&mut self) -> io::Result<()> {
        loop {
            self.inner_mut().reap()?;
            if self.inner().in_flight() == 0 {
                return Ok(());
            }
            self.completion().await?;
        }
    }

    /// Ends the sender after awaiting its loans for at most `timeout` (a tokio timer: the
    /// runtime needs its time driver): the buffers back and not taken, and how many the kernel
    /// still held (left to it, never freed: [`crate::loan::leaked_buffers`]). A drop never
    /// waits on a runtime's thread; this is the way to wait, and to learn what was left.
    pub async fn close(mut self, timeout: std::time::Duration) -> crate::loan::Closed<B> {
        let _ = ::tokio::time::timeout(timeout, self.drain()).await;
        let inner = self.inner.take().expect("a live sender");
        inner.close(std::time::Duration::ZERO)
    }
}

impl<S: ExclusiveSocket + 'static> UringSender<S, PoolBuf> {
    /// A sender whose buffers come from `pool`, registered with the ring in
    /// [`Mode::ZeroCopyFixed`] (and in [`Mode::Auto`] where `RLIMIT_MEMLOCK` allows).
    ///
    /// # Errors
    /// As [`crate::uring::UringSender::with_pool`], and as [`new`](Self::new).
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn with_pool(socket: S, config: Config, pool: &Pool) -> Result<Self, UringError> {
        with_eventfd(sync::UringSender::with_pool(
            socket,
            async_setup(config),
            pool,
        )?)
    }
}

/// A drop never waits: what the kernel still holds goes, with the ring, to the crate's reaper
/// thread, which frees each buffer as its notification comes (`crate::loan::leaked_buffers`
/// counts only what is still loaned after [`crate::loan::ORPHAN_WAIT`]). The ring of an async
/// sender has no single issuer, so that thread may drive it.
impl<S: ExclusiveSocket + 'static, B: OwnedBuf> Drop for UringSender<S, B> {
    fn drop(&mut self) {
        if let Some(mut inner) = self.inner.take() {
            let _ = inner.reap();
            if inner.in_flight() > 0 {
                crate::loan::orphans::adopt_waiting(Box::new(inner));
            }
        }
    }
}
