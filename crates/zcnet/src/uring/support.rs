//! This mechanism's own checks, run once per process: `io_uring_setup`, `SEND_ZC`,
//! `SENDMSG_ZC`, `REPORT_USAGE` and registered buffers.

use crate::support::TIMEOUT;
use crate::support::{Check, CheckId, Probe, Status, loopback};
use crate::sys::{self, abi};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Support: this mechanism's own checks, run once per process.

/// What this kernel allows of io_uring zero-copy sends: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `uring.setup`: `io_uring_setup(2)` (5.1), which a sysctl or seccomp can refuse.
    pub setup: Check,
    /// `uring.send_zc`: `IORING_OP_SEND_ZC` (6.0).
    pub send_zc: Check,
    /// `uring.sendmsg_zc`: `IORING_OP_SENDMSG_ZC` (6.1).
    pub sendmsg_zc: Check,
    /// `uring.report_usage`: `IORING_SEND_ZC_REPORT_USAGE` (6.2).
    pub report_usage: Check,
    /// `uring.registered_buffers`: `IORING_REGISTER_BUFFERS` + `IORING_RECVSEND_FIXED_BUF`.
    pub registered_buffers: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![
            self.setup.clone(),
            self.send_zc.clone(),
            self.sendmsg_zc.clone(),
            self.report_usage.clone(),
            self.registered_buffers.clone(),
        ]
    }
}

/// Whether io_uring, `SEND_ZC`, `SENDMSG_ZC`, usage reports and registered buffers work here:
/// the opcode probe, then real sends over loopback UDP; once per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let mut checks = uring_checks();
        let take = |checks: &mut Vec<Check>, id: CheckId| {
            let i = checks
                .iter()
                .position(|c| c.id == id)
                .expect("uring_checks reports every uring check");
            checks.swap_remove(i)
        };
        Support {
            setup: take(&mut checks, CheckId::UringSetup),
            send_zc: take(&mut checks, CheckId::UringSendZc),
            sendmsg_zc: take(&mut checks, CheckId::UringSendmsgZc),
            report_usage: take(&mut checks, CheckId::UringReportUsage),
            registered_buffers: take(&mut checks, CheckId::UringRegisteredBuffers),
        }
    })
}

