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

/// Runs the network receive softirq once on each CPU the calling thread may run on; returns
/// on how many CPUs it did. Best effort: a namespace whose loopback is down, or a CPU the
/// helper cannot move to, is skipped.
pub fn kick_deferred_frees() -> usize {
    let Some(allowed) = affinity() else {
        return 0;
    };
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) })
        .collect();
    // A thread of its own, so the caller's affinity is never touched; it inherits the
    // caller's network namespace, whose loopback it uses.
    std::thread::scope(|s| {
        s.spawn(|| cpus.iter().filter(|&&cpu| kick_on(cpu)).count())
            .join()
            .unwrap_or(0)
    })
}

/// The calling thread's CPU set (`sched_getaffinity(2)`).
fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed, written by the kernel.
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    (r == 0).then_some(set)
}

/// Moves this thread to `cpu` (`sched_setaffinity(2)` migrates the caller before it
/// returns) and sends a datagram to itself there.
fn kick_on(cpu: usize) -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from CPU_ISSET over the set's range, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: `one` is a cpu_set_t of the size passed, only read by the kernel.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) } != 0 {
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
