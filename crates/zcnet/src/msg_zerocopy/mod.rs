//! `MSG_ZEROCOPY` sends (Linux 4.14 TCP, 5.0 UDP): the kernel pins the sender's pages instead of
//! copying them and reports on the socket error queue when they may be reused.
//!
//! [`ZeroCopySender`] takes ownership of each buffer it sends and gives it back with the
//! completion that frees it ([`Returned`]), tracking ids across wrap-around and calls that carry
//! part of a buffer. Small buffers go by copy (below a threshold), `ENOBUFS` falls back to a
//! copying send, and a policy decides what to do when the kernel reports it copied anyway.
//!
//! Two things would let a buffer come back while the kernel still reads it, and the types rule
//! both out: the caller's `send(2)` flags are a [`SendFlags`], which has no `MSG_ZEROCOPY` (the
//! sender decides which calls loan and counts them), and the sender owns its socket, an
//! [`ExclusiveSocket`] (the kernel numbers completions per socket, so a second sender on it
//! would take the first one's).
//!
//! # References
//! - `send(2)`, `socket(7)` (`SO_ZEROCOPY`)
//! - the kernel's `Documentation/networking/msg_zerocopy.rst`

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::auto::{Choice, SendPath};
use crate::errqueue::{self, Completion, Entry};
use crate::loan::Claim;
use crate::support::TIMEOUT;
use crate::support::{Check, CheckId, Probe, Status, loopback, tcp_pair};
use crate::sys::{self, abi};
use std::sync::OnceLock;

mod borrowed;
mod flags;
mod tracker;
pub use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
pub use flags::SendFlags;
pub use tracker::{Freed, Tracker};

/// Errors of enabling or using `MSG_ZEROCOPY`.
#[derive(Debug, thiserror::Error)]
pub enum ZeroCopyError {
    /// The socket is not of a kind this sender can take with its configuration (not UDP for GSO
    /// trains: `EOPNOTSUPP`).
    #[error("{what}")]
    Socket {
        /// What is wrong with it.
        what: &'static str,
        /// The error that says so.
        #[source]
        source: io::Error,
    },
    /// The kernel or this socket type does not support the feature.
    #[error("{feature} is not supported: {reason}")]
    Unsupported {
        /// The missing feature (`SO_ZEROCOPY`, ...).
        feature: &'static str,
        /// Why, as the kernel said it.
        reason: String,
    },
    /// The socket's completions may not be this sender's alone: another sender holds the same
    /// socket (through another descriptor of it: `try_clone`, `dup(2)`), or `SO_ZEROCOPY` is on
    /// already (another sender, in this process or another, or the caller turned it on), so
    /// the kernel's completion ids may not start at this sender's first send.
    #[error("this socket's MSG_ZEROCOPY completions would not be this sender's alone: {reason}")]
    SocketInUse {
        /// Which of the two.
        reason: &'static str,
    },
    /// No completion arrived in time; the buffer stays loaned to the kernel and was leaked.
    #[error("no MSG_ZEROCOPY completion within {0:?} (the buffer was leaked, not freed)")]
    Timeout(Duration),
    /// A system call failed.
    #[error("{call} failed")]
    Io {
        /// The call that failed.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> ZeroCopyError {
    move |source| ZeroCopyError::Io { call: op, source }
}

/// `setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1)`: without it `MSG_ZEROCOPY` is silently ignored.
///
/// For sockets whose completions the caller reads itself. A [`ZeroCopySender`] enables it on
/// its own socket, and refuses a socket on which it is on already
/// ([`ZeroCopyError::SocketInUse`]): the kernel's completion ids there may have started before
/// the sender's first send.
///
/// # Errors
/// [`ZeroCopyError::Unsupported`] on `ENOPROTOOPT`/`EOPNOTSUPP` (kernel or socket type without
/// zero-copy send), [`ZeroCopyError::Io`] otherwise.
#[doc(alias = "SO_ZEROCOPY")]
pub fn enable(socket: &impl AsFd) -> Result<(), ZeroCopyError> {
    match sys::sockopt::set_zerocopy(socket.as_fd(), true) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP)) => {
            Err(ZeroCopyError::Unsupported {
                feature: "SO_ZEROCOPY",
                reason: e.to_string(),
            })
        }
        Err(e) => Err(io_err("setsockopt(SO_ZEROCOPY)")(e)),
    }
}

/// `setsockopt(SO_ZEROCOPY, 0)`: puts back what [`enable`] changed on a sender refused after it.
fn disable(socket: &impl AsFd) -> Result<(), ZeroCopyError> {
    sys::sockopt::set_zerocopy(socket.as_fd(), false).map_err(io_err("setsockopt(SO_ZEROCOPY, 0)"))
}

