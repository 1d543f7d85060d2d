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
//!
//! The labs and the receivers are [`super::sweep`]'s, which `uring-tx` and `zcnet tune` share;
//! the alternation of the modes, the settings shared and the summary rows are
//! [`super::engine`]'s. `one_run` is one run of this bench's sender, which `zcnet tune` times
//! too.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::Family;
use serde::Serialize;
use zcnet::ZeroCopyCounters as _;
use zcnet::msg_zerocopy::{self, Config as SenderConfig, CopiedPolicy, ZeroCopySender};

use super::engine::{Flags, InLab, Plan, SENDER_METRICS, SendFlags, rows_against_base};
use super::outcome::{Outcome, SummaryRow};
use super::reference::{self, Arm, Reference, Sink};
use super::sweep::{Conn, Lab, Proto, in_sink, pool, run_in_lab};
use super::verdict::{Goal, Verdict};
use crate::measure::{Meter, Metric, ResultSet, Run, Work};
use crate::remote::{Remote, proto::Check};

/// The bench's name for `proto`.
fn bench_name(proto: Proto) -> &'static str {
    match proto {
        Proto::Udp => "udp-tx",
        Proto::Tcp => "tcp-tx",
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
                segment: None,
                ..Default::default()
            },
            Mode::ZcAdaptive => SenderConfig {
                policy: CopiedPolicy::ADAPTIVE,
                ..SenderConfig::default()
            },
            Mode::Auto => SenderConfig {
                mode: msg_zerocopy::Mode::Auto,
                ..SenderConfig::default()
            },
        }
    }
}

impl Flags for Mode {
    const SIZE_HELP: &'static str =
        "Buffer size per send call (repeatable). Default: 1024 4096 16384 32768 64000";
    const SIZES: std::ops::RangeInclusive<u64> = 1..=1073741824;
    const MODE_HELP: &'static str = "Sender modes to alternate (repeatable). Default: copy, zc, \
         auto (UDP); copy, zc, zc-adaptive, auto (TCP)";
}

/// Options of `zcnet bench udp-tx` / `tcp-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub flags: SendFlags<Mode>,
    /// Size of the buffer pool the sends cycle through, in MiB. 256 (default) is meant to be
    /// cold, as for a server sending distinct data; 2 to stay hot in L2/L3, where copying costs
    /// least. The report says which it was: a copy from the pool is timed against one from a hot
    /// buffer before the runs (`settings.pool`), whatever size the cache claims to be.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub pool_mib: usize,
    /// udp-tx: a build of the kernel's `tools/testing/selftests/net/msg_zerocopy.c` to run
    /// beside zcnet in the sink lab, same CPU, same rounds (copy and zc), with the ratios of
    /// zcnet's cost to its cost.
    #[arg(long, value_name = "PATH")]
    pub reference: Option<std::path::PathBuf>,
}

/// `msg_zerocopy`'s twin of `mode`: `-z` or not; zc-adaptive and auto have none.
fn selftest_zerocopy(mode: Mode) -> Option<bool> {
    match mode {
        Mode::Copy => Some(false),
        Mode::Zc => Some(true),
        Mode::ZcAdaptive | Mode::Auto => None,
    }
}

/// Send calls between two reads of the error queue.
const REAP_EVERY: u64 = 32;

/// What one run sends: `size`-byte buffers cut from `pool` in `mode`, for `seconds`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sends {
    /// The sender's mode.
    pub mode: Mode,
    /// Bytes per send call.
    pub size: usize,
    /// Seconds of the run.
    pub seconds: f64,
    /// The buffers the sends are cut from ([`super::sweep::pool`]).
    pub pool: &'static [u8],
}

/// Sends what `sends` says, measuring the sending thread.
fn send_for<S: msg_zerocopy::ExclusiveSocket>(socket: S, sends: Sends) -> anyhow::Result<Run> {
    let Sends {
        mode,
        size,
        seconds,
        pool,
    } = sends;
    if size >= pool.len() {
        bail!(
            "--size {size} does not fit the {} MiB pool",
            pool.len() >> 20
        );
    }
    let mut tx = ZeroCopySender::new(socket, mode.config())
        .map_err(|e| e.error)
        .context("enabling SO_ZEROCOPY")?;
    let meter = Meter::start();
    let start = Instant::now();
    // Consecutive buffers of the pool, wrapping: every call sends different (cold) memory.
    let calls = send_reaping(&mut tx, start, seconds, REAP_EVERY, |calls| {
        let at = ((calls * size as u64) % (pool.len() - size) as u64) as usize;
        &pool[at..at + size]
    })?;
    let c = tx.counters();
    Ok(meter
        .finish(Work {
            bytes: calls * size as u64,
            requests: Some(calls),
            zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
            verified: None,
        })
        .with_auto(tx.auto_choice(), c.auto, size))
}

