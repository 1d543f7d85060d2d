//! What each mechanism needs from this kernel, these limits and these privileges: the shared
//! vocabulary of the per-mechanism `support()` functions.
//!
//! Every mechanism module has a `support()` that runs only its own checks, once per process
//! (cached), and returns a typed `Support` of that module: the [`Check`]s (verdict, one-line
//! reason, the calls made) and the facts the mechanism itself uses (for [`tcp_rx`], how much
//! of `struct tcp_zerocopy_receive` the kernel fills). [`probe`] assembles them into one report.
//!
//! Every answer comes from trying the operation on loopback sockets of the calling thread's
//! network namespace, never from the kernel version. `EPERM`, `EACCES` and `ENOSYS` are not taken
//! as "unsupported" on their own, since a seccomp filter or a missing privilege returns them
//! too: such checks are [`Status::Blocked`] and say why.
//!
//! [`tcp_rx`]: crate::tcp_rx
//! [`probe`]: crate::probe

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use serde::Serialize;

use crate::sys;

/// How long one check waits for the kernel (a completion, a peer's bytes).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);

/// Which mechanism, named as its module (the serialized names are the probe schema's, kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MechanismId {
    /// TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`), [`crate::tcp_rx`].
    #[serde(rename = "RX")]
    TcpRx,
    /// `MSG_ZEROCOPY` sends, [`crate::msg_zerocopy`].
    #[serde(rename = "TX")]
    MsgZerocopy,
    /// `sendfile`/`splice`.
    File,
    /// io_uring zero-copy sends.
    Uring,
    /// `SO_PEEK_OFF` on TCP.
    Peek,
    /// `AF_PACKET` `TPACKET_V3` rings, [`crate::packet`].
    #[serde(rename = "RING")]
    Packet,
    /// `AF_XDP` sockets.
    Xdp,
}

impl MechanismId {
    /// Every mechanism, in report order.
    pub(crate) const ALL: [MechanismId; 7] = [
        MechanismId::TcpRx,
        MechanismId::MsgZerocopy,
        MechanismId::File,
        MechanismId::Uring,
        MechanismId::Peek,
        MechanismId::Packet,
        MechanismId::Xdp,
    ];

    /// The Cargo feature of zcnet that compiles it in.
    pub(crate) fn feature(self) -> &'static str {
        match self {
            MechanismId::TcpRx => "tcp_rx",
            MechanismId::MsgZerocopy => "msg_zerocopy",
            MechanismId::File => "file",
            MechanismId::Uring => "uring",
            MechanismId::Peek => "peek",
            MechanismId::Packet => "packet",
            MechanismId::Xdp => "xdp",
        }
    }
}

