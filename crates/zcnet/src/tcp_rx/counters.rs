//! What a receiver did: bytes mapped and copied.

/// What a receiver has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Bytes received by page mapping.
    pub mapped_bytes: u64,
    /// Bytes received by copy (`copybuf`, `recv`).
    pub copied_bytes: u64,
    /// Pages mapped.
    pub mapped_pages: u64,
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)` calls.
    pub zero_copy_calls: u64,
    /// `recv(2)` calls.
    pub recv_calls: u64,
}

/// Bytes received by copy, none mapped, after which
/// [`TcpZeroCopyReceiver::fallback_reason`](super::TcpZeroCopyReceiver::fallback_reason) says so:
/// 16 pages.
pub const NOTHING_MAPPED_AFTER: u64 = 64 * 1024;

/// What [`TcpZeroCopyReceiver::fallback_reason`](super::TcpZeroCopyReceiver::fallback_reason) says
/// when nothing was mapped.
pub(super) const NOTHING_MAPPED: &str = "the kernel mapped no page: every byte came by copy, since no \
     segment carried whole, page-aligned 4 KiB of payload in pages it may map (a sender of plain \
     writes on loopback; an MSS that is not 4096 plus the TCP options; a NIC without header \
     split; or a local sender's sendfile or splice, whose page-cache pages Linux 6.8 and the \
     stable kernels since January 2024 never map: \"tcp: add sanity checks to rx zerocopy\")";

impl Counters {
    /// All bytes received.
    pub fn bytes(&self) -> u64 {
        self.mapped_bytes + self.copied_bytes
    }
}

impl crate::ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        self.mapped_bytes
    }
    fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }
    /// `recv(2)` calls: bytes that could not be mapped, or the whole stream in copy mode.
    fn fallbacks(&self) -> u64 {
        self.recv_calls
    }
}
