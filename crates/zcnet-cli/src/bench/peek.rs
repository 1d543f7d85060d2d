//! `zcnet bench peek`: the relay of `zcnet relay` with the peek offset against the
//! discard-buffer fallback, the experiment of the SO_PEEK_OFF patch for TCP (passt/pasta).
//!
//! In the `veth` lab, a sender in namespace A streams pattern bytes to a relay thread in A,
//! which forwards them over the veth pair to a verifying receiver in namespace B. A `tbf` qdisc
//! on A's veth limits the downstream rate below what the sender can push, so the relay stays at
//! its bound of unacknowledged bytes (the condition): every peek skips that many bytes still in
//! the source queue, which the discard-buffer method copies again each time. Namespace A's
//! `tcp_rmem` default is raised so that the source's receive buffer can hold them. The relay
//! thread is pinned to CPU 0 and measured alone (RUSAGE_THREAD); sender and receiver share CPU 1.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, Netns, Side, VethLab, pattern};
use serde::Serialize;
use serde_json::json;
use zcnet::peek::Mode as Method;

use super::common::Common;
use super::common::Rounds;
use super::labs::spawn_in;
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::measure::{self, Meter, Metric, ResultSet, Run, Work, pin, ratio_pairs};
use crate::remote::Remote;
use crate::remote::client::received_all;
use crate::remote::proto::Role;
use zcnet::relay::{self as zrelay, Config as Settings};

/// A downstream condition: the relay's bound on unacknowledged bytes (`--max-unacked`). The
/// source is faster than the rate-limited link, so the relay stays at its bound: each
/// acknowledgement lets it peek as much again, past that many bytes still in the queue.
#[derive(Clone, Copy, Debug)]
pub struct Condition {
    /// Name in the tables: the unacknowledged amount aimed at.
    pub name: &'static str,
    /// [`Settings::max_unacked`]; the destination's `SO_SNDBUF` is set to it too (the kernel
    /// doubles it), so that its send buffer never fills first.
    pub max_unacked: u64,
}

/// About 64 KiB, 1 MiB and 4 MiB unacknowledged (the medians measured are in the report).
pub const CONDITIONS: [Condition; 3] = [
    Condition {
        name: "64k",
        max_unacked: 64 << 10,
    },
    Condition {
        name: "1m",
        max_unacked: 1 << 20,
    },
    Condition {
        name: "4m",
        max_unacked: 4 << 20,
    },
];

/// tbf queue limit of the downstream link.
pub const LIMIT: &str = "4mb";

/// tbf rate of the downstream link.
pub const RATE: &str = "2gbit";

/// Options of `zcnet bench peek`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
}

/// Where the relay's destination is: a verifying receiver behind the lab's rate-limited veth,
/// or a `zcnet serve` on another host that reads at [`RATE`].
enum Place {
    Lab(VethLab),
    Remote(Remote),
}

/// [`RATE`] in bits per second, the pace of a remote destination's reads.
const RATE_BPS: u64 = 2_000_000_000;

