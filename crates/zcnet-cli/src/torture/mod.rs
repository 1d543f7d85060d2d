//! `zcnet torture`: every sender and receiver of the library driven with random sizes and
//! injected faults, every byte checked by its stream offset (TCP) or its datagram's sequence
//! (UDP), every loaned buffer counted back, descriptors counted per round; one summary line.
//!
//! A run is a sequence of rounds until `--seconds` pass. Each round draws, from the seed and its
//! number, a mechanism to focus on, its counterpart (a receiver for a sender, a sender for a
//! receiver: another mechanism, or a plain `write`/`read` one), TCP or UDP, the link (a
//! loopback lab or a veth lab), the family, sizes, windows and batches, and a set of faults,
//! then runs sender and receiver on threads of their own and checks what arrived against what
//! the sender says it sent. `--seed` replays the same rounds (their timing may differ).

mod atx;
pub mod check;
mod ctx;
mod ffi;
mod net;
pub mod round;
mod rx;
mod tx;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netlab::Family;
use serde::Serialize;

use check::Rng;
use net::{Labs, Link};
use round::{End, Fault, Faults, GRACE, Mechanism, Plan, RxReport, TxReport};

/// Options of `zcnet torture`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// How long to run rounds (the round running then finishes: its 0.3-2 s, then its drain,
    /// which a slow link can make last up to a minute).
    #[arg(long, default_value = "20", value_parser = crate::args::seconds)]
    seconds: f64,
    /// The seed of every random choice (default: a random one, printed so that a failure can
    /// be replayed).
    #[arg(long)]
    seed: Option<u64>,
    /// A mechanism to drive (repeatable; default: all).
    #[arg(long = "mechanism", value_enum)]
    mechanisms: Vec<Mechanism>,
    /// A fault to inject (repeatable; default: all).
    #[arg(long = "fault", value_enum)]
    faults: Vec<Fault>,
    /// Print the summary as one JSON document.
    #[arg(long)]
    json: bool,
    /// Test only: flip one bit of the first byte the first round receives, before it is
    /// checked (the run must then fail).
    #[arg(long, hide = true)]
    corrupt_one_byte: bool,
}

/// Counts over the run.
#[derive(Default, Serialize)]
struct Summary {
    seed: u64,
    seconds: f64,
    rounds: u64,
    bytes_checked: u64,
    wrong: u64,
    missing: u64,
    faults: BTreeMap<String, u64>,
    loans_out: u64,
    loans_back: u64,
    fds_leaked: u64,
    rounds_by_mechanism: BTreeMap<String, u64>,
    effects: BTreeMap<String, u64>,
    skipped: Vec<Skip>,
    failures: Vec<Failure>,
    /// The signal that ended the run before its time (`SIGINT`, `SIGTERM`, `SIGHUP`), if one did.
    stopped_by: Option<String>,
    ok: bool,
}

#[derive(Serialize)]
struct Skip {
    what: String,
    reason: String,
}

#[derive(Serialize)]
struct Failure {
    round: u64,
    seed: u64,
    sender: String,
    receiver: String,
    plan: String,
    what: String,
}