/// Sends `next(i)` as the `i`-th call on `tx` until `seconds` have passed since `start`, reading
/// the error queue every `reap_every` calls, then waits for the last completions; returns the
/// calls. `udp-gso` sends its trains by `MSG_ZEROCOPY` with it too.
///
/// Reaped in batches: between reads the kernel coalesces completions into one range, and an
/// empty error queue still costs a `recvmsg`.
///
/// # Errors
/// A send, a read of the error queue, or the wait for the completions failed.
pub(crate) fn send_reaping<S: msg_zerocopy::ExclusiveSocket>(
    tx: &mut ZeroCopySender<S, &'static [u8]>,
    start: Instant,
    seconds: f64,
    reap_every: u64,
    mut next: impl FnMut(u64) -> &'static [u8],
) -> anyhow::Result<u64> {
    let mut calls = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        tx.send(next(calls)).map_err(|e| e.error).context("send")?;
        calls += 1;
        if calls % reap_every == 0 {
            tx.reap().context("reading the error queue")?;
            tx.returned().for_each(drop);
        }
    }
    tx.drain(Duration::from_secs(5))
        .context("waiting for completions")?;
    Ok(calls)
}

/// One run in `lab`: what `sends` says, checked where it arrives.
pub(crate) fn one_run(
    lab: &Lab,
    proto: Proto,
    family: Family,
    sends: Sends,
) -> anyhow::Result<Run> {
    let Sends {
        size,
        seconds,
        pool,
        ..
    } = sends;
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
            Conn::Udp(s) => send_for(s, sends),
            Conn::Tcp(s) => send_for(s, sends),
        },
    )
}

/// The settings of `udp-tx` and `tcp-tx` beside the shared ones.
#[derive(Debug, Serialize)]
struct Own {
    #[serde(flatten)]
    in_lab: InLab,
    pool_mib: usize,
    reap_every: u64,
    /// Hot or cold, measured on the pool the sends come from.
    pool: super::heat::PoolHeat,
    /// How the kernel's program runs beside zcnet (`--reference`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<reference::Settings>,
}

/// Runs the bench: `plan`'s sizes cut from a pool of `pool_mib` MiB, with `reference` beside it
/// in the sink lab.
pub fn bench(
    proto: Proto,
    plan: &Plan<'_, Mode>,
    pool_mib: usize,
    reference: Option<&Reference>,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let pool = pool(pool_mib)?;
    let heat = super::heat::PoolHeat::measure(pool_mib, &[pool]);
    let seconds = plan.rounds.seconds;
    let own = Own {
        in_lab: InLab::default(),
        pool_mib,
        reap_every: REAP_EVERY,
        pool: heat,
        reference: reference.map(|r| {
            let args = "-4|-6 -D <sink> -p 9 -s <size> -t <whole> [-z] udp";
            reference::Settings::new(r, "msg_zerocopy", args, seconds, "one static buffer")
        }),
    };
    let settings = plan.settings(Mode::name, own);
    let twins = plan
        .modes
        .iter()
        .filter(|&&m| reference.is_some() && selftest_zerocopy(m).is_some())
        .count();
    let steps: usize = plan
        .labs
        .iter()
        .map(|&l| {
            let arms = plan.modes.len() + if l == "sink" { twins } else { 0 };
            plan.sizes.len() * plan.rounds.runs * arms
        })
        .sum();
    let mut session = plan.start(bench_name(proto), &settings, steps, 0.0)?;
    let mut tables = Vec::new();
    let build = |name: &str| Lab::build(name, proto);
    session.each_lab(remote, plan, build, |s, lab_name, family, lab| {
        let beside = reference.filter(|_| matches!(lab, Lab::Sink(_)));
        if reference.is_some() && beside.is_none() {
            eprintln!("udp-tx {lab_name}: the reference runs in the sink lab only");
        }
        let mut against = Vec::new();
        for &size in plan.sizes {
            let arms = Arm::alternate(plan.modes, beside.is_some(), |m| {
                selftest_zerocopy(m).is_some()
            });
            let step = plan.step(lab_name, family, proto, size);
            let sets = Arm::measure(s, &step, &arms, Mode::name, |arm| match arm {
                Arm::Zcnet(mode) => {
                    let sends = Sends {
                        mode,
                        size,
                        seconds,
                        pool,
                    };
                    one_run(&lab, proto, family, sends)
                }
                Arm::Reference(mode) => {
                    let r = beside
                        .expect("arms of the reference only beside it")
                        .clone();
                    let z = selftest_zerocopy(mode).expect("a reference arm has a twin");
                    in_sink(&lab, family, move |dest| {
                        let to = Sink {
                            dest,
                            family,
                            size,
                            seconds,
                        };
                        r.run_msg_zerocopy(to, z)
                    })
                }
            })?;
            let (ours, refs) = Arm::split(&arms, sets, s, &SENDER_METRICS);
            let rows = summary_rows(proto, lab_name, size, heat, &ours);
            let what = format!("{} {lab_name} {size} B{}", bench_name(proto), heat.suffix());
            let beside_rows =
                reference::beside_rows(reference::SENDER, &what, "msg_zerocopy", &ours, &refs);
            against.push((size, ours.clone(), refs.clone()));
            s.keep(ours, rows);
            s.keep(refs, beside_rows);
        }
        let note = (!heat.is_hot()).then_some(
            "zcnet sent from a cold pool, the program from one hot buffer: unlike sources \
             (--pool-mib 2 compares the send paths alone)",
        );
        let program = ("msg_zerocopy", note);
        tables.extend(
            beside.map(|_| reference::table(bench_name(proto), program, lab_name, &against)),
        );
        Ok(())
    })?;
    super::engine::print_tables(&tables, plan.rounds.quiet);
    Ok(session.finish())
}