/// One probed feature. The serialized name is stable (part of the schema).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckId {
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)` on a TCP socket with a mapping.
    RxTcpZerocopyReceive,
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` on TCP.
    TxTcp,
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` on UDP.
    TxUdp,
    /// `UDP_SEGMENT`: a GSO train sent as its datagrams.
    TxUdpGso,
    /// `UDP_GRO`: a train read whole with its segment size.
    RxUdpGro,
    /// `sendfile(2)` from a file to a TCP socket.
    FileSendfile,
    /// `splice(2)` file → pipe → TCP socket.
    FileSplice,
    /// `io_uring_setup(2)`.
    UringSetup,
    /// `IORING_OP_SEND_ZC`.
    UringSendZc,
    /// `IORING_OP_SENDMSG_ZC`.
    UringSendmsgZc,
    /// `IORING_SEND_ZC_REPORT_USAGE`.
    UringReportUsage,
    /// `IORING_REGISTER_BUFFERS` + `IORING_RECVSEND_FIXED_BUF`.
    UringRegisteredBuffers,
    /// `SO_PEEK_OFF` on TCP over IPv4.
    PeekIpv4,
    /// `SO_PEEK_OFF` on TCP over IPv6.
    PeekIpv6,
    /// `PACKET_RX_RING` with `TPACKET_V3`.
    RingRx,
    /// `PACKET_TX_RING` with `TPACKET_V3`.
    RingTx,
    /// `PACKET_FANOUT`.
    RingFanout,
    /// `socket(AF_XDP)`.
    XdpSocket,
}

impl CheckId {
    /// Every check, in report order.
    pub(crate) const ALL: [CheckId; 18] = {
        use CheckId::*;
        [
            RxTcpZerocopyReceive,
            TxTcp,
            TxUdp,
            TxUdpGso,
            RxUdpGro,
            FileSendfile,
            FileSplice,
            UringSetup,
            UringSendZc,
            UringSendmsgZc,
            UringReportUsage,
            UringRegisteredBuffers,
            PeekIpv4,
            PeekIpv6,
            RingRx,
            RingTx,
            RingFanout,
            XdpSocket,
        ]
    };

    /// The mechanism this check belongs to.
    pub fn mechanism(self) -> MechanismId {
        use CheckId::*;
        match self {
            RxTcpZerocopyReceive => MechanismId::TcpRx,
            TxTcp | TxUdp | TxUdpGso | RxUdpGro => MechanismId::MsgZerocopy,
            FileSendfile | FileSplice => MechanismId::File,
            UringSetup
            | UringSendZc
            | UringSendmsgZc
            | UringReportUsage
            | UringRegisteredBuffers => MechanismId::Uring,
            PeekIpv4 | PeekIpv6 => MechanismId::Peek,
            RingRx | RingTx | RingFanout => MechanismId::Packet,
            XdpSocket => MechanismId::Xdp,
        }
    }

    /// The stable name used in JSON and tables (`rx.tcp_zerocopy_receive`, ...).
    pub fn name(self) -> &'static str {
        use CheckId::*;
        match self {
            RxTcpZerocopyReceive => "rx.tcp_zerocopy_receive",
            TxTcp => "tx.msg_zerocopy_tcp",
            TxUdp => "tx.msg_zerocopy_udp",
            TxUdpGso => "tx.udp_segment",
            RxUdpGro => "rx.udp_gro",
            FileSendfile => "file.sendfile",
            FileSplice => "file.splice",
            UringSetup => "uring.setup",
            UringSendZc => "uring.send_zc",
            UringSendmsgZc => "uring.sendmsg_zc",
            UringReportUsage => "uring.report_usage",
            UringRegisteredBuffers => "uring.registered_buffers",
            PeekIpv4 => "peek.tcp_ipv4",
            PeekIpv6 => "peek.tcp_ipv6",
            RingRx => "ring.tpacket_v3_rx",
            RingTx => "ring.tpacket_v3_tx",
            RingFanout => "ring.fanout",
            XdpSocket => "xdp.socket",
        }
    }
}

impl Serialize for CheckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The operation worked.
    Available,
    /// The kernel said it does not support it (`EINVAL`, `EOPNOTSUPP`, `ENOPROTOOPT`, ...).
    Unavailable,
    /// Could not be decided: a privilege, a limit or a policy (seccomp, sysctl) stood in the way.
    Blocked,
    /// Not tried: a check it depends on failed, or zcnet was built without the mechanism's
    /// Cargo feature (the reason says which).
    Skipped,
}

/// The result of one check: verdict, reason, and how it was decided.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Which feature.
    pub id: CheckId,
    /// Its mechanism.
    pub mechanism: MechanismId,
    /// The verdict.
    pub status: Status,
    /// One line on why, and for anything not available, what would enable it.
    pub reason: String,
    /// The calls made to decide.
    pub method: String,
    /// The errno that decided a negative verdict (`"EOPNOTSUPP"`), if any.
    pub errno: Option<&'static str>,
    /// Extra facts (struct fields the kernel fills, whether a completion was copied, ...).
    pub detail: BTreeMap<&'static str, serde_json::Value>,
}

/// Symbolic name of the errnos the probe meets.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::ENODEV => "ENODEV",
        libc::EFAULT => "EFAULT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EAGAIN => "EAGAIN",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENETUNREACH => "ENETUNREACH",
        _ => "E?",
    }
}

pub(crate) struct Probe {
    id: CheckId,
    method: String,
    detail: BTreeMap<&'static str, serde_json::Value>,
}

impl Probe {
    pub(crate) fn new(id: CheckId) -> Probe {
        Probe {
            id,
            method: String::new(),
            detail: BTreeMap::new(),
        }
    }

    /// Records a call made; the method line lists them in order.
    pub(crate) fn step(&mut self, call: &str) {
        if !self.method.is_empty() {
            self.method.push_str("; ");
        }
        self.method.push_str(call);
    }

    pub(crate) fn detail(&mut self, key: &'static str, v: impl Into<serde_json::Value>) {
        self.detail.insert(key, v.into());
    }

    pub(crate) fn done(
        self,
        status: Status,
        reason: impl Into<String>,
        errno: Option<&'static str>,
    ) -> Check {
        Check {
            id: self.id,
            mechanism: self.id.mechanism(),
            status,
            reason: reason.into(),
            method: self.method,
            errno,
            detail: self.detail,
        }
    }

    pub(crate) fn ok(self, reason: impl Into<String>) -> Check {
        self.done(Status::Available, reason, None)
    }

    pub(crate) fn skipped(self, reason: impl Into<String>) -> Check {
        self.done(Status::Skipped, reason, None)
    }

    /// A failed call: the errno decides between unavailable and blocked. `what` names the
    /// call, `enable` says what would make an unsupported feature work.
    pub(crate) fn failed(mut self, what: &str, err: &io::Error, enable: &str) -> Check {
        let errno = err.raw_os_error();
        let name = errno.map(errno_name);
        self.step(&format!("{what} -> {}", name.unwrap_or("error")));
        let (status, reason) = match errno {
            Some(libc::EPERM | libc::EACCES) => (
                Status::Blocked,
                format!(
                    "{what}: {}, so not checked; run with that privilege (a seccomp or LSM policy can also refuse it)",
                    name.unwrap_or("not permitted")
                ),
            ),
            Some(libc::ENOSYS) => (
                Status::Blocked,
                format!(
                    "{what}: ENOSYS, either a kernel without it or a seccomp filter; cannot tell which"
                ),
            ),
            Some(libc::ENETUNREACH | libc::EADDRNOTAVAIL) => (
                Status::Blocked,
                format!(
                    "{what}: {err}: loopback is down in this network namespace, so not checked (`ip link set lo up`)"
                ),
            ),
            Some(libc::ENOMEM | libc::ENOBUFS) => (
                Status::Blocked,
                format!("{what}: a memory limit refused it ({err})"),
            ),
            _ => (Status::Unavailable, format!("{what}: {err}; {enable}")),
        };
        self.done(status, reason, name)
    }
}

pub(crate) fn loopback(v6: bool) -> SocketAddr {
    if v6 {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    }
}

/// A connected TCP pair over loopback: (client, accepted server side).
pub(crate) fn tcp_pair(v6: bool) -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind(loopback(v6))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    client.set_read_timeout(Some(TIMEOUT))?;
    server.set_read_timeout(Some(TIMEOUT))?;
    Ok((client, server))
}

pub(crate) fn wait_readable(s: &impl AsFd) -> io::Result<()> {
    if sys::event::poll(s.as_fd(), libc::POLLIN, Some(TIMEOUT))? & libc::POLLIN == 0 {
        return Err(io::Error::from(io::ErrorKind::TimedOut));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_the_serde_names() {
        assert_eq!(
            CheckId::RxTcpZerocopyReceive.name(),
            "rx.tcp_zerocopy_receive"
        );
        assert_eq!(CheckId::PeekIpv6.name(), "peek.tcp_ipv6");
        assert_eq!(CheckId::XdpSocket.mechanism(), MechanismId::Xdp);
    }
}
