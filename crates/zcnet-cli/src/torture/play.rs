//! One round: the pair of sockets, the sender and the receiver on threads of their own, each
//! bounded in time, and what they report judged against the plan.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::net::Labs;
use super::round::{GRACE, Plan, RxReport, TxReport};
use super::setup::Setup;
use super::{ctx, net, rx, tx};

/// What one round found.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) bytes: u64,
    pub(super) wrong: u64,
    pub(super) missing: u64,
    pub(super) loans_out: u64,
    pub(super) loans_back: u64,
    pub(super) faults: BTreeMap<&'static str, u64>,
    pub(super) effects: BTreeMap<&'static str, u64>,
    pub(super) problems: Vec<String>,
}

/// Runs `f` on a thread of its own; `None` when it does not end in time (it is left running,
/// and the round fails).
pub(super) fn bounded<T: Send + 'static>(
    name: &str,
    limit: Instant,
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<(std::sync::mpsc::Receiver<std::thread::Result<T>>, Instant)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("torture {name}"))
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })?;
    Ok((rx, limit))
}

pub(super) fn join<T>(
    what: &str,
    (rx, limit): (std::sync::mpsc::Receiver<std::thread::Result<T>>, Instant),
    problems: &mut Vec<String>,
) -> Option<T> {
    let left = limit.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(Ok(v)) => Some(v),
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            problems.push(format!("the {what} panicked: {msg}"));
            None
        }
        Err(_) => {
            problems.push(format!(
                "the {what} did not finish within {GRACE:?} of the round's end (hung)"
            ));
            None
        }
    }
}

/// The sockets of a round: TCP or UDP, each side's end.
pub enum Pair {
    Tcp(std::net::TcpStream, std::net::TcpStream),
    Udp(std::net::UdpSocket, std::net::UdpSocket),
}

