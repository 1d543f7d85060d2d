//! Making a [`ZeroCopySender`] (its socket checked, claimed and `SO_ZEROCOPY` turned on) and
//! what it tells of itself.

use super::error::gso_error;
use super::socket::{claim, disable, set_segment};
use super::{
    Config, Counters, ExclusiveSocket, Mode, NewError, OwnedBuf, Returned, Tracker, ZeroCopyError,
    ZeroCopySender, enable,
};
use crate::auto::{Choice, SendPath};
use crate::loan::Claim;
use crate::socket_kind::Need;
use crate::sys;

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
        if let Err(e) = check_kind(socket.as_fd()) {
            refuse!(e);
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
            Box::new(crate::auto::Decider::new(Choice::for_socket(
                path,
                &socket,
                config.segment.map(crate::udp_gso::Segment::get),
            )))
        });
        // A blocking send waits in the kernel at most the stall timeout (put back at the drop).
        let sndtimeo_before = sys::sockopt::send_timeout(socket.as_fd()).ok();
        let _ = sys::sockopt::set_send_timeout(socket.as_fd(), &timeval(config.stall_timeout));
        ZeroCopySender {
            sndtimeo_before,
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
            cut: false,
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
        // Copy mode asked for is no fallback (issue 62 item 6): no reason to give.
        self.disabled
            .as_deref()
            .filter(|_| self.config.mode != Mode::Copy)
    }

    /// In [`Mode::Auto`]: the path, route and prior threshold, the profile they came from, and
    /// what each size class learned (built when asked: keep it off the path of every send).
    pub fn auto_choice(&self) -> Option<Choice> {
        self.auto.as_deref().map(crate::auto::Decider::choice)
    }

    /// The socket (poll it for `POLLERR` to know when to [`reap`](Self::reap)).
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        Counters {
            auto: crate::auto::Decider::counters_of(self.auto.as_deref()),
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
}

/// `SO_SNDTIMEO`'s value for a stall timeout: at least a microsecond (zero means for ever).
pub(super) fn timeval(d: std::time::Duration) -> libc::timeval {
    let d = d.max(std::time::Duration::from_micros(1));
    libc::timeval {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(d.subsec_micros() as i32),
    }
}

/// The kind of socket a sender takes (docs/api.md, "Socket kinds"): checked by the sync
/// constructor and, before it changes the socket, by the tokio twin's.
pub(crate) fn check_kind(fd: std::os::fd::BorrowedFd<'_>) -> Result<(), ZeroCopyError> {
    crate::socket_kind::check(fd, Need::CONNECTED).map_err(|source| ZeroCopyError::Socket {
        what: "the MSG_ZEROCOPY sender needs a connected TCP stream or a connected UDP socket, \
               IPv4 or IPv6",
        source,
    })
}
