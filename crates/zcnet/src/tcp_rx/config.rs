//! How a receiver is set up.

use std::time::Duration;

/// How mapped pages are released after use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// `madvise(MADV_DONTNEED)` right after use, and `TLB_CLEAN_HINT` on the next call.
    #[doc(alias = "MADV_DONTNEED")]
    Madvise,
    /// Leave the pages mapped; the next `TCP_ZEROCOPY_RECEIVE` zaps the range itself.
    KernelZap,
}

/// Largest window [`TcpZeroCopyReceiver::new`](super::TcpZeroCopyReceiver::new) accepts: 1 GiB.
pub const MAX_WINDOW: usize = 1 << 30;

/// How a [`TcpZeroCopyReceiver`](super::TcpZeroCopyReceiver) receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Map whole pages where the kernel can (`TCP_ZEROCOPY_RECEIVE`), copy the rest; where the
    /// socket cannot be mapped at all, copy everything and say why
    /// ([`TcpZeroCopyReceiver::fallback_reason`](super::TcpZeroCopyReceiver::fallback_reason)).
    #[default]
    ZeroCopy,
    /// Read everything with `recv(2)`: the copying twin, with the same API.
    Copy,
}

/// Default window: 512 KiB, as `tcp_mmap` uses.
pub const DEFAULT_WINDOW: usize = 512 * 1024;
/// Alignment of the window: 2 MiB keeps page-table locks of different windows apart.
pub const WINDOW_ALIGN: usize = 2 * 1024 * 1024;

/// How a [`TcpZeroCopyReceiver`](super::TcpZeroCopyReceiver) is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// Zero-copy (default) or copy.
    pub mode: Mode,
    /// Bytes mapped per call at most (rounded up to whole pages; at most [`MAX_WINDOW`]).
    pub window: usize,
    /// How pages are released after use. [`Release::Madvise`] measured faster here (see the
    /// tcp-rx results in docs/results/tcp-rx.md), as `tcp_mmap`'s comment predicts.
    pub release: Release,
    /// `SO_RCVLOWAT`: wake the receiver only when this many bytes are queued (or at EOF).
    /// Batching pays for zero copy on a bulk stream (`zcnet recv` and the benches set it to the
    /// window); `None` (the default since issue 62) leaves the socket's setting alone (one
    /// byte), as a protocol whose peer waits for an answer needs: 18 bytes of a request under
    /// a low-water mark of 512 KiB were never handed out.
    pub rcvlowat: Option<usize>,
    /// Give up when no data arrives for this long; `None` waits forever.
    pub timeout: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::ZeroCopy,
            window: DEFAULT_WINDOW,
            release: Release::Madvise,
            rcvlowat: None,
            timeout: None,
        }
    }
}