pub(super) fn run_round(plan: &Plan, labs: &Labs, setup: &Setup) -> Outcome {
    let mut out = Outcome::default();
    let pair = if plan.udp {
        labs.udp_pair(plan.link, plan.family)
            .map(|(a, b)| Pair::Udp(a, b))
    } else {
        labs.tcp_pair(plan.link, plan.family)
            .map(|(a, b)| Pair::Tcp(a, b))
    };
    let pair = match pair {
        Ok(p) => p,
        Err(e) => {
            out.problems.push(format!(
                "setting up the sockets: {}",
                crate::error_line::one_line(&e)
            ));
            return out;
        }
    };
    // optmem: inside the sending lab namespace only, put back after the round.
    let _optmem = match (plan.faults.optmem, labs.send_ns(plan.link)) {
        (Some(v), Some(ns)) => match net::Optmem::set(ns, v) {
            Ok(g) => {
                out.faults.insert("optmem", 1);
                Some(g)
            }
            Err(e) => {
                out.problems.push(format!("setting optmem_max: {e:#}"));
                return out;
            }
        },
        _ => None,
    };
    let _memlock = match plan.faults.memlock {
        Some(limit) => match net::Memlock::set(limit) {
            Ok(g) => {
                out.faults.insert("memlock", 1);
                Some(g)
            }
            Err(e) => {
                out.problems.push(format!("lowering RLIMIT_MEMLOCK: {e:#}"));
                return out;
            }
        },
        None => None,
    };
    let drops_before = plan.udp.then(|| labs.drops(plan.link));
    let limit = plan.deadline + GRACE;
    let done = Arc::new(AtomicBool::new(false));
    // A second descriptor of the sender's socket: shut down if the sender hangs, so that its
    // blocked calls return.
    let (tx_end, rx_end) = match pair {
        Pair::Tcp(a, b) => (ctx::Sock::Tcp(a), rx::Sock::Tcp(b)),
        Pair::Udp(a, b) => (ctx::Sock::Udp(a), rx::Sock::Udp(b)),
    };
    let killer = tx_end.try_clone_fd();
    if let Some(b) = plan.faults.sndbuf {
        match net::set_sndbuf(&tx_end, b) {
            Ok(_) => {
                out.faults.insert("sndbuf", 1);
            }
            Err(e) => out.problems.push(format!("setting SO_SNDBUF: {e:#}")),
        }
    }
    let receiver = {
        let plan = plan.clone();
        let done = done.clone();
        bounded("receiver", limit, move || rx::run(&plan, rx_end, &done))
    };
    let sender = {
        let plan = plan.clone();
        let done = done.clone();
        let helper = setup.ffi_helper.clone();
        bounded("sender", limit, move || {
            let r = tx::run(&plan, tx_end, helper.as_deref());
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    let (sender, receiver) = match (sender, receiver) {
        (Ok(s), Ok(r)) => (s, r),
        (Err(e), _) | (_, Err(e)) => {
            out.problems.push(format!("starting a thread: {e}"));
            return out;
        }
    };
    let txr = join("sender", sender, &mut out.problems);
    if let Ok(k) = &killer {
        // The end of the stream for the receiver, also where the sender failed before it
        // could say so (its socket's last descriptor is this one); a hung sender's blocked
        // calls return.
        let how = if txr.is_none() {
            nix::sys::socket::Shutdown::Both
        } else {
            nix::sys::socket::Shutdown::Write
        };
        let _ = nix::sys::socket::shutdown(std::os::fd::AsRawFd::as_raw_fd(k), how);
    }
    done.store(true, Ordering::SeqCst);
    let rxr = join("receiver", receiver, &mut out.problems);
    drop(killer);
    let (Some(txr), Some(rxr)) = (txr, rxr) else {
        return out;
    };
    judge(plan, labs, txr, rxr, drops_before, &mut out);
    out
}

/// The errno an error's text ends with (`... (os error 105)`).
pub(super) fn errno_of(e: &str) -> Option<i32> {
    let at = e.rfind("(os error ")? + "(os error ".len();
    e[at..].split(')').next()?.parse().ok()
}

/// Whether a send's error is one the round's faults explain: anything after a reset; a
/// zero-copy send refused for want of locked memory; a datagram refused for want of send
/// buffer (`SO_SNDBUF`) or option memory.
pub(super) fn explained(plan: &Plan, e: &str) -> bool {
    let f = &plan.faults;
    let errno = errno_of(e);
    f.reset_after.is_some()
        || (f.memlock.is_some() && matches!(errno, Some(libc::ENOMEM | libc::ENOBUFS)))
        || (plan.udp && f.sndbuf.is_some() && matches!(errno, Some(libc::ENOBUFS | libc::EAGAIN)))
        || (plan.udp && f.optmem.is_some() && errno == Some(libc::ENOBUFS))
}

/// Compares what arrived with what the sender says it sent.
pub(super) fn judge(
    plan: &Plan,
    labs: &Labs,
    txr: TxReport,
    rxr: RxReport,
    drops_before: Option<net::Drops>,
    out: &mut Outcome,
) {
    out.loans_out = txr.loans_out;
    out.loans_back = txr.loans_back;
    out.bytes = rxr.bytes;
    out.wrong = rxr.wrong;
    out.problems.extend(txr.problems);
    out.problems.extend(rxr.problems);
    for (k, v) in txr.effects {
        out.effects.insert(k, v);
    }
    if rxr.cancelled_receives > 0 {
        out.effects
            .insert("cancelled_receives", rxr.cancelled_receives);
    }
    if rxr.stalls > 0 {
        out.faults.insert("stall", rxr.stalls);
    }
    if rxr.reset {
        out.faults.insert("reset", 1);
    }
    if let Some(n) = out.effects.get("cancelled") {
        out.faults.insert("cancel", *n);
    }
    if rxr.wrong > 0 {
        out.problems.push(format!(
            "{} wrong {} ({})",
            rxr.wrong,
            if plan.udp { "datagrams" } else { "bytes" },
            rxr.first_bad.as_deref().unwrap_or("?")
        ));
    }
    if txr.loans_out != txr.loans_back {
        out.problems.push(format!(
            "{} buffers handed out, {} came back",
            txr.loans_out, txr.loans_back
        ));
    }
    let unexplained: Vec<&String> = txr.errors.iter().filter(|e| !explained(plan, e)).collect();
    if let Some(first) = unexplained.first() {
        out.problems.push(format!(
            "{} sends failed without a fault that explains it: {first}",
            unexplained.len()
        ));
    }
    if !plan.udp {
        if rxr.bytes > txr.stream_len {
            out.problems.push(format!(
                "{} bytes received, more than the {} the sender says it sent",
                rxr.bytes, txr.stream_len
            ));
        } else if !rxr.reset && rxr.bytes < txr.stream_len {
            out.missing = txr.stream_len - rxr.bytes;
            out.problems.push(format!(
                "{} bytes received of the {} the sender says it sent",
                rxr.bytes, txr.stream_len
            ));
        }
        return;
    }
    // UDP: a datagram the sender says it sent and that did not arrive must have been counted
    // as dropped by the kernel of the receiving side.
    let cut = if rxr.reset {
        rxr.got.last().copied().unwrap_or(0)
    } else {
        u64::MAX
    };
    let lost = |s: &u64| *s <= cut && !rxr.got.contains(s);
    let missing = txr.sent_seqs.iter().filter(|s| lost(s)).count() as u64;
    // What the kernel counts as drops: datagrams, except that a GSO train stays one skb until
    // something cuts it (the receiving socket without UDP_GRO cuts it first; with it, it is
    // queued whole), so a train lost whole on the way (a full backlog, a full socket with
    // UDP_GRO) is one drop and one count.
    let drops_needed = if !txr.trains.is_empty() {
        txr.trains
            .iter()
            .map(|&(first, n)| {
                let gone = (first..first + n).filter(lost).count() as u64;
                if gone == n && n > 1 { 1 } else { gone }
            })
            .sum()
    } else {
        missing
    };
    if let Some(bad) = rxr.got.iter().find(|s| **s >= txr.made) {
        out.problems.push(format!(
            "datagram {bad} arrived, but only {} were made",
            txr.made
        ));
    }
    if missing == 0 {
        return;
    }
    // A sender that does not keep datagrams in order (io_uring's are independent requests)
    // can send some below the cut after the receiver closed: those find no socket.
    let counted = drops_before.map_or(0, |b| labs.drops(plan.link).since(&b, rxr.reset));
    if drops_needed <= counted {
        out.faults.insert("dropped", missing);
    } else {
        out.missing = missing;
        out.problems.push(format!(
            "{missing} datagrams sent and never received ({drops_needed} drops, counting a GSO \
             train a GRO socket lost as one), but the receiving namespace's kernel counted only \
             {counted} drops (UDP RcvbufErrors/InErrors, reassembly, devices)"
        ));
    }
}