/// Sends `len` bytes once with `MSG_ZEROCOPY` on `socket`, which must have `SO_ZEROCOPY`
/// enabled and no earlier zero-copy sends (so this send's id is 0), and waits for its
/// completion. The buffer is owned here and freed only after the completion; on timeout it is
/// leaked.
pub(crate) fn send_once(
    socket: &impl AsFd,
    dest: Option<&SocketAddr>,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZeroCopyError> {
    let buf = vec![0xa5_u8; len];
    sys::net::sendto(socket.as_fd(), &buf, abi::MSG_ZEROCOPY, dest)
        .map_err(io_err("sendto(MSG_ZEROCOPY)"))?;
    let deadline = Instant::now() + timeout;
    loop {
        for entry in errqueue::read_all(socket).map_err(io_err("recvmsg(MSG_ERRQUEUE)"))? {
            match entry {
                Entry::Zerocopy(c) if c.contains(0) => {
                    drop(buf);
                    return Ok(c);
                }
                // Another queued error (an ICMP error for UDP, say) is not our completion.
                _ => {}
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            std::mem::forget(buf);
            return Err(ZeroCopyError::Timeout(timeout));
        }
        // POLLERR is always reported; ask for nothing else.
        sys::event::poll(
            socket.as_fd(),
            0,
            Some(left.min(Duration::from_millis(100))),
        )
        .map_err(io_err("poll"))?;
    }
}

/// Sends one `len`-byte datagram to `dest` with `MSG_ZEROCOPY` from a fresh UDP socket (in the
/// calling thread's network namespace) and returns its completion.
///
/// This answers "does a zero-copy send to this destination really avoid the copy?": the
/// completion's [`Completion::copied`] is the kernel's word on it.
///
/// # Errors
/// [`ZeroCopyError::Unsupported`] when the kernel has no UDP zero-copy (before 5.0), a timeout
/// when no completion comes, or the failing call.
pub fn udp_send_once(
    dest: SocketAddr,
    len: usize,
    timeout: Duration,
) -> Result<Completion, ZeroCopyError> {
    let bind: SocketAddr = if dest.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let socket = UdpSocket::bind(bind).map_err(io_err("bind"))?;
    enable(&socket)?;
    send_once(&socket, Some(&dest), len, timeout)
}

/// What to do when completions say the kernel copied after all (loopback, veth into a local
/// socket: the deferred copy can cost more than a plain send).
///
/// [`Mode::ZeroCopy`] means zero copy: by default ([`CopiedPolicy::Keep`]) it keeps sending with
/// `MSG_ZEROCOPY` whatever the completions say, in Rust as in C (`ZCNET_MODE_ZERO_COPY`); a
/// loopback peer receiving by `TCP_ZEROCOPY_RECEIVE` needs exactly that. Backing off where the
/// kernel copies is a choice named as such: [`CopiedPolicy::ADAPTIVE`], or [`Mode::Auto`], which
/// also learns where zero copy pays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CopiedPolicy {
    /// Keep sending with `MSG_ZEROCOPY` (the default).
    #[default]
    Keep,
    /// Stop using `MSG_ZEROCOPY` on this socket.
    Disable,
    /// Send the next `n` buffers by copy, then try zero-copy again (adaptive).
    RetryAfter(u64),
}

impl CopiedPolicy {
    /// The adaptive policy: 1024 copying sends after each copied completion, then a new try
    /// (the default before issue 49).
    pub const ADAPTIVE: CopiedPolicy = CopiedPolicy::RetryAfter(1024);
}

/// What a [`ZeroCopySender`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Send calls made with `MSG_ZEROCOPY` (each takes one completion id).
    pub loaned_calls: u64,
    /// Bytes sent by those calls.
    pub loaned_bytes: u64,
    /// Send calls made by copy (below the threshold, zero-copy off, or after `ENOBUFS`).
    pub copy_calls: u64,
    /// Bytes sent by copy.
    pub copy_bytes: u64,
    /// Zero-copy calls whose completion has arrived.
    pub completed_calls: u64,
    /// Completed calls the kernel flagged as copied (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied_calls: u64,
    /// `ENOBUFS` answers (optmem or locked-memory limit) that fell back to a copying send.
    pub enobufs_fallbacks: u64,
    /// Times the copied policy switched zero-copy off.
    pub policy_disables: u64,
    /// Other errors read from the error queue (ICMP errors for UDP, ...).
    pub queued_errors: u64,
    /// Times a wait for completions stalled and ran every CPU's deferred frees
    /// ([`crate::loan::kick_deferred_frees`]).
    pub deferred_kicks: u64,
    /// [`Mode::Auto`]: the sends each way and why (zeros in the other modes).
    pub auto: crate::auto::AutoCounters,
}

