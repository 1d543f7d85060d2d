//! io_uring zero-copy sends: `IORING_OP_SEND_ZC` (Linux 6.0) and `IORING_OP_SENDMSG_ZC` (6.1).
//!
//! A zero-copy request produces two completions: the result (bytes sent or `-errno`, with
//! `IORING_CQE_F_MORE` when a notification follows) and the notification
//! (`IORING_CQE_F_NOTIF`), after which the kernel no longer reads the buffer. [`UringSender`]
//! owns each buffer from submission until both have arrived, in either order, and follows
//! `F_MORE` rather than the result: a failed request can still be notified. Every request sets
//! `IORING_SEND_ZC_REPORT_USAGE` (6.2; retried without it on older kernels), so each returned
//! buffer says whether the kernel copied it after all (`IORING_NOTIF_USAGE_ZC_COPIED`).
//!
//! Requests stay in flight in a window and are submitted in batches; the sender waits only when
//! the window is full, and then for whatever completes, never once per notification.
//!
//! On a stream socket the peer gets the bytes of [`UringSender::send`] calls in call order,
//! whatever the kernel does (io_uring itself does not order requests on one socket): a batch
//! goes to the kernel as one chain of linked requests (`IOSQE_IO_LINK`), the next batch once
//! every result of this one is in, and a request the kernel cut short or cancelled is sent again
//! before anything after it. After a send fails for good (the peer reset the connection), every
//! later buffer comes back unsent with an error that says so: bytes after a gap would corrupt the
//! stream. Datagram sockets keep every request independent.
//!
//! With [`Mode::ZeroCopyFixed`] the buffers come from a [`Pool`] registered with the ring
//! (`IORING_REGISTER_BUFFERS`, `IORING_RECVSEND_FIXED_BUF`): the kernel pins the pool's pages
//! once instead of on every send. Registration counts against `RLIMIT_MEMLOCK` unless the caller
//! has `CAP_IPC_LOCK`; the need is checked before registering.
//!
//! [`Mode::Copy`] sends with `IORING_OP_SEND` / `IORING_OP_SENDMSG` through the same API, for
//! A/B comparisons and as the fallback where `SEND_ZC` is missing.
//!
//! # Example
//! ```no_run
//! use std::net::UdpSocket;
//! use zcnet::uring::{Config, Mode, UringSender};
//!
//! let sock = UdpSocket::bind("127.0.0.1:0")?;
//! sock.connect("127.0.0.1:9")?;
//! let mut tx = UringSender::new(sock, Config { mode: Mode::ZeroCopy, ..Config::default() })?;
//! if let Some(why) = tx.fallback_reason() {
//!     eprintln!("io_uring: {why}");
//! }
//! tx.send(vec![7u8; 64000]).map_err(|e| e.error)?;
//! tx.drain(std::time::Duration::from_secs(1))?;
//! for r in tx.returned() {
//!     println!("{} bytes, copied: {:?}, error: {:?}", r.sent, r.copied, r.error);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # References
//! - `io_uring_prep_send_zc(3)`, `io_uring_prep_sendmsg_zc(3)`, `io_uring_register_buffers(3)`
//!   (liburing)
//! - the kernel's `io_uring/net.c` and `Documentation/networking/msg_zerocopy.rst`

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::support::TIMEOUT;

use crate::auto::{Choice, Decider, SendPath};
use crate::support::{Check, CheckId, Probe, Status, loopback};
use crate::sys::{self, abi, uring::SendRing};
use std::net::UdpSocket;
use std::sync::OnceLock;

use crate::loan::Claim;
pub use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
use crate::sys::uring::{Finish, Finished, SendOp};
mod pool;

pub use pool::{Pool, PoolBuf};

/// How a [`UringSender`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// `IORING_OP_SEND` / `SENDMSG`: the kernel copies; the buffer comes back at the result.
    #[doc(alias("IORING_OP_SEND", "IORING_OP_SENDMSG"))]
    Copy,
    /// `IORING_OP_SEND_ZC` / `SENDMSG_ZC`: the buffer comes back at the notification. Where the
    /// kernel lacks them, sends by copy and says why ([`UringSender::fallback_reason`]).
    #[doc(alias("IORING_OP_SEND_ZC", "IORING_OP_SENDMSG_ZC"))]
    ZeroCopy,
    /// `SEND_ZC` with `IORING_RECVSEND_FIXED_BUF`: buffers of a registered [`Pool`].
    #[doc(alias("IORING_RECVSEND_FIXED_BUF", "IORING_REGISTER_BUFFERS"))]
    ZeroCopyFixed,
    /// Zero copy where it pays, learned on this sender's own traffic ([`crate::auto`]): per
    /// size class `SEND_ZC` or `SEND`, starting from the profile's threshold for this socket's
    /// route and moving to what the sending thread's CPU per byte says; after a notification
    /// flagged "copied", by copy for [`crate::auto::BACKOFF_SENDS`] sends (doubling while they
    /// keep saying so), then zero copy again. With [`UringSender::with_pool`] the pool is
    /// registered where `RLIMIT_MEMLOCK` allows and the zero-copy sends use it (the
    /// `uring_zc_fixed` threshold). [`UringSender::auto_choice`] says where it started and what
    /// it learned; `counters().auto` counts each way, the exploring and the back-offs.
    Auto,
}

impl Mode {
    /// `copy`, `zc`, `zc-fixed`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::ZeroCopy => "zc",
            Mode::ZeroCopyFixed => "zc-fixed",
            Mode::Auto => "auto",
        }
    }
}