pub(super) fn uring_checks() -> Vec<Check> {
    use CheckId::*;
    let mut setup = Probe::new(UringSetup);
    setup.step("io_uring_setup(4)");
    let ring = match sys::uring::setup(4) {
        Ok(r) => r,
        Err(e) => return setup_failed(setup, &e),
    };
    let mut out = vec![setup.ok("io_uring_setup works")];

    let mut send_zc = Probe::new(UringSendZc);
    let mut sendmsg_zc = Probe::new(UringSendmsgZc);
    send_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    sendmsg_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    let ops = match sys::uring::probe_opcodes(&ring) {
        Ok(ops) => ops,
        Err(e) => {
            out.push(send_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(sendmsg_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(Probe::new(UringReportUsage).skipped("opcode probe failed"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("opcode probe failed"));
            return out;
        }
    };
    drop(ring);
    out.push(if ops.sendmsg_zc {
        sendmsg_zc.ok("the kernel lists IORING_OP_SENDMSG_ZC as supported")
    } else {
        sendmsg_zc.done(
            Status::Unavailable,
            "IORING_OP_SENDMSG_ZC is not in the opcode probe; needs Linux 6.1+",
            None,
        )
    });
    if !ops.send_zc {
        out.insert(
            1,
            send_zc.done(
                Status::Unavailable,
                "IORING_OP_SEND_ZC is not in the opcode probe; needs Linux 6.0+",
                None,
            ),
        );
        out.push(Probe::new(UringReportUsage).skipped("no IORING_OP_SEND_ZC"));
        out.push(Probe::new(UringRegisteredBuffers).skipped("no IORING_OP_SEND_ZC"));
        return out;
    }

    // A real SEND_ZC over a connected UDP loopback pair, plain and with a registered buffer.
    let pair = UdpSocket::bind(loopback(false)).and_then(|rx| {
        let tx = UdpSocket::bind(loopback(false))?;
        tx.connect(rx.local_addr()?)?;
        Ok((tx, rx))
    });
    let (tx, _rx) = match pair {
        Ok(p) => p,
        Err(e) => {
            out.insert(
                1,
                send_zc.failed("UDP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
            );
            out.push(Probe::new(UringReportUsage).skipped("no UDP loopback"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("no UDP loopback"));
            return out;
        }
    };
    let (sent, usage) = send_zc_checks(tx.as_fd(), send_zc);
    out.insert(1, sent);
    out.push(usage);
    out.push(registered_buffers_check(tx.as_fd()));
    out
}

/// `uring.setup` failed with `e`, saying why where the host's settings do (`io_uring_disabled`,
/// a seccomp filter); the checks after it skipped.
fn setup_failed(setup: Probe, e: &io::Error) -> Vec<Check> {
    use CheckId::*;
    let io_uring_disabled: Option<u32> =
        std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .ok()
            .and_then(|s| s.trim().parse().ok());
    let why = match (e.raw_os_error(), io_uring_disabled) {
        (_, Some(2)) => " (kernel.io_uring_disabled = 2: io_uring is switched off)".to_owned(),
        (Some(libc::EPERM), Some(1)) => {
            " (kernel.io_uring_disabled = 1: only members of kernel.io_uring_group may use it)"
                .to_owned()
        }
        (Some(libc::ENOSYS), Some(_)) => {
            " (the kernel has io_uring, so a seccomp filter must be refusing it)".to_owned()
        }
        _ => String::new(),
    };
    let first = setup.failed(
        &format!("io_uring_setup{why}"),
        e,
        "needs Linux 5.1+ with CONFIG_IO_URING",
    );
    let rest = [
        UringSendZc,
        UringSendmsgZc,
        UringReportUsage,
        UringRegisteredBuffers,
    ]
    .map(|id| Probe::new(id).skipped("io_uring is not usable here (see uring.setup)"));
    std::iter::once(first).chain(rest).collect()
}

/// `uring.send_zc` and `uring.report_usage`: one `SEND_ZC` with `REPORT_USAGE` on `tx`.
fn send_zc_checks(tx: BorrowedFd<'_>, mut send_zc: Probe) -> (Check, Check) {
    let mut usage = Probe::new(CheckId::UringReportUsage);
    usage.step("IORING_OP_SEND_ZC with IORING_SEND_ZC_REPORT_USAGE over loopback UDP");
    send_zc.step("IORING_OP_SEND_ZC over loopback UDP");
    let failed = || Probe::new(CheckId::UringReportUsage).skipped("SEND_ZC itself failed");
    match sys::uring::send_zc_once(tx, 1024, abi::IORING_SEND_ZC_REPORT_USAGE, false, TIMEOUT) {
        Ok(o) if o.result == -libc::EINVAL => (
            send_zc.ok("the opcode probe lists IORING_OP_SEND_ZC"),
            usage.done(
                Status::Unavailable,
                "SEND_ZC rejects IORING_SEND_ZC_REPORT_USAGE (EINVAL); needs Linux 6.2+",
                Some("EINVAL"),
            ),
        ),
        Ok(o) if o.result < 0 => {
            let e = io::Error::from_raw_os_error(-o.result);
            (
                send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
                failed(),
            )
        }
        Ok(o) => {
            send_zc.detail("more", o.more);
            let sent = send_zc.ok(format!(
                "a SEND_ZC request sent {} bytes; result CQE then notification CQE",
                o.result
            ));
            let usage = match o.copied() {
                Some(copied) => {
                    usage.detail("copied", copied);
                    let how = if copied {
                        "copied, as over loopback"
                    } else {
                        "not copied"
                    };
                    usage.ok(format!("the notification reports usage ({how})"))
                }
                None => usage.done(
                    Status::Unavailable,
                    "no notification CQE followed the result",
                    None,
                ),
            };
            (sent, usage)
        }
        Err(e) => (
            send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
            failed(),
        ),
    }
}

/// `uring.registered_buffers`: one page registered, sent with `IORING_RECVSEND_FIXED_BUF`, and
/// what `RLIMIT_MEMLOCK` lets a pool pin.
fn registered_buffers_check(tx: BorrowedFd<'_>) -> Check {
    let memlock_soft = sys::process::memlock_limit().map_or(None, |(soft, _)| soft);
    let cap_ipc_lock = sys::process::has_cap_ipc_lock();
    let mut fixed = Probe::new(CheckId::UringRegisteredBuffers);
    fixed.step(
        "IORING_REGISTER_BUFFERS (one page); IORING_OP_SEND_ZC with IORING_RECVSEND_FIXED_BUF",
    );
    fixed.detail("memlock_soft", memlock_soft);
    fixed.detail("memlock_exempt", cap_ipc_lock);
    let limit = match (cap_ipc_lock, memlock_soft) {
        (true, _) => "CAP_IPC_LOCK exempts this process from RLIMIT_MEMLOCK".to_owned(),
        (false, None) => "RLIMIT_MEMLOCK is unlimited".to_owned(),
        (false, Some(n)) => format!(
            "registered buffers may pin up to {} KiB (RLIMIT_MEMLOCK)",
            n / 1024
        ),
    };
    match sys::uring::send_zc_once(tx, sys::mm::page_size(), 0, true, TIMEOUT) {
        Ok(o) if o.result >= 0 => fixed.ok(format!("a registered-buffer SEND_ZC worked; {limit}")),
        Ok(o) => fixed.failed(
            "SEND_ZC(FIXED_BUF)",
            &io::Error::from_raw_os_error(-o.result),
            "needs Linux 6.0+",
        ),
        Err(e) => fixed.failed("IORING_REGISTER_BUFFERS", &e, &limit),
    }
}