fn one_run(
    place: &mut Place,
    method: Method,
    cond: Condition,
    seconds: f64,
) -> anyhow::Result<(Run, u64)> {
    let lab = match place {
        Place::Lab(lab) => lab,
        Place::Remote(remote) => {
            let role = Role::pattern_sink(Some(RATE_BPS));
            let ((mut run, unacked, sent), far) =
                remote.run_with(role.clone(), seconds, move |dest| {
                    let front = "127.0.0.1".parse()?;
                    relay_run(None, front, (dest.addr, dest.key()), method, cond, seconds)
                })?;
            received_all(&role, sent, &far)?;
            run.verified = far.verified;
            return Ok((run.with_far(&far), unacked));
        }
    };
    let b_ip = VethLab::addr(Side::B, Family::V4);
    let a_ip = VethLab::addr(Side::A, Family::V4);
    let sink = lab
        .ns(Side::B)
        .run(move || TcpListener::bind(SocketAddr::new(b_ip, 0)))??;
    let dest = sink.local_addr()?;
    let receiver = lab
        .ns(Side::B)
        .spawn(move || -> anyhow::Result<(u64, bool)> {
            pin(1);
            let (mut c, _) = sink.accept()?;
            let mut v = pattern::Verifier::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match c.read(&mut buf) {
                    Ok(0) => return Ok((v.offset(), v.ok())),
                    Ok(n) => v.check(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
        })?;
    let (mut run, unacked, sent) = relay_run(
        Some(lab.ns(Side::A)),
        a_ip,
        (dest, &[]),
        method,
        cond,
        seconds,
    )?;
    let (received, ok) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    if received != sent {
        bail!("sent {sent} bytes, received {received}");
    }
    run.verified = Some(ok);
    if !ok {
        bail!("the receiver saw different bytes than sent");
    }
    Ok((run, unacked))
}

/// The veth lab with [`RATE`] on A's side and room for the unacknowledged bytes.
fn rate_limited_lab() -> anyhow::Result<VethLab> {
    let lab = VethLab::new(None)?;
    let a = lab.ns(Side::A);
    // Room for the unacknowledged bytes in the relay's source queue: they fill its receive
    // buffer, and autotuning, which grows it with the bytes the application takes per
    // round trip, would keep the window (and so the bytes held) near a few hundred KiB.
    a.set_sysctl("net.ipv4.tcp_rmem", "4096 16777216 67108864")?;
    a.set_sysctl("net.ipv4.tcp_wmem", "4096 16384 67108864")?;
    a.command("tc")
        .args([
            "qdisc",
            "add",
            "dev",
            VethLab::DEV_A,
            "root",
            "tbf",
            "rate",
            RATE,
        ])
        .args(["burst", "256kb", "limit", LIMIT])
        .status()
        .context("tc (iproute2)")?
        .success()
        .then_some(())
        .context("adding the tbf qdisc")?;
    Ok(lab)
}

/// The source side of one run, in `ns` (else here): a sender on CPU 1 streaming the pattern
/// for `seconds` to a relay on CPU 0 (accepting on `front_ip`) that forwards it to `dest`,
/// after `key`, the bytes that make the stream a remote run's own (none in the lab).
/// Returns the relay's run, its median unacknowledged bytes, and the bytes of the pattern sent.
fn relay_run(
    ns: Option<&Netns>,
    front_ip: IpAddr,
    (dest, key): (SocketAddr, &[u8]),
    method: Method,
    cond: Condition,
    seconds: f64,
) -> anyhow::Result<(Run, u64, u64)> {
    let front = match ns {
        Some(ns) => ns.run(move || TcpListener::bind(SocketAddr::new(front_ip, 0)))??,
        None => {
            let front = TcpListener::bind(SocketAddr::new(front_ip, 0))?;
            // Room for the unacknowledged bytes in the source queue, as the lab's tcp_rmem
            // gives (the host's own sysctls are not ours to change); root only.
            let _ = nix::sys::socket::setsockopt(
                &front,
                nix::sys::socket::sockopt::RcvBufForce,
                &(16 << 20),
            );
            front
        }
    };
    let relay_addr = front.local_addr()?;
    let settings = Settings {
        targets: vec![dest],
        mode: method,
        max_unacked: cond.max_unacked,
        ack_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        dest_sndbuf: Some(cond.max_unacked as usize),
        sample_unacked: true,
    };
    let key = key.to_vec();
    let key_len = key.len() as u64;
    let relay = spawn_in(ns, move || -> anyhow::Result<(Run, u64)> {
        pin(0);
        let (src, _) = front.accept()?;
        let meter = Meter::start();
        let stats = zrelay::relay(src, settings.clone())?;
        let mut samples = stats.unacked_samples.clone();
        samples.sort_unstable();
        let median = samples.get(samples.len() / 2).copied().unwrap_or(0);
        let run = meter.finish(Work {
            // The run's payload, as the far side counts it: the key is the protocol's.
            bytes: stats.bytes.saturating_sub(key_len),
            requests: None,
            zero_copy_share: None,
            verified: None,
        });
        Ok((run, median))
    })?;
    let sender = spawn_in(ns, move || -> anyhow::Result<u64> {
        pin(1);
        let mut s = TcpStream::connect(relay_addr)?;
        s.write_all(&key)?;
        let start = Instant::now();
        let mut off = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let chunk = pattern::chunk_at(off, 256 * 1024);
            s.write_all(chunk)?;
            off += chunk.len() as u64;
        }
        s.shutdown(Shutdown::Write)?;
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        Ok(off)
    })?;
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    let (run, unacked) = relay
        .join()
        .map_err(|_| anyhow::anyhow!("relay panicked"))??;
    if run.bytes != sent {
        bail!("sent {sent} bytes, relayed {}", run.bytes);
    }
    Ok((run, unacked, sent))
}

/// The settings of `peek`.
#[derive(Debug, Serialize)]
struct BenchSettings {
    runs: usize,
    seconds: f64,
    /// The link's rate (with `--remote`, the far side's reads).
    rate: String,
    /// The qdisc's queue (none with `--remote`).
    tbf_limit: Option<&'static str>,
    relay_cpu: usize,
    sender_receiver_cpu: usize,
    modes: [&'static str; 2],
}

/// Runs the bench.
pub fn bench(
    conditions: &[Condition],
    rounds: Rounds,
    mut remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let modes = [Method::Copy, Method::ZeroCopy];
    let settings = BenchSettings {
        runs: rounds.runs,
        seconds: rounds.seconds,
        rate: match remote {
            // No qdisc on another host's link: the far side reads at the rate instead.
            Some(_) => format!("{RATE} (the far side's reads)"),
            None => RATE.into(),
        },
        tbf_limit: remote.is_none().then_some(LIMIT),
        relay_cpu: 0,
        sender_receiver_cpu: 1,
        modes: modes.map(Method::name),
    };
    let steps = conditions.len() * rounds.runs * modes.len();
    let mut s = rounds.start("peek", &settings, steps, rounds.seconds)?;
    let lab_name = super::labs::remote_lab(&mut s.report, remote.as_ref(), "veth");
    let mut ratio_1m = None;
    for cond in conditions {
        let mut place = match remote.take() {
            Some(r) => Place::Remote(r),
            None => Place::Lab(rate_limited_lab()?),
        };
        let mut unacked: Vec<Vec<u64>> = vec![Vec::new(); modes.len()];
        let per = measure::alternate(&[0usize, 1], rounds.runs, s.progress(), |m, i| {
            let (run, u) = one_run(&mut place, modes[m], *cond, rounds.seconds)
                .with_context(|| format!("{} {} run {}", cond.name, modes[m].name(), i + 1))?;
            unacked[m].push(u);
            if !rounds.quiet {
                println!(
                    "[{lab_name} {RATE} max unacked {} KiB] {:<14} {:>6.2} Gbit, relay {:>6.1} us/MB, median unacked {} KiB{}",
                    cond.max_unacked >> 10,
                    modes[m].name(),
                    run.gbit,
                    run.cpu_us_per_mb,
                    u >> 10,
                    run.far_part()
                );
            }
            anyhow::Ok(run)
        })?;
        let sets: Vec<ResultSet> = modes
            .iter()
            .zip(per)
            .enumerate()
            .map(|(m, (method, runs))| {
                let mut u = unacked[m].clone();
                u.sort_unstable();
                let med = u.get(u.len() / 2).copied().unwrap_or(0);
                ResultSet::new(
                    lab_name,
                    "ipv4",
                    super::labs::congestion(lab_name).as_deref(),
                    json!({"condition": cond.name, "max_unacked": cond.max_unacked, "median_unacked": med}),
                    method.name(),
                    runs,
                )
            })
            .collect();
        s.compare(&sets[1], &sets[0], &[Metric::CpuUsPerMb, Metric::Gbit]);
        let pairs = ratio_pairs(&sets[1].runs, &sets[0].runs, Metric::CpuUsPerMb);
        if !pairs.is_empty() {
            let med = |s: &ResultSet, k: Metric| s.median_of(k).unwrap_or(f64::NAN);
            // The acceptance: <= 0.8 at 1 MiB, lower still at 4 MiB (than 1 MiB's median),
            // throughput not lower (5 % is within this machine's run-to-run noise) in any
            // condition.
            let goal = match cond.name {
                "1m" => Some(Goal::AtMost(0.8)),
                "4m" => ratio_1m.map(|r: f64| Goal::AtMost((r * 1000.0).round() / 1000.0)),
                _ => None,
            };
            let gbit = ratio_pairs(&sets[1].runs, &sets[0].runs, Metric::Gbit);
            let verdict = Verdict::judge(&pairs, goal).and(
                "Gbit ratio",
                Verdict::judge(&gbit, Some(Goal::AtLeast(0.95))),
            );
            if cond.name == "1m" {
                ratio_1m = Some(verdict.ratio());
            }
            s.summary.push(SummaryRow::new(
                format!(
                    "peek relay {lab_name} {} unacked ({} KiB median)",
                    cond.name,
                    sets[1].params["median_unacked"].as_u64().unwrap_or(0) >> 10
                ),
                "relay us/MB",
                (
                    med(&sets[0], Metric::CpuUsPerMb),
                    med(&sets[1], Metric::CpuUsPerMb),
                ),
                None,
                &verdict,
            ));
        }
        s.keep(sets, Vec::new());
        if let Place::Remote(r) = place {
            remote = Some(r);
        }
    }
    Ok(s.finish())
}

/// `zcnet bench peek`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    opt.common
        .needs_labs("peek builds its veth lab in private network namespaces")?;
    if opt.common.remote.is_none() {
        netlab::skip::on_path("tc")
            .then_some(())
            .context("peek needs `tc` (Debian package iproute2) for its rate-limited link")?;
    }
    let out = bench(&CONDITIONS, opt.common.rounds(5, 2.0), opt.common.remote()?)?;
    out.finish(&opt.common)
}
