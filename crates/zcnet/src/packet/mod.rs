//! `AF_PACKET` `TPACKET_V3` rings (`Documentation/networking/packet_mmap.rst`, `packet(7)`):
//! capture without a copy or a system call per packet, and transmit from a mapped ring.
//!
//! - [`RxRing`]: `PACKET_RX_RING` (Linux 3.2) of blocks holding variable-size frames. The kernel
//!   fills a block and hands it over (`TP_STATUS_USER`), when full or when its retire timeout
//!   expires on a quiet link; [`RxRing::next_block`] returns it as a [`Block`] checked once, and
//!   dropping the block hands it back (`TP_STATUS_KERNEL`). Drops and queue freezes come from
//!   `PACKET_STATISTICS`.
//! - [`TxRing`]: `PACKET_TX_RING` of fixed-size frames: fill several, kick once with `send(2)`;
//!   optionally `PACKET_QDISC_BYPASS` (3.14).
//! - [`RxRing::join_fanout`] / [`fanout`]: `PACKET_FANOUT` (3.1) groups spreading packets over
//!   several rings by flow hash, CPU or in turn.
//! - [`Socket`]: the copying twin, one `recvfrom(2)` per frame, for comparison and for
//!   callers who want frames one at a time.
//! - [`Filter`]: tcpdump expressions compiled by libpcap (`pcap_compile(3PCAP)`), attached with
//!   `SO_ATTACH_FILTER` before the socket binds, so that no unfiltered packet gets in.
//!
//! Rings bind to an interface of the calling thread's network namespace; they need
//! `CAP_NET_RAW`.

pub mod block;
pub mod pcap;
mod support;
pub use support::{Support, support};

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

pub use block::{BlockError, BlockInfo, Frame, Frames};

use crate::sys::{self, abi, packet as ring};

/// Errors of the packet rings.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    /// `socket(AF_PACKET)` refused: no `CAP_NET_RAW`.
    #[error("packet sockets need CAP_NET_RAW (run as root)")]
    NoPrivilege,
    /// No interface of that name in this network namespace.
    #[error("no interface named {0:?} in this network namespace")]
    NoInterface(String),
    /// A parameter the kernel would refuse.
    #[error("{0}")]
    Config(String),
    /// The kernel or the machine lacks something this needs (libpcap for a filter expression).
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// The missing feature.
        feature: &'static str,
        /// Why, and what would provide it.
        reason: String,
    },
    /// libpcap could not compile the expression.
    #[error("bad filter expression {expr:?}: {message}")]
    Filter {
        /// The expression.
        expr: String,
        /// libpcap's message.
        message: String,
    },
    /// The interface the ring is bound to went down or was deleted (the socket's `ENETDOWN`,
    /// as libpcap reports it): the ring receives nothing more. Blocks captured before are
    /// handed over first.
    #[error("the interface {interface} {}", if *.deleted { "was deleted" } else { "went down" })]
    InterfaceDown {
        /// The interface.
        interface: String,
        /// Deleted (or moved to another namespace), not only down.
        deleted: bool,
        /// The socket's error (`ENETDOWN`).
        source: io::Error,
    },
    /// A block that does not describe itself consistently; it was handed back.
    #[error("malformed block")]
    Malformed(#[from] BlockError),
    /// A call failed.
    #[error("{call} failed")]
    Io {
        /// The call, named as in C.
        call: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
}

fn sys_err(call: &'static str) -> impl FnOnce(io::Error) -> PacketError {
    move |source| PacketError::Io { call, source }
}

/// Whether libpcap can be loaded (what [`Filter::compile`] needs), and if not, why: the names
/// tried and the loader's message.
///
/// # Errors
/// The one-line reason, naming the Debian package that provides it.
pub fn libpcap_available() -> Result<(), String> {
    ring::libpcap_loaded().map_err(|m| libpcap_missing(&m))
}

/// The one line saying libpcap is missing: the names tried, the loader's word, the package.
fn libpcap_missing(m: &ring::LibpcapMissing) -> String {
    format!(
        "libpcap could not be loaded (tried {}: {}); install it (Debian: apt install libpcap0.8)",
        m.tried.join(", "),
        m.message
    )
}

/// Whether `iface` is a loopback device (`IFF_LOOPBACK` in `/sys/class/net/IFACE/flags`), where
/// every packet passes twice; see [`RxConfig::ignore_outgoing`].
pub fn is_loopback(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & libc::IFF_LOOPBACK as u32 != 0)
}