impl Counters {
    /// Completed zero-copy calls not flagged copied, as a fraction of completed calls.
    pub fn not_copied_share(&self) -> Option<f64> {
        (self.completed_calls > 0).then(|| {
            (self.completed_calls - self.copied_calls) as f64 / self.completed_calls as f64
        })
    }
}

impl crate::ZeroCopyCounters for Counters {
    /// Bytes sent with `MSG_ZEROCOPY` whose completions were not flagged copied (estimated per
    /// call: calls flagged copied count their share of the zero-copy bytes; none before the
    /// first completion).
    fn zero_copy_bytes(&self) -> u64 {
        let share = self.not_copied_share().unwrap_or(0.0);
        (self.loaned_bytes as f64 * share) as u64
    }
    /// Bytes sent by copy, plus zero-copy bytes the kernel copied.
    fn copied_bytes(&self) -> u64 {
        self.copy_bytes + self.loaned_bytes - self.zero_copy_bytes()
    }
    /// `ENOBUFS` fallbacks and copied-policy switches.
    fn fallbacks(&self) -> u64 {
        self.enobufs_fallbacks + self.policy_disables
    }
}

/// A second `io::Error` with the same errno (or kind and message): `io::Error` is not `Clone`.
fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// How a [`ZeroCopySender`] sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// `MSG_ZEROCOPY` for buffers of at least [`Config::threshold`] bytes, as the copied policy
    /// allows; by copy where the socket refuses `SO_ZEROCOPY`, saying why
    /// ([`ZeroCopySender::fallback_reason`]).
    #[default]
    ZeroCopy,
    /// Every send by copy: the copying twin, with the same API.
    Copy,
    /// Zero copy where it pays, learned on this sender's own traffic ([`crate::auto`]): per
    /// size class, starting from the profile's threshold for this socket's path (UDP or TCP)
    /// and route and moving to what the sending thread's CPU per byte says; after a completion
    /// flagged "copied", by copy for [`crate::auto::BACKOFF_SENDS`] sends (doubling while
    /// completions keep saying so), then zero copy again. [`ZeroCopySender::auto_choice`] says
    /// where it started and what it learned; [`Config::threshold`] and [`Config::policy`] are
    /// not used.
    Auto,
}

/// How a [`ZeroCopySender`] behaves.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Zero-copy (default) or copy.
    pub mode: Mode,
    /// Buffers smaller than this go by copy (default 16 KiB; the kernel documentation puts the
    /// break-even near 10 KB).
    pub threshold: usize,
    /// What to do about completions flagged copied.
    pub policy: CopiedPolicy,
    /// UDP only: send each buffer as a GSO train of datagrams of this size
    /// ([`crate::udp_gso`], `UDP_SEGMENT`, Linux 4.18), the last one shorter; a buffer of at
    /// most one segment is one datagram. Set on the socket at [`ZeroCopySender::new`]; a buffer
    /// of more than [`crate::udp_gso::MAX_SEGMENTS`] segments is refused before the kernel sees
    /// it. Zero copy, the loan, the copied report and [`Mode::Auto`]'s choice are per train.
    /// `None` (default): the socket's `UDP_SEGMENT` is left as it is (0, one datagram per
    /// buffer, unless the caller set it).
    pub segment: Option<crate::udp_gso::Segment>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::ZeroCopy,
            threshold: DEFAULT_THRESHOLD,
            policy: CopiedPolicy::default(),
            segment: None,
        }
    }
}

/// Default size below which a send copies: 16 KiB.
pub const DEFAULT_THRESHOLD: usize = 16 * 1024;

/// Identifies a borrowed send ([`ZeroCopySender::send_borrowed`]) until its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BorrowToken(pub u64);

/// What the tracker holds for a send: an owned buffer, or the token of a borrowed one.
#[derive(Debug)]
enum Slot<B> {
    /// The caller's buffer, and the error that ended its send part-way with the bytes sent.
    Owned(B, Option<(io::Error, usize)>),
    Borrowed(BorrowToken),
}