/// How the ring is set up, as liburing's examples (`send-zerocopy.c`) set it: each item is
/// tried and dropped where the kernel refuses it; [`UringSender::setup`] says what was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RingSetup {
    /// `IORING_SETUP_COOP_TASKRUN` (Linux 5.19): completions run at the next kernel entry
    /// instead of interrupting the task. Default on.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SINGLE_ISSUER` (6.0): one thread submits, the kernel skips the locking for
    /// others. The first thread that sends becomes that thread (the ring is created disabled and
    /// enabled then); sending from another thread afterwards fails with `EEXIST`. Default off:
    /// a sender that moves between threads (a work-stealing runtime) must not set it.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (6.1), only with `single_issuer`: the kernel runs the work
    /// that posts completions (every `SEND_ZC` notification) when the sending thread next
    /// submits or waits, in one batch, instead of as task work at any kernel entry. Measured
    /// into the sink (8000 and 64000 B, 2 × 5 alternating runs each way beside the kernel's
    /// `io_uring_zerocopy_tx`): 0.4-1.5 % less CPU per byte in zc and zc-fixed. Completions
    /// then show only after the sender enters the kernel (`reap`, `flush`, a send that submits
    /// a batch, `drain`): a ring fd or eventfd polled by another thread does not see them
    /// before. Default off.
    pub defer_taskrun: bool,
    /// `IORING_REGISTER_RING_FDS` (5.18): `io_uring_enter` takes the ring's registered index,
    /// skipping the file lookup. The index belongs to the thread that sends first; default
    /// off for the same reason as `single_issuer`. That thread's io_uring context holds the
    /// ring: a sender dropped on it unregisters the index and the ring goes; dropped on
    /// another thread, the ring, its locked memory and its socket stay until that thread ends.
    pub registered_ring_fd: bool,
    /// `IORING_REGISTER_FILES` (5.1): the socket is fixed file 0 and requests skip its lookup.
    /// Default on.
    pub registered_file: bool,
}

impl Default for RingSetup {
    fn default() -> RingSetup {
        RingSetup {
            coop_taskrun: true,
            single_issuer: false,
            defer_taskrun: false,
            registered_ring_fd: false,
            registered_file: true,
        }
    }
}

impl RingSetup {
    fn raw(self) -> sys::uring::Setup {
        sys::uring::Setup {
            coop_taskrun: self.coop_taskrun,
            single_issuer: self.single_issuer,
            defer_taskrun: self.defer_taskrun,
            registered_ring_fd: self.registered_ring_fd,
            registered_file: self.registered_file,
        }
    }

    fn from_raw(s: sys::uring::Setup) -> RingSetup {
        RingSetup {
            coop_taskrun: s.coop_taskrun,
            single_issuer: s.single_issuer,
            defer_taskrun: s.defer_taskrun,
            registered_ring_fd: s.registered_ring_fd,
            registered_file: s.registered_file,
        }
    }

    /// Everything liburing's examples set: for a sender that stays on one thread.
    pub const ONE_THREAD: RingSetup = RingSetup {
        coop_taskrun: true,
        single_issuer: true,
        defer_taskrun: true,
        registered_ring_fd: true,
        registered_file: true,
    };
}

/// Settings of a [`UringSender`].
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The mode asked for; [`UringSender::mode`] says what is used.
    pub mode: Mode,
    /// Submission queue entries (completion queue: twice as many).
    pub entries: u32,
    /// Requests in flight at most (result or notification outstanding); at most `entries`.
    pub window: usize,
    /// Requests queued before one `io_uring_enter` submits them.
    pub batch: usize,
    /// How long a send waits for room in the window before failing with `TimedOut`.
    pub stall_timeout: Duration,
    /// The ring's set-up flags and registrations.
    pub setup: RingSetup,
    /// UDP only: send each buffer as a GSO train of datagrams of this size
    /// ([`crate::udp_gso`], `UDP_SEGMENT` set on the socket, Linux 4.18), the last one shorter;
    /// a buffer of more than [`crate::udp_gso::MAX_SEGMENTS`] segments is refused before the
    /// kernel sees it. `SEND_ZC` with registered buffers sends a train as it sends a datagram.
    /// `None` (default): the socket's `UDP_SEGMENT` is left as it is (0, one datagram per
    /// buffer, unless the caller set it).
    pub segment: Option<crate::udp_gso::Segment>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::ZeroCopy,
            entries: 256,
            window: 128,
            batch: 16,
            stall_timeout: Duration::from_secs(10),
            setup: RingSetup::default(),
            segment: None,
        }
    }
}