/// A classic BPF program for Ethernet frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    program: Vec<abi::SockFilter>,
}

impl Filter {
    /// Compiles a tcpdump expression (`pcap-filter(7)`); the empty expression accepts every
    /// frame. The program returns at most `snaplen` bytes of each frame, so it also cuts the
    /// captured length, in the kernel.
    ///
    /// # Errors
    /// [`PacketError::Filter`] with libpcap's message; [`PacketError::Unsupported`] when
    /// libpcap cannot be loaded. libpcap is loaded at run time (`libpcap.so.1`, then
    /// `libpcap.so.0.8`, or the name in `ZCNET_LIBPCAP`), on the first compile: nothing else
    /// in zcnet needs it.
    pub fn compile(expr: &str, snaplen: u32) -> Result<Filter, PacketError> {
        match ring::compile_filter(expr, snaplen) {
            Ok(program) => Ok(Filter { program }),
            Err(ring::CompileError::Expression(message)) => Err(PacketError::Filter {
                expr: expr.to_owned(),
                message,
            }),
            Err(ring::CompileError::Missing(m)) => Err(PacketError::Unsupported {
                feature: "filter expressions (libpcap)",
                reason: libpcap_missing(&m),
            }),
        }
    }

    /// Instructions in the program.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// True for an empty program (never produced by [`Filter::compile`]).
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }
}

/// Geometry and behaviour of an RX ring.
#[derive(Clone, Debug)]
pub struct RxConfig {
    /// Bytes per block; a multiple of the page size. Default 1 MiB.
    pub block_size: usize,
    /// Blocks in the ring. Default 32 (32 MiB).
    pub block_count: usize,
    /// Frame size the kernel uses to count frames (`tp_frame_size`); frames are variable in
    /// V3. Default 2048.
    pub frame_size: usize,
    /// A block with at least one frame is handed over after this long (`tp_retire_blk_tov`),
    /// so a quiet link still delivers. Default 10 ms.
    pub retire_timeout: Duration,
    /// Optional filter, attached before binding.
    pub filter: Option<Filter>,
    /// Skip the frames this host sends (`PACKET_IGNORE_OUTGOING`, Linux 4.20). On a loopback
    /// device every packet passes twice, once going out and once coming in; tcpdump (libpcap)
    /// skips the outgoing copy there, and so should a capture of `lo`.
    pub ignore_outgoing: bool,
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig {
            block_size: 1 << 20,
            block_count: 32,
            frame_size: 2048,
            retire_timeout: Duration::from_millis(10),
            filter: None,
            ignore_outgoing: false,
        }
    }
}

/// Counters of `PACKET_STATISTICS`, summed since the ring was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Packets that reached the socket, dropped ones included.
    pub packets: u64,
    /// Packets dropped for lack of a free block.
    pub drops: u64,
    /// Times the queue froze (every block held by the application).
    pub freezes: u64,
}

/// Fanout modes (`PACKET_FANOUT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanoutMode {
    /// By flow hash: a flow stays on one ring.
    Hash,
    /// In turn.
    LoadBalance,
    /// By the CPU the packet arrived on.
    Cpu,
}

impl FanoutMode {
    fn raw(self) -> u32 {
        match self {
            FanoutMode::Hash => abi::PACKET_FANOUT_HASH,
            FanoutMode::LoadBalance => abi::PACKET_FANOUT_LB,
            FanoutMode::Cpu => abi::PACKET_FANOUT_CPU,
        }
    }
}

fn packet_socket() -> Result<OwnedFd, PacketError> {
    // Protocol 0: the socket receives nothing until bind names the interface and protocol.
    sys::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            PacketError::NoPrivilege
        } else {
            PacketError::Io {
                call: "socket(AF_PACKET)",
                source: e,
            }
        }
    })
}

