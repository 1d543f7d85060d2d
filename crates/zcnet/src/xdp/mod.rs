//! `AF_XDP` sockets (Linux 4.18; `Documentation/networking/af_xdp.rst`): frames received into a
//! UMEM of this process, and sent from it, through rings shared with the kernel; an XDP program
//! redirects the frames of one queue of an interface to the socket.
//!
//! ```no_run
//! use zcnet::xdp::{Config, Mode, XdpSocket};
//! let mut xsk = XdpSocket::new("eth0", Config { mode: Mode::ZeroCopy, ..Config::default() })?;
//! if let Some(why) = xsk.fallback_reason() { eprintln!("copy mode: {why}"); }
//! while let Some(frames) = xsk.recv(Some(std::time::Duration::from_secs(1)))? {
//!     for f in frames.iter() { println!("{} bytes", f.len()); }
//! } // each batch of frames goes back to the fill ring when dropped
//! # Ok::<(), zcnet::xdp::XdpError>(())
//! ```
//!
//! - **Modes**: `Mode::ZeroCopy` binds with `XDP_ZEROCOPY` (the driver DMAs into the UMEM),
//!   `Mode::Copy` with `XDP_COPY` (any device; the kernel copies each frame once, into the UMEM,
//!   not into an skb and a socket buffer); `Mode::ZeroCopy` falls back to copy where the driver
//!   cannot, with [`XdpSocket::fallback_reason`] naming the errno (veth has no zero-copy
//!   AF_XDP).
//! - **The program** is `crates/zcnet/bpf/xdp_redirect.c` (libxdp's default program: the frame
//!   goes to the socket of its RX queue in an XSKMAP, else to the stack), compiled by
//!   `bpf/build.sh` and embedded; it is loaded and attached with the `aya` crate through a BPF
//!   link, native (driver) mode where the driver has it, else generic (skb) mode, as
//!   [`Attach`] asks. An interface that already has an XDP program is refused, never replaced.
//!   The link is closed when the socket drops (also on a panic's unwinding) and by the kernel
//!   when the process dies.
//! - **Frames** are borrowed from a [`Frames`] batch, checked once against the UMEM's bounds, and
//!   go back to the fill ring when it drops. A sent frame's UMEM slot comes back only with its
//!   completion (the same loan discipline as `msg_zerocopy`).
//! - **Privileges**: `CAP_NET_RAW` for the socket, `CAP_BPF` and `CAP_NET_ADMIN` for the
//!   program; the UMEM counts against `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`.
//! - **Several queues**: a [`Umem`] shared by sockets on several queues (`XDP_SHARED_UMEM`,
//!   [`XdpSocket::new_shared`]), each holding frames of its own and its own fill and
//!   completion rings; the sockets of one interface share its program.
//! - Not here: unaligned chunks and multi-buffer frames (one frame per descriptor, at most a
//!   UMEM frame long).

mod queues;

pub use queues::Queues;

use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::counters::ZeroCopyCounters;
use crate::support::{Check, CheckId, Probe};
use crate::sys::xdp::{Bound, SocketError};
use crate::sys::{self, abi};

/// 8-byte alignment for the embedded object: the ELF parser reads its headers in place.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!("../../bpf/xdp_redirect.o"));

/// The redirect program's object (built by `bpf/build.sh` from `bpf/xdp_redirect.c`), 8-aligned.
pub const PROGRAM_OBJECT: &[u8] = &OBJECT.0;
/// The program's name in the object.
const PROGRAM: &str = "zcnet_xsk_redirect";
/// The XSKMAP's name in the object.
const MAP: &str = "xsks_map";
/// Most frames one receive hands over.
const BATCH: u32 = 1024;

/// Entries of the XSKMAP: the queues a program can serve.
pub const MAX_QUEUES: u32 = 64;

/// How to bind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// `XDP_ZEROCOPY`: the driver writes and reads the UMEM. Where the driver cannot (or the
    /// socket shares a UMEM bound in copy mode), the socket binds in [`Mode::Copy`] and
    /// [`XdpSocket::fallback_reason`] says why, as every zero-copy mode falls back.
    #[default]
    #[doc(alias = "XDP_ZEROCOPY")]
    ZeroCopy,
    /// `XDP_COPY`: the kernel copies each frame into (or out of) the UMEM; any device.
    #[doc(alias = "XDP_COPY")]
    Copy,
}

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attach {
    /// Native where the driver has it, else generic (not called `Auto`: in zcnet that word means
    /// the senders' choice by measured cost).
    NativeOrGeneric,
    /// `XDP_FLAGS_DRV_MODE`: in the driver, before any skb exists.
    Native,
    /// `XDP_FLAGS_SKB_MODE`: after the skb is built (any device).
    Generic,
}

