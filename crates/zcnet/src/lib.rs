//! zcnet: the Linux kernel's zero-copy socket paths, made safe and measurable.
//!
//! # Layers
//! - The kernel ABI the `libc` crate lacks and every raw call live below, in the `zcnet-sys`
//!   crate (named `sys` here, private): a crate of its own, so it cannot import anything of this
//!   one, and it holds no policy. Above it, `unsafe` operations only in the io_uring send engine
//!   (which decides when a loaned buffer is free), the `MSG_ZEROCOPY` sends (a loan until its
//!   completion) and where a packet ring is mapped, once per socket, each block carrying a `SAFETY:` line; elsewhere `unsafe` only declares the promises
//!   a caller makes: the [`loan::OwnedBuf`] contract and the two functions through which a caller
//!   vouches ([`loan::AssumeExclusive::new`],
//!   [`ZeroCopySender::send_borrowed`](msg_zerocopy::ZeroCopySender::send_borrowed)). Nothing
//!   public lets safe code hand the kernel an address that did not come from a live borrow or an
//!   owned loan ([`loan`]).
//! - One module per mechanism, named as the kernel names it: [`tcp_rx`], [`msg_zerocopy`] (with
//!   [`errqueue`], where its completions arrive), [`file`](mod@file), [`uring`], [`peek`] (and
//!   [`relay`] on top of it), [`packet`] (TPACKET_V3 rings) and [`xdp`] (AF_XDP sockets). Each
//!   has the same shape (the repository's `docs/api.md`): `X::new(socket, Config { mode, .. })`,
//!   `counters()` returning a [`ZeroCopyCounters`], `fallback_reason()`, and a cached
//!   `support()` of its own. The sending mechanisms' `Mode::Auto` sends by zero copy only where
//!   it pays, after a profile ([`auto`]).
//! - [`probe`] assembles every mechanism's `support()` with the machine's limits and this
//!   process's privileges into one report.
//! - With the feature `tokio`, `zcnet::tokio` holds the same types on a tokio runtime (the
//!   repository's `docs/async.md`).
//!
//! # Features
//! A Cargo feature per mechanism, named as its module, so that a build pays only for the
//! mechanisms it uses; the default is every mechanism and `profile`. With
//! `default-features = false, features = ["msg_zerocopy"]`, for one, none of `aya`,
//! `libloading`, `io-uring` or `toml` is built.
//!
//! | feature | what | pulls in |
//! |---|---|---|
//! | `tcp_rx` | [`tcp_rx`]: `TCP_ZEROCOPY_RECEIVE` | |
//! | `msg_zerocopy` | [`msg_zerocopy`] (with [`errqueue`] and [`auto`]): `MSG_ZEROCOPY` | feature `udp_gso` |
//! | `udp_gso` | [`udp_gso`]: UDP GSO trains (`UDP_SEGMENT`) and `UDP_GRO` | |
//! | `file` | [`file`](mod@file): `sendfile`, `splice`, an mmap window sent with `MSG_ZEROCOPY` | feature `msg_zerocopy` |
//! | `uring` | [`uring`] (with [`auto`]): io_uring `SEND_ZC`, `SENDMSG_ZC` | crate `io-uring`, feature `udp_gso` |
//! | `peek` | [`peek`]: `SO_PEEK_OFF` | |
//! | `relay` | [`relay`]: a relay that loses nothing unacknowledged | feature `peek` |
//! | `packet` | [`packet`]: `TPACKET_V3` rings, fanout, filter expressions | crate `libloading` (libpcap is loaded at run time) |
//! | `xdp` | [`xdp`]: `AF_XDP` sockets and their redirect program | crate `aya` |
//! | `profile` | [`auto`] reads the profile `zcnet tune` writes (else the built-in thresholds) | crate `toml` |
//! | `tokio` | `zcnet::tokio`: the async twins of the mechanisms compiled in | crate `tokio` |
//! | `serde` | `serde::Serialize` on every mechanism's `Counters` | |
//!
//! [`probe`], [`support`], [`loan`], [`counters`] and [`tcp_info`] are always there. A
//! mechanism left out keeps its checks in the probe's report, each skipped with the reason
//! "not compiled in".
//!
//! # Examples, one per mechanism
//! Each runs on loopback (the last two where the process has `CAP_NET_RAW`) and checks its
//! bytes; each is compiled, and run as a test, with its mechanism's feature.
//!
//! TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`, Linux 4.18): pages are mapped where whole ones
//! arrive, the rest is copied, and the counters say which.
#![cfg_attr(
    feature = "tcp_rx",
    doc = r#"