/// The index of `iface` and an unbound `TPACKET_V3` packet socket: what both rings start from.
fn v3_socket(iface: &str) -> Result<(u32, OwnedFd), PacketError> {
    let index =
        sys::if_nametoindex(iface).map_err(|_| PacketError::NoInterface(iface.to_owned()))?;
    let fd = packet_socket()?;
    sys::setsockopt(
        fd.as_fd(),
        abi::SOL_PACKET,
        abi::PACKET_VERSION,
        &abi::TPACKET_V3,
    )
    .map_err(sys_err("setsockopt(PACKET_VERSION, TPACKET_V3)"))?;
    Ok((index, fd))
}

/// Refuses `rings` rings of `block_count` blocks of `block_size` bytes before any is allocated
/// when together they exceed half the memory the machine has available (`MemAvailable`): the
/// kernel allocates a ring's blocks at once and in full, so a typo (`--blocks 100000`) would
/// otherwise take the machine's memory (issue 22 item 3).
pub fn check_ring_memory(
    rings: usize,
    block_size: usize,
    block_count: usize,
) -> Result<(), PacketError> {
    let total = (block_size as u64)
        .checked_mul(block_count as u64)
        .and_then(|t| t.checked_mul(rings as u64))
        .ok_or_else(|| PacketError::Config("ring too large".into()))?;
    let Some(available) = sys::mem_available() else {
        return Ok(());
    };
    if total > available / 2 {
        const MIB: u64 = 1 << 20;
        return Err(PacketError::Config(format!(
            "{rings} ring(s) of {block_count} blocks of {} KiB need {} MiB, more than half the \
             {} MiB this machine has available: use fewer or smaller blocks, or fewer rings",
            block_size >> 10,
            total.div_ceil(MIB),
            available / MIB
        )));
    }
    Ok(())
}

/// A ring dimension as `struct tpacket_req3` holds it.
fn to_u32(n: usize) -> Result<u32, PacketError> {
    u32::try_from(n).map_err(|_| PacketError::Config("ring too large".into()))
}

fn page_multiple(what: &str, n: usize) -> Result<(), PacketError> {
    let page = sys::page_size();
    if n == 0 || n % page != 0 {
        return Err(PacketError::Config(format!(
            "{what} {n} is not a multiple of the page size ({page})"
        )));
    }
    Ok(())
}

/// A `TPACKET_V3` receive ring bound to one interface.
#[derive(Debug)]
pub struct RxRing {
    fd: OwnedFd,
    ring: ring::Ring,
    next: usize,
    totals: Stats,
    interface: String,
    retire_timeout: Duration,
    /// Set once the interface went down or away: the blocks retired until then still come.
    ending: Option<Instant>,
}