/// A sender that loans owned buffers to the kernel with `MSG_ZEROCOPY` and gives each back
/// with the completion that frees it.
///
/// Sends block as the socket does (a non-blocking socket is waited on with `poll`). Reaping is
/// never blocking: call [`reap`](Self::reap) from an event loop when the socket reports
/// `POLLERR` (always reported, no need to ask for it), or [`drain`](Self::drain) to wait for
/// everything in flight.
///
/// The sender owns its socket ([`ExclusiveSocket`]) and must be the only one counting its
/// completions: `new` refuses a socket that another sender of this process holds or on which
/// `SO_ZEROCOPY` is on already ([`ZeroCopyError::SocketInUse`]).
///
/// Dropping the sender with buffers still in flight waits briefly for their completions and then
/// leaks what remains rather than free memory the kernel may still read.
#[derive(Debug)]
#[doc(alias("MSG_ZEROCOPY", "SO_ZEROCOPY"))]
pub struct ZeroCopySender<S: ExclusiveSocket, B: OwnedBuf> {
    socket: S,
    /// The socket, held in this process's list of sockets with a sender.
    _claim: Claim,
    /// Whether this sender turned `SO_ZEROCOPY` on, and not in copy mode: where
    /// `MSG_ZEROCOPY` takes a completion id (without `SO_ZEROCOPY` the kernel copies and
    /// takes none).
    zerocopy_on: bool,
    tracker: Tracker<Slot<B>>,
    ready: std::collections::VecDeque<Returned<B>>,
    borrowed_done: Vec<BorrowToken>,
    next_token: u64,
    config: Config,
    /// Why zero-copy is off for good, if it is.
    disabled: Option<String>,
    copy_for: u64,
    counters: Counters,
    /// An error that ended a partly loaned send, reported again by the next send.
    pending_error: Option<io::Error>,
    /// [`Mode::Auto`]'s decisions.
    auto: Option<crate::auto::Decider>,
    /// The buffer whose calls are being made: always `None` between synchronous calls; an async
    /// send that would block leaves it here, owned by the sender, to be finished first.
    current: Option<InProgress<B>>,
    /// When a stalled wait for completions kicks the kernel's deferred frees.
    kick: crate::loan::DeferredKick,
}

/// A buffer part-way through its send calls.
#[derive(Debug)]
struct InProgress<B> {
    buf: B,
    calls: Calls,
}

/// How far the send calls of one buffer (owned or borrowed) have gone.
#[derive(Debug)]
struct Calls {
    flags: SendFlags,
    /// Bytes sent so far.
    off: usize,
    /// Zero-copy calls that carried part of it (their ids are the tracker's next ones).
    zc_calls: u64,
    /// Whether the next call asks for zero copy (false from the start, or after `ENOBUFS`).
    zerocopy: bool,
}

