//! What a socket did ([`Counters`]) and what the kernel counted (`XDP_STATISTICS`,
//! [`Statistics`]).

use crate::counters::ZeroCopyCounters;

/// The kernel's `XDP_STATISTICS` of a socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[doc(alias = "XDP_STATISTICS")]
pub struct Statistics {
    /// Frames dropped for other reasons.
    pub rx_dropped: u64,
    /// Frames dropped for an invalid fill descriptor.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel refused.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (5.9+).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (5.9+).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty (5.9+).
    pub tx_ring_empty_descs: u64,
}

/// What a socket did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames put on the TX ring.
    pub tx_frames: u64,
    /// Bytes put on the TX ring.
    pub tx_bytes: u64,
    /// TX frames whose completion came back.
    pub completions: u64,
    /// Times a receive found the kernel waiting for fill-ring frames (need-wakeup set).
    pub fill_ring_empty: u64,
    /// Completions that named no frame in flight (a broken ring; never trusted).
    pub bad_completions: u64,
    /// Received descriptors outside the UMEM or across a frame's end (dropped, never read).
    pub bad_descs: u64,
    /// Whether the socket is bound zero-copy.
    pub zero_copy: bool,
}

impl ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        if self.zero_copy {
            self.rx_bytes + self.tx_bytes
        } else {
            0
        }
    }

    fn copied_bytes(&self) -> u64 {
        if self.zero_copy {
            0
        } else {
            self.rx_bytes + self.tx_bytes
        }
    }

    fn fallbacks(&self) -> u64 {
        0
    }
}
