//! The labs of `tcp-rx`: the conditions of the experiment (lab, family, MTU or MSS that make
//! payloads page-sized), the lab each builds, and the sockets with their MSS.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use anyhow::{Context, bail};
use netlab::{Family, LoopbackLab, Netns, Side, VethLab};
use serde_json::json;

/// One experiment: lab, family, and what makes payloads page-sized.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Condition {
    /// `loopback` or `veth`.
    pub lab: &'static str,
    /// Address family.
    pub family: Family,
    /// MTU of the lab's device.
    pub mtu: Option<u32>,
    /// TCP_MAXSEG on both ends.
    pub mss: Option<i32>,
}

impl Condition {
    pub(super) fn params(&self) -> serde_json::Value {
        json!({"mtu": self.mtu, "mss": self.mss})
    }

    pub(super) fn label(&self) -> String {
        let what = match (self.mtu, self.mss) {
            (_, Some(mss)) => format!("mss {mss}"),
            (Some(mtu), None) => format!("mtu {mtu}"),
            (None, None) => "defaults".into(),
        };
        format!("{} {} {what}", self.lab, self.family.name())
    }

    /// The acceptance bound on zc/copy receiver µs per MB, where the issue sets one.
    pub(super) fn bound(&self) -> Option<f64> {
        match (self.lab, self.family, self.mtu, self.mss) {
            ("loopback", Family::V6, Some(61512), None) => Some(0.6),
            ("loopback", Family::V6, _, Some(4108)) => Some(0.75),
            _ => None,
        }
    }
}

/// The conditions of the issue: loopback with MSS 4108 and with MTU 61512, and veth with an
/// MTU that carries 4 KiB payloads (4096 + 12 timestamp + 20 TCP + 40 IPv6 / 20 IPv4).
pub fn conditions() -> Vec<Condition> {
    let mut out = Vec::new();
    for family in [Family::V6, Family::V4] {
        out.push(Condition {
            lab: "loopback",
            family,
            mtu: None,
            mss: Some(4108),
        });
        out.push(Condition {
            lab: "loopback",
            family,
            mtu: Some(61512),
            mss: None,
        });
        let veth_mtu = if family == Family::V6 { 4168 } else { 4148 };
        out.push(Condition {
            lab: "veth",
            family,
            mtu: Some(veth_mtu),
            mss: None,
        });
    }
    out
}

pub(super) enum Lab {
    Loopback(LoopbackLab),
    Veth(VethLab),
}

impl Lab {
    pub(super) fn build(c: &Condition) -> anyhow::Result<Lab> {
        Ok(match c.lab {
            "loopback" => {
                Lab::Loopback(LoopbackLab::new(c.mtu).context("building the loopback lab")?)
            }
            "veth" => Lab::Veth(VethLab::new(c.mtu).context("building the veth lab")?),
            other => bail!("tcp-rx has no lab {other:?} (loopback, veth)"),
        })
    }

    /// (receiver namespace, sender namespace, receiver address)
    pub(super) fn ends(&self, family: Family) -> (&Netns, &Netns, IpAddr) {
        match self {
            Lab::Loopback(l) => (&l.ns, &l.ns, l.addr(family)),
            Lab::Veth(v) => (&v.b, &v.a, VethLab::addr(Side::B, family)),
        }
    }
}

pub(super) fn set_mss(s: socket2::SockRef<'_>, mss: Option<i32>) -> anyhow::Result<()> {
    if let Some(m) = mss {
        s.set_tcp_mss(u32::try_from(m).context("MSS")?)
            .context("setsockopt(TCP_MAXSEG)")?;
    }
    Ok(())
}

pub(super) fn listen(addr: SocketAddr, mss: Option<i32>) -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
    set_mss(socket2::SockRef::from(&l), mss)?;
    Ok(l)
}

pub(super) fn connect(addr: SocketAddr, mss: Option<i32>) -> anyhow::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .context("socket")?;
    set_mss(socket2::SockRef::from(&s), mss)?;
    s.connect(&addr.into())
        .with_context(|| format!("connecting to {addr}"))?;
    Ok(TcpStream::from(s))
}