/// Errors of setting up a [`UringSender`].
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// The descriptor is not a socket this sender can take (not a socket: `ENOTSOCK`; not UDP
    /// for GSO trains: `EOPNOTSUPP`).
    #[error("{what}")]
    Socket {
        /// What is wrong with it.
        what: &'static str,
        /// The kernel's error, or the one that says so.
        #[source]
        source: io::Error,
    },
    /// io_uring cannot be used here: `io_uring_setup` failed (no io_uring,
    /// `kernel.io_uring_disabled`, seccomp, ...).
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// `io_uring`.
        feature: &'static str,
        /// The kernel's error and what would enable it.
        reason: String,
    },
    /// `io_uring_setup` had no memory for the ring (`ENOMEM`): without `CAP_IPC_LOCK` the
    /// ring's own pages count against `RLIMIT_MEMLOCK`.
    #[error("io_uring_setup could not allocate the ring: {reason}")]
    RingMemory {
        /// The limit, and what would allow it.
        reason: String,
        /// The kernel's error (`ENOMEM`).
        #[source]
        source: io::Error,
    },
    /// Registering the pool would exceed `RLIMIT_MEMLOCK`.
    #[error(
        "registering {need} bytes of send buffers needs RLIMIT_MEMLOCK >= {need} bytes, but the \
         limit is {limit} bytes: raise it (`ulimit -l {need_kib}`, limits.conf) or run with \
         CAP_IPC_LOCK"
    )]
    Memlock {
        /// Bytes the registration pins.
        need: u64,
        /// `need` in KiB, as `ulimit -l` takes it.
        need_kib: u64,
        /// The soft limit.
        limit: u64,
    },
    /// A call failed (the buffer registration, with the bytes it would have pinned).
    #[error("{call} of {bytes} bytes failed")]
    Io {
        /// The call.
        call: &'static str,
        /// Bytes registered.
        bytes: usize,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Setting up the completion eventfd of the async sender (`zcnet::tokio::UringSender`)
    /// failed: `eventfd`, its registration with the ring or with the reactor.
    #[error("{call} failed")]
    Eventfd {
        /// The call.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Another sender of this process holds the same socket (through another descriptor of it):
    /// two senders on one stream would mix their bytes.
    #[error("this socket is not this sender's alone: {reason}")]
    SocketInUse {
        /// What holds it.
        reason: &'static str,
    },
    /// `fstat` of the socket failed.
    #[error("fstat of the socket failed")]
    Fstat(#[source] io::Error),
    /// [`Mode::ZeroCopyFixed`] without a pool.
    #[error("zc-fixed sends need a registered pool: build the sender with UringSender::with_pool")]
    NoPool,
    /// The window does not fit the ring.
    #[error("window {window} must be between 1 and the ring's {entries} entries")]
    Window {
        /// The window asked for.
        window: usize,
        /// The ring's entries.
        entries: u32,
    },
}

/// What a [`UringSender`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Requests queued.
    pub requests: u64,
    /// Of those, with a zero-copy opcode.
    pub zero_copy_requests: u64,
    /// Of those, with a registered buffer.
    pub fixed_requests: u64,
    /// Buffers returned.
    pub returned: u64,
    /// Bytes the kernel accepted, over returned buffers.
    pub bytes: u64,
    /// Returned zero-copy buffers whose notification said "copied".
    pub copied: u64,
    /// Returned zero-copy buffers whose notification said "not copied".
    pub not_copied: u64,
    /// Bytes of the `not_copied` buffers.
    pub not_copied_bytes: u64,
    /// Returned buffers whose request failed.
    pub errors: u64,
    /// `io_uring_enter` calls that waited for room in the window.
    pub window_waits: u64,
    /// Zero-copy requests the kernel refused to pin (`ENOMEM`/`ENOBUFS`: `RLIMIT_MEMLOCK`, which
    /// counts the pages a zero-copy send pins) and that were sent again by copy.
    pub memlock_fallbacks: u64,
    /// Times a wait for completions ([`UringSender::drain`], a full window) stalled and ran every CPU's deferred frees
    /// ([`crate::loan::kick_deferred_frees`]).
    pub deferred_kicks: u64,
    /// [`Mode::Auto`]: the sends each way and why (zeros in the other modes).
    pub auto: crate::auto::AutoCounters,
}

impl crate::ZeroCopyCounters for Counters {
    /// Bytes of buffers whose notification said "not copied" (none in copy mode or without
    /// usage reports, Linux 6.2).
    fn zero_copy_bytes(&self) -> u64 {
        self.not_copied_bytes
    }
    /// Every other byte the kernel accepted.
    fn copied_bytes(&self) -> u64 {
        self.bytes - self.not_copied_bytes
    }
    /// Zero-copy requests sent again by copy for want of locked memory.
    fn fallbacks(&self) -> u64 {
        self.memlock_fallbacks
    }
}

/// Sends owned buffers on a socket through io_uring and gives each back after the kernel is done
/// with it (see the module docs).
///
/// The socket is the sender's alone ([`ExclusiveSocket`]: owned, not borrowed): a second
/// sender on a stream would put its bytes between this one's.
///
/// ```compile_fail,E0277
/// use zcnet::uring::{Config, UringSender};
/// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// let tx: UringSender<_, Vec<u8>> = UringSender::new(&socket, Config::default()).unwrap();
/// ```
#[doc(alias("IORING_OP_SEND_ZC", "IORING_OP_SENDMSG_ZC", "io_uring_prep_send_zc"))]
pub struct UringSender<S: ExclusiveSocket, B: OwnedBuf> {
    ring: SendRing<B>,
    socket: S,
    config: Config,
    mode: Mode,
    fallback: Option<String>,
    stream: bool,
    queued: usize,
    returned: VecDeque<Returned<B>>,
    counters: Counters,
    /// Zero-copy sends use the registered pool.
    fixed: bool,
    /// [`Mode::Auto`]'s decisions.
    auto: Option<Decider>,
    /// When a stalled wait for completions kicks the kernel's deferred frees.
    kick: crate::loan::DeferredKick,
    /// The socket's place among the sockets senders of this process hold.
    _claim: Claim,
    /// [`UringSender::close`] waited already: the drop does not.
    closed: bool,
}

impl<S: ExclusiveSocket, B: OwnedBuf> UringSender<S, B> {
    /// A sender on `socket` (connected for [`UringSender::send`]; any for
    /// [`UringSender::send_to`]). Zero-copy modes fall back to copying, with
    /// [`UringSender::fallback_reason`] saying why, where the kernel lacks `SEND_ZC`. Where
    /// `RLIMIT_MEMLOCK` refuses the ring within a second of this process closing another, it
    /// blocks until the kernel has freed that one (some milliseconds), at most that second.
    ///
    /// # Errors
    /// [`UringError::NoPool`] for [`Mode::ZeroCopyFixed`] (use [`UringSender::with_pool`]),
    /// [`UringError::Unsupported`], [`UringError::Window`], [`UringError::SocketInUse`] when
    /// another sender of this process holds the socket through another descriptor of it.
    pub fn new(socket: S, config: Config) -> Result<Self, NewError<S, UringError>> {
        if config.mode == Mode::ZeroCopyFixed {
            return Err(NewError {
                error: UringError::NoPool,
                socket,
            });
        }
        Self::build(socket, config, None)
    }

    /// Everything that can fail first, the socket changed last (`UDP_SEGMENT`), the sender made
    /// when nothing can fail any more: a refusal hands the socket back as it was given.
    fn build(
        socket: S,
        config: Config,
        pool: Option<&Pool>,
    ) -> Result<Self, NewError<S, UringError>> {
        macro_rules! refuse {
            ($e:expr) => {
                return Err(NewError { error: $e, socket })
            };
        }
        if config.window == 0 || config.window > config.entries as usize {
            refuse!(UringError::Window {
                window: config.window,
                entries: config.entries,
            });
        }
        if let Err(e) = check_socket(socket.as_fd(), config.segment.is_some()) {
            refuse!(e);
        }
        let claim = match Claim::take(socket.as_fd()) {
            Ok(c) => c,
            Err(None) => refuse!(UringError::SocketInUse {
                reason: crate::loan::IN_USE,
            }),
            Err(Some(e)) => refuse!(UringError::Fstat(e)),
        };
        let mut ring = match open_ring(config.entries, config.setup) {
            Ok(r) => r,
            Err(e) => refuse!(e),
        };
        ring.register_file(socket.as_fd());
        let ty = sys::sockopt::socket_type(socket.as_fd()).unwrap_or(0);
        let (mode, fallback) = match config.mode {
            Mode::Copy => (Mode::Copy, None),
            m => match ring.probe() {
                Ok(ops) if ops.send_zc && ops.sendmsg_zc => (m, None),
                Ok(ops) if ops.send_zc => (
                    m,
                    Some("IORING_OP_SENDMSG_ZC is missing (Linux 6.1): send_to copies".to_owned()),
                ),
                Ok(_) => (
                    Mode::Copy,
                    Some(
                        "IORING_OP_SEND_ZC is missing (needs Linux 6.0): sending by copy \
                         (IORING_OP_SEND)"
                            .to_owned(),
                    ),
                ),
                Err(e) => (
                    Mode::Copy,
                    Some(format!(
                        "IORING_REGISTER_PROBE failed ({e}; needs Linux 5.6): sending by copy"
                    )),
                ),
            },
        };
        let mut auto = (mode == Mode::Auto).then(|| {
            Decider::new(Choice::for_socket(
                SendPath::UringZc,
                &socket,
                config.segment,
            ))
        });
        let mut fixed = mode == Mode::ZeroCopyFixed;
        if let Some(pool) = pool {
            // Auto registers the pool where the limit allows, and sends from it by zero copy.
            if mode == Mode::Auto
                && memlock_check(pool.region_len() as u64).is_ok()
                && ring.register(&pool.0).is_ok()
            {
                fixed = true;
                // The route and its device as found above, for the registered path.
                auto = auto.map(|d| Decider::new(d.choice().for_path(SendPath::UringZcFixed)));
            }
            if mode == Mode::ZeroCopyFixed {
                let registered = memlock_check(pool.region_len() as u64).and_then(|()| {
                    ring.register(&pool.0)
                        .map_err(|source| match source.raw_os_error() {
                            Some(libc::ENOMEM) => memlock_check_failed(pool.region_len() as u64),
                            _ => UringError::Io {
                                call: "io_uring_register(IORING_REGISTER_BUFFERS)",
                                bytes: pool.region_len(),
                                source,
                            },
                        })
                });
                if let Err(e) = registered {
                    refuse!(e);
                }
            }
        }
        let stream = ty == libc::SOCK_STREAM;
        if stream {
            ring.keep_order();
        }
        // The only change to the socket, and the last step that can fail: a sender refused
        // earlier (no io_uring, say) leaves the caller's socket sending single datagrams as
        // before.
        if let Some(segment) = config.segment
            && let Err(e) = crate::udp_gso::set_segment(&socket, Some(segment))
        {
            refuse!(UringError::Unsupported {
                feature: "UDP_SEGMENT",
                reason: e.reason(),
            });
        }
        Ok(UringSender {
            fixed,
            auto,
            ring,
            socket,
            config,
            mode,
            fallback,
            stream,
            queued: 0,
            closed: false,
            returned: VecDeque::new(),
            counters: Counters::default(),
            kick: crate::loan::DeferredKick::default(),
            _claim: claim,
        })
    }

    /// The mode in use (the configured one, or [`Mode::Copy`] after a fallback).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Why the sender copies where zero-copy was asked for (one line), if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// In [`Mode::Auto`]: the path, route and prior threshold, the profile they came from, and
    /// what each size class learned (built when asked: keep it off the path of every send).
    pub fn auto_choice(&self) -> Option<Choice> {
        self.auto.as_ref().map(Decider::choice)
    }

    /// Signals `fd`, an eventfd, at every completion (`IORING_REGISTER_EVENTFD`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn register_eventfd(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ring.register_eventfd(fd)
    }

    /// Requests in flight at most.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn window(&self) -> usize {
        self.config.window
    }

    /// The oldest buffer given back and not yet taken.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn pop_returned(&mut self) -> Option<Returned<B>> {
        self.returned.pop_front()
    }

    /// The ring set-up the kernel granted (the registered ring fd from the first submission).
    pub fn setup(&self) -> RingSetup {
        RingSetup::from_raw(self.ring.setup())
    }

    /// Whether this buffer goes by zero copy (the mode, or auto's decision).
    ///
    /// # Errors
    /// A train of more segments than the kernel takes ([`Config::segment`]).
    /// At an edge of a learning round a pair uses, what is queued goes to the kernel and what
    /// completed is taken first, so that their cost counts in the round that chose their way:
    /// that submission's error.
    fn zero_copy(&mut self, buf: &B) -> io::Result<bool> {
        let len = buf.bytes().len();
        if let Some(segment) = self.config.segment {
            segment.check_train(len)?;
        }
        if self.mode == Mode::Auto && self.auto.as_ref().is_some_and(|d| d.edge_is_measured(len)) {
            self.reap()?;
        }
        Ok(match (self.mode, &mut self.auto) {
            (Mode::Copy, _) => false,
            (Mode::Auto, Some(d)) => d.zero_copy(len),
            _ => true,
        })
    }

    /// Whether the kernel refused `IORING_SEND_ZC_REPORT_USAGE` (before Linux 6.2), leaving
    /// `copied` unknown.
    pub fn usage_unknown(&self) -> bool {
        self.ring.usage_refused()
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// What was done so far.
    pub fn counters(&self) -> Counters {
        Counters {
            auto: self.auto.as_ref().map(|d| d.counters).unwrap_or_default(),
            ..self.counters
        }
    }

    /// Requests whose buffers are still held.
    pub fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    /// Buffers given back since the last call, in completion order.
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.returned.drain(..)
    }

    /// Queues `buf` for the connected socket (`SEND_ZC`, or `SEND` in copy mode); queued
    /// requests go to the kernel a batch at a time, and all of them at [`UringSender::flush`],
    /// [`UringSender::reap`] or [`UringSender::drain`]. Stream sends
    /// carry `MSG_WAITALL`, so the kernel sends all or fails; a short result is sent on.
    ///
    /// # Errors
    /// The buffer comes back if it could not be queued: the window stayed full for
    /// `stall_timeout`, or the ring failed.
    #[inline]
    pub fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
        let zc = match self.zero_copy(&buf) {
            Ok(zc) => zc,
            Err(error) => {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        };
        let op = if zc { SendOp::SendZc } else { SendOp::Send };
        self.queue(buf, op, None, zc && self.fixed)
    }

    /// Sends `buf` to `dest` (`SENDMSG_ZC`, or `SENDMSG` in copy mode), for unconnected
    /// datagram sockets.
    ///
    /// # Errors
    /// As [`UringSender::send`].
    pub fn send_to(&mut self, buf: B, dest: SocketAddr) -> Result<(), SendError<B>> {
        let op = match self.zero_copy(&buf) {
            Ok(true) => SendOp::SendMsgZc,
            Ok(false) => SendOp::SendMsg,
            Err(error) => {
                return Err(SendError {
                    error,
                    sent: 0,
                    buf,
                });
            }
        };
        self.queue(buf, op, Some(dest), false)
    }

    #[inline]
    fn queue(
        &mut self,
        buf: B,
        op: SendOp,
        dest: Option<SocketAddr>,
        fixed: bool,
    ) -> Result<(), SendError<B>> {
        // A full batch goes to the kernel before this buffer joins the queue, so that a failed
        // submission can still hand this buffer back.
        let ready = if self.queued >= self.config.batch {
            self.flush()
        } else {
            Ok(())
        };
        if let Err(error) = ready.and_then(|()| self.make_room()) {
            return Err(SendError {
                error,
                sent: 0,
                buf,
            });
        }
        let req = sys::uring::SendRequest {
            op,
            fixed,
            dest,
            flags: if self.stream { libc::MSG_WAITALL } else { 0 },
            report_usage: true,
        };
        self.ring
            .push(self.socket.as_fd(), buf, req)
            .map_err(|(buf, error)| SendError {
                error,
                sent: 0,
                buf,
            })?;
        self.counters.requests += 1;
        self.counters.zero_copy_requests += u64::from(op != SendOp::Send && op != SendOp::SendMsg);
        self.counters.fixed_requests += u64::from(fixed);
        self.queued += 1;
        Ok(())
    }

    /// Waits until the window has room, reaping as completions come.
    fn make_room(&mut self) -> io::Result<()> {
        if self.ring.in_flight() < self.config.window {
            return Ok(());
        }
        // What completed during the last submission is in the ring already: taking it needs no
        // system call (the requests queued since go with the next batch).
        self.collect()?;
        if self.ring.in_flight() < self.config.window {
            return Ok(());
        }
        self.reap()?;
        let deadline = Instant::now() + self.config.stall_timeout;
        while self.ring.in_flight() >= self.config.window {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} io_uring sends still in flight after {:?}",
                        self.ring.in_flight(),
                        self.config.stall_timeout
                    ),
                ));
            }
            self.counters.window_waits += 1;
            self.queued = 0;
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        Ok(())
    }

    /// Submits what is queued.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn flush(&mut self) -> io::Result<()> {
        self.queued = 0;
        self.ring.submit().map(drop)
    }

    /// Submits what is queued and collects what completed, without waiting; returns how many
    /// buffers came back. Call it when the ring or socket is readable, or now and then.
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn reap(&mut self) -> io::Result<usize> {
        self.flush()?;
        self.collect()
    }

    fn collect(&mut self) -> io::Result<usize> {
        let before = self.counters.returned;
        let mut back = Collect {
            counters: &mut self.counters,
            auto: &mut self.auto,
            returned: &mut self.returned,
        };
        self.ring.complete(&mut back)?;
        Ok((self.counters.returned - before) as usize)
    }

    /// Ends the sender: submits what is queued, waits up to `timeout` for what the kernel still
    /// holds, and returns every buffer that came back and was not taken, with how many the
    /// kernel still held at the end (left to it, never freed: [`crate::loan::leaked_buffers`]).
    /// Unlike a drop, it waits as long as asked and says what it left.
    pub fn close(mut self, timeout: Duration) -> Closed<B> {
        let _ = self.drain(timeout);
        let returned = self.returned.drain(..).collect();
        let still_loaned = self.ring.in_flight();
        // The drop that follows waits no more: nothing it could wait for came in `timeout`.
        self.closed = true;
        Closed {
            returned,
            still_loaned,
        }
    }

    /// Submits what is queued, then waits up to `timeout` for a loaned buffer to come back and
    /// returns the oldest one that has (at once when one already has): what a fixed pool
    /// recycles with. `Ok(None)` when none came in time, or when nothing is loaned (none will).
    ///
    /// # Errors
    /// `io_uring_enter`'s error.
    pub fn wait_returned(&mut self, timeout: Duration) -> io::Result<Option<Returned<B>>> {
        let deadline = Instant::now() + timeout;
        self.reap()?;
        loop {
            if let Some(r) = self.returned.pop_front() {
                return Ok(Some(r));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if self.ring.in_flight() == 0 || left.is_zero() {
                return Ok(None);
            }
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
    }

    /// Submits everything and waits until every buffer is back, at most `timeout`. When none
    /// comes back for 100 ms it runs every CPU's deferred frees, at most once a second
    /// ([`crate::loan::kick_deferred_frees`], counted in `deferred_kicks`): a `SEND_ZC`
    /// notification waits for the free of what a receiver on this host read on another CPU.
    ///
    /// # Errors
    /// `TimedOut` naming how many are still loaned to the kernel, or `io_uring_enter`'s error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        self.reap()?;
        while self.ring.in_flight() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} buffers still loaned to the kernel by io_uring",
                        self.ring.in_flight()
                    ),
                ));
            }
            self.ring.wait(left.min(crate::loan::DeferredKick::STALL))?;
            self.collect()?;
            if self.kick.kick_if_stalled(self.counters.returned) {
                self.counters.deferred_kicks += 1;
            }
        }
        Ok(())
    }
}