impl Summary {
    fn line(&self) -> String {
        let f = |k: &str| self.faults.get(k).copied().unwrap_or(0);
        let mut s = format!(
            "torture: {} rounds, {} bytes checked, {} wrong, {} missing, faults: sndbuf={} \
             optmem={} memlock={} stall={} reset={} cancel={} dropped={}, loans: {} out {} \
             back, fds: {} leaked",
            self.rounds,
            self.bytes_checked,
            self.wrong,
            self.missing,
            f("sndbuf"),
            f("optmem"),
            f("memlock"),
            f("stall"),
            f("reset"),
            f("cancel"),
            f("dropped"),
            self.loans_out,
            self.loans_back,
            self.fds_leaked
        );
        let _ = write!(s, ", skipped: {}", self.skipped.len());
        if let Some(sig) = &self.stopped_by {
            let _ = write!(s, ", stopped by {sig}");
        }
        s.push_str(if self.ok { " -- ok" } else { " -- FAILED" });
        s
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    // Below 2^53: a JSON number reads it back exactly.
    h.finish() >> 11
}

/// What can run here, and why not where it cannot.
struct Setup {
    mechanisms: Vec<Mechanism>,
    faults: Vec<Fault>,
    ffi_helper: Option<std::path::PathBuf>,
    skipped: Vec<Skip>,
}

fn setup(opt: &Opt, labs: &Labs) -> Setup {
    let mut skipped = Vec::new();
    let mut skip = |what: String, reason: String| {
        eprintln!("torture: skipping {what}: {reason}");
        skipped.push(Skip { what, reason });
    };
    let mut wanted: Vec<Mechanism> = if opt.mechanisms.is_empty() {
        Mechanism::ALL.to_vec()
    } else {
        opt.mechanisms.clone()
    };
    wanted.sort();
    wanted.dedup();
    let uring = zcnet::uring::support();
    let uring_ok = uring.setup.status == zcnet::support::Status::Available;
    let fixed_ok = uring.registered_buffers.status == zcnet::support::Status::Available;
    let ffi_helper = ffi::helper();
    let mut mechanisms = Vec::new();
    for m in wanted {
        let why = if m.uring() && !uring_ok {
            Some(format!("io_uring: {}", uring.setup.reason))
        } else if m == Mechanism::UringZcFixed && !fixed_ok {
            Some(format!(
                "registered buffers: {}",
                uring.registered_buffers.reason
            ))
        } else if matches!(
            m,
            Mechanism::FfiZc | Mechanism::FfiUring | Mechanism::FfiFile
        ) {
            ffi_helper.as_ref().err().cloned()
        } else {
            None
        };
        match why {
            Some(reason) => skip(format!("mechanism {}", m.name()), reason),
            None => mechanisms.push(m),
        }
    }
    let mut wanted: Vec<Fault> = if opt.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        opt.faults.clone()
    };
    wanted.sort();
    wanted.dedup();
    let mut faults = Vec::new();
    for f in wanted {
        let why = match f {
            Fault::Optmem => match &labs.no_lab {
                Some(r) => Some(format!(
                    "{r}; optmem_max is changed only inside a lab namespace, never the host's"
                )),
                None if !mechanisms.iter().any(|m| m.msg_zerocopy()) => {
                    Some("no MSG_ZEROCOPY mechanism is driven".into())
                }
                None => None,
            },
            Fault::Memlock => {
                let limits =
                    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK);
                match limits {
                    Err(e) => Some(format!("getrlimit(RLIMIT_MEMLOCK): {e}")),
                    Ok(_) if !mechanisms.iter().any(|m| m.pins()) => {
                        Some("no zero-copy mechanism is driven".into())
                    }
                    Ok(_) => None,
                }
            }
            Fault::Cancel if !mechanisms.iter().any(|m| m.tokio()) => {
                Some("no tokio mechanism is driven".into())
            }
            _ => None,
        };
        match why {
            Some(reason) => skip(format!("fault {}", f.name()), reason),
            None => faults.push(f),
        }
    }
    if labs.veth.is_none() {
        skip(
            "link veth".into(),
            labs.no_lab
                .clone()
                .unwrap_or_else(|| "the veth lab could not be built".into()),
        );
    }
    if labs.loopback.is_none() {
        eprintln!(
            "torture: the loopback rounds use the host's 127.0.0.1 and ::1 ({})",
            labs.no_lab.as_deref().unwrap_or("no loopback lab")
        );
    }
    Setup {
        mechanisms,
        faults,
        ffi_helper: ffi_helper.ok(),
        skipped,
    }
}

