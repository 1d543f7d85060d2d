//! What a [`FileSender`](super::FileSender) sent so far ([`Counters`]).

use crate::msg_zerocopy;

/// What a [`FileSender`](super::FileSender) sent so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Bytes sent.
    pub bytes: u64,
    /// Bytes that left without a user-space copy: all of them for sendfile and splice, none for
    /// copy, and for mmap-zc those whose completion was not flagged copied.
    pub zero_copy_bytes: u64,
    /// For mmap-zc, the `MSG_ZEROCOPY` sender's counters of the last file.
    pub mmap_window: Option<msg_zerocopy::Counters>,
    /// [`Mode::Auto`](super::Mode::Auto): files sent each way and why (one call per file; zeros in
    /// other modes).
    pub auto: crate::auto::AutoCounters,
}

impl Counters {
    pub(super) fn add(&mut self, bytes: u64, zero_copy_bytes: u64) {
        self.bytes += bytes;
        self.zero_copy_bytes += zero_copy_bytes;
    }
}

impl crate::ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        self.zero_copy_bytes
    }
    fn copied_bytes(&self) -> u64 {
        self.bytes - self.zero_copy_bytes
    }
    /// `ENOBUFS` fallbacks and copied-policy switches of the mmap-zc sender.
    fn fallbacks(&self) -> u64 {
        self.mmap_window.map_or(0, |c| c.fallbacks())
    }
}
