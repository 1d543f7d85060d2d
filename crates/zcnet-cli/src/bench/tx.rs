//! `zcnet bench udp-tx` and `zcnet bench tcp-tx`: `MSG_ZEROCOPY` sends against plain sends.
//!
//! A sender thread, pinned to CPU 0 inside the lab, sends buffers of one size for a fixed time;
//! a receiver (where there is one) pinned to CPU 1 discards what arrives. The `sink` lab routes
//! UDP into an `ifb` device that drops it in its transmit routine: the only lab here where the
//! kernel really sends without copying. In `veth` and `loopback` local delivery copies every
//! zero-copy send, and the completions say so (`zero_copy_share` 0). TCP cannot run into the
//! sink (it drops the SYN), so `tcp-tx` uses loopback and veth only.
//!
//! Modes: `copy` (plain `send`), `zc` (`MSG_ZEROCOPY` on every call, whatever the kernel
//! reports), `zc-adaptive` (the library's defaults: 16 KiB threshold, copy for 1024 sends after
//! a completion flagged copied).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, LoopbackLab, Netns, Side, SinkLab, VethLab, pattern};
use serde_json::json;
use zcnet::ZeroCopyCounters as _;
use zcnet::msg_zerocopy::{self, Config as SenderConfig, CopiedPolicy, ZerocopySender};

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use crate::measure::{
    self, Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work, pin,
};
use crate::remote::{
    self, Remote,
    proto::{Check, Role},
};

/// Transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// UDP datagrams.
    Udp,
    /// A TCP stream.
    Tcp,
}

impl Proto {
    fn bench(self) -> &'static str {
        match self {
            Proto::Udp => "udp-tx",
            Proto::Tcp => "tcp-tx",
        }
    }
}

/// Sender mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Plain `send(2)`.
    Copy,
    /// `MSG_ZEROCOPY` on every call.
    Zc,
    /// `MSG_ZEROCOPY` with the library's threshold and adaptive copied policy.
    ZcAdaptive,
    /// `Mode::Auto`: zero copy from the profile's threshold for this route (`zcnet tune`).
    Auto,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Zc => "zc",
            Mode::ZcAdaptive => "zc-adaptive",
            Mode::Auto => "auto",
        }
    }

    fn config(self) -> SenderConfig {
        match self {
            Mode::Copy => SenderConfig {
                mode: msg_zerocopy::Mode::Copy,
                ..SenderConfig::default()
            },
            Mode::Zc => SenderConfig {
                mode: msg_zerocopy::Mode::ZeroCopy,
                threshold: 0,
                policy: CopiedPolicy::Keep,
            },
            Mode::ZcAdaptive => SenderConfig::default(),
            Mode::Auto => SenderConfig {
                mode: msg_zerocopy::Mode::Auto,
                ..SenderConfig::default()
            },
        }
    }
}

/// Options of `zcnet bench udp-tx` / `tcp-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Buffer size per send call (repeatable). Default: 1024 4096 16384 32768 64000.
    #[arg(long = "size", value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1073741824))]
    pub sizes: Vec<usize>,
    /// Sender modes to alternate (repeatable). Default: copy, zc, auto (UDP); copy, zc,
    /// zc-adaptive, auto (TCP).
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// Address family. Default: IPv4.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: super::common::FamilyArg,
    /// Size of the buffer pool the sends cycle through, in MiB. 256 (default) is meant to be
    /// cold, as for a server sending distinct data; 2 to stay hot in L2/L3, where copying costs
    /// least. The report says which it was: a copy from the pool is timed against one from a hot
    /// buffer before the runs (`settings.pool`), whatever size the cache claims to be.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub pool_mib: usize,
}

pub(crate) enum Lab {
    Loopback(LoopbackLab),
    Veth(VethLab),
    Sink(SinkLab),
    /// `--remote`: the receiver is a `zcnet serve` on another host.
    Remote(std::sync::Mutex<Remote>),
}

impl Lab {
    pub(crate) fn build(name: &str, proto: Proto) -> anyhow::Result<Lab> {
        Ok(match (name, proto) {
            ("loopback", _) => Lab::Loopback(LoopbackLab::new(None)?),
            // UDP datagrams must not be fragmented: a fragment lost to a full backlog leaves the
            // others in the reassembly queue for ipfrag_time (30 s), holding their zero-copy
            // pages, and the sender's drain times out. veth carries 65535 bytes in one frame.
            ("veth", Proto::Udp) => Lab::Veth(VethLab::new(Some(VETH_UDP_MTU))?),
            ("veth", Proto::Tcp) => Lab::Veth(VethLab::new(None)?),
            ("sink", Proto::Udp) => Lab::Sink(SinkLab::new()?),
            ("sink", Proto::Tcp) => {
                bail!("TCP cannot run into the sink lab: it drops the handshake")
            }
            (other, _) => bail!("no lab {other:?} (loopback, veth, sink)"),
        })
    }