/// Draws round `round`.
fn plan(seed: u64, round: u64, setup: &Setup, links: &[Link], end: Instant, corrupt: bool) -> Plan {
    let round_seed = seed ^ round.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut rng = Rng::new(round_seed);
    let focus = rng.pick(&setup.mechanisms);
    let senders: Vec<Mechanism> = setup
        .mechanisms
        .iter()
        .copied()
        .filter(|m| !m.receives())
        .collect();
    let receivers: Vec<Mechanism> = setup
        .mechanisms
        .iter()
        .copied()
        .filter(|m| m.receives())
        .collect();
    let (sender, receiver) = if focus.receives() {
        let s = if senders.is_empty() || rng.chance(0.25) {
            End::Plain
        } else {
            End::Mechanism(rng.pick(&senders))
        };
        (s, End::Mechanism(focus))
    } else {
        let r = if receivers.is_empty() || rng.chance(0.4) {
            End::Plain
        } else {
            End::Mechanism(rng.pick(&receivers))
        };
        (End::Mechanism(focus), r)
    };
    let udp_capable = matches!(sender, End::Mechanism(m) if m.udp()) && receiver == End::Plain;
    let udp = udp_capable && rng.chance(0.4);
    // GSO trains from the senders that take a segment size (libzcnet's C config has none).
    let trains = matches!(sender, End::Mechanism(m) if m.sends_trains());
    let segment =
        (udp && trains && rng.chance(0.4)).then(|| rng.pick(&[check::HEADER, 64, 512, 1200, 1452]));
    let link = rng.pick(links);
    let family = if rng.chance(0.5) {
        Family::V4
    } else {
        Family::V6
    };
    let has = |f: Fault| setup.faults.contains(&f);
    let sends_with = |pred: fn(Mechanism) -> bool| matches!(sender, End::Mechanism(m) if pred(m));
    let mut faults = Faults::default();
    if has(Fault::Sndbuf) && rng.chance(0.3) {
        faults.sndbuf = Some(rng.pick(&[1usize, 4096, 8192, 32_768]));
    }
    if has(Fault::Optmem) && sends_with(Mechanism::msg_zerocopy) && rng.chance(0.4) {
        faults.optmem = Some(rng.pick(&[0u64, 512, 4096, 16_384]));
    }
    if has(Fault::Memlock) && sends_with(Mechanism::pins) && rng.chance(0.3) {
        faults.memlock = Some(rng.pick(&[0u64, 4096, 65_536, 1 << 20]));
    }
    faults.stall = has(Fault::Stall) && rng.chance(0.25);
    let budget = rng.range(256 << 10, 24 << 20);
    // The corrupted round must read something: no reset there.
    if has(Fault::Reset) && rng.chance(0.2) && !corrupt {
        faults.reset_after = Some(if udp {
            rng.range(1, 200)
        } else {
            rng.range(0, budget / 2)
        });
    }
    faults.cancel = has(Fault::Cancel) && sends_with(|m| m.tokio()) && rng.chance(0.7);
    let now = Instant::now();
    let secs = Duration::from_millis(rng.range(300, 2000));
    let deadline = (now + secs).min(end.max(now + Duration::from_millis(300)));
    Plan {
        round,
        seed: round_seed,
        focus,
        sender,
        receiver,
        udp,
        segment,
        link,
        family,
        faults,
        budget,
        deadline,
        base: rng.range(0, netlab::pattern::PERIOD as u64 - 1),
        stream: rng.next_u64() as u32,
        corrupt,
    }
}

