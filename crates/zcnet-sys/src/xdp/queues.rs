//! The RX queues of an interface (`SIOCETHTOOL` `ETHTOOL_GCHANNELS`, `netdevice(7)`).

use std::io;
use std::os::fd::AsFd;

use crate::{abi, net};

/// The RX queues of `iface` in this thread's network namespace (`SIOCETHTOOL`
/// `ETHTOOL_GCHANNELS`: RX plus combined channels), where the driver reports them.
pub fn rx_queues(iface: &str) -> io::Result<u32> {
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let mut ch = EthtoolChannels {
        cmd: abi::ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let fd = net::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    // SAFETY: for ETHTOOL_GCHANNELS the kernel writes one `struct ethtool_channels`, which
    // `ch` is.
    unsafe { crate::netdev::ethtool(fd.as_fd(), iface, &mut ch) }?;
    Ok(ch.rx_count + ch.combined_count)
}