impl Calls {
    fn new(flags: SendFlags, zerocopy: bool) -> Calls {
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
    fn make(
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

/// A [`crate::udp_gso::GsoError`] as this module's error.
fn gso_error(e: crate::udp_gso::GsoError) -> ZeroCopyError {
    use crate::udp_gso::GsoError;
    match e {
        GsoError::Unsupported { feature, reason } => ZeroCopyError::Unsupported { feature, reason },
        GsoError::Io { call, source } => ZeroCopyError::Io { call, source },
        GsoError::NotUdp(_) => ZeroCopyError::Socket {
            what: "not a UDP socket: GSO trains (Config::segment) are UDP's",
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        },
        other => ZeroCopyError::Unsupported {
            feature: "UDP_SEGMENT",
            reason: other.to_string(),
        },
    }
}

impl<S> From<NewError<S, ZeroCopyError>> for ZeroCopyError {
    /// The error alone, the socket dropped.
    fn from(e: NewError<S, ZeroCopyError>) -> ZeroCopyError {
        e.error
    }
}

/// Sets [`Config::segment`] on a sender's socket (nothing when there is none).
///
/// # Errors
/// [`ZeroCopyError::Unsupported`] for a socket that is not UDP or a kernel without
/// `UDP_SEGMENT`; the `setsockopt` error.
fn set_segment(
    socket: &impl AsFd,
    segment: Option<crate::udp_gso::Segment>,
) -> Result<(), ZeroCopyError> {
    let Some(segment) = segment else {
        return Ok(());
    };
    crate::udp_gso::set_segment(socket, Some(segment)).map_err(gso_error)
}

/// Holds the socket of `fd` for one sender ([`crate::loan::Claim`]).
///
/// # Errors
/// [`ZeroCopyError::SocketInUse`] when another sender holds it; the `fstat` error.
fn claim(fd: BorrowedFd<'_>) -> Result<Claim, ZeroCopyError> {
    Claim::take(fd).map_err(|e| match e {
        None => ZeroCopyError::SocketInUse {
            reason: crate::loan::IN_USE,
        },
        Some(source) => io_err("fstat")(source),
    })
}

impl<S: ExclusiveSocket, B: OwnedBuf> ZeroCopySender<S, B> {
    /// A sender on `socket`, a connected TCP or UDP socket it owns from now on. Enables
    /// `SO_ZEROCOPY` (`setsockopt(2)`, `socket(7)`), also in [`Mode::Copy`], where it marks the
    /// socket as taken; where the kernel refuses it, the sender copies and
    /// [`fallback_reason`](Self::fallback_reason) says why.
    ///
    /// ```
    /// use zcnet::msg_zerocopy::{Config, ZeroCopySender};
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// socket.connect(socket.local_addr()?)?;
    /// let tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(socket, Config::default())?;
    /// // The socket is the sender's; use it through the sender.
    /// let _ = tx.get_ref().local_addr()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    /// A borrowed socket does not compile: a second sender on it would take this one's
    /// completions.
    /// ```compile_fail,E0277
    /// use zcnet::msg_zerocopy::{Config, ZeroCopySender};
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let a: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(&socket, Config::default()).unwrap();
    /// let b: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(&socket, Config::default()).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`ZeroCopyError::SocketInUse`] when another sender of this process holds the same socket
    /// (through another descriptor of it), or when `SO_ZEROCOPY` is on already
    /// (`getsockopt(2)`): another sender, or the caller, turned it on, and the kernel's
    /// completion ids may not start at this sender's first send. [`ZeroCopyError::Io`] for a
    /// failing `fstat`, or a `setsockopt` error other than "unsupported".
    /// [`ZeroCopyError::Socket`] for a GSO segment ([`Config::segment`]) on a socket that is not
    /// UDP. Every error comes in a [`NewError`] with the socket, as it was given: what was
    /// checked was checked before anything changed, and `SO_ZEROCOPY` is turned off again when
    /// the step after it fails.
    ///
    /// # References
    /// The kernel's `Documentation/networking/msg_zerocopy.rst`.
    #[doc(alias = "SO_ZEROCOPY")]
    pub fn new(socket: S, config: Config) -> Result<Self, NewError<S, ZeroCopyError>> {
        macro_rules! refuse {
            ($e:expr) => {
                return Err(NewError { error: $e, socket })
            };
        }
        let claim = match claim(socket.as_fd()) {
            Ok(c) => c,
            Err(e) => refuse!(e),
        };
        // ENOPROTOOPT (a kernel without SO_ZEROCOPY) reads as off; `enable` says why below.
        let on = sys::sockopt::zerocopy(socket.as_fd()).unwrap_or(false);
        if on {
            refuse!(ZeroCopyError::SocketInUse {
                reason: "SO_ZEROCOPY is on already (another sender, in this process or \
                         another, or the caller turned it on), so the kernel's completion ids \
                         may have started before this sender",
            });
        }
        // Everything checked before the socket changes: a GSO segment on a socket that is not
        // UDP, or on a kernel without UDP_SEGMENT, is refused with the socket as it was.
        if let Some(segment) = config.segment
            && let Err(e) = crate::udp_gso::check_segment(&socket, segment)
        {
            refuse!(gso_error(e));
        }
        let enabled = match enable(&socket) {
            Ok(()) => Ok(()),
            Err(ZeroCopyError::Unsupported { reason, .. }) => Err(reason),
            Err(e) => refuse!(e),
        };
        // The last step that can fail: refused, it puts SO_ZEROCOPY back as it found it (off),
        // and the caller's socket sends single datagrams as before.
        if let Err(e) = set_segment(&socket, config.segment) {
            if enabled.is_ok() {
                let _ = disable(&socket);
            }
            refuse!(e);
        }
        let zerocopy_on = enabled.is_ok() && config.mode != Mode::Copy;
        let disabled = match enabled {
            _ if config.mode == Mode::Copy => Some("copy mode requested".to_owned()),
            Ok(()) => None,
            Err(reason) => Some(format!("SO_ZEROCOPY refused: {reason}")),
        };
        Ok(Self::with(socket, claim, config, disabled, zerocopy_on, 0))
    }

    /// A sender on a socket on which an earlier sender of this crate, now dropped, turned
    /// `SO_ZEROCOPY` on: its ids continue at `next_id` (that sender's
    /// [`next_id`](Self::next_id)). The file sender's mmap window makes one per file.
    ///
    /// # Errors
    /// [`ZeroCopyError::SocketInUse`] when another sender of this process holds the socket; the
    /// `fstat` error.
    pub(crate) fn resume(socket: S, config: Config, next_id: u32) -> Result<Self, ZeroCopyError> {
        let claim = claim(socket.as_fd())?;
        set_segment(&socket, config.segment)?;
        let zerocopy_on = config.mode != Mode::Copy;
        let disabled = (!zerocopy_on).then(|| "copy mode requested".to_owned());
        Ok(Self::with(
            socket,
            claim,
            config,
            disabled,
            zerocopy_on,
            next_id,
        ))
    }

    /// The kernel id the next zero-copy call will take.
    pub(crate) fn next_id(&self) -> u32 {
        self.tracker.next_id()
    }

    fn with(
        socket: S,
        claim: Claim,
        config: Config,
        disabled: Option<String>,
        zerocopy_on: bool,
        next_id: u32,
    ) -> Self {
        let auto = (config.mode == Mode::Auto).then(|| {
            let stream =
                sys::sockopt::socket_type(socket.as_fd()).is_ok_and(|t| t == libc::SOCK_STREAM);
            let path = if stream {
                SendPath::MsgZerocopyTcp
            } else {
                SendPath::MsgZerocopyUdp
            };
            crate::auto::Decider::new(Choice::for_socket(path, &socket, config.segment))
        });
        ZeroCopySender {
            auto,
            socket,
            _claim: claim,
            zerocopy_on,
            tracker: Tracker::starting_at(next_id),
            ready: Default::default(),
            borrowed_done: Vec::new(),
            next_token: 0,
            config,
            disabled,
            copy_for: 0,
            counters: Counters::default(),
            pending_error: None,
            current: None,
            kick: crate::loan::DeferredKick::default(),
        }
    }

    /// The mode in effect: the one asked for, or [`Mode::Copy`] where zero copy is off for
    /// good ([`fallback_reason`](Self::fallback_reason) says why).
    pub fn mode(&self) -> Mode {
        if self.disabled.is_some() {
            Mode::Copy
        } else {
            self.config.mode
        }
    }

    /// Why this sender copies everything, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.disabled.as_deref()
    }

    /// In [`Mode::Auto`]: the path, route and prior threshold, the profile they came from, and
    /// what each size class learned (built when asked: keep it off the path of every send).
    pub fn auto_choice(&self) -> Option<Choice> {
        self.auto.as_ref().map(crate::auto::Decider::choice)
    }

    /// The socket (poll it for `POLLERR` to know when to [`reap`](Self::reap)).
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        Counters {
            auto: self.auto.as_ref().map(|d| d.counters).unwrap_or_default(),
            ..self.counters
        }
    }

    /// Buffers the kernel still holds.
    pub fn in_flight(&self) -> usize {
        self.tracker.len()
    }

    /// Buffers given back so far and not yet taken, in the order they were freed.
    pub fn returned(&mut self) -> std::collections::vec_deque::Drain<'_, Returned<B>> {
        self.ready.drain(..)
    }

