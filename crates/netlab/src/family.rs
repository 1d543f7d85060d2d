//! Address families ([`Family`]) and their loopback addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Both families, IPv4 first.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family of `ip`.
    pub fn of(ip: std::net::IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// `"ipv4"` or `"ipv6"`, as results name them.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// The loopback address of this family.
    pub fn loopback(self) -> IpAddr {
        match self {
            Family::V4 => Ipv4Addr::LOCALHOST.into(),
            Family::V6 => Ipv6Addr::LOCALHOST.into(),
        }
    }
}