impl RxRing {
    /// Opens a ring on `iface` capturing every protocol (`ETH_P_ALL`).
    ///
    /// # Errors
    /// No privilege, unknown interface, a geometry the kernel refuses, or a failed call.
    pub fn open(iface: &str, config: &RxConfig) -> Result<RxRing, PacketError> {
        page_multiple("block size", config.block_size)?;
        if config.frame_size < abi::TPACKET3_HDR_LEN
            || config.frame_size % 16 != 0
            || config.block_size % config.frame_size != 0
        {
            return Err(PacketError::Config(format!(
                "frame size {} must be a multiple of 16, at least 48, dividing the block size",
                config.frame_size
            )));
        }
        if config.block_count == 0 {
            return Err(PacketError::Config(
                "a ring needs at least one block".into(),
            ));
        }
        check_ring_memory(1, config.block_size, config.block_count)?;
        let (index, fd) = v3_socket(iface)?;
        let req = abi::TpacketReq3 {
            tp_block_size: to_u32(config.block_size)?,
            tp_block_nr: to_u32(config.block_count)?,
            tp_frame_size: to_u32(config.frame_size)?,
            tp_frame_nr: to_u32(config.block_size / config.frame_size * config.block_count)?,
            tp_retire_blk_tov: u32::try_from(config.retire_timeout.as_millis().max(1))
                .unwrap_or(u32::MAX),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sys::setsockopt(fd.as_fd(), abi::SOL_PACKET, abi::PACKET_RX_RING, &req)
            .map_err(sys_err("setsockopt(PACKET_RX_RING)"))?;
        let ring = ring::Ring::map(fd.as_fd(), config.block_size, config.block_count)
            .map_err(sys_err("mmap(ring)"))?;
        if let Some(f) = &config.filter {
            ring::attach_filter(fd.as_fd(), &f.program)
                .map_err(sys_err("setsockopt(SO_ATTACH_FILTER)"))?;
        }
        if config.ignore_outgoing {
            sys::setsockopt(
                fd.as_fd(),
                abi::SOL_PACKET,
                abi::PACKET_IGNORE_OUTGOING,
                &1i32,
            )
            .map_err(sys_err("setsockopt(PACKET_IGNORE_OUTGOING) (Linux 4.20)"))?;
        }
        sys::bind_packet(fd.as_fd(), index, abi::ETH_P_ALL).map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(RxRing {
            fd,
            ring,
            next: 0,
            totals: Stats::default(),
            interface: iface.to_owned(),
            retire_timeout: config.retire_timeout,
            ending: None,
        })
    }

    /// Joins fanout group `group` (the same id and mode on every ring of the group).
    ///
    /// # Errors
    /// `setsockopt(PACKET_FANOUT)`'s error (a group of another mode, for one).
    pub fn join_fanout(&self, group: u16, mode: FanoutMode) -> Result<(), PacketError> {
        let arg: u32 = u32::from(group) | (mode.raw() << 16);
        sys::setsockopt(self.fd.as_fd(), abi::SOL_PACKET, abi::PACKET_FANOUT, &arg)
            .map_err(sys_err("setsockopt(PACKET_FANOUT)"))
    }

    /// The next block the kernel handed over, waiting up to `timeout` (`None`: forever).
    /// `Ok(None)` when the time ran out.
    ///
    /// # Errors
    /// [`PacketError::InterfaceDown`] once the blocks captured before the interface went are
    /// handed over, `poll(2)`'s error, an error the socket reports, or
    /// [`PacketError::Malformed`] (the block is handed back and skipped).
    pub fn next_block(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<Block<'_>>, PacketError> {
        let i = self.next;
        if !self.ring.is_user(i) {
            let mut wait = timeout;
            if let Some(until) = self.ending {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(self.gone());
                }
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            match sys::poll(self.fd.as_fd(), libc::POLLIN | libc::POLLERR, wait) {
                Ok(revents) if revents & libc::POLLERR != 0 => self.take_socket_error()?,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "poll",
                        source: e,
                    });
                }
            }
        }
        let count = self.ring.count();
        let Some(raw) = self.ring.user_block(i) else {
            return Ok(None);
        };
        self.next = (i + 1) % count;
        let info = BlockInfo::parse(raw.bytes())?;
        Ok(Some(Block { raw, info }))
    }

    /// Reads (and so clears) the error the socket reports with `POLLERR`. `ENETDOWN`, the
    /// interface gone down or away, ends the ring once the block being filled could have been
    /// retired (twice its timeout): frames captured before are not lost.
    fn take_socket_error(&mut self) -> Result<(), PacketError> {
        let code = sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ERROR)
            .map_err(sys_err("getsockopt(SO_ERROR)"))?;
        match code {
            0 => Ok(()),
            libc::ENETDOWN => {
                if self.ending.is_none() {
                    self.ending =
                        Some(Instant::now() + 2 * self.retire_timeout + Duration::from_millis(10));
                }
                Ok(())
            }
            e => Err(PacketError::Io {
                call: "poll",
                source: io::Error::from_raw_os_error(e),
            }),
        }
    }

    /// [`PacketError::InterfaceDown`]: deleted where the socket lost its binding, which the
    /// kernel does when the interface is unregistered (whatever namespace asks).
    fn gone(&self) -> PacketError {
        PacketError::InterfaceDown {
            interface: self.interface.clone(),
            deleted: sys::packet_bound_index(self.fd.as_fd()).is_ok_and(|i| i <= 0),
            source: io::Error::from_raw_os_error(libc::ENETDOWN),
        }
    }

    /// Counters since the ring was opened (reads and sums `PACKET_STATISTICS`, which the
    /// kernel resets on each read).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn stats(&mut self) -> Result<Stats, PacketError> {
        add_stats(self.fd.as_fd(), &mut self.totals)
    }
}

