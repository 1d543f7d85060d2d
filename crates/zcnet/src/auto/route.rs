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
        sys::peer_addr(socket.as_fd())
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
/// software after all; so `offload: Some(true)` says no more than that the first device takes
/// them whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Trains {
    /// The segment size, bytes: a message longer than it is a train.
    pub segment: usize,
    /// The device the route leaves by; `None` when it is not known (see `unknown`).
    pub device: Option<String>,
    /// Whether that device has `tx-udp-segmentation` on; `None` when not known.
    pub offload: Option<bool>,
    /// Why the device or its offload is not known: the socket is not connected, the route is
    /// local, or the lookup failed (with the call and its error).
    pub unknown: Option<String>,
}

impl Trains {
    /// What the route of `socket` (connected, through a device) does with trains of `segment`
    /// bytes: `RTM_GETROUTE` for its peer, with the socket's own address, bound device (or the
    /// peer's IPv6 scope) and mark, from the calling thread (rtnetlink(7); the socket must
    /// share the thread's network namespace, checked with `SO_NETNS_COOKIE`, Linux 5.14), the
    /// device's name by `SIOCGIFNAME` and its feature by `ETHTOOL_GFEATURES`
    /// (netdevice(7), Linux 2.6.39).
    pub fn of(socket: &impl AsFd, segment: usize) -> Trains {
        let fd = socket.as_fd();
        let unknown = |why: String| Trains {
            segment,
            device: None,
            offload: None,
            unknown: Some(why),
        };
        let peer = match sys::peer_addr(fd) {
            Ok(Some(p)) => p,
            Ok(None) => return unknown("the socket is not connected".into()),
            Err(e) => return unknown(format!("getpeername: {e}")),
        };
        if Route::to(peer.ip()) == Route::Local {
            return unknown("the route is local: no device segments the trains".into());
        }
        match crate::netdev::egress(fd, peer) {
            Err(why) => unknown(why),
            Ok((_, name)) => match crate::netdev::feature_of(fd, &name, "tx-udp-segmentation") {
                Ok(on) => Trains {
                    segment,
                    device: Some(name),
                    offload: Some(on),
                    unknown: None,
                },
                Err(why) => Trains {
                    segment,
                    device: Some(name),
                    offload: None,
                    unknown: Some(why),
                },
            },
        }
    }

    /// Whether the kernel cuts these trains in software: the route's device has its UDP
    /// segmentation offload off.
    pub fn software(&self) -> bool {
        self.offload == Some(false)
    }

    /// Whether a message of `len` bytes is a train (more than one segment).
    pub fn is_train(&self, len: usize) -> bool {
        len > self.segment
    }
}

impl fmt::Display for Trains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trains of {} B segments", self.segment)?;
        match (&self.device, self.offload, &self.unknown) {
            (Some(d), Some(false), _) => write!(
                f,
                " leave by {d}, which cuts them in software (tx-udp-segmentation off): they \
                 copy unless zero copy measures {:.0} % cheaper",
                100.0 * super::SOFTWARE_GSO_MARGIN
            ),
            (Some(d), Some(true), _) => {
                write!(
                    f,
                    " leave by {d}, which takes them whole (tx-udp-segmentation on)"
                )
            }
            (_, _, Some(why)) => write!(f, ": the device's segmentation is not known ({why})"),
            _ => f.write_str(": the device's segmentation is not known"),
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
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = Trains::of(&s, 1472);
        assert_eq!((t.device.as_deref(), t.offload), (None, None));
        assert!(t.to_string().contains("not connected"), "{t}");
        s.connect("127.0.0.1:9").unwrap();
        let t = Trains::of(&s, 1472);
        assert!(!t.software());
        assert!(t.to_string().contains("local"), "{t}");
        assert!(t.is_train(1473) && !t.is_train(1472));
        let sw = Trains {
            segment: 1200,
            device: Some("sink0".into()),
            offload: Some(false),
            unknown: None,
        };
        assert!(sw.software());
        assert_eq!(
            sw.to_string(),
            "trains of 1200 B segments leave by sink0, which cuts them in software \
             (tx-udp-segmentation off): they copy unless zero copy measures 15 % cheaper"
        );
    }
}