    /// (sender namespace, receiver namespace if any, destination address); `None` for the
    /// remote, whose far side is no namespace here.
    fn ends(&self, family: Family) -> Option<(&Netns, Option<&Netns>, IpAddr)> {
        Some(match self {
            Lab::Loopback(l) => (&l.ns, Some(&l.ns), l.addr(family)),
            Lab::Veth(v) => (&v.a, Some(&v.b), VethLab::addr(Side::B, family)),
            Lab::Sink(s) => (&s.ns, None, SinkLab::target(family)),
            Lab::Remote(_) => return None,
        })
    }
}

pub(super) fn unspecified(family: Family) -> SocketAddr {
    match family {
        Family::V4 => "0.0.0.0:0".parse().expect("literal"),
        Family::V6 => "[::]:0".parse().expect("literal"),
    }
}

/// What a receiver got: bytes, and for a checked TCP stream the verifier that saw them.
pub(super) type Received = (u64, Option<pattern::Verifier>);

/// A receiver on CPU 1 that discards what it gets, after checking a TCP stream against `check`
/// (datagrams are counted); returns the bytes it received and its verifier.
pub(super) fn receiver(
    ns: &Netns,
    proto: Proto,
    ip: IpAddr,
    check: Check,
) -> anyhow::Result<(SocketAddr, std::thread::JoinHandle<Received>)> {
    match proto {
        Proto::Udp => {
            let sock = ns.run(move || UdpSocket::bind(SocketAddr::new(ip, 0)))??;
            let addr = sock.local_addr()?;
            sock.set_read_timeout(Some(Duration::from_millis(300)))?;
            let h = std::thread::spawn(move || {
                pin(1);
                let mut buf = vec![0u8; 65536];
                let mut total = 0u64;
                // Ends when the sender has gone quiet (the read timeout).
                while let Ok(n) = sock.recv(&mut buf) {
                    total += n as u64;
                }
                (total, None)
            });
            Ok((addr, h))
        }
        Proto::Tcp => {
            let l = ns.run(move || TcpListener::bind(SocketAddr::new(ip, 0)))??;
            let addr = l.local_addr()?;
            let mut verifier = match check {
                Check::Count => None,
                Check::Pattern => Some(pattern::Verifier::new()),
                Check::Pool { size, span } => Some(pattern::Verifier::pool(size, span)),
                Check::Buffers { size, count } => {
                    Some(pattern::Verifier::buffers(size as usize, count as usize))
                }
            };
            let h = std::thread::spawn(move || {
                pin(1);
                let Ok((mut c, _)) = l.accept() else {
                    return (0, verifier);
                };
                let mut buf = vec![0u8; 1 << 20];
                let mut total = 0u64;
                while let Ok(n) = std::io::Read::read(&mut c, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                    if let Some(v) = &mut verifier {
                        v.check(&buf[..n]);
                    }
                }
                (total, verifier)
            });
            Ok((addr, h))
        }
    }
}

/// A pool of `mib` MiB of pattern bytes, made once per size and kept for the process (the
/// kernel may hold any part of it; `'static` makes that safe without tracking).
pub fn pool(mib: usize) -> &'static [u8] {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static POOLS: Mutex<Option<HashMap<usize, &'static [u8]>>> = Mutex::new(None);
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    pools
        .get_or_insert_with(HashMap::new)
        .entry(mib.max(1))
        .or_insert_with(|| {
            let len = mib.max(1) << 20;
            let mut v = Vec::with_capacity(len);
            while v.len() < len {
                let off = v.len() as u64;
                v.extend_from_slice(pattern::chunk_at(
                    off,
                    (len - v.len()).min(pattern::MAX_CHUNK),
                ));
            }
            Box::leak(v.into_boxed_slice())
        })
}

/// MTU of the veth lab for UDP: the largest frame veth carries, so that no datagram is
/// fragmented.
const VETH_UDP_MTU: u32 = 65535;

/// Send calls between two reads of the error queue.
const REAP_EVERY: u64 = 32;