/// What a sender does with each buffer the ring hands back: counts it, tells the decider what
/// its notification said, and queues it for [`UringSender::returned`].
struct Collect<'a, B> {
    counters: &'a mut Counters,
    auto: &'a mut Option<Decider>,
    returned: &'a mut VecDeque<Returned<B>>,
}

impl<B> Finish<B> for Collect<'_, B> {
    #[inline(always)]
    fn finish(&mut self, f: Finished<B>) {
        let c = &mut *self.counters;
        c.returned += 1;
        c.bytes += f.sent as u64;
        c.errors += u64::from(f.error.is_some());
        c.memlock_fallbacks += u64::from(f.memlock_fallback);
        match f.copied {
            Some(true) => {
                c.copied += 1;
                if let Some(d) = self.auto {
                    d.copied();
                }
            }
            Some(false) => {
                c.not_copied += 1;
                c.not_copied_bytes += f.sent as u64;
                if let Some(d) = self.auto {
                    d.not_copied();
                }
            }
            None => {}
        }
        self.returned.push_back(Returned {
            buf: f.buf,
            sent: f.sent,
            error: f.error,
            zero_copy: f.zero_copy,
            copied: f.copied,
        });
    }
}

impl<S: ExclusiveSocket> UringSender<S, PoolBuf> {
    /// A sender whose buffers come from `pool`; in [`Mode::ZeroCopyFixed`] the pool is registered with
    /// the ring first.
    ///
    /// # Errors
    /// [`UringError::Memlock`] when the registration would exceed `RLIMIT_MEMLOCK` (checked
    /// before trying; root has `CAP_IPC_LOCK` and is exempt), [`UringError::Io`] when the
    /// kernel refuses it, and the errors of [`UringSender::new`].
    pub fn with_pool(
        socket: S,
        config: Config,
        pool: &Pool,
    ) -> Result<Self, NewError<S, UringError>> {
        Self::build(socket, config, Some(pool))
    }
}

