//! TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`, Linux 4.18): received pages are mapped into
//! the process instead of copied.
//!
//! [`TcpZeroCopyReceiver`] reserves one read-only mapping on a connected TCP socket (aligned to
//! 2 MiB, sized to the window, 512 KiB by default) and, on each [`recv`](TcpZeroCopyReceiver::recv),
//! asks the kernel to map whole received pages into it. Bytes that cannot be mapped (a partial
//! page, a header) are read by copy: in the same call through the `copybuf` fields where the
//! kernel has them (5.11+), else by `recv(2)`. Received data is lent as `&[u8]` slices valid
//! until the next receive; mapped pages are released right after.
//!
//! The `copybuf` given to the kernel is kept below one page: since 5.11 the kernel copies the
//! whole queue into it whenever the queue fits ("hybrid copy" for small RPCs), mappable pages
//! included, and a copy that ends inside a page misaligns the stream so that the following
//! calls cannot map either. With a window-sized copy buffer and `SO_RCVLOWAT` at the window,
//! that took the mapped share on loopback from 100 % to 0-97 %, varying run to run.
//!
//! Where the kernel lacks the feature, the socket cannot be mapped, or copying is forced, the
//! same API reads with plain `recv(2)` and [`TcpZeroCopyReceiver::fallback_reason`] says why.
//! [`Counters`] always says how many bytes were mapped and how many copied.
//!
//! Only whole 4 KiB pages at offset 0 of a segment's payload can be mapped: on loopback that
//! needs an MSS of 4108 (4096 + 12 timestamp bytes) or a loopback MTU of 61512, and a sender
//! using `MSG_ZEROCOPY` (a plain sender's payload sits at unaligned offsets); on a NIC, header
//! split or a 4 KiB-payload MTU. Otherwise everything silently takes the copy path, which is why
//! the mapped share is always reported.
//!
//! # References
//! - `getsockopt(2)`, `tcp(7)`; the kernel's `tools/testing/selftests/net/tcp_mmap.c`
//! - "tcp: add TCP_ZEROCOPY_RECEIVE support for zerocopy receive" (Linux 4.18)

mod config;
mod counters;
mod error;
mod receiver;
mod support;

pub use config::{Config, DEFAULT_WINDOW, MAX_WINDOW, Mode, Release, WINDOW_ALIGN};
pub use counters::{Counters, NOTHING_MAPPED_AFTER};
pub use error::RxError;
#[cfg(feature = "tokio")]
pub(crate) use receiver::Step;
pub use receiver::{PROBE_EVERY, Received, TcpZeroCopyReceiver};
pub use support::{Support, support};

/// The kind of socket a receiver takes (docs/api.md, "Socket kinds"): checked by the sync
/// constructor and, before it changes the socket, by the tokio twin's.
pub(crate) fn check_kind(fd: std::os::fd::BorrowedFd<'_>) -> Result<(), RxError> {
    crate::socket_kind::check(fd, crate::socket_kind::Need::TCP).map_err(|source| RxError::Io {
        call: "the socket check (TCP_ZEROCOPY_RECEIVE maps the pages of a connected TCP \
               stream, IPv4 or IPv6)",
        source,
    })
}