/// Sends `size`-byte buffers for `seconds`, measuring the sending thread.
fn send_for<S: msg_zerocopy::ExclusiveSocket>(
    socket: S,
    mode: Mode,
    size: usize,
    seconds: f64,
    pool: &'static [u8],
) -> anyhow::Result<Run> {
    if size >= pool.len() {
        bail!(
            "--size {size} does not fit the {} MiB pool",
            pool.len() >> 20
        );
    }
    let mut tx = ZerocopySender::new(socket, mode.config()).context("enabling SO_ZEROCOPY")?;
    let meter = Meter::start();
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        // Consecutive buffers of the pool, wrapping: every call sends different (cold) memory.
        let at = ((calls * size as u64) % (pool.len() - size) as u64) as usize;
        tx.send(&pool[at..at + size])
            .map_err(|e| e.error)
            .context("send")?;
        calls += 1;
        // Reap in batches: between reads the kernel coalesces completions into one range, and
        // an empty error queue still costs a recvmsg.
        if calls % REAP_EVERY == 0 {
            tx.reap().context("reading the error queue")?;
            tx.returned().for_each(drop);
        }
    }
    tx.drain(Duration::from_secs(5))
        .context("waiting for completions")?;
    let c = tx.counters();
    Ok(meter.finish(Work {
        bytes: calls * size as u64,
        requests: Some(calls),
        zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
        verified: None,
    }))
}

pub(crate) fn one_run(
    lab: &Lab,
    proto: Proto,
    family: Family,
    mode: Mode,
    size: usize,
    seconds: f64,
    pool: &'static [u8],
) -> anyhow::Result<Run> {
    // The far side of a remote run checks the sends as they were cut from the pool.
    let check = Check::Pool {
        size: size as u64,
        span: (pool.len() - size.min(pool.len() - 1)) as u64,
    };
    run_in_lab(
        lab,
        proto,
        family,
        (seconds, check),
        move |conn| match conn {
            Conn::Udp(s) => send_for(s, mode, size, seconds, pool),
            Conn::Tcp(s) => send_for(s, mode, size, seconds, pool),
        },
    )
}

/// The sender's connected socket.
pub(crate) enum Conn {
    /// Connected UDP.
    Udp(UdpSocket),
    /// TCP.
    Tcp(TcpStream),
}

/// One run in `lab`: a discarding receiver where the lab has one, then `send` on a socket
/// connected to it, in the sender's namespace, pinned to CPU 0; checks the TCP byte count.
/// `far`: the run's seconds and what a remote receiver checks the stream against.
pub(crate) fn run_in_lab<F>(
    lab: &Lab,
    proto: Proto,
    family: Family,
    far: (f64, Check),
    send: F,
) -> anyhow::Result<Run>
where
    F: FnOnce(Conn) -> anyhow::Result<Run> + Send + 'static,
{
    let Some((send_ns, recv_ns, ip)) = lab.ends(family) else {
        let Lab::Remote(remote) = lab else {
            unreachable!("only the remote has no namespaces")
        };
        let mut remote = remote.lock().unwrap_or_else(|e| e.into_inner());
        return run_remote(&mut remote, proto, far, send);
    };
    let (dest, receiver) = match recv_ns {
        Some(ns) => {
            let (a, h) = receiver(ns, proto, ip, far.1)?;
            (a, Some(h))
        }
        // The sink: any port, nothing listens, every datagram is dropped by the device.
        None => (SocketAddr::new(ip, 9), None),
    };
    let run = send_ns.run(move || -> anyhow::Result<Run> {
        pin(0);
        match proto {
            Proto::Udp => {
                let s = UdpSocket::bind(unspecified(family))?;
                s.connect(dest)?;
                send(Conn::Udp(s))
            }
            Proto::Tcp => send(Conn::Tcp(TcpStream::connect(dest)?)),
        }
    })??;
    let mut run = run;
    if let Some(h) = receiver {
        let (received, verifier) = h.join().map_err(|_| anyhow::anyhow!("receiver panicked"))?;
        if proto == Proto::Tcp && received != run.bytes {
            bail!("sent {} bytes but the receiver got {received}", run.bytes);
        }
        if let Some(v) = verifier {
            // A bench that moves wrong bytes fast is a failure, not a figure.
            if let Some(at) = v.first_bad() {
                bail!("the receiver got wrong bytes at stream offset {at} of {received}");
            }
            if !v.ok() {
                bail!("the stream ended inside a buffer, at {received} bytes");
            }
            run.verified = Some(true);
        }
    }
    Ok(run)
}

