//! zcnet: the Linux kernel's zero-copy socket paths, made safe and measurable.
//!
//! # Layers
//! - A private `sys` module holds the kernel ABI the `libc` crate lacks and every raw call; it is
//!   the only module with `unsafe` code, each block carrying a `SAFETY:` line. Nothing public
//!   lets safe code hand the kernel an address that did not come from a live borrow or an owned
//!   loan ([`loan`]).
//! - One module per mechanism, named as the kernel names it: [`msg_zerocopy`] (with
//!   [`errqueue`], where its completions arrive), [`tcp_rx`], [`file`](mod@file), [`uring`], [`peek`] and
//!   [`packet`] (TPACKET_V3 rings).
//! - [`probe`] decides at run time, by trying each operation, what this kernel, these limits
//!   and these privileges allow, and says why not where it says no.
//!
//! # Example
//! ```
//! use zcnet::probe::{self, CheckId};
//!
//! let f = probe::features();
//! let rx = f.check(CheckId::RxTcpZerocopyReceive);
//! println!("{}: {:?} ({})", rx.id.name(), rx.status, rx.reason);
//! assert!(!f.host.kernel.is_empty());
//! ```
//!
//! # Soundness: what the types forbid
//! Each of these was possible from safe code in an earlier version and no longer compiles.
//!
//! The kernel ABI and raw calls are private, so safe code cannot hand the kernel an address
//! (a `tcp_zerocopy_receive` copy buffer, a borrowed `MSG_ZEROCOPY` slice, a second ring
//! mapping):
//! ```compile_fail
//! let _ = zcnet::sys::page_size();
//! ```
//! A buffer sent zero-copy is moved into the sender and comes back only with its completion:
//! ```compile_fail
//! use zcnet::msg_zerocopy::{Config, ZerocopySender};
//! let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
//! let mut tx: ZerocopySender<_, Vec<u8>> = ZerocopySender::new(s, Config::default()).unwrap();
//! let mut buf = vec![0u8; 65536];
//! tx.send(buf).unwrap();
//! buf[0] = 1; // the kernel may still be reading it
//! ```
//! An inline array moves with its owner, so it cannot be loaned (it is no [`loan::OwnedBuf`]):
//! ```compile_fail
//! use zcnet::msg_zerocopy::{Config, ZerocopySender};
//! let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
//! let mut tx = ZerocopySender::new(s, Config::default()).unwrap();
//! tx.send([0u8; 64]).unwrap();
//! ```
//! Mapped receive pages are lent until the next receive, which releases them:
//! ```compile_fail
//! use zcnet::tcp_rx::{Config, TcpZerocopyReceiver};
//! fn f(s: std::net::TcpStream) {
//!     let mut rx = TcpZerocopyReceiver::new(s, Config::default()).unwrap();
//!     let first = rx.recv().unwrap().unwrap();
//!     let _second = rx.recv();
//!     println!("{}", first.mapped[0]); // those pages are gone
//! }
//! ```
//! The same four, written correctly, compile:
//! ```
//! use zcnet::msg_zerocopy::{Config, ZerocopySender};
//! use zcnet::tcp_rx::TcpZerocopyReceiver;
//! fn f(s: std::net::TcpStream, u: std::net::UdpSocket) {
//!     let mut tx: ZerocopySender<_, Vec<u8>> = ZerocopySender::new(u, Config::default()).unwrap();
//!     tx.send(vec![0u8; 65536]).unwrap();
//!     for back in tx.returned() {
//!         let mut buf = back.buf; // the caller's again
//!         buf[0] = 1;
//!     }
//!     let mut rx = TcpZerocopyReceiver::new(s, zcnet::tcp_rx::Config::default()).unwrap();
//!     let n = rx.recv().unwrap().map_or(0, |r| r.len());
//!     let _ = (n, zcnet::probe::features().host.page_size);
//! }
//! ```
//! A descriptor is never trusted past the borrow that checked it: [`peek::discard`] and the
//! peek cursor's consume check that the socket is TCP on every call (a test hands the cursor a
//! socket that turns into UDP and sees the refusal).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub use counters::ZeroCopyCounters;

pub mod counters;
pub mod errqueue;
pub mod file;
pub mod loan;
pub mod msg_zerocopy;
pub mod packet;
pub mod peek;
pub mod probe;
pub mod relay;
pub mod support;
mod sys;
pub mod tcp_info;
pub mod tcp_rx;
pub mod uring;
