//! Two namespaces joined by a veth pair ([`VethLab`]), IPv4 and IPv6 on both ends.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::loopback::prepare;
use crate::{Family, LabError, Netns};

/// Two namespaces, `a` and `b`, joined by a veth pair.
#[derive(Debug)]
pub struct VethLab {
    /// Side A (device [`VethLab::DEV_A`]).
    pub a: Netns,
    /// Side B (device [`VethLab::DEV_B`]).
    pub b: Netns,
    /// MTU of both ends.
    pub mtu: u32,
}

impl VethLab {
    /// Device name in `a`.
    pub const DEV_A: &'static str = "veth-a";
    /// Device name in `b`.
    pub const DEV_B: &'static str = "veth-b";

    /// Builds the lab with `mtu` on both ends (`None`: 1500).
    pub fn new(mtu: Option<u32>) -> Result<VethLab, LabError> {
        VethLab::build(mtu, 1)
    }

    /// [`VethLab::quiet`] with `queues` RX and TX queues on each end: a frame leaves veth-a by
    /// the TX queue its flow hashes to and arrives on veth-b's RX queue of the same number.
    ///
    /// # Errors
    /// As [`VethLab::quiet`].
    pub fn multiqueue(queues: u32) -> Result<VethLab, LabError> {
        VethLab::build(None, queues)?.silence()
    }

    fn build(mtu: Option<u32>, queues: u32) -> Result<VethLab, LabError> {
        let (a, b) = (Netns::new()?, Netns::new()?);
        prepare(&a, None)?;
        prepare(&b, None)?;
        let mtu = mtu.unwrap_or(1500);
        let (m, q) = (mtu.to_string(), queues.to_string());
        let each = ["mtu", &m, "numtxqueues", &q, "numrxqueues", &q];
        // Created inside `a` with its peer placed in `b`: the pair never exists on the host.
        let mut args = vec!["link", "add", Self::DEV_A];
        args.extend(each);
        args.extend(["type", "veth", "peer", "name", Self::DEV_B]);
        args.extend(each);
        args.extend(["netns", b.name()]);
        a.ip(&args)?;
        for (ns, dev, side) in [(&a, Self::DEV_A, Side::A), (&b, Self::DEV_B, Side::B)] {
            let v4 = format!("{}/24", Self::addr(side, Family::V4));
            let v6 = format!("{}/64", Self::addr(side, Family::V6));
            ns.ip(&["addr", "add", &v4, "dev", dev])?;
            ns.ip(&["addr", "add", &v6, "dev", dev, "nodad"])?;
            ns.ip(&["link", "set", dev, "up"])?;
        }
        // Permanent neighbours both ways, so that no run waits on resolution: IPv6 neighbour
        // discovery took 1.02-1.04 s here (the link-local addresses are still tentative), longer
        // than a short run (issue 48 item 7).
        let macs = [a.mac(Self::DEV_A)?, b.mac(Self::DEV_B)?];
        for (ns, dev, peer, mac) in [
            (&a, Self::DEV_A, Side::B, macs[1]),
            (&b, Self::DEV_B, Side::A, macs[0]),
        ] {
            let lladdr = mac
                .iter()
                .map(|o| format!("{o:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            for family in Family::ALL {
                let target = Self::addr(peer, family).to_string();
                ns.ip(&[
                    "neigh",
                    "replace",
                    &target,
                    "lladdr",
                    &lladdr,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ])?;
            }
        }
        Ok(VethLab { a, b, mtu })
    }

    /// [`VethLab::new`] with IPv6 off on both devices: no router or neighbour discovery, no MLD,
    /// so the only frames on the link are the ones a test or bench sends.
    ///
    /// # Errors
    /// As [`VethLab::new`], or the sysctl refused.
    pub fn quiet(mtu: Option<u32>) -> Result<VethLab, LabError> {
        VethLab::new(mtu)?.silence()
    }

    /// IPv6 off on both devices.
    fn silence(self) -> Result<VethLab, LabError> {
        for (side, dev) in [(Side::A, Self::DEV_A), (Side::B, Self::DEV_B)] {
            self.ns(side)
                .set_sysctl(&format!("net.ipv6.conf.{dev}.disable_ipv6"), "1")?;
        }
        Ok(self)
    }

    /// The address of `side` in `family`.
    pub fn addr(side: Side, family: Family) -> IpAddr {
        let host = match side {
            Side::A => 1,
            Side::B => 2,
        };
        match family {
            Family::V4 => Ipv4Addr::new(198, 18, 0, host as u8).into(),
            Family::V6 => Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, host).into(),
        }
    }

    /// The namespace of `side`.
    pub fn ns(&self, side: Side) -> &Netns {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }
}

/// One end of a [`VethLab`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first namespace.
    A,
    /// The second namespace.
    B,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_addresses_are_in_the_benchmarking_ranges() {
        for side in [Side::A, Side::B] {
            match VethLab::addr(side, Family::V4) {
                IpAddr::V4(a) => assert_eq!(a.octets()[..2], [198, 18]),
                IpAddr::V6(_) => panic!("v4 expected"),
            }
            match VethLab::addr(side, Family::V6) {
                IpAddr::V6(a) => assert_eq!(a.segments()[..2], [0x2001, 2]),
                IpAddr::V4(_) => panic!("v6 expected"),
            }
        }
    }
}