/// How long after this process closed a ring the kernel may still count the ring's pages as
/// locked memory: it frees a closed ring in a worker, once its last requests are done.
const RING_TEARDOWN: Duration = Duration::from_secs(1);

/// `io_uring_setup(2)` for a sender. Under a tight `RLIMIT_MEMLOCK` the pages of a ring this
/// process has just closed may still be counted (the kernel frees it later, in a worker): an
/// `ENOMEM` within [`RING_TEARDOWN`] of a close is tried again until then, so that a program
/// that replaces one ring by another (a bench run after run) is not refused at random.
fn open_ring<B: OwnedBuf>(entries: u32, setup: RingSetup) -> Result<SendRing<B>, UringError> {
    loop {
        match SendRing::new(entries, setup.raw()) {
            Err(e)
                if e.raw_os_error() == Some(libc::ENOMEM)
                    && sys::uring::last_close().is_some_and(|t| t.elapsed() < RING_TEARDOWN) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r.map_err(setup_error),
        }
    }
}

/// The error of an `io_uring_setup(2)` that failed: `ENOMEM` names the memlock limit (the ring's
/// pages count against it without `CAP_IPC_LOCK`), anything else says io_uring is not usable.
fn setup_error(e: io::Error) -> UringError {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        let reason = match (
            sys::process::has_cap_ipc_lock(),
            sys::process::memlock_limit(),
        ) {
            (false, Ok((Some(limit), _))) => format!(
                "its pages count against RLIMIT_MEMLOCK, {limit} bytes here (no CAP_IPC_LOCK): \
                 raise it (`ulimit -l`, limits.conf), run with CAP_IPC_LOCK, or ask for fewer \
                 entries"
            ),
            _ => "the kernel is out of memory for it".to_owned(),
        };
        return UringError::RingMemory { reason, source: e };
    }
    UringError::Unsupported {
        feature: "io_uring",
        reason: format!(
            "io_uring_setup: {e} (io_uring needs Linux 5.6+ and kernel.io_uring_disabled = 0)"
        ),
    }
}