    /// Moves freed slots to where their owners find them.
    fn settle(&mut self, freed: Vec<Freed<Slot<B>>>) {
        for r in freed {
            match r.buf {
                Slot::Owned(buf, failed) => {
                    let (error, sent) = match failed {
                        Some((e, sent)) => (Some(e), sent),
                        None => (None, buf.bytes().len()),
                    };
                    self.ready.push_back(Returned {
                        buf,
                        sent,
                        error,
                        zero_copy: r.zero_copy,
                        copied: r.zero_copy.then_some(r.copied),
                    })
                }
                Slot::Borrowed(token) => self.borrowed_done.push(token),
            }
        }
    }

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
                Blocking::Wait,
            )
            .unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()));
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
        self.advance(Blocking::Wait).map(drop)
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

    /// The oldest buffer given back and not yet taken.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn pop_returned(&mut self) -> Option<Returned<B>> {
        self.ready.pop_front()
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

    /// Reads every completion now queued, without blocking; returns how many buffers it freed
    /// (take them with [`returned`](Self::returned)).
    ///
    /// # Errors
    /// The `recvmsg(MSG_ERRQUEUE)` error.
    pub fn reap(&mut self) -> io::Result<usize> {
        let mut freed = Vec::new();
        let mut control = [0u8; 256];
        // One read usually holds every completion: the kernel merges consecutive ranges while
        // they wait in the queue. A completion that reaches the last id sent means nothing more
        // can be queued for this sender, so the read that would only say EAGAIN is skipped, as
        // msg_zerocopy.c skips it (issue 17: our sends cost 14-21 % more per byte than its; that
        // read was one syscall in every 16 sends). Other queued errors wait for the next reap.
        while let Some((len, _)) = sys::net::recv_errqueue(self.socket.as_fd(), &mut control)? {
            let entries = errqueue::parse(&control[..len])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut caught_up = false;
            for entry in entries {
                match entry {
                    Entry::Zerocopy(c) => {
                        self.counters.completed_calls += c.count();
                        if c.copied {
                            self.counters.copied_calls += c.count();
                            self.on_copied();
                        } else if let Some(d) = &mut self.auto {
                            d.not_copied();
                        }
                        caught_up |= c.last.wrapping_add(1) == self.tracker.next_id();
                        self.tracker.complete(c, &mut freed);
                    }
                    Entry::Other { .. } => self.counters.queued_errors += 1,
                }
            }
            if caught_up {
                break;
            }
        }
        let n = freed.len();
        self.settle(freed);
        Ok(n)
    }

    fn on_copied(&mut self) {
        if let Some(d) = &mut self.auto {
            d.copied();
            return;
        }
        match self.config.policy {
            CopiedPolicy::Keep => {}
            CopiedPolicy::Disable => {
                if self.disabled.is_none() {
                    self.counters.policy_disables += 1;
                    self.disabled =
                        Some("the kernel copied zero-copy sends (policy: disable)".into());
                }
            }
            CopiedPolicy::RetryAfter(n) => {
                if self.copy_for == 0 {
                    self.counters.policy_disables += 1;
                }
                self.copy_for = n;
            }
        }
    }

    /// Waits up to `timeout` until every buffer has come back. When none comes back for 100 ms
    /// it runs every CPU's deferred frees, at most once a second
    /// ([`crate::loan::kick_deferred_frees`], counted in `deferred_kicks`): a receiver on this
    /// host that read a datagram on another CPU leaves its completion waiting for that CPU's
    /// next network softirq, for minutes on an idle host.
    ///
    /// # Errors
    /// `TimedOut` with the count still in flight (they stay loaned), or the `poll`/`recvmsg`
    /// error.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap()?;
            if self.tracker.is_empty() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} buffers still loaned to the kernel", self.tracker.len()),
                ));
            }
            sys::event::poll(
                self.socket.as_fd(),
                0,
                Some(left.min(crate::loan::DeferredKick::STALL)),
            )?;
            self.kick_if_stalled();
        }
    }

    /// Ends the sender: waits up to `timeout` for what the kernel still holds, and returns every
    /// buffer that came back and was not taken, with how many the kernel still held at the end
    /// (left to it, never freed: [`crate::loan::leaked_buffers`]). Unlike a drop, it waits as
    /// long as asked and says what it left.
    pub fn close(mut self, timeout: Duration) -> Closed<B> {
        let _ = self.drain(timeout);
        let returned = self.ready.drain(..).collect();
        let still_loaned = self.tracker.len();
        // The drop that follows leaves what is still loaned to the kernel, counted, at once.
        let mut left = 0;
        for slot in self.tracker.abandon() {
            std::mem::forget(slot);
            left += 1;
        }
        crate::loan::note_leaked(left);
        Closed {
            returned,
            still_loaned,
        }
    }

    /// Waits up to `timeout` for a loaned buffer to come back and returns the oldest one that
    /// has (at once when one already has): what a fixed pool of buffers recycles with (take one
    /// back, fill it, send it). `Ok(None)` when none came in time, or when nothing is loaned
    /// (none will). Waits on the error queue (`poll(2)` for `POLLERR`), running the deferred
    /// frees when completions stall, as [`drain`](Self::drain) does.
    ///
    /// # Errors
    /// Reading the error queue or `poll` failed.
    pub fn wait_returned(&mut self, timeout: Duration) -> io::Result<Option<Returned<B>>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Ok(Some(r));
            }
            self.reap()?;
            if let Some(r) = self.ready.pop_front() {
                return Ok(Some(r));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if self.tracker.is_empty() || left.is_zero() {
                return Ok(None);
            }
            sys::event::poll(
                self.socket.as_fd(),
                0,
                Some(left.min(crate::loan::DeferredKick::STALL)),
            )?;
            self.kick_if_stalled();
        }
    }

    /// Runs every CPU's deferred frees when completions have stalled (see
    /// [`crate::loan::kick_deferred_frees`]): a receiver on this host may have read what is
    /// still loaned on another CPU, which frees it only at its next network softirq.
    pub(crate) fn kick_if_stalled(&mut self) {
        if !self.tracker.is_empty() && self.kick.kick_if_stalled(self.counters.completed_calls) {
            self.counters.deferred_kicks += 1;
        }
    }
}

