//! Where `packet`'s frames come from and are captured: the veth lab, whose generator floods
//! frames from a TX ring in namespace A, or a `zcnet serve` sending UDP to this host.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, bail};
use netlab::{Family, Netns, Side, VethLab};
use zcnet::packet::{RxConfig, TxConfig, TxRing};

use crate::measure::{Far, pin};
use crate::remote::Remote;
use crate::remote::proto::Role;

/// The destination of the generated frames: a locally administered address nobody has.
pub(super) const MIRROR_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0, 0, 0x01];

/// Where the frames come from and are captured: the veth lab (a TX ring in A, the capture on
/// veth-b), or a `zcnet serve` sending UDP to this host (the capture on the interface that has
/// this host's address toward it).
pub(super) enum Place {
    Veth { veth: VethLab, src_mac: [u8; 6] },
    Remote { remote: Mutex<Remote>, dev: String },
}

/// The lab's geometry, shared by every run.
pub(super) struct Lab {
    pub(super) place: Place,
    pub(super) ring: RxConfig,
}

/// What a generator did: frames sent, its time, and a remote generator's figures.
pub(super) struct Generated {
    pub(super) sent: u64,
    pub(super) took: f64,
    pub(super) far: Option<Far>,
}

impl Lab {
    pub(super) fn new(ring: RxConfig) -> anyhow::Result<Lab> {
        let veth = VethLab::quiet(None)?;
        let src_mac = veth.ns(Side::A).mac(VethLab::DEV_A)?;
        Ok(Lab {
            place: Place::Veth { veth, src_mac },
            ring,
        })
    }

    pub(super) fn remote(remote: Remote, ring: RxConfig) -> anyhow::Result<Lab> {
        let ip = remote.local_ip()?;
        if ip.is_loopback() {
            // A packet socket on lo sees each frame twice, going out and coming in.
            bail!(
                "packet --remote captures on the link to another host, and {} is reached over \
                 loopback: run zcnet serve on the other host (or in another namespace)",
                remote.addr()
            );
        }
        let dev = interface_of(ip)?;
        Ok(Lab {
            place: Place::Remote {
                remote: Mutex::new(remote),
                dev,
            },
            ring,
        })
    }

    /// The capture's namespace (`None`: this one) and device.
    pub(super) fn capture_point(&self) -> (Option<&Netns>, &str) {
        match &self.place {
            Place::Veth { veth, .. } => (Some(veth.ns(Side::B)), VethLab::DEV_B),
            Place::Remote { dev, .. } => (None, dev),
        }
    }

    pub(super) fn ring_bytes(&self) -> usize {
        self.ring.block_size * self.ring.block_count
    }

    /// The generator: floods `size`-byte frames for `seconds`, from a TX ring in namespace A
    /// pinned to CPU 1, or from the remote's UDP socket.
    pub(super) fn generate(&self, size: usize, seconds: f64) -> anyhow::Result<Generated> {
        let (veth, src_mac) = match &self.place {
            Place::Veth { veth, src_mac } => (veth, *src_mac),
            Place::Remote { remote, .. } => {
                let mut remote = remote.lock().unwrap_or_else(|e| e.into_inner());
                let role = Role::Generate {
                    frame: size,
                    port: DISCARD_PORT,
                };
                remote.start(role, seconds)?;
                let far = remote.finish()?;
                return Ok(Generated {
                    sent: far.messages,
                    took: far.seconds,
                    far: Some(far),
                });
            }
        };
        let (IpAddr::V4(a), IpAddr::V4(b)) = (
            VethLab::addr(Side::A, Family::V4),
            VethLab::addr(Side::B, Family::V4),
        ) else {
            unreachable!("the lab's IPv4 addresses")
        };
        let payload = vec![0x5a; size - netlab::frame::HEADERS];
        let frame = netlab::frame::udp_v4(
            MIRROR_MAC,
            src_mac,
            a.octets(),
            b.octets(),
            (40_000, DISCARD_PORT),
            &payload,
        );
        let generator = veth
            .ns(Side::A)
            .spawn(move || -> anyhow::Result<Generated> {
                pin(1);
                let config = TxConfig {
                    qdisc_bypass: true,
                    ..TxConfig::default()
                };
                let mut tx = TxRing::new(VethLab::DEV_A, config)?;
                let start = Instant::now();
                let mut sent = 0u64;
                while start.elapsed().as_secs_f64() < seconds {
                    while tx.push(&frame)? {}
                    sent += (tx.flush()? / frame.len()) as u64;
                }
                let took = start.elapsed().as_secs_f64();
                if tx.refused() > 0 {
                    bail!("the kernel refused {} generated frames", tx.refused());
                }
                Ok(Generated {
                    sent,
                    took,
                    far: None,
                })
            })?;
        generator
            .join()
            .map_err(|_| anyhow::anyhow!("generator panicked"))?
    }
}

/// The UDP port the frames go to (discard).
pub(super) const DISCARD_PORT: u16 = 9;

/// The interface that has `ip` (where a remote generator's frames arrive).
pub(super) fn interface_of(ip: IpAddr) -> anyhow::Result<String> {
    let addrs = nix::ifaddrs::getifaddrs().context("getifaddrs")?;
    for a in addrs {
        let Some(addr) = a.address else { continue };
        let found = match ip {
            IpAddr::V4(v4) => addr.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => addr.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        if found {
            return Ok(a.interface_name);
        }
    }
    bail!("no interface here has {ip}, this host's address toward the server")
}