/// Checks that `need` bytes of registered buffers fit under `RLIMIT_MEMLOCK`.
///
/// # Errors
/// [`UringError::Memlock`] with the limit and the `ulimit -l` that would allow it.
pub fn memlock_check(need: u64) -> Result<(), UringError> {
    if sys::process::has_cap_ipc_lock() {
        return Ok(());
    }
    match sys::process::memlock_limit() {
        Ok((Some(limit), _)) if need > limit => Err(UringError::Memlock {
            need,
            need_kib: need.div_ceil(1024),
            limit,
        }),
        _ => Ok(()),
    }
}

/// The kernel said ENOMEM although the up-front check passed (memory already locked by this
/// user elsewhere counts too): the same message, with the limit as it stands.
fn memlock_check_failed(need: u64) -> UringError {
    let limit = sys::process::memlock_limit()
        .ok()
        .and_then(|l| l.0)
        .unwrap_or(0);
    UringError::Memlock {
        need,
        need_kib: need.div_ceil(1024),
        limit,
    }
}

impl<S: ExclusiveSocket, B: OwnedBuf> Drop for UringSender<S, B> {
    fn drop(&mut self) {
        if self.ring.in_flight() == 0 {
            return;
        }
        // At most DROP_WAIT, and not at all on an async runtime's thread (crate::loan's rule)
        // or after `close`, which waited already.
        let wait = crate::loan::drop_wait();
        if !wait.is_zero() && !self.closed {
            let _ = self.drain(wait);
        }
        // What the kernel still holds the ring leaks, not frees: counted.
        crate::loan::note_leaked(self.ring.in_flight());
    }
}

