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

mod config;
mod counters;
mod error;
mod program;
mod queues;
mod rx;
mod socket;
mod support;
mod tx;
mod umem;

pub use config::{Attach, Config, Mode};
pub use counters::{Counters, Statistics};
pub use error::XdpError;
use error::{memlock, sys_err};
pub use program::MAX_QUEUES;
pub use queues::Queues;
pub use rx::Frames;
pub use socket::XdpSocket;
use socket::ifindex;
pub use support::{Support, support};
pub use umem::Umem;
