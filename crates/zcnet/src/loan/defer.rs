//! The kernel's deferred frees of socket buffers, and the nudge that runs them.
//!
//! Since Linux 5.19 (TCP) and later kernels (UDP) a socket buffer that a receiver consumes on
//! another CPU than the one that allocated it is not freed there: `skb_attempt_defer_free`
//! queues it on the allocating CPU's list, which that CPU empties at the start of its next
//! network receive softirq (`net_rx_action`), or when the list reaches half of
//! `net.core.skb_defer_max` (an IPI). For a `MSG_ZEROCOPY` or `SEND_ZC` send whose receiver is
//! on this host (loopback, veth, a container), the buffer's completion is sent by that free. On
//! a CPU with no other network traffic it waits: 107 s was seen in the lab, with the sender
//! idle, waiting for its last completion.
//!
//! [`kick_deferred_frees`] runs that softirq on every CPU this thread may use: it moves a
//! helper thread to each CPU in turn and sends one datagram to itself over loopback, whose
//! transmit raises `NET_RX` on that CPU and runs it before the send returns.

use std::net::{Ipv4Addr, UdpSocket};

use crate::sys;

/// Runs the network receive softirq once on each CPU the calling thread may run on; returns
/// on how many CPUs it did. Best effort: a namespace whose loopback is down, or a CPU the
/// helper cannot move to, is skipped.
pub(super) fn kick_deferred_frees() -> usize {
    let Ok(cpus) = sys::process::allowed_cpus() else {
        return 0;
    };
    // A thread of its own, so the caller's affinity is never touched; it inherits the
    // caller's network namespace, whose loopback it uses.
    std::thread::scope(|s| {
        s.spawn(|| cpus.iter().filter(|&&cpu| kick_on(cpu)).count())
            .join()
            .unwrap_or(0)
    })
}

/// Moves this thread to `cpu` and sends a datagram to itself there.
fn kick_on(cpu: usize) -> bool {
    if sys::process::run_only_on(cpu).is_err() {
        return false;
    }
    let Ok(s) = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)) else {
        return false;
    };
    let sent = s
        .local_addr()
        .and_then(|a| s.connect(a))
        .and_then(|()| s.send(&[0]));
    sent.is_ok()
}