// ---------------------------------------------------------------------------------------------
// Support: this mechanism's own checks, run once per process.

/// What this kernel allows of io_uring zero-copy sends: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `uring.setup`: `io_uring_setup(2)` (5.1), which a sysctl or seccomp can refuse.
    pub setup: Check,
    /// `uring.send_zc`: `IORING_OP_SEND_ZC` (6.0).
    pub send_zc: Check,
    /// `uring.sendmsg_zc`: `IORING_OP_SENDMSG_ZC` (6.1).
    pub sendmsg_zc: Check,
    /// `uring.report_usage`: `IORING_SEND_ZC_REPORT_USAGE` (6.2).
    pub report_usage: Check,
    /// `uring.registered_buffers`: `IORING_REGISTER_BUFFERS` + `IORING_RECVSEND_FIXED_BUF`.
    pub registered_buffers: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![
            self.setup.clone(),
            self.send_zc.clone(),
            self.sendmsg_zc.clone(),
            self.report_usage.clone(),
            self.registered_buffers.clone(),
        ]
    }
}

/// Whether io_uring, `SEND_ZC`, `SENDMSG_ZC`, usage reports and registered buffers work here:
/// the opcode probe, then real sends over loopback UDP; once per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let mut checks = uring_checks();
        let take = |checks: &mut Vec<Check>, id: CheckId| {
            let i = checks
                .iter()
                .position(|c| c.id == id)
                .expect("uring_checks reports every uring check");
            checks.swap_remove(i)
        };
        Support {
            setup: take(&mut checks, CheckId::UringSetup),
            send_zc: take(&mut checks, CheckId::UringSendZc),
            sendmsg_zc: take(&mut checks, CheckId::UringSendmsgZc),
            report_usage: take(&mut checks, CheckId::UringReportUsage),
            registered_buffers: take(&mut checks, CheckId::UringRegisteredBuffers),
        }
    })
}

