//! Fanout: packets of one interface spread over several rings.

use std::os::fd::AsFd;

use super::{PacketError, RxConfig, RxRing, check_ring_memory, sys_err};
use crate::sys::{self, abi};

/// Fanout modes (`PACKET_FANOUT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "PACKET_FANOUT")]
pub enum FanoutMode {
    /// By flow hash: a flow stays on one ring.
    Hash,
    /// In turn.
    LoadBalance,
    /// By the CPU the packet arrived on.
    Cpu,
}

impl FanoutMode {
    fn raw(self) -> u32 {
        match self {
            FanoutMode::Hash => abi::PACKET_FANOUT_HASH,
            FanoutMode::LoadBalance => abi::PACKET_FANOUT_LB,
            FanoutMode::Cpu => abi::PACKET_FANOUT_CPU,
        }
    }
}

impl RxRing {
    /// Joins fanout group `group` (the same id and mode on every ring of the group).
    ///
    /// # Errors
    /// `setsockopt(PACKET_FANOUT)`'s error (a group of another mode, for one).
    #[doc(alias = "PACKET_FANOUT")]
    pub fn join_fanout(&self, group: u16, mode: FanoutMode) -> Result<(), PacketError> {
        let arg: u32 = u32::from(group) | (mode.raw() << 16);
        sys::sockopt::set_packet_fanout(self.as_fd(), arg)
            .map_err(sys_err("setsockopt(PACKET_FANOUT)"))
    }
}

/// `n` rings on `iface` in one fanout group (id from the process id), each with `config`.
///
/// # Errors
/// As [`RxRing::new`] and [`RxRing::join_fanout`].
#[doc(alias = "PACKET_FANOUT")]
pub fn fanout(
    iface: &str,
    n: usize,
    mode: FanoutMode,
    config: &RxConfig,
) -> Result<Vec<RxRing>, PacketError> {
    check_ring_memory(n, config.block_size, config.block_count)?;
    let group = (std::process::id() & 0xffff) as u16;
    (0..n)
        .map(|_| {
            let r = RxRing::new(iface, config.clone())?;
            r.join_fanout(group, mode)?;
            Ok(r)
        })
        .collect()
}