/// Reads `PACKET_STATISTICS` (which resets the kernel's counters) and adds it to `totals`.
/// A socket without a V3 ring gets the shorter `struct tpacket_stats`: no freeze count.
fn add_stats(fd: BorrowedFd<'_>, totals: &mut Stats) -> Result<Stats, PacketError> {
    let mut s = abi::TpacketStatsV3::default();
    let len = size_of::<abi::TpacketStatsV3>();
    sys::getsockopt(fd, abi::SOL_PACKET, abi::PACKET_STATISTICS, &mut s, len)
        .map_err(sys_err("getsockopt(PACKET_STATISTICS)"))?;
    totals.packets += u64::from(s.tp_packets);
    totals.drops += u64::from(s.tp_drops);
    totals.freezes += u64::from(s.tp_freeze_q_cnt);
    Ok(*totals)
}

/// The copying twin of [`RxRing`]: a packet socket bound to one interface, read with one
/// `recvfrom(2)` per frame, which copies the frame out of the socket's queue (`packet(7)`).
/// The queue is bounded by `SO_RCVBUF` counted in socket-buffer memory (`truesize`, several
/// hundred bytes even for a small frame); what does not fit is dropped and counted in
/// `PACKET_STATISTICS`.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    totals: Stats,
}

/// One frame read by [`Socket::recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes copied into the buffer.
    pub len: usize,
    /// The frame's length on the link (more than `len` when the buffer was shorter).
    pub original: usize,
}

impl Socket {
    /// Opens a packet socket on `iface` receiving every protocol (`ETH_P_ALL`), with a receive
    /// queue of `rcvbuf` bytes when given (`SO_RCVBUFFORCE`, past `net.core.rmem_max` with
    /// `CAP_NET_ADMIN`; else `SO_RCVBUF`, which the kernel caps at `rmem_max`).
    ///
    /// # Errors
    /// No privilege, unknown interface, or a failed call.
    pub fn open(iface: &str, rcvbuf: Option<usize>) -> Result<Socket, PacketError> {
        let index =
            sys::if_nametoindex(iface).map_err(|_| PacketError::NoInterface(iface.to_owned()))?;
        let fd = packet_socket()?;
        if let Some(bytes) = rcvbuf {
            // The kernel doubles the value for its bookkeeping; ask for half.
            let half = i32::try_from(bytes / 2).unwrap_or(i32::MAX);
            sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &half)
                .or_else(|_| sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &half))
                .map_err(sys_err("setsockopt(SO_RCVBUF)"))?;
        }
        sys::bind_packet(fd.as_fd(), index, abi::ETH_P_ALL).map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(Socket {
            fd,
            totals: Stats::default(),
        })
    }

    /// Copies the next frame into `buf` (cut at its length), waiting up to `timeout` (`None`:
    /// forever) when the queue is empty; `Ok(None)` when the time ran out. While frames are
    /// queued this is one `recvfrom(MSG_DONTWAIT | MSG_TRUNC)` per frame; `poll(2)` only when
    /// the queue is empty.
    ///
    /// # Errors
    /// `recvfrom`'s or `poll`'s error.
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<Option<Received>, PacketError> {
        let mut waited = false;
        loop {
            match sys::recv(self.fd.as_fd(), buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC) {
                Ok(original) => {
                    return Ok(Some(Received {
                        len: original.min(buf.len()),
                        original,
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if waited {
                        return Ok(None);
                    }
                    match sys::poll(self.fd.as_fd(), libc::POLLIN, timeout) {
                        Ok(_) => waited = true,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
                        Err(e) => {
                            return Err(PacketError::Io {
                                call: "poll",
                                source: e,
                            });
                        }
                    }
                }
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "recvfrom(AF_PACKET)",
                        source: e,
                    });
                }
            }
        }
    }

    /// Counters since the socket was opened (`PACKET_STATISTICS`: frames that reached the
    /// socket, dropped ones included, and drops for a full queue; no freezes without a ring).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn stats(&mut self) -> Result<Stats, PacketError> {
        add_stats(self.fd.as_fd(), &mut self.totals)
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for RxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `n` rings on `iface` in one fanout group (id from the process id), each with `config`.
///
/// # Errors
/// As [`RxRing::open`] and [`RxRing::join_fanout`].
pub fn fanout(
    iface: &str,
    n: usize,
    mode: FanoutMode,
    config: &RxConfig,
) -> Result<Vec<RxRing>, PacketError> {
    check_ring_memory(n, config.block_size, config.block_count)?;
    let group = (std::process::id() & 0xffff) as u16;
    (0..n)
        .map(|_| {
            let r = RxRing::open(iface, config)?;
            r.join_fanout(group, mode)?;
            Ok(r)
        })
        .collect()
}