```
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use zcnet::tcp_rx::{Config, TcpZeroCopyReceiver};
use zcnet::ZeroCopyCounters;

let l = TcpListener::bind("127.0.0.1:0")?;
let mut tx = TcpStream::connect(l.local_addr()?)?;
let sender = std::thread::spawn(move || tx.write_all(&[7u8; 100_000]));
let mut rx = TcpZeroCopyReceiver::new(l.accept()?.0, Config::default())?;
let mut got = Vec::new();
rx.copy_to(&mut got)?;
sender.join().unwrap()?;
assert_eq!(got, vec![7u8; 100_000]);
println!("{:?} mapped", rx.counters().zero_copy_share());
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! `MSG_ZEROCOPY` (Linux 4.14 TCP, 5.0 UDP): the buffer is the kernel's until its completion
//! hands it back, with the kernel's word on whether it copied after all.
#![cfg_attr(
    feature = "msg_zerocopy",
    doc = r#"
```
use std::net::UdpSocket;
use std::time::Duration;
use zcnet::msg_zerocopy::{Config, ZeroCopySender};

let rx = UdpSocket::bind("127.0.0.1:0")?;
let tx = UdpSocket::bind("127.0.0.1:0")?;
tx.connect(rx.local_addr()?)?;
let mut sender = ZeroCopySender::new(tx, Config::default())?;
sender.send(vec![1u8; 32_000]).map_err(|e| e.error)?;
sender.drain(Duration::from_secs(5))?;
let back: Vec<_> = sender.returned().collect();
assert_eq!(back.len(), 1);
assert_eq!(back[0].sent, 32_000);
// Over loopback the kernel copies for local delivery, and says so.
assert!(back[0].copied != Some(false));
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! A file without a user copy (`sendfile`, `splice`, or an mmap window with `MSG_ZEROCOPY`):
#![cfg_attr(
    feature = "file",
    doc = r#"
```
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use zcnet::file::{Config, FileSender};

let path = std::env::temp_dir().join(format!("zcnet-doc-{}", std::process::id()));
std::fs::write(&path, vec![3u8; 300_000])?;
let l = TcpListener::bind("127.0.0.1:0")?;
let socket = TcpStream::connect(l.local_addr()?)?;
let reader = std::thread::spawn(move || {
    let mut got = Vec::new();
    l.accept()?.0.read_to_end(&mut got).map(|_| got)
});
let mut tx = FileSender::new(&socket, Config::default())?;
tx.send_file(&std::fs::File::open(&path)?, 0, 300_000)?;
socket.shutdown(std::net::Shutdown::Write)?;
assert_eq!(reader.join().unwrap()?.len(), 300_000);
println!("{} by {}", tx.counters().bytes, tx.mode().name());
std::fs::remove_file(&path)?;
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! io_uring `SEND_ZC` (Linux 6.0): owned buffers come back at their notification.
#![cfg_attr(
    feature = "uring",
    doc = r#"
```
use std::net::UdpSocket;
use std::time::Duration;
use zcnet::uring::{Config, Mode, UringSender};

if !zcnet::uring::support().setup.status.eq(&zcnet::support::Status::Available) {
    return Ok(()); // io_uring refused here (sysctl, seccomp): nothing to show
}
let rx = UdpSocket::bind("127.0.0.1:0")?;
let tx = UdpSocket::bind("127.0.0.1:0")?;
tx.connect(rx.local_addr()?)?;
let config = Config { mode: Mode::ZeroCopy, ..Config::default() };
let mut sender = UringSender::new(tx, config)?;
sender.send(vec![9u8; 8000]).map_err(|e| e.error)?;
sender.drain(Duration::from_secs(5))?;
assert_eq!(sender.returned().count(), 1);
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! `SO_PEEK_OFF` (Linux 6.9): read queued bytes at an offset, drop them only when done. The
//! [`relay`] forwards a connection this way and drops a byte from the source's queue only once
//! the destination acknowledged it, so that a failover to the next destination loses nothing.
#![cfg_attr(
    feature = "peek",
    doc = r#"