impl<S: ExclusiveSocket, B: OwnedBuf> Drop for ZeroCopySender<S, B> {
    fn drop(&mut self) {
        // A buffer left part-way (an async send dropped, then the sender): what was loaned of it
        // is tracked like any other loan, the rest was never given to the kernel.
        if let Some(cur) = self.current.take()
            && cur.calls.zc_calls > 0
        {
            let mut freed = Vec::new();
            self.tracker
                .push(Slot::Owned(cur.buf, None), cur.calls.zc_calls, &mut freed);
            self.settle(freed);
        }
        if self.tracker.is_empty() {
            return;
        }
        // At most DROP_WAIT, and not at all on an async runtime's thread (crate::loan's rule).
        let wait = crate::loan::drop_wait();
        if !wait.is_zero() {
            let _ = self.drain(wait);
        }
        // What the kernel still holds must not be freed under it: left to it, and counted.
        // (Borrowed memory is the caller's, under the contract of `send_borrowed`.)
        let mut left = 0;
        for slot in self.tracker.abandon() {
            std::mem::forget(slot);
            left += 1;
        }
        crate::loan::note_leaked(left);
    }
}

// ---------------------------------------------------------------------------------------------
// Support: this mechanism's own checks, run once per process.

/// What this kernel allows of `MSG_ZEROCOPY`: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `tx.msg_zerocopy_tcp` (Linux 4.14).
    pub tcp: Check,
    /// `tx.msg_zerocopy_udp` (Linux 5.0).
    pub udp: Check,
    /// `tx.udp_segment` and `rx.udp_gro`: GSO trains, which the UDP senders send with a
    /// [`Config::segment`] ([`crate::udp_gso::support`]).
    pub gso: crate::udp_gso::Support,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        let mut v = vec![self.tcp.clone(), self.udp.clone()];
        v.extend(self.gso.checks());
        v
    }
}

