//! How an [`XdpSocket`](super::XdpSocket) is made: [`Config`], the bind [`Mode`] and where the
//! program runs ([`Attach`]).

use std::time::Duration;

/// How to bind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// `XDP_ZEROCOPY`: the driver writes and reads the UMEM. Where the driver cannot (or the socket
    /// shares a UMEM bound in copy mode), the socket binds in [`Mode::Copy`] and
    /// [`XdpSocket::fallback_reason`](super::XdpSocket::fallback_reason) says why, as every
    /// zero-copy mode falls back.
    #[default]
    #[doc(alias = "XDP_ZEROCOPY")]
    ZeroCopy,
    /// `XDP_COPY`: the kernel copies each frame into (or out of) the UMEM; any device.
    #[doc(alias = "XDP_COPY")]
    Copy,
}

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attach {
    /// Native where the driver has it, else generic (not called `Auto`: in zcnet that word means
    /// the senders' choice by measured cost).
    NativeOrGeneric,
    /// `XDP_FLAGS_DRV_MODE`: in the driver, before any skb exists.
    Native,
    /// `XDP_FLAGS_SKB_MODE`: after the skb is built (any device).
    Generic,
}

/// How an [`XdpSocket`](super::XdpSocket) is made.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Zero copy, copy, or auto.
    pub mode: Mode,
    /// Native or generic XDP.
    pub attach: Attach,
    /// The interface's RX (and TX) queue.
    pub queue: u32,
    /// UMEM frames (default 4096).
    pub frame_count: u32,
    /// Bytes per UMEM frame: 2048 or 4096 (default 2048).
    pub frame_size: u32,
    /// Entries of each ring, a power of two (default 2048).
    pub ring_size: u32,
    /// Receive (default true).
    pub rx: bool,
    /// Send (default false).
    pub tx: bool,
    /// Attach the redirect program (default true; a TX-only socket needs none).
    pub program: bool,
    /// After the first frame of a receive, wait this long once for more before returning the
    /// batch (default 0): fewer wakeups per frame at high rates, as a `TPACKET_V3` block's
    /// retire timeout gives, at the cost of that much latency. Keep it under the time the RX
    /// ring takes to fill, or frames are dropped (`Statistics::rx_ring_full`).
    pub coalesce: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::ZeroCopy,
            attach: Attach::NativeOrGeneric,
            queue: 0,
            frame_count: 4096,
            frame_size: 2048,
            ring_size: 2048,
            rx: true,
            tx: false,
            program: true,
            coalesce: Duration::ZERO,
        }
    }
}
