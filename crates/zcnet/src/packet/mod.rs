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
mod capture;
mod fanout;
mod filter;
pub mod pcap;
mod rx;
mod socket;
mod support;
mod tx;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub use block::{BlockError, BlockFrames, BlockInfo, Frame};
pub use capture::{Capture, Config, Counters, Mode};
pub use fanout::{FanoutMode, fanout};
pub use filter::{Filter, libpcap_available};
pub use rx::{Block, RxConfig, RxRing};
pub use socket::{Received, Socket};
pub use support::{Support, support};
pub use tx::{TxConfig, TxRing};

use crate::sys::{self, abi};

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

/// Counters of `PACKET_STATISTICS`, summed since the ring was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[doc(alias = "PACKET_STATISTICS")]
pub struct Statistics {
    /// Packets that reached the socket, dropped ones included.
    pub packets: u64,
    /// Packets dropped for lack of a free block.
    pub drops: u64,
    /// Times the queue froze (every block held by the application).
    pub freezes: u64,
}

fn packet_socket() -> Result<OwnedFd, PacketError> {
    // Protocol 0: the socket receives nothing until bind names the interface and protocol.
    sys::net::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0).map_err(|e| {
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
        sys::net::if_nametoindex(iface).map_err(|_| PacketError::NoInterface(iface.to_owned()))?;
    let fd = packet_socket()?;
    sys::sockopt::set_packet_version(fd.as_fd(), abi::TPACKET_V3)
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
    let Some(available) = sys::process::mem_available() else {
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

/// Reads `PACKET_STATISTICS` (which resets the kernel's counters) and adds it to `totals`.
/// A socket without a V3 ring gets the shorter `struct tpacket_stats`: no freeze count.
fn add_statistics(fd: BorrowedFd<'_>, totals: &mut Statistics) -> Result<Statistics, PacketError> {
    let (s, _) =
        sys::sockopt::packet_statistics(fd).map_err(sys_err("getsockopt(PACKET_STATISTICS)"))?;
    totals.packets += u64::from(s.tp_packets);
    totals.drops += u64::from(s.tp_drops);
    totals.freezes += u64::from(s.tp_freeze_q_cnt);
    Ok(*totals)
}