/// Runs the torture rounds and prints the summary.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    // SIGINT, SIGTERM or SIGHUP ends the run after the round it is in, with its summary and its
    // labs removed (killed by the default action, the lab namespaces stayed until the next
    // run). Taken before any thread starts. The programs a round starts inherit the blocked
    // signals, which suits them: the libzcnet helper ends by itself or is ended by its id (not
    // by a signal to the process group mid-round), and `ip` runs for a moment.
    if let Err(e) = crate::interrupt::watch() {
        eprintln!("torture: cannot take SIGINT and SIGTERM ({e}): they end the run at once");
    }
    // A second signal ends the process at once: its labs go with it.
    crate::interrupt::on_death(netlab::remove_namespaces_of_this_process);
    let _graceful = crate::interrupt::graceful_saying(
        "torture stops after the round in progress (its drain can take a minute); a second \
         signal ends it now",
    );
    let seed = opt.seed.unwrap_or_else(random_seed);
    eprintln!("torture: seed {seed} (replay: zcnet torture --seed {seed})");
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(opt.seconds);
    let labs = Labs::build();
    let setup = setup(&opt, &labs);
    // The probes open and close sockets and rings once per process: run them before the first
    // descriptor count.
    let _ = (
        zcnet::msg_zerocopy::support(),
        zcnet::file::support(),
        zcnet::tcp_rx::support(),
        zcnet::peek::support(),
        zcnet::probe::features(),
    );
    let mut summary = Summary {
        seed,
        seconds: opt.seconds,
        skipped: setup.skipped,
        ..Summary::default()
    };
    let setup = Setup {
        skipped: Vec::new(),
        ..setup
    };
    if setup.mechanisms.is_empty() {
        anyhow::bail!("no mechanism can run here (each skip is said above)");
    }
    let links = labs.links();
    let mut round = 0u64;
    while (Instant::now() < end || round == 0) && crate::interrupt::stop_requested().is_none() {
        let plan = plan(
            seed,
            round,
            &setup,
            &links,
            end,
            opt.corrupt_one_byte && round == 0,
        );
        let fds = net::open_fds();
        let outcome = run_round(&plan, &labs, &setup);
        let leaked = net::open_fds().saturating_sub(fds);
        summary.rounds += 1;
        for m in [plan.sender, plan.receiver] {
            if let End::Mechanism(m) = m {
                *summary.rounds_by_mechanism.entry(m.name()).or_default() += 1;
            }
        }
        let mut problems = outcome.problems;
        if leaked > 0 {
            summary.fds_leaked += leaked;
            problems.push(format!(
                "{leaked} descriptors more after the round than before"
            ));
        }
        summary.bytes_checked += outcome.bytes;
        summary.wrong += outcome.wrong;
        summary.missing += outcome.missing;
        summary.loans_out += outcome.loans_out;
        summary.loans_back += outcome.loans_back;
        for (k, v) in outcome.faults {
            *summary.faults.entry(k.to_owned()).or_default() += v;
        }
        for (k, v) in outcome.effects {
            *summary.effects.entry(k.to_owned()).or_default() += v;
        }
        for what in problems {
            eprintln!("torture: FAILED {}: {what}", plan.describe());
            summary.failures.push(Failure {
                round: plan.round,
                seed: plan.seed,
                sender: plan.sender.name(),
                receiver: plan.receiver.name(),
                plan: plan.describe(),
                what,
            });
        }
        round += 1;
    }
    drop(labs);
    summary.stopped_by = crate::interrupt::stop_requested().map(|sig| sig.as_str().to_owned());
    summary.ok = summary.failures.is_empty()
        && summary.wrong == 0
        && summary.missing == 0
        && summary.loans_out == summary.loans_back
        && summary.fds_leaked == 0;
    if opt.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("{}", summary.line());
    }
    if summary.ok {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "torture failed: {} problems in {} rounds (seed {seed}; each is described above)",
            summary.failures.len(),
            summary.rounds
        ))
    }
}

/// What one round found.
#[derive(Default)]
struct Outcome {
    bytes: u64,
    wrong: u64,
    missing: u64,
    loans_out: u64,
    loans_back: u64,
    faults: BTreeMap<&'static str, u64>,
    effects: BTreeMap<&'static str, u64>,
    problems: Vec<String>,
}

/// Runs `f` on a thread of its own; `None` when it does not end in time (it is left running,
/// and the round fails).
fn bounded<T: Send + 'static>(
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

fn join<T>(
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

fn run_round(plan: &Plan, labs: &Labs, setup: &Setup) -> Outcome {
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
fn errno_of(e: &str) -> Option<i32> {
    let at = e.rfind("(os error ")? + "(os error ".len();
    e[at..].split(')').next()?.parse().ok()
}

/// Whether a send's error is one the round's faults explain: anything after a reset; a
/// zero-copy send refused for want of locked memory; a datagram refused for want of send
/// buffer (`SO_SNDBUF`) or option memory.
fn explained(plan: &Plan, e: &str) -> bool {
    let f = &plan.faults;
    let errno = errno_of(e);
    f.reset_after.is_some()
        || (f.memlock.is_some() && matches!(errno, Some(libc::ENOMEM | libc::ENOBUFS)))
        || (plan.udp && f.sndbuf.is_some() && matches!(errno, Some(libc::ENOBUFS | libc::EAGAIN)))
        || (plan.udp && f.optmem.is_some() && errno == Some(libc::ENOBUFS))
}

/// Compares what arrived with what the sender says it sent.
fn judge(
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
