//! This mechanism's own checks, run once per process.

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::OnceLock;

use crate::support::{Check, CheckId, Probe, Status, tcp_pair, wait_readable};
use crate::sys::abi;
use crate::sys::{self, tcp_zerocopy::ZcWindow};

/// What this kernel allows of TCP zero-copy receive: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `rx.tcp_zerocopy_receive`: `getsockopt(TCP_ZEROCOPY_RECEIVE)` on a mapped TCP socket.
    pub check: Check,
    /// Bytes of `struct tcp_zerocopy_receive` the kernel fills (16 on 4.18, 24 on 5.7, 64 on
    /// 5.12); 0 when the call failed.
    pub struct_len: usize,
    /// Whether the kernel has the `copybuf` fields (5.11), which copy unmappable bytes in the
    /// same call.
    pub copybuf: bool,
}

impl Support {
    /// Whether zero-copy receive works here.
    pub fn available(&self) -> bool {
        self.check.status == Status::Available
    }

    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.check.clone()]
    }
}

/// Whether `TCP_ZEROCOPY_RECEIVE` works here, and which struct version the kernel knows: tried
/// once per process on a loopback connection (1 byte queued: the kernel must map nothing and
/// hint 1 byte to copy), then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let mut facts = (0, false);
        let check = rx_check(&mut facts);
        Support {
            check,
            struct_len: facts.0,
            copybuf: facts.1,
        }
    })
}

fn rx_check(facts: &mut (usize, bool)) -> Check {
    let mut p = Probe::new(CheckId::RxTcpZerocopyReceive);
    let page = sys::mm::page_size();
    let (client, server) = match tcp_pair(false) {
        Ok(pair) => pair,
        Err(e) => return p.failed("TCP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    p.step("mmap(PROT_READ, MAP_SHARED) on a connected TCP socket");
    let mut window = match ZcWindow::new(server.as_fd(), page, page, false) {
        Ok(w) => w,
        Err(e) => return p.failed("mmap(TCP socket)", &e, "needs Linux 4.18+ (tcp_mmap)"),
    };
    if let Err(e) = (&client)
        .write_all(b"z")
        .and_then(|()| wait_readable(&server))
    {
        return p.failed("send 1 byte over loopback", &e, "loopback TCP must work");
    }
    p.step("getsockopt(TCP_ZEROCOPY_RECEIVE, optlen 64) after 1 byte");
    let zc = match window.receive(server.as_fd(), &mut [], 64) {
        Ok(zc) => zc,
        Err(e) => {
            return p.failed("getsockopt(TCP_ZEROCOPY_RECEIVE)", &e, "needs Linux 4.18+");
        }
    };
    let fields: Vec<&str> = abi::TcpZerocopyReceive::FIELDS
        .iter()
        .filter(|(_, _, end)| *end as usize <= zc.optlen)
        .map(|(name, _, _)| *name)
        .collect();
    let newest = abi::TcpZerocopyReceive::FIELDS
        .iter()
        .filter(|(_, _, end)| *end as usize <= zc.optlen)
        .map(|(_, v, _)| *v)
        .next_back()
        .unwrap_or("?");
    let optlen = zc.optlen;
    *facts = (optlen, fields.contains(&"copybuf_address"));
    p.detail("struct_len", optlen);
    p.detail("fields", fields.clone());
    p.detail("copybuf", fields.contains(&"copybuf_address"));
    // One byte cannot be mapped: the kernel must map nothing and hint that 1 byte be copied.
    if zc.mapped != 0 || zc.skip_hint != 1 {
        return p.done(
            Status::Unavailable,
            format!(
                "TCP_ZEROCOPY_RECEIVE returned length {} and recv_skip_hint {} for 1 queued byte (expected 0 and 1)",
                zc.mapped, zc.skip_hint
            ),
            None,
        );
    }
    p.ok(format!(
        "works; the kernel fills {optlen} bytes of struct tcp_zerocopy_receive (the {newest} layout: {})",
        fields.join(", ")
    ))
}