/// How an [`XdpSocket`] is made.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Zero copy, copy, or auto.
    pub mode: Mode,
    /// Native or generic XDP.
    pub attach: Attach,
    /// The interface's RX (and TX) queue.
    pub queue: u32,
    /// UMEM frames (default 4096).
    pub frame_count: u32,
    /// Bytes per UMEM frame: 2048 or 4096 (default 2048).
    pub frame_size: u32,
    /// Entries of each ring, a power of two (default 2048).
    pub ring_size: u32,
    /// Receive (default true).
    pub rx: bool,
    /// Send (default false).
    pub tx: bool,
    /// Attach the redirect program (default true; a TX-only socket needs none).
    pub program: bool,
    /// After the first frame of a receive, wait this long once for more before returning the
    /// batch (default 0): fewer wakeups per frame at high rates, as a `TPACKET_V3` block's
    /// retire timeout gives, at the cost of that much latency. Keep it under the time the RX
    /// ring takes to fill, or frames are dropped (`Statistics::rx_ring_full`).
    pub coalesce: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::ZeroCopy,
            attach: Attach::NativeOrGeneric,
            queue: 0,
            frame_count: 4096,
            frame_size: 2048,
            ring_size: 2048,
            rx: true,
            tx: false,
            program: true,
            coalesce: Duration::ZERO,
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// No interface of that name here.
    #[error("no interface named {0:?} in this network namespace")]
    NoInterface(String),
    /// A parameter the kernel would refuse (a queue out of range, sizes).
    #[error("{0}")]
    Config(String),
    /// A privilege is missing.
    #[error("{what} needs {caps} (run as root)")]
    NoPrivilege {
        /// What was refused.
        what: &'static str,
        /// The capabilities it needs.
        caps: &'static str,
    },
    /// The UMEM is larger than `RLIMIT_MEMLOCK` allows.
    #[error(
        "the UMEM needs {need} bytes locked but RLIMIT_MEMLOCK is {limit}: raise it (ulimit -l \
         {need_kib}) or use fewer or smaller frames"
    )]
    Memlock {
        /// Bytes to lock.
        need: u64,
        /// The same in KiB, for `ulimit -l`.
        need_kib: u64,
        /// The limit.
        limit: u64,
    },
    /// Another XDP program is attached; zcnet does not replace it.
    #[error(
        "{iface} already has an XDP program: zcnet does not replace it (see `ip link show dev \
         {iface}`)"
    )]
    Busy {
        /// The interface.
        iface: String,
    },
    /// Another `AF_XDP` socket is bound to the queue.
    #[error("queue {queue} of {iface} already has an AF_XDP socket")]
    QueueBusy {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
    },
    /// The kernel lacks something this needs.
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// The missing feature.
        feature: &'static str,
        /// Why.
        reason: String,
    },
    /// Loading or attaching the program failed.
    #[error("the XDP program: {0}")]
    Program(String),
    /// The interface was deleted (or moved to another namespace) under the socket, which the
    /// kernel then unbinds with `ENETDOWN`: it receives nothing more.
    #[error("the interface {iface} was deleted")]
    InterfaceGone {
        /// The interface.
        iface: String,
        /// The socket's error (`ENETDOWN`).
        source: io::Error,
    },
    /// A call failed.
    #[error("{call} failed")]
    Io {
        /// The call, named as in C.
        call: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
}

fn sys_err(call: &'static str) -> impl FnOnce(io::Error) -> XdpError {
    move |source| XdpError::Io { call, source }
}

/// The kernel's `XDP_STATISTICS` of a socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[doc(alias = "XDP_STATISTICS")]
pub struct Statistics {
    /// Frames dropped for other reasons.
    pub rx_dropped: u64,
    /// Frames dropped for an invalid fill descriptor.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel refused.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (5.9+).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (5.9+).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty (5.9+).
    pub tx_ring_empty_descs: u64,
}