fn uring_checks() -> Vec<Check> {
    let io_uring_disabled: Option<u32> =
        std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .ok()
            .and_then(|s| s.trim().parse().ok());
    let memlock_soft = sys::process::memlock_limit().map_or(None, |(soft, _)| soft);
    let cap_ipc_lock = sys::process::has_cap_ipc_lock();
    use CheckId::*;
    let mut setup = Probe::new(UringSetup);
    setup.step("io_uring_setup(4)");
    let ring = match sys::uring::setup(4) {
        Ok(r) => r,
        Err(e) => {
            let why = match (e.raw_os_error(), io_uring_disabled) {
                (_, Some(2)) => " (kernel.io_uring_disabled = 2: io_uring is switched off)".to_owned(),
                (Some(libc::EPERM), Some(1)) => {
                    " (kernel.io_uring_disabled = 1: only members of kernel.io_uring_group may use it)".to_owned()
                }
                (Some(libc::ENOSYS), Some(_)) => {
                    " (the kernel has io_uring, so a seccomp filter must be refusing it)".to_owned()
                }
                _ => String::new(),
            };
            let first = setup.failed(
                &format!("io_uring_setup{why}"),
                &e,
                "needs Linux 5.1+ with CONFIG_IO_URING",
            );
            let rest = [
                UringSendZc,
                UringSendmsgZc,
                UringReportUsage,
                UringRegisteredBuffers,
            ]
            .map(|id| Probe::new(id).skipped("io_uring is not usable here (see uring.setup)"));
            return std::iter::once(first).chain(rest).collect();
        }
    };
    let mut out = vec![setup.ok("io_uring_setup works")];

    let mut send_zc = Probe::new(UringSendZc);
    let mut sendmsg_zc = Probe::new(UringSendmsgZc);
    send_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    sendmsg_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    let ops = match sys::uring::probe_opcodes(&ring) {
        Ok(ops) => ops,
        Err(e) => {
            out.push(send_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(sendmsg_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(Probe::new(UringReportUsage).skipped("opcode probe failed"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("opcode probe failed"));
            return out;
        }
    };
    drop(ring);
    out.push(if ops.sendmsg_zc {
        sendmsg_zc.ok("the kernel lists IORING_OP_SENDMSG_ZC as supported")
    } else {
        sendmsg_zc.done(
            Status::Unavailable,
            "IORING_OP_SENDMSG_ZC is not in the opcode probe; needs Linux 6.1+",
            None,
        )
    });
    if !ops.send_zc {
        out.insert(
            1,
            send_zc.done(
                Status::Unavailable,
                "IORING_OP_SEND_ZC is not in the opcode probe; needs Linux 6.0+",
                None,
            ),
        );
        out.push(Probe::new(UringReportUsage).skipped("no IORING_OP_SEND_ZC"));
        out.push(Probe::new(UringRegisteredBuffers).skipped("no IORING_OP_SEND_ZC"));
        return out;
    }

    // A real SEND_ZC over a connected UDP loopback pair, plain and with a registered buffer.
    let pair = UdpSocket::bind(loopback(false)).and_then(|rx| {
        let tx = UdpSocket::bind(loopback(false))?;
        tx.connect(rx.local_addr()?)?;
        Ok((tx, rx))
    });
    let (tx, _rx) = match pair {
        Ok(p) => p,
        Err(e) => {
            out.insert(
                1,
                send_zc.failed("UDP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
            );
            out.push(Probe::new(UringReportUsage).skipped("no UDP loopback"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("no UDP loopback"));
            return out;
        }
    };
    let mut usage = Probe::new(UringReportUsage);
    usage.step("IORING_OP_SEND_ZC with IORING_SEND_ZC_REPORT_USAGE over loopback UDP");
    send_zc.step("IORING_OP_SEND_ZC over loopback UDP");
    match sys::uring::send_zc_once(
        tx.as_fd(),
        1024,
        abi::IORING_SEND_ZC_REPORT_USAGE,
        false,
        TIMEOUT,
    ) {
        Ok(o) if o.result == -libc::EINVAL => {
            out.insert(1, send_zc.ok("the opcode probe lists IORING_OP_SEND_ZC"));
            out.push(usage.done(
                Status::Unavailable,
                "SEND_ZC rejects IORING_SEND_ZC_REPORT_USAGE (EINVAL); needs Linux 6.2+",
                Some("EINVAL"),
            ));
        }
        Ok(o) if o.result < 0 => {
            let e = io::Error::from_raw_os_error(-o.result);
            out.insert(
                1,
                send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
            );
            out.push(Probe::new(UringReportUsage).skipped("SEND_ZC itself failed"));
        }
        Ok(o) => {
            send_zc.detail("more", o.more);
            out.insert(
                1,
                send_zc.ok(format!(
                    "a SEND_ZC request sent {} bytes; result CQE then notification CQE",
                    o.result
                )),
            );
            match o.copied() {
                Some(copied) => {
                    usage.detail("copied", copied);
                    let how = if copied {
                        "copied, as over loopback"
                    } else {
                        "not copied"
                    };
                    out.push(usage.ok(format!("the notification reports usage ({how})")));
                }
                None => out.push(usage.done(
                    Status::Unavailable,
                    "no notification CQE followed the result",
                    None,
                )),
            }
        }
        Err(e) => {
            out.insert(
                1,
                send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
            );
            out.push(Probe::new(UringReportUsage).skipped("SEND_ZC itself failed"));
        }
    }

    let mut fixed = Probe::new(UringRegisteredBuffers);
    fixed.step(
        "IORING_REGISTER_BUFFERS (one page); IORING_OP_SEND_ZC with IORING_RECVSEND_FIXED_BUF",
    );
    fixed.detail("memlock_soft", memlock_soft);
    fixed.detail("memlock_exempt", cap_ipc_lock);
    let limit = match (cap_ipc_lock, memlock_soft) {
        (true, _) => "CAP_IPC_LOCK exempts this process from RLIMIT_MEMLOCK".to_owned(),
        (false, None) => "RLIMIT_MEMLOCK is unlimited".to_owned(),
        (false, Some(n)) => format!(
            "registered buffers may pin up to {} KiB (RLIMIT_MEMLOCK)",
            n / 1024
        ),
    };
    out.push(
        match sys::uring::send_zc_once(tx.as_fd(), sys::mm::page_size(), 0, true, TIMEOUT) {
            Ok(o) if o.result >= 0 => {
                fixed.ok(format!("a registered-buffer SEND_ZC worked; {limit}"))
            }
            Ok(o) => fixed.failed(
                "SEND_ZC(FIXED_BUF)",
                &io::Error::from_raw_os_error(-o.result),
                "needs Linux 6.0+",
            ),
            Err(e) => fixed.failed("IORING_REGISTER_BUFFERS", &e, &limit),
        },
    );
    out
}

impl<S> From<NewError<S, UringError>> for UringError {
    /// The error alone, the socket dropped.
    fn from(e: NewError<S, UringError>) -> UringError {
        e.error
    }
}

/// What a socket must be for a sender: a socket (`ENOTSOCK` otherwise), and UDP where it is to
/// send GSO trains.
fn check_socket(fd: BorrowedFd<'_>, trains: bool) -> Result<(), UringError> {
    let what = "not a UDP socket: GSO trains (Config::segment) are UDP's";
    let checked = match trains {
        true => sys::sockopt::check_protocol(fd, libc::IPPROTO_UDP, what),
        // Any protocol, but a socket.
        false => sys::sockopt::protocol(fd).map(drop),
    };
    checked.map_err(|source| match source.kind() {
        io::ErrorKind::InvalidInput => UringError::Socket {
            what,
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        },
        _ => UringError::Socket {
            what: "getsockopt(SO_PROTOCOL)",
            source,
        },
    })
}