/// [`run_in_lab`] against a `zcnet serve`: its receiver counts (UDP) or checks (TCP) what
/// arrives; the sender runs on this thread, pinned to CPU 0.
fn run_remote<F>(
    remote: &mut Remote,
    proto: Proto,
    (seconds, check): (f64, Check),
    send: F,
) -> anyhow::Result<Run>
where
    F: FnOnce(Conn) -> anyhow::Result<Run> + Send + 'static,
{
    let role = Role::Receive {
        proto: match proto {
            Proto::Udp => remote::proto::Proto::Udp,
            Proto::Tcp => remote::proto::Proto::Tcp,
        },
        check: if proto == Proto::Udp {
            Check::Count
        } else {
            check
        },
        rate_bps: None,
    };
    let (run, far) = remote.run_with(role.clone(), seconds, move |dest| {
        pin(0);
        match proto {
            Proto::Udp => send(Conn::Udp(dest.udp()?)),
            Proto::Tcp => send(Conn::Tcp(dest.connect()?)),
        }
    })?;
    remote::client::received_all(&role, run.bytes, &far)?;
    Ok(run.with_far(&far))
}

/// One size in one lab of a send bench: the condition its runs share.
pub(super) struct SizeStep<'a> {
    /// Lab name.
    pub lab: &'a str,
    /// Address family.
    pub family: Family,
    /// Transport.
    pub proto: Proto,
    /// Bytes per send.
    pub size: usize,
    /// Alternations per mode.
    pub runs: usize,
    /// No per-run lines.
    pub quiet: bool,
}

impl SizeStep<'_> {
    /// Alternates `modes` (`runs` rounds), printing each run unless quiet; returns one result
    /// set per mode and adds each mode's requests/s and CPU ratios against the first to
    /// `report`.
    pub(super) fn measure<M: Copy>(
        &self,
        modes: &[M],
        name: impl Fn(M) -> &'static str,
        progress: &Progress,
        report: &mut Report,
        mut one: impl FnMut(M) -> anyhow::Result<Run>,
    ) -> anyhow::Result<Vec<ResultSet>> {
        let (lab, size, family) = (self.lab, self.size, self.family.name());
        let per_mode = measure::alternate(modes, self.runs, progress, |mode, i| {
            let run = one(mode)
                .with_context(|| format!("{lab} {size} B {} run {}", name(mode), i + 1))?;
            if !self.quiet {
                println!(
                    "[{lab} {family} {size} B] {:<11} {:>10.0} req/s {:>7.2} Gbit {:>7.1} us/MB sender, {:>6.2} % zero-copy{}",
                    name(mode),
                    run.requests_per_s.unwrap_or(0.0),
                    run.gbit,
                    run.cpu_us_per_mb,
                    100.0 * run.zero_copy_share.unwrap_or(0.0),
                    run.far_part()
                );
            }
            anyhow::Ok(run)
        })?;
        let (congestion, proto) = match self.proto {
            Proto::Tcp => (super::labs::congestion(lab), "tcp"),
            Proto::Udp => (None, "udp"),
        };
        let sets: Vec<ResultSet> = modes
            .iter()
            .zip(per_mode)
            .map(|(&m, runs)| {
                let params = json!({"size": size, "proto": proto});
                ResultSet::new(lab, family, congestion.as_deref(), params, name(m), runs)
            })
            .collect();
        for other in &sets[1..] {
            for metric in [Metric::RequestsPerS, Metric::CpuUsPerMb] {
                report
                    .comparisons
                    .extend(Comparison::new(other, &sets[0], metric));
            }
        }
        Ok(sets)
    }
}

/// Runs the bench.
#[allow(clippy::too_many_arguments)]
pub fn bench(
    proto: Proto,
    labs: &[&str],
    family: Family,
    sizes: &[usize],
    modes: &[Mode],
    runs: usize,
    seconds: f64,
    pool_mib: usize,
    quiet: bool,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let pool = pool(pool_mib);
    // Hot or cold, measured on the pool the sends come from.
    let heat = super::heat::PoolHeat::measure(pool_mib, &[pool]);
    let mut report = Report::new(proto.bench());
    report.settings = json!({
        "runs": runs, "seconds": seconds, "modes": modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "sender_cpu": 0, "receiver_cpu": 1, "pool_mib": pool_mib,
        "reap_every": REAP_EVERY,
        "pool": heat,
        "auto_profile": zcnet::auto::active().origin(),
    });
    let mut summary = Vec::new();
    let steps = labs.len() * sizes.len() * runs * modes.len();
    let progress = Progress::new(
        proto.bench(),
        steps as u64,
        Duration::from_secs_f64(seconds * steps as f64),
    );
    let _pinned = Pinned::to(1);
    let (family, labs) = super::labs::remote_labs(&mut report, remote.as_ref(), family, labs);
    let mut remote = remote.map(std::sync::Mutex::new);
    for &lab_name in &labs {
        let lab = match remote.take() {
            Some(r) => Lab::Remote(r),
            None => Lab::build(lab_name, proto)?,
        };
        for &size in sizes {
            let step = SizeStep {
                lab: lab_name,
                family,
                proto,
                size,
                runs,
                quiet,
            };
            let sets = step.measure(modes, Mode::name, &progress, &mut report, |mode| {
                one_run(&lab, proto, family, mode, size, seconds, pool)
            })?;
            summary.extend(summary_rows(proto, lab_name, size, heat, &sets));
            report.results.extend(sets);
        }
    }
    Ok(Outcome { report, summary })
}