/// What a socket did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames put on the TX ring.
    pub tx_frames: u64,
    /// Bytes put on the TX ring.
    pub tx_bytes: u64,
    /// TX frames whose completion came back.
    pub completions: u64,
    /// Times a receive found the kernel waiting for fill-ring frames (need-wakeup set).
    pub fill_ring_empty: u64,
    /// Completions that named no frame in flight (a broken ring; never trusted).
    pub bad_completions: u64,
    /// Received descriptors outside the UMEM or across a frame's end (dropped, never read).
    pub bad_descs: u64,
    /// Whether the socket is bound zero-copy.
    pub zero_copy: bool,
}

impl ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        if self.zero_copy {
            self.rx_bytes + self.tx_bytes
        } else {
            0
        }
    }

    fn copied_bytes(&self) -> u64 {
        if self.zero_copy {
            0
        } else {
            self.rx_bytes + self.tx_bytes
        }
    }

    fn fallbacks(&self) -> u64 {
        0
    }
}

/// The redirect program attached to an interface; detached (its link closed) on drop.
struct Program {
    // Dropping the Ebpf object drops the program, which detaches its links.
    ebpf: aya::Ebpf,
    native: bool,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("native", &self.native)
            .finish()
    }
}

/// A UMEM: memory cut into frames that the kernel writes received frames into and reads sent
/// frames from, shared by the sockets opened on it ([`XdpSocket::new_shared`]) on several
/// queues of one interface or of several (`XDP_SHARED_UMEM`; Linux 5.10 for another queue).
/// Each socket takes a range of frames of its own, given back when it drops (in copy mode: a
/// zero-copy driver may use a closed socket's frames until the kernel's deferred release, so
/// those stay out of use until the UMEM drops); the first registers the memory
/// (`XDP_UMEM_REG`) and binds in the [`Mode`] asked, the others share that registration and
/// its mode. The sockets of one interface share its redirect program, each in its queue's slot
/// of the XSKMAP; the program is detached when the last of them drops. A clone is the same
/// UMEM.
#[derive(Clone, Debug)]
#[doc(alias("XDP_SHARED_UMEM", "XDP_UMEM_REG"))]
pub struct Umem {
    memory: Arc<sys::xdp::Umem>,
    /// The programs its sockets attached, by interface index, while a socket uses one.
    programs: Arc<Mutex<Vec<Attached>>>,
}

/// A program one of a UMEM's sockets attached: the interface index, the program while a
/// socket holds it.
type Attached = (u32, Weak<Mutex<Program>>);

impl Umem {
    /// Maps `frame_count` frames of `frame_size` bytes (2048 or 4096), on 2 MiB boundaries with
    /// `MADV_HUGEPAGE`; locked (counted against `RLIMIT_MEMLOCK`) once a socket registers it.
    ///
    /// # Errors
    /// [`XdpError::Config`] for sizes the kernel refuses, [`XdpError::Memlock`] over the limit
    /// (without `CAP_IPC_LOCK`), [`XdpError::Io`] from `mmap`.
    pub fn new(frame_count: u32, frame_size: u32) -> Result<Umem, XdpError> {
        if !matches!(frame_size, 2048 | 4096) {
            return Err(XdpError::Config(format!(
                "frame size {frame_size}: 2048 or 4096"
            )));
        }
        if !(1..=1 << 20).contains(&frame_count) {
            return Err(XdpError::Config(format!(
                "{frame_count} frames: 1 to 1048576"
            )));
        }
        let need = u64::from(frame_count) * u64::from(frame_size);
        if !sys::process::has_cap_ipc_lock()
            && let Ok((Some(limit), _)) = sys::process::memlock_limit()
            && need > limit
        {
            return Err(memlock(need));
        }
        let memory = sys::xdp::Umem::new(frame_count, frame_size).map_err(sys_err("mmap(UMEM)"))?;
        Ok(Umem {
            memory: Arc::new(memory),
            programs: Arc::default(),
        })
    }

    /// Frames in all.
    pub fn frame_count(&self) -> u32 {
        self.memory.frame_count()
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.memory.frame_size()
    }

    /// Frames no socket holds.
    pub fn free_frames(&self) -> u32 {
        self.memory.free_frames()
    }

    /// The redirect program of `iface`: the one a socket on this UMEM attached, else a new one.
    fn program(
        &self,
        iface: &str,
        ifindex: u32,
        config: &Config,
    ) -> Result<Arc<Mutex<Program>>, XdpError> {
        let mut programs = self
            .programs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        programs.retain(|(_, p)| p.strong_count() > 0);
        if let Some(p) = programs
            .iter()
            .find(|(i, _)| *i == ifindex)
            .and_then(|(_, p)| p.upgrade())
        {
            return Ok(p);
        }
        let p = Arc::new(Mutex::new(attach(iface, config)?));
        programs.push((ifindex, Arc::downgrade(&p)));
        Ok(p)
    }
}

