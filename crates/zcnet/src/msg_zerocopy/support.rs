//! This mechanism's own checks, run once per process: does a `MSG_ZEROCOPY` send over loopback
//! TCP and UDP complete ([`support`]).

use std::io;
use std::net::UdpSocket;
use std::sync::OnceLock;

use super::{ZeroCopyError, enable, send_once, udp_send_once};
use crate::errqueue::Completion;
use crate::support::TIMEOUT;
use crate::support::{Check, CheckId, Probe, Status, loopback, tcp_pair};

/// What this kernel allows of `MSG_ZEROCOPY`: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `tx.msg_zerocopy_tcp` (Linux 4.14).
    pub tcp: Check,
    /// `tx.msg_zerocopy_udp` (Linux 5.0).
    pub udp: Check,
    /// `tx.udp_segment` and `rx.udp_gro`: GSO trains, which the UDP senders send with a
    /// [`Config::segment`](super::Config::segment) ([`crate::udp_gso::support`]).
    pub gso: crate::udp_gso::Support,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        let mut v = vec![self.tcp.clone(), self.udp.clone()];
        v.extend(self.gso.checks());
        v
    }
}

/// Whether `SO_ZEROCOPY` + `MSG_ZEROCOPY` work on TCP and on UDP here: one send each over
/// loopback and its completion read from the error queue; once per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        tcp: tx_tcp_check(),
        udp: tx_udp_check(),
        gso: crate::udp_gso::support().clone(),
    })
}

fn zerocopy_outcome(mut p: Probe, r: Result<Completion, ZeroCopyError>, proto: &str) -> Check {
    match r {
        Ok(c) => {
            p.detail("copied", c.copied);
            let how = if c.copied {
                "flagged copied, as it always is over loopback"
            } else {
                "not copied"
            };
            p.ok(format!(
                "SO_ZEROCOPY accepted and a {proto} MSG_ZEROCOPY send completed on the error queue ({how})"
            ))
        }
        Err(ZeroCopyError::Unsupported { reason, .. }) => {
            p.step("setsockopt(SO_ZEROCOPY) -> unsupported");
            let need = if proto == "UDP" {
                "Linux 5.0+"
            } else {
                "Linux 4.14+"
            };
            p.done(
                Status::Unavailable,
                format!("SO_ZEROCOPY refused on {proto}: {reason}; needs {need}"),
                Some("ENOPROTOOPT"),
            )
        }
        Err(ZeroCopyError::SocketInUse { reason }) => p.failed(
            "setsockopt(SO_ZEROCOPY)",
            &io::Error::other(reason),
            "the probe's own socket is in use",
        ),
        Err(ZeroCopyError::Timeout(t)) => p.done(
            Status::Unavailable,
            format!("MSG_ZEROCOPY send accepted but no completion within {t:?}"),
            Some("ETIMEDOUT"),
        ),
        Err(ZeroCopyError::Io { call, source }) => {
            p.failed(call, &source, "MSG_ZEROCOPY send failed")
        }
        Err(ZeroCopyError::Socket { what, source }) => p.failed("socket", &source, what),
    }
}

fn tx_tcp_check() -> Check {
    let mut p = Probe::new(CheckId::TxTcp);
    let (client, _server) = match tcp_pair(false) {
        Ok(pair) => pair,
        Err(e) => return p.failed("TCP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); send(MSG_ZEROCOPY) over loopback TCP; recvmsg(MSG_ERRQUEUE)",
    );
    let r = enable(&client).and_then(|()| send_once(&client, None, 4096, TIMEOUT));
    zerocopy_outcome(p, r, "TCP")
}

fn tx_udp_check() -> Check {
    let mut p = Probe::new(CheckId::TxUdp);
    let receiver = match UdpSocket::bind(loopback(false)) {
        Ok(s) => s,
        Err(e) => return p.failed("bind UDP 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    let dest = match receiver.local_addr() {
        Ok(a) => a,
        Err(e) => return p.failed("getsockname", &e, ""),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); sendto(MSG_ZEROCOPY) over loopback UDP; recvmsg(MSG_ERRQUEUE)",
    );
    zerocopy_outcome(p, udp_send_once(dest, 4096, TIMEOUT), "UDP")
}
