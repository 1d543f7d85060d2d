//! How a [`ZeroCopySender`](super::ZeroCopySender) sends: [`Config`], [`Mode`] and the
//! [`CopiedPolicy`].

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

/// How a [`ZeroCopySender`](super::ZeroCopySender) sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// `MSG_ZEROCOPY` for buffers of at least [`Config::threshold`] bytes, as the copied policy
    /// allows; by copy where the socket refuses `SO_ZEROCOPY`, saying why
    /// ([`ZeroCopySender::fallback_reason`](super::ZeroCopySender::fallback_reason)).
    #[default]
    ZeroCopy,
    /// Every send by copy: the copying twin, with the same API.
    Copy,
    /// Zero copy where it pays, learned on this sender's own traffic ([`crate::auto`]): per size
    /// class, starting from the profile's threshold for this socket's path (UDP or TCP) and route
    /// and moving to what the sending thread's CPU per byte says; after a completion flagged
    /// "copied", by copy for [`crate::auto::Learning::backoff_sends`] sends (doubling while
    /// completions keep saying so), then zero copy again.
    /// [`ZeroCopySender::auto_choice`](super::ZeroCopySender::auto_choice) says where it started
    /// and what it learned; [`Config::threshold`] and [`Config::policy`] are not used.
    Auto,
}

/// How a [`ZeroCopySender`](super::ZeroCopySender) behaves.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Zero-copy (default) or copy.
    pub mode: Mode,
    /// Buffers smaller than this go by copy (default 16 KiB; the kernel documentation puts the
    /// break-even near 10 KB).
    pub threshold: usize,
    /// What to do about completions flagged copied.
    pub policy: CopiedPolicy,
    /// UDP only: send each buffer as a GSO train of datagrams of this size ([`crate::udp_gso`],
    /// `UDP_SEGMENT`, Linux 4.18), the last one shorter; a buffer of at most one segment is one
    /// datagram. Set on the socket at [`ZeroCopySender::new`](super::ZeroCopySender::new); a buffer
    /// of more than [`crate::udp_gso::MAX_SEGMENTS`] segments is refused before the kernel sees it.
    /// Zero copy, the loan, the copied report and [`Mode::Auto`]'s choice are per train. `None`
    /// (default): the socket's `UDP_SEGMENT` is left as it is (0, one datagram per buffer, unless
    /// the caller set it).
    pub segment: Option<crate::udp_gso::Segment>,
    /// How long a send waits while the socket takes no byte before it fails with `TimedOut`
    /// (default 10 s, as [`crate::uring::Config::stall_timeout`]): a peer that stops reading
    /// holds the caller at most about twice this (a buffer part-way in, then none). The sender
    /// sets the socket's `SO_SNDTIMEO` to it, for blocking sends, and puts the old value back
    /// when it is dropped. A non-blocking socket (`O_NONBLOCK`) with no room fails at once with
    /// `WouldBlock` instead, the buffer handed back unsent; but a TCP buffer of which the kernel
    /// took a part is finished within this bound or fails, since a retry of the whole buffer
    /// would repeat that part on the stream. The tokio twin never waits here: it waits on the
    /// runtime.
    pub stall_timeout: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::ZeroCopy,
            threshold: DEFAULT_THRESHOLD,
            policy: CopiedPolicy::default(),
            segment: None,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

/// Default stall timeout of a send: 10 s.
pub const DEFAULT_STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Default size below which a send copies: 16 KiB.
pub const DEFAULT_THRESHOLD: usize = 16 * 1024;