/// A block of captured frames, owned by the application until dropped.
#[derive(Debug)]
pub struct Block<'a> {
    raw: ring::UserBlock<'a>,
    info: BlockInfo,
}

impl Block<'_> {
    /// The checked descriptor.
    pub fn info(&self) -> &BlockInfo {
        &self.info
    }

    /// The frames, in arrival order.
    pub fn frames(&self) -> Frames<'_> {
        Frames::new(self.raw.bytes(), &self.info)
    }

    /// Whether the retire timeout, not a full block, handed it over.
    pub fn timed_out(&self) -> bool {
        self.info.status & abi::TP_STATUS_BLK_TMO != 0
    }
}

/// Geometry and behaviour of a TX ring.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// Bytes per frame, header included (the packet gets `frame_size - 48`). Default 2048.
    pub frame_size: usize,
    /// Frames in the ring. Default 1024.
    pub frame_count: usize,
    /// Hand frames straight to the driver, skipping the qdisc (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// Copy each frame whole into its socket buffer (`PACKET_VNET_HDR`, each frame led by a
    /// `virtio_net_hdr` whose `hdr_len` is the frame's length; zcnet writes it). Without it the
    /// kernel copies the Ethernet header and points the skb at the rest in the ring's page; a
    /// device that may not keep such fragments (veth: the peer's stack) then copies each frame
    /// into a freshly allocated page (`skb_copy_ubufs`), which costs more than the copy saved.
    pub linear: bool,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            frame_size: 2048,
            frame_count: 1024,
            qdisc_bypass: false,
            linear: false,
        }
    }
}

/// A `TPACKET_V3` transmit ring bound to one interface.
#[derive(Debug)]
pub struct TxRing {
    fd: OwnedFd,
    ring: ring::Ring,
    next: usize,
    filled: usize,
    linear: bool,
}

impl TxRing {
    /// Opens a transmit ring on `iface`; it receives nothing.
    ///
    /// # Errors
    /// No privilege, unknown interface, a geometry the kernel refuses, or a failed call.
    pub fn open(iface: &str, config: &TxConfig) -> Result<TxRing, PacketError> {
        let page = sys::page_size();
        if config.frame_size < abi::TPACKET3_HDR_LEN + 14
            || config.frame_size % 16 != 0
            || (page % config.frame_size != 0 && config.frame_size % page != 0)
        {
            return Err(PacketError::Config(format!(
                "frame size {} must be a multiple of 16 that divides or is a multiple of the page size",
                config.frame_size
            )));
        }
        let block_size = config.frame_size.max(page);
        let per_block = block_size / config.frame_size;
        let blocks = config.frame_count.div_ceil(per_block).max(1);
        check_ring_memory(1, block_size, blocks)?;
        let (index, fd) = v3_socket(iface)?;
        if config.qdisc_bypass {
            sys::setsockopt(fd.as_fd(), abi::SOL_PACKET, abi::PACKET_QDISC_BYPASS, &1i32)
                .map_err(sys_err("setsockopt(PACKET_QDISC_BYPASS)"))?;
        }
        if config.linear {
            // Before the ring: the kernel refuses it once a ring is set.
            sys::setsockopt(fd.as_fd(), abi::SOL_PACKET, abi::PACKET_VNET_HDR, &1i32)
                .map_err(sys_err("setsockopt(PACKET_VNET_HDR)"))?;
        }
        let req = abi::TpacketReq3 {
            tp_block_size: to_u32(block_size)?,
            tp_block_nr: to_u32(blocks)?,
            tp_frame_size: to_u32(config.frame_size)?,
            tp_frame_nr: to_u32(per_block * blocks)?,
            ..Default::default()
        };
        sys::setsockopt(fd.as_fd(), abi::SOL_PACKET, abi::PACKET_TX_RING, &req)
            .map_err(sys_err("setsockopt(PACKET_TX_RING)"))?;
        let ring = ring::Ring::map(fd.as_fd(), config.frame_size, per_block * blocks)
            .map_err(sys_err("mmap(ring)"))?;
        // Protocol 0: no receive hook; frames carry their own Ethernet header.
        sys::bind_packet(fd.as_fd(), index, 0).map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(TxRing {
            fd,
            ring,
            next: 0,
            filled: 0,
            linear: config.linear,
        })
    }

