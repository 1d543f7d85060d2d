//! An `AF_XDP` socket on one queue ([`XdpSocket`]): opened in named steps (checks, program,
//! `socket(2)` and `bind(2)` with the mode it got), and what it tells of itself.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::program::{MAX_QUEUES, Program};
use super::{Config, Counters, Mode, Statistics, Umem, XdpError, memlock, sys_err};
use crate::sys::xdp::{Bound, SocketError};
use crate::sys::{self, abi};

/// The index of `iface`.
pub(super) fn ifindex(iface: &str) -> Result<u32, XdpError> {
    sys::net::if_nametoindex(iface).map_err(|_| XdpError::NoInterface(iface.into()))
}

/// An `AF_XDP` socket bound to one queue of an interface, with its frames of a UMEM, its rings
/// and the interface's program.
#[derive(Debug)]
#[doc(alias = "AF_XDP")]
pub struct XdpSocket {
    // Drop order: the program (stop redirecting, if no other socket uses it) before the socket.
    pub(super) program: Option<Arc<Mutex<Program>>>,
    pub(super) xsk: sys::xdp::Xsk,
    pub(super) iface: String,
    pub(super) fallback: Option<String>,
    pub(super) counters: Counters,
    pub(super) coalesce: Duration,
}

impl XdpSocket {
    /// Opens a socket on `queue` of `iface` with a UMEM of its own (`config.frame_count`
    /// frames) and, for RX, attaches the redirect program.
    ///
    /// # Errors
    /// [`XdpError::NoInterface`], [`XdpError::Config`] (queue out of range, sizes),
    /// [`XdpError::NoPrivilege`], [`XdpError::Memlock`], [`XdpError::Busy`] (another program is
    /// attached), [`XdpError::QueueBusy`], [`XdpError::Unsupported`] (no AF_XDP in this kernel),
    /// [`XdpError::Program`], [`XdpError::Io`].
    pub fn new(iface: &str, config: Config) -> Result<XdpSocket, XdpError> {
        // The interface first: its error is the one to see, not the UMEM's.
        let ifindex = ifindex(iface)?;
        let umem = Umem::new(config.frame_count, config.frame_size)?;
        XdpSocket::open_on(iface, ifindex, &config, &umem)
    }

    /// Opens a socket on `queue` of `iface` holding `config.frame_count` frames of `umem`
    /// (`config.frame_size` must be the UMEM's). The first socket on a UMEM binds in
    /// `config.mode`; the others share its registration and its mode (`Mode::ZeroCopy` takes
    /// it, falling back to copy with the reason; `Mode::Copy` on a zero-copy UMEM is refused). For RX the interface's redirect program is
    /// attached by its first socket on this UMEM and shared by the others; an interface with
    /// another program is refused.
    ///
    /// # Errors
    /// As [`XdpSocket::new`]; [`XdpError::Config`] also when the UMEM has fewer free frames
    /// than asked, [`XdpError::QueueBusy`] when a socket on it holds that queue already.
    #[doc(alias = "XDP_SHARED_UMEM")]
    pub fn new_shared(iface: &str, config: Config, umem: &Umem) -> Result<XdpSocket, XdpError> {
        XdpSocket::open_on(iface, ifindex(iface)?, &config, umem)
    }

    /// Opens a socket on `umem` as `config` says: the checks, the program, the socket made
    /// and bound, then the mode it got, and the socket put in the program's XSKMAP.
    fn open_on(
        iface: &str,
        ifindex: u32,
        config: &Config,
        umem: &Umem,
    ) -> Result<XdpSocket, XdpError> {
        check(iface, config, umem)?;
        // The program first: an interface that has another one is refused before any socket is
        // bound to it.
        let program = if config.rx && config.program {
            Some(umem.program(iface, ifindex, config)?)
        } else {
            None
        };
        let (xsk, bound) = open_socket(iface, ifindex, config, umem)?;
        let zero_copy = xsk.zero_copy().unwrap_or(false);
        let fallback = fallback(iface, config.mode, bound, zero_copy)?;
        if let Some(p) = &program {
            p.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .serve(config.queue, &xsk)?;
        }
        Ok(XdpSocket {
            program,
            xsk,
            iface: iface.to_owned(),
            fallback,
            counters: Counters {
                zero_copy,
                ..Counters::default()
            },
            coalesce: config.coalesce,
        })
    }

    /// The mode in effect: [`Mode::ZeroCopy`] where the driver binds zero copy, else
    /// [`Mode::Copy`].
    pub fn mode(&self) -> Mode {
        if self.counters.zero_copy {
            Mode::ZeroCopy
        } else {
            Mode::Copy
        }
    }