/// Each mode against copy in requests/s, judged where the seed issue set a bound.
fn summary_rows(
    proto: Proto,
    lab: &str,
    size: usize,
    heat: super::heat::PoolHeat,
    sets: &[ResultSet],
) -> Vec<SummaryRow> {
    let name = |s: &ResultSet| {
        let bench = bench_name(proto);
        format!("{bench} {lab} {size} B{} {}", heat.suffix(), s.mode)
    };
    let verdict = |s: &ResultSet, pairs: &[f64]| {
        let share = s.median_of(Metric::ZeroCopyShare);
        match (proto, lab, size, s.mode.as_str()) {
            (_, _, _, "auto") => super::outcome::auto_verdict(s, sets),
            // The bound holds for a cold pool; a hot one is information.
            (Proto::Udp, "sink", 64000, "zc") if !heat.is_hot() => {
                Verdict::judge(pairs, Some(Goal::AtLeast(1.6)))
                    .require(share.is_some_and(|x| x >= 0.999), "copied > 0 %")
            }
            // Loopback copies: the adaptive policy must cost nothing against copy.
            (Proto::Tcp, "loopback", _, "zc-adaptive") => {
                Verdict::judge(pairs, Some(Goal::AtLeast(0.95)))
            }
            (_, "loopback" | "veth", _, _) => Verdict::info(pairs, "kernel copies"),
            _ => Verdict::info(pairs, ""),
        }
    };
    rows_against_base(sets, ("req/s", Metric::RequestsPerS), true, name, verdict)
}

/// `zcnet bench udp-tx` / `tcp-tx`.
pub fn run(proto: Proto, opt: Opt) -> anyhow::Result<()> {
    let sweep = &opt.flags.sweep;
    let common = &sweep.common;
    common.needs_labs("the tx benches build their labs in private network namespaces")?;
    let labs = common.labs_or(match proto {
        Proto::Udp => &["sink", "veth", "loopback"],
        Proto::Tcp => &["loopback", "veth"],
    });
    let sizes = sweep.sizes_or(&[1024, 4096, 16384, 32768, 64000]);
    let modes = sweep.modes_or(match proto {
        Proto::Udp => &[Mode::Copy, Mode::Zc, Mode::Auto],
        Proto::Tcp => &[Mode::Copy, Mode::Zc, Mode::ZcAdaptive, Mode::Auto],
    });
    if modes[0] != Mode::Copy {
        bail!("the first --mode is the baseline of the comparisons and must be copy");
    }
    let plan = Plan {
        labs: &labs,
        family: opt.flags.family.into(),
        sizes: &sizes,
        modes: &modes,
        rounds: common.rounds(5, 2.0),
    };
    if opt.reference.is_some() && proto == Proto::Tcp {
        bail!("--reference runs the kernel's msg_zerocopy in the sink lab: udp-tx only");
    }
    let remote = common.remote.is_some();
    let reference = Reference::for_sink(opt.reference.as_deref(), remote, &labs, &sizes)?;
    let out = bench(
        proto,
        &plan,
        opt.pool_mib,
        reference.as_ref(),
        common.remote()?,
    )?;
    out.finish(common)
}
