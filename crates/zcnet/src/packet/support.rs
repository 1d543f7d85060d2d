//! What this kernel and these privileges allow of `AF_PACKET` rings: `support()`, run once per
//! process.

use std::os::fd::AsFd as _;
use std::sync::OnceLock;

use crate::support::{Check, CheckId, Probe};
use crate::sys::{self, abi};

/// What this kernel allows of `TPACKET_V3` rings: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `ring.tpacket_v3_rx`: `PACKET_RX_RING` with `TPACKET_V3` (3.2).
    pub rx: Check,
    /// `ring.tpacket_v3_tx`: `PACKET_TX_RING` with `TPACKET_V3` (4.11).
    pub tx: Check,
    /// `ring.fanout`: `PACKET_FANOUT` (3.1).
    pub fanout: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.rx.clone(), self.tx.clone(), self.fanout.clone()]
    }
}

/// Whether packet sockets, both rings and fanout work here (they need `CAP_NET_RAW` in this
/// network namespace); once per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        rx: ring_check(false),
        tx: ring_check(true),
        fanout: fanout_check(),
    })
}

fn ring_req(tx: bool) -> abi::TpacketReq3 {
    let block = 4 * sys::mm::page_size() as u32;
    abi::TpacketReq3 {
        tp_block_size: block,
        tp_block_nr: 2,
        tp_frame_size: 2048,
        tp_frame_nr: 2 * block / 2048,
        // The TX ring rejects the RX-only fields.
        tp_retire_blk_tov: if tx { 0 } else { 10 },
        ..Default::default()
    }
}

fn ring_check(tx: bool) -> Check {
    let (id, name) = if tx {
        (CheckId::RingTx, "PACKET_TX_RING")
    } else {
        (CheckId::RingRx, "PACKET_RX_RING")
    };
    let mut p = Probe::new(id);
    p.step("socket(AF_PACKET, SOCK_RAW, 0)");
    let fd = match sys::net::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) {
        Ok(fd) => fd,
        Err(e) => {
            return p.failed(
                "socket(AF_PACKET) (needs CAP_NET_RAW)",
                &e,
                "needs CONFIG_PACKET",
            );
        }
    };
    p.step("setsockopt(PACKET_VERSION, TPACKET_V3)");
    if let Err(e) = sys::sockopt::set_packet_version(fd.as_fd(), abi::TPACKET_V3) {
        return p.failed(
            "setsockopt(PACKET_VERSION, TPACKET_V3)",
            &e,
            "needs Linux 3.2+",
        );
    }
    let req = ring_req(tx);
    p.step(&format!(
        "setsockopt({name}, 2 blocks of {} B)",
        req.tp_block_size
    ));
    if let Err(e) = sys::sockopt::set_packet_ring(fd.as_fd(), tx, &req) {
        let need = if tx {
            "TX rings under TPACKET_V3 need Linux 4.11+"
        } else {
            "needs Linux 3.2+"
        };
        return p.failed(&format!("setsockopt({name})"), &e, need);
    }
    p.step("mmap(ring)");
    let len = (req.tp_block_size * req.tp_block_nr) as usize;
    match sys::mm::Mmap::shared(fd.as_fd(), len, libc::PROT_READ | libc::PROT_WRITE) {
        Ok(_) => p.ok(format!(
            "a TPACKET_V3 {} ring was set up and mapped",
            if tx { "TX" } else { "RX" }
        )),
        Err(e) => p.failed("mmap(ring)", &e, ""),
    }
}

fn fanout_check() -> Check {
    let mut p = Probe::new(CheckId::RingFanout);
    p.step("socket(AF_PACKET, SOCK_RAW, ETH_P_ALL); bind(lo)");
    let fd = match sys::net::socket(
        libc::AF_PACKET,
        libc::SOCK_RAW,
        i32::from(abi::ETH_P_ALL.to_be()),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            return p.failed(
                "socket(AF_PACKET) (needs CAP_NET_RAW)",
                &e,
                "needs CONFIG_PACKET",
            );
        }
    };
    let bound = sys::net::if_nametoindex("lo")
        .and_then(|i| sys::net::bind_packet(fd.as_fd(), i, abi::ETH_P_ALL));
    if let Err(e) = bound {
        return p.failed("bind(AF_PACKET, lo)", &e, "");
    }
    // A group id of our own (the low 16 bits of the pid) so concurrent probes do not join.
    let group = std::process::id() & 0xffff;
    p.step("setsockopt(PACKET_FANOUT, PACKET_FANOUT_HASH)");
    match sys::sockopt::set_packet_fanout(fd.as_fd(), group | (abi::PACKET_FANOUT_HASH << 16)) {
        Ok(()) => p.ok("a packet socket joined a PACKET_FANOUT_HASH group"),
        Err(e) => p.failed("setsockopt(PACKET_FANOUT)", &e, "needs Linux 3.1+"),
    }
}