    /// Why the socket copies although zero copy was asked; `None` otherwise.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Whether the program runs in the driver (`true`) or on the skb (`false`); `None` without a
    /// program.
    pub fn native(&self) -> Option<bool> {
        self.program.as_ref().map(|p| {
            p.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .native
        })
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The kernel's `XDP_STATISTICS`.
    ///
    /// # Errors
    /// [`XdpError::Io`] from `getsockopt`.
    pub fn statistics(&self) -> Result<Statistics, XdpError> {
        let s = self
            .xsk
            .statistics()
            .map_err(sys_err("getsockopt(XDP_STATISTICS)"))?;
        Ok(Statistics {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }
}

/// Refuses what cannot work before anything is made: a queue past the interface's (where
/// `ETHTOOL_GCHANNELS` tells) or the program's, sizes the kernel refuses, a socket with no
/// frames or neither ring.
fn check(iface: &str, config: &Config, umem: &Umem) -> Result<(), XdpError> {
    if let Ok(n) = sys::xdp::rx_queues(iface)
        && n > 0
        && config.queue >= n
    {
        return Err(XdpError::Config(format!(
            "queue {} of {iface}: it has {n} (0..{})",
            config.queue,
            n.saturating_sub(1)
        )));
    }
    if config.queue >= MAX_QUEUES {
        return Err(XdpError::Config(format!(
            "queue {}: the program serves queues 0..{MAX_QUEUES}",
            config.queue
        )));
    }
    if config.frame_size != umem.frame_size() {
        return Err(XdpError::Config(format!(
            "frame size {}: the UMEM's frames are {} bytes",
            config.frame_size,
            umem.frame_size()
        )));
    }
    if !config.ring_size.is_power_of_two() || !(64..=65536).contains(&config.ring_size) {
        return Err(XdpError::Config(format!(
            "ring size {}: a power of two from 64 to 65536",
            config.ring_size
        )));
    }
    if config.frame_count == 0 {
        return Err(XdpError::Config("a socket with no frames".into()));
    }
    if !config.rx && !config.tx {
        return Err(XdpError::Config("a socket with neither RX nor TX".into()));
    }
    Ok(())
}

/// Makes the socket, holding `config.frame_count` frames of `umem`, and binds it to
/// `config.queue` of `iface` with need-wakeup: zero copy, then copy, for [`Mode::ZeroCopy`];
/// copy alone for [`Mode::Copy`].
fn open_socket(
    iface: &str,
    ifindex: u32,
    config: &Config,
    umem: &Umem,
) -> Result<(sys::xdp::Xsk, Bound), XdpError> {
    let geometry = sys::xdp::Geometry {
        frame_count: config.frame_count,
        ring_size: config.ring_size,
        rx: config.rx,
        tx: config.tx,
    };
    let wake = abi::XDP_USE_NEED_WAKEUP;
    let flags: &[u16] = match config.mode {
        Mode::ZeroCopy => &[abi::XDP_ZEROCOPY | wake, abi::XDP_COPY | wake],
        Mode::Copy => &[abi::XDP_COPY | wake],
    };
    // A socket closed just before still holds its queue until the kernel's deferred release
    // runs: EBUSY for a moment. Asked again for up to a second.
    let end = Instant::now() + Duration::from_secs(1);
    let retry = |e: &io::Error| e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < end;
    umem.memory
        .socket(&geometry, ifindex, config.queue, flags, &retry)
        .map_err(|e| socket_error(e, iface, config.queue, umem))
}

/// Why the socket could not be made or bound, as an [`XdpError`]: the privilege, the limit or
/// the queue it was.
fn socket_error(e: SocketError, iface: &str, queue: u32, umem: &Umem) -> XdpError {
    let queue_busy = || XdpError::QueueBusy {
        iface: iface.into(),
        queue,
    };
    match e {
        SocketError::NoFrames { asked, free } => {
            XdpError::Config(format!("{asked} frames asked of a UMEM with {free} free"))
        }
        SocketError::QueueTaken => queue_busy(),
        SocketError::Setup(e) => match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => XdpError::NoPrivilege {
                what: "socket(AF_XDP)",
                caps: "CAP_NET_RAW",
            },
            Some(libc::ENOMEM) => {
                memlock(u64::from(umem.frame_count()) * u64::from(umem.frame_size()))
            }
            Some(libc::EAFNOSUPPORT) => XdpError::Unsupported {
                feature: "AF_XDP",
                reason: "this kernel has no CONFIG_XDP_SOCKETS (Linux 4.18+)".into(),
            },
            _ => XdpError::Io {
                call: "socket(AF_XDP) and XDP_UMEM_REG",
                source: e,
            },
        },
        SocketError::Bind(e) => match e.raw_os_error() {
            Some(libc::EBUSY) => queue_busy(),
            Some(libc::EPERM) => XdpError::NoPrivilege {
                what: "bind(AF_XDP)",
                caps: "CAP_NET_RAW",
            },
            // The queue beyond the device's (where ethtool could not say so above:
            // loopback, some virtual devices).
            Some(libc::EINVAL) => XdpError::Config(format!(
                "queue {} of {iface}: bind refused ({e}); the device has fewer queues \
                 (`ethtool -l {iface}`)",
                queue
            )),
            _ => XdpError::Io {
                call: "bind(AF_XDP)",
                source: e,
            },
        },
    }
}

/// Why the socket copies although zero copy was asked (`None`: it does not, or copy was
/// asked); a socket asking copy of a UMEM bound zero copy is refused.
fn fallback(
    iface: &str,
    mode: Mode,
    bound: Bound,
    zero_copy: bool,
) -> Result<Option<String>, XdpError> {
    Ok(match bound {
        Bound::Registered(refused) => refused.first().map(|e| {
            format!(
                "zero-copy bind refused ({e}): {iface}'s driver has no AF_XDP zero-copy \
                 support for this queue; bound in copy mode"
            )
        }),
        Bound::Shared => match (mode, zero_copy) {
            (Mode::ZeroCopy, false) => Some(
                "shares a UMEM whose first socket is bound in copy mode; bound in copy mode".into(),
            ),
            (Mode::Copy, true) => {
                return Err(XdpError::Config(
                    "Copy asked, but the UMEM's first socket is bound in zero-copy mode, \
                     which the sockets sharing it take (ask Mode::ZeroCopy)"
                        .into(),
                ));
            }
            _ => None,
        },
    })
}