/// Whether `SO_ZEROCOPY` + `MSG_ZEROCOPY` work on TCP and on UDP here: one send each over
/// loopback and its completion read from the error queue; once per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        tcp: tx_tcp_check(),
        udp: tx_udp_check(),
        gso: crate::udp_gso::support().clone(),
    })
}

fn zerocopy_outcome(mut p: Probe, r: Result<Completion, ZeroCopyError>, proto: &str) -> Check {
    match r {
        Ok(c) => {
            p.detail("copied", c.copied);
            let how = if c.copied {
                "flagged copied, as it always is over loopback"
            } else {
                "not copied"
            };
            p.ok(format!(
                "SO_ZEROCOPY accepted and a {proto} MSG_ZEROCOPY send completed on the error queue ({how})"
            ))
        }
        Err(ZeroCopyError::Unsupported { reason, .. }) => {
            p.step("setsockopt(SO_ZEROCOPY) -> unsupported");
            let need = if proto == "UDP" {
                "Linux 5.0+"
            } else {
                "Linux 4.14+"
            };
            p.done(
                Status::Unavailable,
                format!("SO_ZEROCOPY refused on {proto}: {reason}; needs {need}"),
                Some("ENOPROTOOPT"),
            )
        }
        Err(ZeroCopyError::SocketInUse { reason }) => p.failed(
            "setsockopt(SO_ZEROCOPY)",
            &io::Error::other(reason),
            "the probe's own socket is in use",
        ),
        Err(ZeroCopyError::Timeout(t)) => p.done(
            Status::Unavailable,
            format!("MSG_ZEROCOPY send accepted but no completion within {t:?}"),
            Some("ETIMEDOUT"),
        ),
        Err(ZeroCopyError::Io { call, source }) => {
            p.failed(call, &source, "MSG_ZEROCOPY send failed")
        }
        Err(ZeroCopyError::Socket { what, source }) => p.failed("socket", &source, what),
    }
}

fn tx_tcp_check() -> Check {
    let mut p = Probe::new(CheckId::TxTcp);
    let (client, _server) = match tcp_pair(false) {
        Ok(pair) => pair,
        Err(e) => return p.failed("TCP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); send(MSG_ZEROCOPY) over loopback TCP; recvmsg(MSG_ERRQUEUE)",
    );
    let r = enable(&client).and_then(|()| send_once(&client, None, 4096, TIMEOUT));
    zerocopy_outcome(p, r, "TCP")
}

fn tx_udp_check() -> Check {
    let mut p = Probe::new(CheckId::TxUdp);
    let receiver = match UdpSocket::bind(loopback(false)) {
        Ok(s) => s,
        Err(e) => return p.failed("bind UDP 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    let dest = match receiver.local_addr() {
        Ok(a) => a,
        Err(e) => return p.failed("getsockname", &e, ""),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); sendto(MSG_ZEROCOPY) over loopback UDP; recvmsg(MSG_ERRQUEUE)",
    );
    zerocopy_outcome(p, udp_send_once(dest, 4096, TIMEOUT), "UDP")
}