/// The index of `iface`.
fn ifindex(iface: &str) -> Result<u32, XdpError> {
    sys::net::if_nametoindex(iface).map_err(|_| XdpError::NoInterface(iface.into()))
}

/// [`XdpError::Memlock`] for `need` bytes.
fn memlock(need: u64) -> XdpError {
    XdpError::Memlock {
        need,
        need_kib: need.div_ceil(1024),
        limit: sys::process::memlock_limit()
            .ok()
            .and_then(|l| l.0)
            .unwrap_or(0),
    }
}

/// An `AF_XDP` socket bound to one queue of an interface, with its frames of a UMEM, its rings
/// and the interface's program.
#[derive(Debug)]
#[doc(alias = "AF_XDP")]
pub struct XdpSocket {
    // Drop order: the program (stop redirecting, if no other socket uses it) before the socket.
    program: Option<Arc<Mutex<Program>>>,
    xsk: sys::xdp::Xsk,
    iface: String,
    fallback: Option<String>,
    counters: Counters,
    coalesce: Duration,
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

    fn open_on(
        iface: &str,
        ifindex: u32,
        config: &Config,
        umem: &Umem,
    ) -> Result<XdpSocket, XdpError> {
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
        // The program first: an interface that has another one is refused before any socket is
        // bound to it.
        let program = if config.rx && config.program {
            Some(umem.program(iface, ifindex, config)?)
        } else {
            None
        };
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
        let queue_busy = || XdpError::QueueBusy {
            iface: iface.into(),
            queue: config.queue,
        };
        let (xsk, bound) = umem
            .memory
            .socket(&geometry, ifindex, config.queue, flags, &retry)
            .map_err(|e| match e {
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
                        config.queue
                    )),
                    _ => XdpError::Io {
                        call: "bind(AF_XDP)",
                        source: e,
                    },
                },
            })?;
        let zero_copy = xsk.zero_copy().unwrap_or(false);
        let fallback = match bound {
            Bound::Registered(refused) => refused.first().map(|e| {
                format!(
                    "zero-copy bind refused ({e}): {iface}'s driver has no AF_XDP zero-copy \
                     support for this queue; bound in copy mode"
                )
            }),
            Bound::Shared => match (config.mode, zero_copy) {
                (Mode::ZeroCopy, false) => Some(
                    "shares a UMEM whose first socket is bound in copy mode; bound in copy mode"
                        .into(),
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
        };
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

    /// Waits up to `timeout` (`None`: forever) for received frames; `Ok(None)` when none came.
    ///
    /// # Errors
    /// [`XdpError::Io`] from `poll`.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Frames<'_>>, XdpError> {
        let end = timeout.map(|t| Instant::now() + t);
        loop {
            self.xsk.refill();
            // A zero-copy driver refills from the fill ring in its NAPI poll, which it runs
            // again only when told; in copy mode the kernel takes fill frames as frames arrive.
            if self.counters.zero_copy && self.xsk.fill_needs_wakeup() {
                self.counters.fill_ring_empty += 1;
                self.xsk.kick_rx().map_err(sys_err("recvfrom(AF_XDP)"))?;
            }
            let ready = self.xsk.rx_ready();
            if ready > 0 {
                // A full batch is there already: no reason to wait.
                if ready < BATCH && !self.coalesce.is_zero() {
                    std::thread::sleep(self.coalesce);
                }
                break;
            }
            let left = match end {
                None => None,
                Some(e) => match e.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Ok(None),
                },
            };
            // Short polls: with need-wakeup the kernel may wait on the fill ring first.
            let wait = left.map_or(Duration::from_millis(100), |l| {
                l.min(Duration::from_millis(100))
            });
            let revents = sys::event::poll(self.xsk.fd(), libc::POLLIN, Some(wait))
                .map_err(sys_err("poll"))?;
            if revents == 0 {
                // An unbound socket polls as merely idle: its error says why it is quiet.
                self.take_socket_error()?;
            }
        }
        let batch = self.xsk.rx_batch(BATCH);
        self.counters.bad_descs = batch.bad_descs();
        self.counters.rx_frames += batch.len() as u64;
        self.counters.rx_bytes += batch.bytes();
        Ok(Some(Frames { batch }))
    }

    /// Reads (and clears) the socket's error: `ENETDOWN` is what the kernel sets when it
    /// unbinds the socket from an interface being unregistered.
    fn take_socket_error(&self) -> Result<(), XdpError> {
        match sys::sockopt::take_error(self.xsk.fd()).map_err(sys_err("getsockopt(SO_ERROR)"))? {
            0 => Ok(()),
            libc::ENETDOWN => Err(XdpError::InterfaceGone {
                iface: self.iface.clone(),
                source: io::Error::from_raw_os_error(libc::ENETDOWN),
            }),
            e => Err(XdpError::Io {
                call: "poll",
                source: io::Error::from_raw_os_error(e),
            }),
        }
    }

    /// Queues `frame` for sending (copied into a free UMEM frame); `Ok(false)` when no frame is
    /// free or the TX ring is full: [`XdpSocket::flush`] and try again.
    ///
    /// # Errors
    /// [`XdpError::Config`]: no TX ring, or a frame longer than a UMEM frame.
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, XdpError> {
        if self.xsk.free_frames() == 0 {
            let _ = self.reap();
        }
        match self.xsk.send(frame) {
            Ok(true) => {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += frame.len() as u64;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => Err(XdpError::Config(e.to_string())),
        }
    }

    /// Tells the kernel to send what the TX ring holds (`sendto`, where it asks for one or in
    /// copy mode, which sends only from the syscall) and takes completions back.
    ///
    /// # Errors
    /// [`XdpError::Io`] from `sendto`.
    pub fn flush(&mut self) -> Result<(), XdpError> {
        if !self.counters.zero_copy || self.xsk.tx_needs_wakeup() {
            self.xsk.kick_tx().map_err(sys_err("sendto(AF_XDP)"))?;
        }
        let _ = self.reap();
        Ok(())
    }

    /// Waits up to `timeout` for every sent frame's completion.
    ///
    /// # Errors
    /// [`XdpError::Io`]: `sendto` failed, or frames are still out at the timeout.
    pub fn drain(&mut self, timeout: Duration) -> Result<(), XdpError> {
        let end = Instant::now() + timeout;
        while self.xsk.in_flight() > 0 {
            self.flush()?;
            if Instant::now() > end {
                return Err(XdpError::Io {
                    call: "sendto(AF_XDP)",
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{} frames not completed", self.xsk.in_flight()),
                    ),
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Takes completions back: their UMEM frames are free again. Returns how many, as the
    /// loaning senders' `reap` does (reading the completion ring cannot fail: always `Ok`).
    ///
    /// # Errors
    /// None today; the signature is the senders'.
    pub fn reap(&mut self) -> io::Result<usize> {
        let n = self.xsk.reap();
        self.counters.completions += u64::from(n);
        self.counters.bad_completions = self.xsk.bad_completions;
        Ok(n as usize)
    }

    /// Frames sent whose completion has not come back.
    pub fn in_flight(&self) -> usize {
        self.xsk.in_flight()
    }

    /// UMEM frames free for sending.
    pub fn free_frames(&self) -> usize {
        self.xsk.free_frames()
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

/// `e` and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut c = e.source();
    while let Some(x) = c {
        s.push_str(": ");
        s.push_str(&x.to_string());
        c = x.source();
    }
    s
}

impl Program {
    /// Puts the socket in the program's XSKMAP at `queue`: from now on the queue's frames go to
    /// it.
    fn serve(&mut self, queue: u32, xsk: &sys::xdp::Xsk) -> Result<(), XdpError> {
        let mut map: aya::maps::XskMap<_> = self
            .ebpf
            .map_mut(MAP)
            .ok_or_else(|| XdpError::Program(format!("no map {MAP} in the object")))?
            .try_into()
            .map_err(|e| XdpError::Program(chain(&e)))?;
        map.set(queue, xsk.fd(), 0)
            .map_err(|e| XdpError::Program(format!("the XSKMAP: {}", chain(&e))))
    }
}

/// The errno of the first `io::Error` in `e`'s chain.
fn errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut c = Some(e);
    while let Some(x) = c {
        if let Some(io) = x.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        c = x.source();
    }
    None
}

/// Loads the redirect program and attaches it to `iface`.
fn attach(iface: &str, config: &Config) -> Result<Program, XdpError> {
    use aya::programs::{Xdp, XdpFlags};
    // What the kernel said, wherever in aya's error chain its io::Error sits.
    let perm = |e: &(dyn std::error::Error + 'static)| {
        matches!(errno(e), Some(libc::EPERM | libc::EACCES)).then_some(XdpError::NoPrivilege {
            what: "loading an XDP program",
            caps: "CAP_BPF and CAP_NET_ADMIN",
        })
    };
    let mut ebpf = aya::Ebpf::load(PROGRAM_OBJECT).map_err(|e| {
        perm(&e).unwrap_or_else(|| XdpError::Program(format!("loading: {}", chain(&e))))
    })?;
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| XdpError::Program(format!("no program {PROGRAM} in the object")))?
        .try_into()
        .map_err(|e| XdpError::Program(chain(&e)))?;
    prog.load().map_err(|e| {
        perm(&e).unwrap_or_else(|| XdpError::Program(format!("verifier: {}", chain(&e))))
    })?;
    let tries: &[(XdpFlags, bool)] = match config.attach {
        Attach::Native => &[(XdpFlags::DRV_MODE, true)],
        Attach::Generic => &[(XdpFlags::SKB_MODE, false)],
        Attach::NativeOrGeneric => &[(XdpFlags::DRV_MODE, true), (XdpFlags::SKB_MODE, false)],
    };
    let mut native = None;
    let mut last = String::new();
    for &(flags, is_native) in tries {
        match prog.attach(iface, flags) {
            Ok(_) => {
                native = Some(is_native);
                break;
            }
            Err(e) => {
                if matches!(errno(&e), Some(libc::EBUSY | libc::EEXIST)) {
                    return Err(XdpError::Busy {
                        iface: iface.into(),
                    });
                }
                if let Some(p) = perm(&e) {
                    return Err(p);
                }
                last = chain(&e);
            }
        }
    }
    let Some(native) = native else {
        return Err(XdpError::Program(format!("attaching to {iface}: {last}")));
    };
    Ok(Program { ebpf, native })
}

/// A batch of received frames, borrowed from the socket; they go back to the fill ring when the
/// batch drops.
///
/// The batch holds the socket's `&mut`: its frames are read before the next receive, which
/// could otherwise hand them to the kernel to fill again while they are read.
/// ```
/// fn count(xsk: &mut zcnet::xdp::XdpSocket) -> Result<usize, zcnet::xdp::XdpError> {
///     let mut bytes = 0;
///     if let Some(frames) = xsk.recv(None)? {
///         bytes += frames.iter().map(<[u8]>::len).sum::<usize>();
///     } // the frames go back here
///     let _next = xsk.recv(None)?;
///     Ok(bytes)
/// }
/// ```
/// ```compile_fail,E0499
/// fn keep(xsk: &mut zcnet::xdp::XdpSocket) {
///     let first = xsk.recv(None).unwrap().unwrap();
///     let _next = xsk.recv(None);
///     println!("{:?}", first.get(0)); // refilled by the kernel meanwhile
/// }
/// ```
#[derive(Debug)]
pub struct Frames<'a> {
    batch: sys::xdp::RxBatch<'a>,
}

impl Frames<'_> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.batch.len() == 0
    }

    /// Frame `i`, from its Ethernet header.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < self.batch.len()).then(|| self.batch.frame(i))
    }

    /// Every frame, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.batch.len()).map(|i| self.batch.frame(i))
    }
}

/// What this kernel allows of `AF_XDP`: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `socket(AF_XDP)`.
    pub socket: Check,
}

impl Support {
    /// Every check, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.socket.clone()]
    }
}

/// Checks, once: an `AF_XDP` socket can be made (copy mode works on any device; zero copy
/// needs a driver with AF_XDP zero-copy support, which only a bind on the device can show).
pub fn support() -> &'static Support {
    static S: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let mut p = Probe::new(CheckId::XdpSocket);
        p.step("socket(AF_XDP, SOCK_RAW, 0)");
        let socket = match sys::net::socket(abi::AF_XDP, libc::SOCK_RAW, 0) {
            Ok(_) => p.ok(
                "AF_XDP sockets can be created; copy mode works on any device, zero-copy bind \
                 (XDP_ZEROCOPY) needs a driver with AF_XDP zero-copy support (not checked: needs \
                 a real device)",
            ),
            Err(e) => p.failed(
                "socket(AF_XDP) (needs CAP_NET_RAW)",
                &e,
                "needs Linux 4.18+ with CONFIG_XDP_SOCKETS",
            ),
        };
        Support { socket }
    })
}
