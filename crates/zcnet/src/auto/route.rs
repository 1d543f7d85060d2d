//! Where a socket's data goes: to a socket of this host, or out through a device.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use serde::{Deserialize, Serialize};

use crate::sys;

/// Where a socket's data goes, as far as zero copy cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// To a socket of this network namespace (a loopback or a local address): the receiver's
    /// queue holds the sender's pages, which the kernel copies to release them.
    Local,
    /// Out through a device. A device that hands the packet to a socket on this host after all
    /// (veth) shows itself through completions flagged "copied".
    Device,
}

impl Route {
    /// `local`, `device`.
    pub fn name(self) -> &'static str {
        match self {
            Route::Local => "local",
            Route::Device => "device",
        }
    }

    /// The route to `addr`: local when it is a loopback address or one this namespace holds
    /// (a UDP socket can bind it), else through a device.
    pub fn to(addr: IpAddr) -> Route {
        if addr.is_loopback() || UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok() {
            Route::Local
        } else {
            Route::Device
        }
    }

    /// The route of a connected socket; `None` when it is not connected.
    pub fn of(socket: &impl AsFd) -> Option<Route> {
        sys::peer_addr(socket.as_fd())
            .ok()
            .flatten()
            .map(|a| Route::to(a.ip()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_of_loopback_and_local_addresses() {
        assert_eq!(Route::to("127.0.0.1".parse().unwrap()), Route::Local);
        assert_eq!(Route::to("::1".parse().unwrap()), Route::Local);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(Route::of(&s), None);
        s.connect("127.0.0.1:9").unwrap();
        assert_eq!(Route::of(&s), Some(Route::Local));
    }
}