```
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use zcnet::peek::{Config, PeekCursor};

let l = TcpListener::bind("127.0.0.1:0")?;
TcpStream::connect(l.local_addr()?)?.write_all(b"headerbody")?;
let mut cur = PeekCursor::new(l.accept()?.0, Config::default())?;
let (mut a, mut b) = ([0u8; 6], [0u8; 4]);
cur.peek(&mut a)?;
cur.peek(&mut b)?; // continues after "header", which is still queued
assert_eq!((&a, &b), (b"header", b"body"));
cur.consume(6)?; // now "header" leaves the queue, without a copy
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! `TPACKET_V3` capture (needs `CAP_NET_RAW`):
#![cfg_attr(
    feature = "packet",
    doc = r#"
```
use std::time::Duration;
use zcnet::packet::{Capture, Config};

if zcnet::packet::support().rx.status != zcnet::support::Status::Available {
    return Ok(()); // no CAP_NET_RAW here
}
let mut cap = Capture::new("lo", Config::default())?;
let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
udp.send_to(b"hello", udp.local_addr()?)?;
let mut frames = 0;
for _ in 0..10 {
    frames += cap.recv_frames(Some(Duration::from_millis(200)), |f| assert!(f.len > 0))?;
    if frames > 0 { break; }
}
assert!(frames > 0);
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//! `AF_XDP` (Linux 4.18, needs `CAP_NET_RAW`): a frame sent from the socket's UMEM, whose
//! frame comes back with its completion. Sending only, without the redirect program, leaves
//! the interface's received frames to the stack (a receiving socket takes those of its queue).
#![cfg_attr(
    feature = "xdp",
    doc = r#"
```
use std::time::Duration;
use zcnet::xdp::{Config, XdpSocket};

if zcnet::xdp::support().socket.status != zcnet::support::Status::Available {
    return Ok(()); // no CAP_NET_RAW here
}
let config = Config {
    rx: false,
    tx: true,
    program: false,
    frame_count: 64,
    ring_size: 64,
    ..Config::default()
};
let mut xsk = XdpSocket::new("lo", config)?;
let mut frame = [0u8; 60];
frame[12..14].copy_from_slice(&[0x88, 0xb5]); // a local experimental EtherType: nothing answers
assert!(xsk.push(&frame)?);
xsk.drain(Duration::from_secs(5))?;
assert_eq!(xsk.counters().completions, 1);
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]
//!
//! # Soundness: what the types forbid
//! Each of these was possible from safe code in an earlier version and no longer compiles.
//!
//! The kernel ABI and raw calls are private, so safe code cannot hand the kernel an address
//! (a `tcp_zerocopy_receive` copy buffer, a borrowed `MSG_ZEROCOPY` slice, a second ring
//! mapping):
//! ```compile_fail
//! let _ = zcnet::sys::mm::page_size();
//! ```
//! A buffer sent zero-copy is moved into the sender and comes back only with its completion:
#![cfg_attr(
    feature = "msg_zerocopy",
    doc = r#"
```compile_fail
use zcnet::msg_zerocopy::{Config, ZeroCopySender};
let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
let mut tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(s, Config::default()).unwrap();
let mut buf = vec![0u8; 65536];
tx.send(buf).unwrap();
buf[0] = 1; // the kernel may still be reading it
```
"#
)]
//! An inline array moves with its owner, so it cannot be loaned (it is no [`loan::OwnedBuf`]):
#![cfg_attr(
    feature = "msg_zerocopy",
    doc = r#"
```compile_fail
use zcnet::msg_zerocopy::{Config, ZeroCopySender};
let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
let mut tx = ZeroCopySender::new(s, Config::default()).unwrap();
tx.send([0u8; 64]).unwrap();
```
"#
)]
//! Mapped receive pages are lent until the next receive, which releases them:
#![cfg_attr(
    feature = "tcp_rx",
    doc = r#"
