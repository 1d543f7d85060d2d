//! How a [`UringSender`](super::UringSender) sends: its mode, ring set-up and configuration, and
//! what it counts.

use crate::sys;
use std::time::Duration;

/// How a [`UringSender`](super::UringSender) sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// `IORING_OP_SEND` / `SENDMSG`: the kernel copies; the buffer comes back at the result.
    #[doc(alias("IORING_OP_SEND", "IORING_OP_SENDMSG"))]
    Copy,
    /// `IORING_OP_SEND_ZC` / `SENDMSG_ZC`: the buffer comes back at the notification. Where the
    /// kernel lacks them, sends by copy and says why
    /// ([`UringSender::fallback_reason`](super::UringSender::fallback_reason)).
    #[doc(alias("IORING_OP_SEND_ZC", "IORING_OP_SENDMSG_ZC"))]
    ZeroCopy,
    /// `SEND_ZC` with `IORING_RECVSEND_FIXED_BUF`: buffers of a registered [`Pool`](super::Pool).
    #[doc(alias("IORING_RECVSEND_FIXED_BUF", "IORING_REGISTER_BUFFERS"))]
    ZeroCopyFixed,
    /// Zero copy where it pays, learned on this sender's own traffic ([`crate::auto`]): per size
    /// class `SEND_ZC` or `SEND`, starting from the profile's threshold for this socket's route and
    /// moving to what the sending thread's CPU per byte says; after a notification flagged
    /// "copied", by copy for [`crate::auto::Learning::backoff_sends`] sends (doubling while they
    /// keep saying so), then zero copy again. With
    /// [`UringSender::with_pool`](super::UringSender::with_pool) the pool is registered where
    /// `RLIMIT_MEMLOCK` allows and the zero-copy sends use it (the `uring_zc_fixed` threshold).
    /// [`UringSender::auto_choice`](super::UringSender::auto_choice) says where it started and what
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

/// How the ring is set up, as liburing's examples (`send-zerocopy.c`) set it: each item is tried
/// and dropped where the kernel refuses it; [`UringSender::setup`](super::UringSender::setup) says
/// what was granted.
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
    /// Default on. It also keeps the socket with the ring: a sender dropped with requests in
    /// flight hands its ring to a thread that finishes them only where this was granted (and
    /// neither `single_issuer` nor `defer_taskrun` was); otherwise the drop counts what is still
    /// loaned as leaked and resets a stream it cuts.
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
    pub(super) fn raw(self) -> sys::uring::Setup {
        sys::uring::Setup {
            coop_taskrun: self.coop_taskrun,
            single_issuer: self.single_issuer,
            defer_taskrun: self.defer_taskrun,
            registered_ring_fd: self.registered_ring_fd,
            registered_file: self.registered_file,
        }
    }

    pub(super) fn from_raw(s: sys::uring::Setup) -> RingSetup {
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

/// Settings of a [`UringSender`](super::UringSender).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The mode asked for; [`UringSender::mode`](super::UringSender::mode) says what is used.
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

/// What a [`UringSender`](super::UringSender) did.
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
    /// Times a wait for completions ([`UringSender::drain`](super::UringSender::drain), a full
    /// window) stalled and ran every CPU's deferred frees ([`crate::loan::kick_deferred_frees`]).
    pub deferred_kicks: u64,
    /// Requests that went again from their ring slots ([`UringSender::resend_returned`]'s
    /// short path, every mode on a datagram socket without trains): the path tag a test of
    /// [`Mode::Auto`] checks, so that a mode's cheaper path cannot leave auto behind unseen.
    ///
    /// [`UringSender::resend_returned`]: super::UringSender::resend_returned
    pub resent_in_place: u64,
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
