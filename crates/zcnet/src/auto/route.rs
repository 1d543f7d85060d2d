//! Where a socket's data goes: to a socket of this host, or out through a device, and for GSO
//! trains, whether that device segments them.

use std::fmt;
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
        sys::net::peer_addr(socket.as_fd())
            .ok()
            .flatten()
            .map(|a| Route::to(a.ip()))
    }
}

/// What a sender of GSO trains (a `Config::segment`, `UDP_SEGMENT`) found of the device its
/// route leaves by: whether the device takes the trains whole (`tx-udp-segmentation`, what
/// `ethtool -k` prints) or the kernel cuts them in software before it
/// (`Documentation/networking/segmentation-offloads.rst`, "UDP segmentation offload").
///
/// Only the device the route names is read. A stacked device (a VLAN, bond, bridge or macvlan)
/// reports the feature on and hands trains whole to the device below it, which may cut them in
/// software after all; so [`Segmentation::Offload`] says no more than that the first device
/// takes them whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Trains {
    /// The segment size, bytes: a message longer than it is a train.
    pub segment: usize,
    /// What the route's device does with them.
    pub segmentation: Segmentation,
}

/// Who cuts a sender's GSO trains into datagrams.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Segmentation {
    /// The device the route leaves by takes them whole (`tx-udp-segmentation` on).
    Offload {
        /// The device.
        device: String,
    },
    /// The kernel cuts them in software before the device (`tx-udp-segmentation` off).
    Software {
        /// The device.
        device: String,
    },
    /// Not known: the socket is not connected, the route is local, or a lookup failed.
    Unknown {
        /// The device, when the route was found but its feature could not be read.
        device: Option<String>,
        /// Why, with the call and its error.
        why: String,
    },
}

impl Trains {
    /// What the route of `socket` (connected, through a device) does with trains of `segment`:
    /// `RTM_GETROUTE` for its peer, with the socket's own address, bound device (or the peer's
    /// IPv6 scope) and mark, from the calling thread (rtnetlink(7); the socket must share the
    /// thread's network namespace, checked with `SO_NETNS_COOKIE`, Linux 5.14), the device's
    /// name by `SIOCGIFNAME` and its feature by `ETHTOOL_GFEATURES` (netdevice(7), Linux
    /// 2.6.39).
    pub fn of(socket: &impl AsFd, segment: usize) -> Trains {
        Trains {
            segment,
            segmentation: Segmentation::of(socket.as_fd()),
        }
    }

    /// Whether the kernel cuts these trains in software: the route's device has its UDP
    /// segmentation offload off.
    pub fn software(&self) -> bool {
        matches!(self.segmentation, Segmentation::Software { .. })
    }

    /// Whether a message of `len` bytes is a train (more than one segment).
    pub fn is_train(&self, len: usize) -> bool {
        len > self.segment
    }
}

impl Segmentation {
    fn of(fd: std::os::fd::BorrowedFd<'_>) -> Segmentation {
        let unknown = |why: String| Segmentation::Unknown { device: None, why };
        let peer = match sys::net::peer_addr(fd) {
            Ok(Some(p)) => p,
            Ok(None) => return unknown("the socket is not connected".into()),
            Err(e) => return unknown(format!("getpeername: {e}")),
        };
        if Route::to(peer.ip()) == Route::Local {
            return unknown("the route is local: no device segments the trains".into());
        }
        let device = match crate::netdev::egress(fd, peer) {
            Ok(name) => name,
            Err(why) => return unknown(why),
        };
        match crate::netdev::feature_of(fd, &device, "tx-udp-segmentation") {
            Ok(true) => Segmentation::Offload { device },
            Ok(false) => Segmentation::Software { device },
            Err(why) => Segmentation::Unknown {
                device: Some(device),
                why,
            },
        }
    }
}

impl fmt::Display for Trains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trains of {} B segments", self.segment)?;
        match &self.segmentation {
            Segmentation::Software { device } => write!(
                f,
                " leave by {device}, which cuts them in software (tx-udp-segmentation off): \
                 they copy unless zero copy measures {:.0} % cheaper",
                100.0 * super::learn::SOFTWARE_GSO_MARGIN
            ),
            Segmentation::Offload { device } => write!(
                f,
                " leave by {device}, which takes them whole (tx-udp-segmentation on)"
            ),
            Segmentation::Unknown { why, .. } => {
                write!(f, ": the device's segmentation is not known ({why})")
            }
        }
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

    #[test]
    fn trains_say_why_their_device_is_not_known() {
        let segment = 1472;
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = Trains::of(&s, segment);
        assert!(matches!(
            t.segmentation,
            Segmentation::Unknown { device: None, .. }
        ));
        assert!(t.to_string().contains("not connected"), "{t}");
        s.connect("127.0.0.1:9").unwrap();
        let t = Trains::of(&s, segment);
        assert!(!t.software());
        assert!(t.to_string().contains("local"), "{t}");
        assert!(t.is_train(1473) && !t.is_train(1472));
        let sw = Trains {
            segment: 1200,
            segmentation: Segmentation::Software {
                device: "sink0".into(),
            },
        };
        assert!(sw.software());
        assert_eq!(
            sw.to_string(),
            "trains of 1200 B segments leave by sink0, which cuts them in software \
             (tx-udp-segmentation off): they copy unless zero copy measures 15 % cheaper"
        );
        assert_eq!(
            serde_json::to_value(&sw.segmentation).unwrap(),
            serde_json::json!({"kind": "software", "device": "sink0"})
        );
    }
}
