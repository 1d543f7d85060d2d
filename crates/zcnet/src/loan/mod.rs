//! Buffers loaned to the kernel: one vocabulary for every zero-copy send.
//!
//! A zero-copy send ([`msg_zerocopy`](crate::msg_zerocopy), [`uring`](crate::uring)) lets the
//! kernel read the buffer after the call returns, until a completion says it is done. So the
//! safe senders take the buffer by value (any [`OwnedBuf`]) and give it back only with its
//! completion, as a [`Returned`]; a send refused before anything was loaned gives it back at
//! once inside a [`SendError`]. No safe call lets a buffer be written or freed while loaned.
//!
//! A `MSG_ZEROCOPY` completion names its send by a counter the kernel keeps per socket, so a
//! sender must also be the only one counting on its socket: it takes an [`ExclusiveSocket`],
//! a socket it owns for its whole life (not a reference, which would let a second sender
//! share the counter and take the first one's completions).
//!
//! # References
//! - the kernel's `Documentation/networking/msg_zerocopy.rst` ("Notification")
//! - `io_uring_prep_send_zc(3)` (the notification CQE, `IORING_CQE_F_NOTIF`)

use std::io;
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

mod contract;
mod defer;
#[cfg(any(feature = "msg_zerocopy", feature = "uring"))]
pub(crate) mod orphans;
#[cfg(feature = "uring")]
pub(crate) mod pool;

#[cfg(any(feature = "msg_zerocopy", feature = "uring"))]
pub use orphans::ORPHAN_WAIT;

pub use contract::OwnedBuf;

/// A buffer the kernel is done with, and what became of it.
#[derive(Debug)]
pub struct Returned<B> {
    /// The buffer, the caller's again.
    pub buf: B,
    /// Bytes of it that were sent (all of it unless `error` is set).
    pub sent: usize,
    /// The error that ended the send of this buffer part-way, if one did. The buffer still
    /// came back only after the kernel released every byte it had taken.
    pub error: Option<io::Error>,
    /// Whether a zero-copy send was asked for (`MSG_ZEROCOPY`, `SEND_ZC`); `false` when the
    /// buffer went by copy (copy mode, below the threshold, a fallback).
    pub zero_copy: bool,
    /// The kernel's word on whether it copied after all (`SO_EE_CODE_ZEROCOPY_COPIED`,
    /// `IORING_NOTIF_USAGE_ZC_COPIED`): `Some(false)` really zero-copy, `Some(true)` copied,
    /// `None` when no zero-copy was asked for or the kernel does not say.
    pub copied: Option<bool>,
}

impl<B> Returned<B> {
    /// True when the bytes really went without a copy (`copied == Some(false)`).
    pub fn really_zero_copy(&self) -> bool {
        self.copied == Some(false)
    }
}

/// A send refused before any byte of the buffer was loaned: the buffer comes back with it.
///
/// When part of a buffer was already loaned, the send is not refused: the buffer comes back
/// with its completion, as a [`Returned`] whose `error` is set, and the sender reports the
/// error again on its next call.
#[derive(Debug, thiserror::Error)]
#[error("send failed after {sent} bytes")]
pub struct SendError<B> {
    /// The kernel's error (or `InvalidInput` for a buffer the sender cannot take).
    #[source]
    pub error: io::Error,
    /// Bytes of the buffer sent by copy before the error (0 for a zero-copy send).
    pub sent: usize,
    /// The buffer, the caller's again.
    pub buf: B,
}

/// A sender refused at its construction: the error, and the socket handed back as it was
/// given (what the constructor had changed on it put back: `SO_ZEROCOPY`, `UDP_SEGMENT`), as a
/// [`SendError`] hands back its buffer.
///
/// It reads as its `error` does, causes included (`Display` is the error's, `source()` the
/// error's source), so a printer of the chain names each cause once.
#[derive(Debug)]
pub struct NewError<S, E: std::error::Error + 'static> {
    /// Why.
    pub error: E,
    /// The socket, the caller's again.
    pub socket: S,
}

impl<S, E: std::error::Error + 'static> std::fmt::Display for NewError<S, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<S: std::fmt::Debug, E: std::error::Error + 'static> std::error::Error for NewError<S, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// What a loaning sender's `close(timeout)` leaves.
#[derive(Debug)]
pub struct Closed<B> {
    /// Every buffer that came back and was not taken yet, in the order they came back.
    pub returned: Vec<Returned<B>>,
    /// Buffers the kernel still held at the end of the wait: never freed, since it may read
    /// them (counted in [`leaked_buffers`]).
    pub still_loaned: usize,
}

