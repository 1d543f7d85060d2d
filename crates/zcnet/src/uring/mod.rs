//! io_uring zero-copy sends: `IORING_OP_SEND_ZC` (Linux 6.0) and `IORING_OP_SENDMSG_ZC` (6.1).
//!
//! A zero-copy request produces two completions: the result (bytes sent or `-errno`, with
//! `IORING_CQE_F_MORE` when a notification follows) and the notification
//! (`IORING_CQE_F_NOTIF`), after which the kernel no longer reads the buffer. [`UringSender`]
//! owns each buffer from submission until both have arrived, in either order, and follows
//! `F_MORE` rather than the result: a failed request can still be notified. Every request sets
//! `IORING_SEND_ZC_REPORT_USAGE` (6.2; retried without it on older kernels), so each returned
//! buffer says whether the kernel copied it after all (`IORING_NOTIF_USAGE_ZC_COPIED`).
//!
//! Requests stay in flight in a window and are submitted in batches; the sender waits only when
//! the window is full, and then for whatever completes, never once per notification.
//!
//! On a stream socket the peer gets the bytes of [`UringSender::send`] calls in call order,
//! whatever the kernel does (io_uring itself does not order requests on one socket): a batch
//! goes to the kernel as one chain of linked requests (`IOSQE_IO_LINK`), the next batch once
//! every result of this one is in, and a request the kernel cut short or cancelled is sent again
//! before anything after it. After a send fails for good (the peer reset the connection), every
//! later buffer comes back unsent with an error that says so: bytes after a gap would corrupt the
//! stream. Datagram sockets keep every request independent.
//!
//! With [`Mode::ZeroCopyFixed`] the buffers come from a [`Pool`] registered with the ring
//! (`IORING_REGISTER_BUFFERS`, `IORING_RECVSEND_FIXED_BUF`): the kernel pins the pool's pages
//! once instead of on every send. Registration counts against `RLIMIT_MEMLOCK` unless the caller
//! has `CAP_IPC_LOCK`; the need is checked before registering.
//!
//! [`Mode::Copy`] sends with `IORING_OP_SEND` / `IORING_OP_SENDMSG` through the same API, for
//! A/B comparisons and as the fallback where `SEND_ZC` is missing.
//!
//! A sender that sends every buffer again as it comes back (a media or load sender, refilling
//! each or not) can leave the buffers where the sender holds them:
//! [`UringSender::resend_returned`] offers each buffer that came back whole to a closure, which
//! may write it and says whether it goes again; on a datagram socket in any mode but
//! [`Mode::Auto`], without trains, it goes
//! again from its slot, without a trip through [`UringSender::returned`] and
//! [`UringSender::send`] (about a quarter of the sender's instructions a request, issue 51).
//! The closure sees a buffer only after the kernel is done with it.
//!
//! # Example
//! ```no_run
//! use std::net::UdpSocket;
//! use zcnet::uring::{Config, Mode, UringSender};
//!
//! let sock = UdpSocket::bind("127.0.0.1:0")?;
//! sock.connect("127.0.0.1:9")?;
//! let mut tx = UringSender::new(sock, Config { mode: Mode::ZeroCopy, ..Config::default() })?;
//! if let Some(why) = tx.fallback_reason() {
//!     eprintln!("io_uring: {why}");
//! }
//! tx.send(vec![7u8; 64000]).map_err(|e| e.error)?;
//! tx.drain(std::time::Duration::from_secs(1))?;
//! for r in tx.returned() {
//!     println!("{} bytes, copied: {:?}, error: {:?}", r.sent, r.copied, r.error);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # References
//! - `io_uring_prep_send_zc(3)`, `io_uring_prep_sendmsg_zc(3)`, `io_uring_register_buffers(3)`
//!   (liburing)
//! - the kernel's `io_uring/net.c` and `Documentation/networking/msg_zerocopy.rst`

mod config;
mod engine;
mod error;
mod sender;
mod support;

pub use crate::loan::pool::{Pool, PoolBuf};
pub use crate::loan::{Closed, ExclusiveSocket, NewError, OwnedBuf, Returned, SendError};
pub use config::{Config, Counters, Mode, RingSetup};
pub use error::{UringError, memlock_check};
pub use sender::UringSender;
pub use support::{Support, support};