    /// Largest frame the ring takes.
    pub fn max_frame(&self) -> usize {
        let vnet = if self.linear {
            abi::VIRTIO_NET_HDR_LEN
        } else {
            0
        };
        self.ring.slot_size() - abi::TPACKET3_HDR_LEN - vnet
    }

    /// Copies one Ethernet frame into the next free slot; `false` when the ring is full (call
    /// [`TxRing::send`]).
    ///
    /// # Errors
    /// [`PacketError::Config`] for a frame larger than [`TxRing::max_frame`].
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, PacketError> {
        if frame.len() > self.max_frame() {
            return Err(PacketError::Config(format!(
                "frame of {} bytes exceeds the ring's {}",
                frame.len(),
                self.max_frame()
            )));
        }
        let count = self.ring.count();
        let Some(mut slot) = self.ring.free_frame(self.next) else {
            return Ok(false);
        };
        if self.linear {
            // struct virtio_net_hdr: no flags, no GSO, hdr_len (little-endian) = the whole
            // frame, which the kernel then copies into the skb's linear part.
            let data = slot.data_mut();
            let mut h = [0u8; abi::VIRTIO_NET_HDR_LEN];
            h[2..4].copy_from_slice(&(frame.len() as u16).to_le_bytes());
            data[..h.len()].copy_from_slice(&h);
            data[h.len()..h.len() + frame.len()].copy_from_slice(frame);
            slot.submit(h.len() + frame.len());
        } else {
            slot.data_mut()[..frame.len()].copy_from_slice(frame);
            slot.submit(frame.len());
        }
        self.next = (self.next + 1) % count;
        self.filled += 1;
        Ok(true)
    }

    /// Kicks the kernel to send every submitted frame (`send(fd, NULL, 0, 0)`), waiting until
    /// it took them; returns the bytes it reported sending.
    ///
    /// # Errors
    /// `send`'s error; frames the kernel refused stay marked `TP_STATUS_WRONG_FORMAT`.
    pub fn send(&mut self) -> Result<usize, PacketError> {
        self.filled = 0;
        loop {
            match sys::sendto(self.fd.as_fd(), &[], 0, None) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "send(TX ring)",
                        source: e,
                    });
                }
            }
        }
    }

    /// Frames pushed since the last [`TxRing::send`].
    pub fn pending(&self) -> usize {
        self.filled
    }

    /// Frames the kernel refused (`TP_STATUS_WRONG_FORMAT`) still in the ring.
    pub fn refused(&self) -> usize {
        (0..self.ring.count())
            .filter(|&i| self.ring.frame_status(i) == abi::TP_STATUS_WRONG_FORMAT)
            .count()
    }
}

// ---------------------------------------------------------------------------------------------
// Capture: the one-shape entry over the ring and its copying twin.

/// How a [`Capture`] takes frames from the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// A `TPACKET_V3` RX ring ([`RxRing`]): frames are read in place in memory shared with the
    /// kernel, a block at a time, with no copy and no call per frame.
    #[default]
    Ring,
    /// One `recvfrom(2)` per frame ([`Socket`]): the copying twin.
    Copy,
}

/// How a [`Capture`] is set up.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Ring (default) or copy.
    pub mode: Mode,
    /// The ring's geometry and filter ([`Mode::Ring`]; the filter applies to both modes).
    pub ring: RxConfig,
    /// The copying socket's receive queue in bytes ([`Mode::Copy`]; `None`: the default).
    pub rcvbuf: Option<usize>,
}