/// Buffers this process's senders left to the kernel for good: never freed, since the kernel
/// may read them until it is done, and so never given back.
///
/// A dropped sender never waits long and never leaks what the kernel gives back later: its
/// drop waits for its loans at most [`DROP_WAIT`] on a thread that is not an async runtime's,
/// not at all on one that is (a tokio twin's drop), then hands what is still loaned to a
/// thread of the crate (`zcnet-orphans` for every `MSG_ZEROCOPY` sender; a short-lived one of
/// its own for an io_uring ring), which frees each buffer when the kernel gives it back; only
/// what is still loaned [`ORPHAN_WAIT`] later is counted here. The socket (or ring) stays
/// open, held by that thread, until then: a TCP peer sees the end of the stream once its loans
/// came back. A synchronous `uring::UringSender` whose ring has a single issuer or deferred
/// task work (set-ups a caller asks for) cannot be driven by another thread: it counts what it
/// holds at once, and resets a stream its ring's close cuts. `close(timeout)` waits as long as
/// asked, on the caller's thread, and says what it left; what it left is counted here at once.
pub fn leaked_buffers() -> u64 {
    LEAKED.load(std::sync::atomic::Ordering::Relaxed)
}

static LEAKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts `n` buffers left to the kernel ([`leaked_buffers`]).
pub(crate) fn note_leaked(n: usize) {
    LEAKED.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// How long a sender's drop waits for its loans on a thread that is not an async runtime's.
pub const DROP_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a drop may wait here: [`DROP_WAIT`], none on a thread of an async (tokio) runtime,
/// whose other tasks it would stall.
pub(crate) fn drop_wait() -> std::time::Duration {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        return std::time::Duration::ZERO;
    }
    DROP_WAIT
}

mod sealed {
    pub trait Sealed {}
}

/// A socket that a zero-copy sender holds alone for the sender's whole life: an owned
/// [`TcpStream`], [`UdpSocket`] or [`OwnedFd`], never a reference to one.
///
/// The kernel numbers a socket's `MSG_ZEROCOPY` sends with one counter and reports their
/// completions on the socket's one error queue (`Documentation/networking/msg_zerocopy.rst`,
/// "Notification Batching"). Two senders on one socket would each count only their own sends:
/// one would read the other's completions, and give a buffer back while the kernel still reads
/// it under another id, or never give it back. Owning the socket keeps a second sender off it;
/// a second descriptor of the same socket (`try_clone`, `dup(2)`) is caught at run time:
/// [`ZeroCopySender::new`](crate::msg_zerocopy::ZeroCopySender::new) refuses a socket on
/// which `SO_ZEROCOPY` is on already, or which another sender of this process holds
/// ([`ZeroCopyError::SocketInUse`](crate::msg_zerocopy::ZeroCopyError::SocketInUse)).
///
/// Sealed: the crate's senders rely on it. A descriptor owned elsewhere (a C caller's) can be
/// vouched for with the `unsafe` [`AssumeExclusive::new`].
#[cfg_attr(
    feature = "msg_zerocopy",
    doc = r#"
```
use zcnet::msg_zerocopy::{Config, ZeroCopySender};
let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
socket.connect(socket.local_addr()?)?;
let tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(socket, Config::default())?;
# Ok::<(), Box<dyn std::error::Error>>(())
```
A borrowed socket is no `ExclusiveSocket`:
```compile_fail,E0277
use zcnet::msg_zerocopy::{Config, ZeroCopySender};
let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
let tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(&socket, Config::default()).unwrap();
```
"#
)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a socket a zero-copy sender can own: pass the socket itself",
    label = "give the sender the socket by value (a TcpStream, UdpSocket or OwnedFd), not a \
             reference",
    note = "a second sender on one socket would take the first one's completions \
            (zcnet::loan::ExclusiveSocket); `try_clone` the socket if you need it too, or \
            vouch for a descriptor owned elsewhere with the unsafe AssumeExclusive::new"
)]
pub trait ExclusiveSocket: AsFd + Send + sealed::Sealed {}

macro_rules! exclusive {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl ExclusiveSocket for $t {}
    )*};
}
exclusive!(TcpStream, UdpSocket, OwnedFd);

/// A descriptor vouched for as exclusive by whoever made this with the `unsafe`
/// [`AssumeExclusive::new`]: for sockets owned outside Rust (libzcnet's C callers).
#[derive(Debug)]
pub struct AssumeExclusive<F: AsFd>(pub(crate) F);

impl<F: AsFd> AssumeExclusive<F> {
    /// The descriptor.
    pub fn get_ref(&self) -> &F {
        &self.0
    }
}

impl<F: AsFd> AsFd for AssumeExclusive<F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl<F: AsFd + Send> sealed::Sealed for AssumeExclusive<F> {}
impl<F: AsFd + Send> ExclusiveSocket for AssumeExclusive<F> {}

/// A socket the crate itself borrows for as long as the sender it makes lives, and uses for
/// nothing else meanwhile (the file sender's mmap window holds `&mut` of its `FileSender` for
/// the whole send); the run-time checks of `ZeroCopySender::new` still apply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held<'a>(pub(crate) BorrowedFd<'a>);

impl AsFd for Held<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0
    }
}

impl sealed::Sealed for Held<'_> {}
impl ExclusiveSocket for Held<'_> {}

