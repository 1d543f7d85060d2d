//! A namespace whose route leads into an `ifb` device that drops what it transmits
//! ([`SinkLab`]): UDP zero-copy sends complete without a copy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::loopback::prepare;
use crate::{Family, LabError, Netns, io_err};

/// A namespace whose route leads into an `ifb` device that drops what it transmits.
#[derive(Debug)]
pub struct SinkLab {
    /// The namespace.
    pub ns: Netns,
}

impl SinkLab {
    /// The sink device.
    pub const DEV: &'static str = "sink0";
    /// Its MTU: large enough for 64000-byte datagrams unfragmented.
    pub const MTU: u32 = 65535;
    const LLADDR: &'static str = "02:00:5e:00:00:02";
    /// The namespace's own IPv4 address, on the sink device.
    pub const ADDR_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

    /// Builds the lab: the device sends nothing of its own (no router solicitations), so its
    /// drop counter counts exactly what was sent into it.
    pub fn new() -> Result<SinkLab, LabError> {
        let ns = Netns::new()?;
        prepare(&ns, None)?;
        ns.ip(&[
            "link",
            "add",
            Self::DEV,
            "mtu",
            &Self::MTU.to_string(),
            "type",
            "ifb",
        ])?;
        // No router solicitations from the device: they are dropped there too, and counted
        // with what a test sends (201 drops for 200 datagrams, once in 200 runs, when one went
        // out in the test's window). With these the device sends nothing of its own.
        for (key, value) in [("router_solicitations", "0"), ("accept_ra", "0")] {
            ns.set_sysctl(&format!("net.ipv6.conf.{}.{key}", Self::DEV), value)?;
        }
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/24", Self::ADDR_V4),
            "dev",
            Self::DEV,
        ])?;
        ns.ip(&[
            "addr",
            "add",
            "2001:2:0:ff::1/64",
            "dev",
            Self::DEV,
            "nodad",
        ])?;
        ns.ip(&["link", "set", Self::DEV, "up"])?;
        // Permanent neighbours, so nothing waits on resolution before reaching the device.
        for family in Family::ALL {
            let target = Self::target(family).to_string();
            ns.ip(&[
                "neigh",
                "replace",
                &target,
                "lladdr",
                Self::LLADDR,
                "dev",
                Self::DEV,
                "nud",
                "permanent",
            ])?;
        }
        Ok(SinkLab { ns })
    }

    /// [`SinkLab::new`] with IPv6 off on the sink device as well (no IPv6 at all reaches it).
    pub fn quiet() -> Result<SinkLab, LabError> {
        let lab = SinkLab::new()?;
        lab.ns
            .set_sysctl(&format!("net.ipv6.conf.{}.disable_ipv6", Self::DEV), "1")?;
        Ok(lab)
    }

    /// [`SinkLab::new`] with the device's UDP segmentation offload off (`ethtool -K sink0
    /// tx-udp-segmentation off`, needs `ethtool`): a GSO train is cut into datagrams in
    /// software before the device drops them, as on a NIC without UDP segmentation offload.
    pub fn software_gso() -> Result<SinkLab, LabError> {
        let lab = SinkLab::new()?;
        let out = lab
            .ns
            .command("ethtool")
            .args(["-K", Self::DEV, "tx-udp-segmentation", "off"])
            .output()
            .map_err(io_err("running ethtool (apt-get install ethtool)"))?;
        if !out.status.success() {
            return Err(LabError::Command {
                cmd: format!(
                    "ethtool -K {} tx-udp-segmentation off (Debian package ethtool)",
                    Self::DEV
                ),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(lab)
    }

    /// The address to send to: routed into the sink device, where every packet is dropped.
    pub fn target(family: Family) -> IpAddr {
        match family {
            Family::V4 => Ipv4Addr::new(198, 19, 0, 2).into(),
            Family::V6 => Ipv6Addr::new(0x2001, 2, 0, 0xff, 0, 0, 0, 2).into(),
        }
    }

    /// Packets the sink has dropped so far (its RX-dropped counter).
    pub fn dropped(&self) -> Result<u64, LabError> {
        Ok(self.ns.link_stats(Self::DEV)?.rx_dropped)
    }
}