/// What a [`Capture`] delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Frames handed to the caller.
    pub frames: u64,
    /// Their captured bytes read in place from the ring.
    pub ring_bytes: u64,
    /// Their captured bytes copied out by `recvfrom`.
    pub copied_bytes: u64,
    /// Calls that took frames: blocks (ring) or `recvfrom` (copy).
    pub calls: u64,
}

impl crate::ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        self.ring_bytes
    }
    fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }
    /// A capture never changes its mode.
    fn fallbacks(&self) -> u64 {
        0
    }
}

#[derive(Debug)]
enum Source {
    Ring(RxRing),
    Copy { socket: Socket, buf: Vec<u8> },
}

/// Frames of one interface, by a ring or by copy, through one API.
///
/// ```no_run
/// use zcnet::packet::{Capture, Config};
/// let mut cap = Capture::new("lo", Config::default())?;
/// let mut seen = 0;
/// while seen < 10 {
///     seen += cap.next_frames(None, |f| println!("{} bytes", f.len))?;
/// }
/// # Ok::<(), zcnet::packet::PacketError>(())
/// ```
#[derive(Debug)]
pub struct Capture {
    source: Source,
    counters: Counters,
}

impl Capture {
    /// Opens a capture on `iface` (every protocol) in `config.mode`.
    ///
    /// # Errors
    /// [`PacketError::NoPrivilege`] without `CAP_NET_RAW`, [`PacketError::NoInterface`], a
    /// ring the kernel refuses, or a failed call.
    pub fn new(iface: &str, config: Config) -> Result<Capture, PacketError> {
        let source = match config.mode {
            Mode::Ring => Source::Ring(RxRing::open(iface, &config.ring)?),
            Mode::Copy => {
                let socket = Socket::open(iface, config.rcvbuf)?;
                if let Some(f) = &config.ring.filter {
                    ring::attach_filter(socket.fd.as_fd(), &f.program)
                        .map_err(sys_err("setsockopt(SO_ATTACH_FILTER)"))?;
                }
                Source::Copy {
                    socket,
                    buf: vec![0; config.ring.frame_size.max(65536)],
                }
            }
        };
        Ok(Capture {
            source,
            counters: Counters::default(),
        })
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        match self.source {
            Source::Ring(_) => Mode::Ring,
            Source::Copy { .. } => Mode::Copy,
        }
    }

    /// A capture never falls back: `None`.
    pub fn fallback_reason(&self) -> Option<&str> {
        None
    }

    /// Waits up to `timeout` (`None`: forever) for frames and lends each to `f`: one block's
    /// frames (ring), or every frame queued (copy; timestamps, status and hash are 0 there, as
    /// `recvfrom` does not give them). Returns how many; 0 when the time ran out.
    ///
    /// # Errors
    /// As [`RxRing::next_block`] and [`Socket::recv`].
    pub fn next_frames(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&Frame<'_>),
    ) -> Result<usize, PacketError> {
        let c = &mut self.counters;
        match &mut self.source {
            Source::Ring(r) => {
                let Some(block) = r.next_block(timeout)? else {
                    return Ok(0);
                };
                c.calls += 1;
                let mut n = 0;
                for frame in block.frames() {
                    c.frames += 1;
                    c.ring_bytes += frame.data.len() as u64;
                    n += 1;
                    f(&frame);
                }
                Ok(n)
            }
            Source::Copy { socket, buf } => {
                let mut n = 0;
                let mut wait = timeout;
                while let Some(got) = socket.recv(buf, wait)? {
                    c.calls += 1;
                    c.frames += 1;
                    c.copied_bytes += got.len as u64;
                    n += 1;
                    f(&Frame {
                        data: &buf[..got.len],
                        len: u32::try_from(got.original).unwrap_or(u32::MAX),
                        sec: 0,
                        nsec: 0,
                        status: 0,
                        rxhash: 0,
                        vlan: None,
                    });
                    // Take what is queued without waiting again.
                    wait = Some(Duration::ZERO);
                }
                Ok(n)
            }
        }
    }

    /// What was delivered so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The kernel's counters (`PACKET_STATISTICS`: packets, drops, freezes).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn stats(&mut self) -> Result<Stats, PacketError> {
        match &mut self.source {
            Source::Ring(r) => r.stats(),
            Source::Copy { socket, .. } => socket.stats(),
        }
    }
}
