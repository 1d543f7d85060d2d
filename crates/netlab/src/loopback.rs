//! A fresh namespace's loopback ([`LoopbackLab`]), and what every lab sets in its namespaces
//! ([`CONGESTION`]).

use std::net::IpAddr;

use crate::{Family, LabError, Netns};

/// The congestion control every lab sets inside its namespaces.
pub const CONGESTION: &str = "reno";

pub(crate) fn prepare(ns: &Netns, lo_mtu: Option<u32>) -> Result<(), LabError> {
    match lo_mtu {
        Some(mtu) => ns.ip(&["link", "set", "lo", "mtu", &mtu.to_string(), "up"])?,
        None => ns.ip(&["link", "set", "lo", "up"])?,
    };
    ns.set_sysctl("net.ipv4.tcp_congestion_control", CONGESTION)
}

/// A fresh namespace's loopback, with the MTU asked for (default 65536).
#[derive(Debug)]
pub struct LoopbackLab {
    /// The namespace.
    pub ns: Netns,
    /// MTU of its `lo`.
    pub mtu: u32,
}

impl LoopbackLab {
    /// Builds the lab; `mtu` `None` keeps the kernel's 65536.
    pub fn new(mtu: Option<u32>) -> Result<LoopbackLab, LabError> {
        let ns = Netns::new()?;
        prepare(&ns, mtu)?;
        Ok(LoopbackLab {
            ns,
            mtu: mtu.unwrap_or(65536),
        })
    }

    /// The address to use for `family` (127.0.0.1 or ::1).
    pub fn addr(&self, family: Family) -> IpAddr {
        family.loopback()
    }
}
