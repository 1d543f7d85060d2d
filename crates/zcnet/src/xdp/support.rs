//! This mechanism's own check, run once per process: can an `AF_XDP` socket be made
//! (`socket(2)`)?

use crate::support::{Check, CheckId, Probe};
use crate::sys::{self, abi};

/// What this kernel allows of `AF_XDP`: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `socket(AF_XDP)`.
    pub socket: Check,
}

impl Support {
    /// Every check, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.socket.clone()]
    }
}

/// Checks, once: an `AF_XDP` socket can be made (copy mode works on any device; zero copy
/// needs a driver with AF_XDP zero-copy support, which only a bind on the device can show).
pub fn support() -> &'static Support {
    static S: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let mut p = Probe::new(CheckId::XdpSocket);
        p.step("socket(AF_XDP, SOCK_RAW, 0)");
        let socket = match sys::net::socket(abi::AF_XDP, libc::SOCK_RAW, 0) {
            Ok(_) => p.ok(
                "AF_XDP sockets can be created; copy mode works on any device, zero-copy bind \
                 (XDP_ZEROCOPY) needs a driver with AF_XDP zero-copy support (not checked: needs \
                 a real device)",
            ),
            Err(e) => p.failed(
                "socket(AF_XDP) (needs CAP_NET_RAW)",
                &e,
                "needs Linux 4.18+ with CONFIG_XDP_SOCKETS",
            ),
        };
        Support { socket }
    })
}