/// The sockets that senders of this process hold, by [`crate::sys::file::file_id`] (the same through
/// every descriptor of a socket): a `MSG_ZEROCOPY` sender and an io_uring sender alike, as two
/// senders on one socket would share its completion ids, or mix their bytes on a stream.
static HELD: std::sync::Mutex<std::collections::BTreeSet<(u64, u64)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Why [`Claim::take`] refused a socket another sender holds.
pub(crate) const IN_USE: &str = "another zcnet sender of this process holds the same socket \
                                 (through another descriptor of it: a try_clone or dup)";

/// The sockets that peek cursors of this process hold: two cursors on one socket would share
/// its one `SO_PEEK_OFF`, each moving the other's offset (issue 62 item 8).
static PEEKING: std::sync::Mutex<std::collections::BTreeSet<(u64, u64)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A set of held sockets, by [`crate::sys::file::file_id`].
type HeldSet = std::sync::Mutex<std::collections::BTreeSet<(u64, u64)>>;

/// A socket's place in one of the process's sets of held sockets, given up when its holder
/// drops.
#[derive(Debug)]
pub(crate) struct Claim {
    id: (u64, u64),
    set: &'static HeldSet,
}

impl Claim {
    /// Holds the socket of `fd` for one sender.
    ///
    /// # Errors
    /// `None` when another sender holds it ([`IN_USE`]); `Some` with the `fstat` error.
    pub(crate) fn take(fd: BorrowedFd<'_>) -> Result<Claim, Option<io::Error>> {
        Claim::take_in(&HELD, fd)
    }

    /// Holds the socket of `fd` for one peek cursor.
    ///
    /// # Errors
    /// `None` when another cursor holds it; `Some` with the `fstat` error.
    #[cfg_attr(not(feature = "peek"), allow(dead_code))]
    pub(crate) fn peek(fd: BorrowedFd<'_>) -> Result<Claim, Option<io::Error>> {
        Claim::take_in(&PEEKING, fd)
    }

    fn take_in(set: &'static HeldSet, fd: BorrowedFd<'_>) -> Result<Claim, Option<io::Error>> {
        let id = crate::sys::file::file_id(fd).map_err(Some)?;
        // A panic while the lock was held left a consistent set: each change is one call.
        let mut held = set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !held.insert(id) {
            return Err(None);
        }
        Ok(Claim { id, set })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// Makes each CPU the calling thread may run on run its network receive softirq once; returns
/// on how many it did.
///
/// A socket buffer that a receiver on this host consumed on another CPU than the one that
/// allocated it is freed later, by that CPU, at its next network receive softirq
/// (`skb_attempt_defer_free`: Linux 5.19 for TCP, later kernels for UDP too). When the buffer
/// carried a `MSG_ZEROCOPY` or `SEND_ZC` send, its completion waits with it: on a CPU without
/// other network traffic for seconds or minutes (107 s was seen in a veth lab). The senders'
/// waits ([`msg_zerocopy::ZeroCopySender::drain`](crate::msg_zerocopy::ZeroCopySender::drain),
/// the async `flush`) call this themselves when completions stall for 100 ms, at most once a
/// second, and count it (`deferred_kicks`); call it where you wait for completions another way.
///
/// How: a helper thread moves to each CPU in turn and sends one datagram to itself over
/// loopback (in the caller's network namespace), whose transmit runs the softirq there. Best
/// effort: a namespace whose loopback is down, or a CPU the helper cannot move to, is skipped.
pub fn kick_deferred_frees() -> usize {
    defer::kick_deferred_frees()
}

/// When a sender waiting for completions runs [`kick_deferred_frees`]: after
/// [`STALL`](Self::STALL) of looks at which its count of completions did not move, at most once
/// a second. It reads the clock only while a wait looks, never on the send path.
#[derive(Debug, Default)]
pub(crate) struct DeferredKick {
    /// The completion count at the last look, and since when it has stood there.
    seen: Option<(u64, std::time::Instant)>,
    kicked: Option<std::time::Instant>,
}

impl DeferredKick {
    /// How long a wait goes without a completion before it kicks.
    pub(crate) const STALL: std::time::Duration = std::time::Duration::from_millis(100);
    const EVERY: std::time::Duration = std::time::Duration::from_secs(1);

    /// A look by a wait at `completed`, the sender's count of completions so far: kicks if it
    /// has not moved for [`STALL`](Self::STALL) and no kick came within the last second; says
    /// whether it did.
    pub(crate) fn kick_if_stalled(&mut self, completed: u64) -> bool {
        let now = std::time::Instant::now();
        let since = match self.seen {
            Some((n, since)) if n == completed => since,
            _ => {
                self.seen = Some((completed, now));
                return false;
            }
        };
        if now.duration_since(since) < Self::STALL
            || self
                .kicked
                .is_some_and(|k| now.duration_since(k) < Self::EVERY)
        {
            return false;
        }
        self.kicked = Some(now);
        kick_deferred_frees();
        true
    }
}