```compile_fail
use zcnet::tcp_rx::{Config, TcpZeroCopyReceiver};
fn f(s: std::net::TcpStream) {
    let mut rx = TcpZeroCopyReceiver::new(s, Config::default()).unwrap();
    let first = rx.recv().unwrap().unwrap();
    let _second = rx.recv();
    println!("{}", first.mapped[0]); // those pages are gone
}
```
"#
)]
//! The same four, written correctly, compile:
#![cfg_attr(
    all(feature = "msg_zerocopy", feature = "tcp_rx"),
    doc = r#"
```
use zcnet::msg_zerocopy::{Config, ZeroCopySender};
use zcnet::tcp_rx::TcpZeroCopyReceiver;
fn f(s: std::net::TcpStream, u: std::net::UdpSocket) {
    let mut tx: ZeroCopySender<_, Vec<u8>> = ZeroCopySender::new(u, Config::default()).unwrap();
    tx.send(vec![0u8; 65536]).unwrap();
    for back in tx.returned() {
        let mut buf = back.buf; // the caller's again
        buf[0] = 1;
    }
    let mut rx = TcpZeroCopyReceiver::new(s, zcnet::tcp_rx::Config::default()).unwrap();
    let n = rx.recv().unwrap().map_or(0, |r| r.len());
    let _ = (n, zcnet::probe::features().host.page_size);
}
```
"#
)]
//! A `MSG_ZEROCOPY` sender's bookkeeping is its own: the caller's `send(2)` flags are a
//! [`msg_zerocopy::SendFlags`], which has no `MSG_ZEROCOPY` (with it, a buffer below the
//! threshold came back at once while the kernel held its pages), and the sender owns its
//! socket, a [`loan::ExclusiveSocket`] (two senders on one socket took each other's
//! completions); each item shows the `compile_fail` and the right way. A second sender through
//! another descriptor of the socket is refused at run time
//! ([`msg_zerocopy::ZeroCopyError::SocketInUse`]).
//!
//! A descriptor is never trusted past the borrow that checked it: [`peek::discard`] and the
//! peek cursor's consume check that the socket is TCP on every call (a test hands the cursor a
//! socket that turns into UDP and sees the refusal).
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The shared layers (loans, checks, raw calls, `auto`) and some mechanisms' parts serve several
// mechanisms each, so a build that leaves some mechanisms out leaves parts without a user. Gating
// each by the exact set of its users would break a partial build with every new user; the
// build with every mechanism (CI's clippy of the workspace) still finds what none uses.
#![cfg_attr(
    not(all(
        feature = "tcp_rx",
        feature = "msg_zerocopy",
        feature = "udp_gso",
        feature = "file",
        feature = "uring",
        feature = "peek",
        feature = "relay",
        feature = "packet",
        feature = "xdp"
    )),
    allow(dead_code)
)]

pub use counters::ZeroCopyCounters;

#[cfg(any(feature = "msg_zerocopy", feature = "uring"))]
pub mod auto;
mod cmsg;
pub mod counters;
#[cfg(feature = "msg_zerocopy")]
pub mod errqueue;
#[cfg(feature = "file")]
pub mod file;
pub mod loan;
pub mod mechanism;
#[cfg(feature = "msg_zerocopy")]
pub mod msg_zerocopy;
mod netdev;
#[cfg(feature = "packet")]
pub mod packet;
#[cfg(feature = "peek")]
pub mod peek;
pub mod probe;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(any(
    feature = "msg_zerocopy",
    feature = "uring",
    feature = "tcp_rx",
    feature = "peek",
    feature = "file"
))]
mod socket_kind;
pub mod support;
// The kernel ABI and raw calls: a crate of its own below this one, named as the module it was.
use zcnet_sys as sys;
pub mod tcp_info;
#[cfg(feature = "tcp_rx")]
pub mod tcp_rx;
#[cfg(feature = "tokio")]
pub mod tokio;
#[cfg(feature = "udp_gso")]
pub mod udp_gso;
#[cfg(feature = "uring")]
pub mod uring;
#[cfg(feature = "xdp")]
pub mod xdp;