fn summary_rows(
    proto: Proto,
    lab: &str,
    size: usize,
    heat: super::heat::PoolHeat,
    sets: &[ResultSet],
) -> Vec<SummaryRow> {
    let med = |s: &ResultSet, k: Metric| s.median_of(k);
    let Some(copy) = sets.iter().find(|s| s.mode == "copy") else {
        return Vec::new();
    };
    sets.iter()
        .filter(|s| s.mode != "copy")
        .filter_map(|s| {
            let ratio = Comparison::new(s, copy, Metric::RequestsPerS)?.ratio_median;
            let share = med(s, Metric::ZeroCopyShare);
            let verdict = match (proto, lab, size, s.mode.as_str()) {
                (_, _, _, "auto") => super::outcome::auto_verdict(s, sets),
                // The bound holds for a cold pool; a hot one is information.
                (Proto::Udp, "sink", 64000, "zc") if !heat.is_hot() => {
                    let ok = ratio >= 1.6 && share.is_some_and(|x| x >= 0.999);
                    if ok {
                        "ok (>= 1.6, 0 % copied)".into()
                    } else {
                        "MISS (needs >= 1.6, 0 % copied)".into()
                    }
                }
                (Proto::Tcp, "loopback", _, "zc-adaptive") => {
                    if ratio >= 0.95 {
                        "ok (within 5 % of copy)".into()
                    } else {
                        "MISS (needs >= 0.95)".into()
                    }
                }
                (_, "loopback" | "veth", _, _) => "info (kernel copies)".into(),
                _ => "info".into(),
            };
            Some(SummaryRow {
                experiment: format!(
                    "{} {lab} {size} B{} {}",
                    proto.bench(),
                    heat.suffix(),
                    s.mode
                ),
                metric: "req/s".into(),
                copy: med(copy, Metric::RequestsPerS).unwrap_or(f64::NAN),
                zero_copy: med(s, Metric::RequestsPerS).unwrap_or(f64::NAN),
                ratio,
                zero_copy_share: share,
                verdict,
            })
        })
        .collect()
}

/// `zcnet bench udp-tx` / `tcp-tx`.
pub fn run(proto: Proto, opt: Opt) -> anyhow::Result<()> {
    opt.common
        .needs_labs("the tx benches build their labs in private network namespaces")?;
    let labs: Vec<&str> = if opt.common.labs.is_empty() {
        match proto {
            Proto::Udp => vec!["sink", "veth", "loopback"],
            Proto::Tcp => vec!["loopback", "veth"],
        }
    } else {
        opt.common.labs.iter().map(String::as_str).collect()
    };
    let sizes = if opt.sizes.is_empty() {
        vec![1024, 4096, 16384, 32768, 64000]
    } else {
        opt.sizes.clone()
    };
    let modes = if opt.modes.is_empty() {
        match proto {
            Proto::Udp => vec![Mode::Copy, Mode::Zc, Mode::Auto],
            Proto::Tcp => vec![Mode::Copy, Mode::Zc, Mode::ZcAdaptive, Mode::Auto],
        }
    } else {
        opt.modes.clone()
    };
    if modes[0] != Mode::Copy {
        bail!("the first --mode is the baseline of the comparisons and must be copy");
    }
    let runs = opt.common.runs.unwrap_or(5);
    let seconds = opt.common.seconds.unwrap_or(2.0);
    let out = bench(
        proto,
        &labs,
        opt.family.into(),
        &sizes,
        &modes,
        runs,
        seconds,
        opt.pool_mib,
        opt.common.json,
        opt.common.remote()?,
    )?;
    out.finish(&opt.common)
}
