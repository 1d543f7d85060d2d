//! `zcnet bench udp-gso`: UDP GSO trains, the QUIC and media sender's path, against one send
//! per datagram.
//!
//! Per segment size and train length (segments per train), the modes alternate in mirrored
//! rounds: `sendmsg` (one `send(2)` per datagram), `sendmmsg` (a train's datagrams in one
//! call), and the train as one send with `UDP_SEGMENT`: `gso-copy`, `gso-zc` (`MSG_ZEROCOPY`),
//! `gso-zc-fixed` (io_uring `SEND_ZC` from registered buffers) and `gso-auto` (`Mode::Auto`).
//! The GSO modes are zcnet's senders with [`zcnet::udp_gso::Segment`] in their `Config`.
//!
//! Labs: `sink` (an `ifb` device with UDP segmentation offload drops each train whole: the
//! sending path alone), `sink-swgso` (the same with the offload off, `ethtool -K sink0
//! tx-udp-segmentation off`: the kernel cuts the train in software, where zero copy cannot
//! win) and `veth`, where a receiver with `UDP_GRO` reads trains whole, cuts them with
//! [`zcnet::udp_gso::datagrams`] and checks every datagram: its bytes, and its size (the
//! segment size, the train's last one shorter). Every datagram carries its own offset in the
//! send pool in its first 8 bytes, so a datagram cut at the wrong place, truncated, or holding
//! another's bytes is caught. Delivery over veth copies zero-copy sends, and the completions
//! say so.
//!
//! Requests are datagrams: `requests_per_s` is datagrams per second. `--reference PATH` runs
//! the kernel's `udpgso_bench_tx` beside each mode it has (`sendmsg` and `sendmmsg` at its
//! fixed 1472-byte datagrams, `gso-copy` and `gso-zc` at any segment size), in the sink labs.
//!
//! The files: `mode` (the modes and the arms beside the reference), `train` (the trains
//! and their check), `receiver` (the GRO receiver), `send` (one run), `twin` (the
//! reference's runs), `summary` (the suite's rows); the alternation and the settings shared
//! are [`super::engine`]'s.

mod mode;
mod receiver;
mod send;
mod summary;
mod train;
mod twin;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::json;
use zcnet::udp_gso::{self, Segment};

use super::common::Common;
use super::engine::{InLab, Plan, SENDER_METRICS, asked_or, registrable};
use super::outcome::Outcome;
use super::reference::Reference;
use super::sweep::Proto;
use crate::measure::{Metric, ResultSet};
use crate::remote::Remote;

use mode::Arm;
pub use mode::Mode;
use send::{REAP_EVERY, Shape};
pub use train::TrainPool;

/// Options of `zcnet bench udp-gso`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Segment size in bytes (repeatable). Default: 1200 (QUIC's floor) and 1472 (an Ethernet
    /// MTU of IPv4 UDP).
    #[arg(long = "segment", value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8..=9000))]
    pub segments: Vec<usize>,
    /// Datagrams per train (repeatable), at most 64. Default: 1, 8 and 42.
    #[arg(long = "train", value_name = "SEGMENTS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub trains: Vec<usize>,
    /// Modes to alternate (repeatable; the first is the baseline of the comparisons). Default:
    /// all, sendmsg first.
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// Address family. Default: IPv4.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: super::common::FamilyArg,
    /// Size of the pool of trains the sends cycle through, in KiB (at least one train). 256
    /// (default) stays in L2, as the kernel's program sends one buffer; the report measures it.
    #[arg(long, value_name = "KIB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(64..=1048576))]
    pub pool_kib: usize,
    /// The kernel's `tools/testing/selftests/net/udpgso_bench_tx`, run beside each mode it has
    /// in the sink labs (build it with `gcc -O2 -I. -o udpgso_bench_tx udpgso_bench_tx.c`
    /// next to the selftests' `kselftest.h`).
    #[arg(long, value_name = "PATH")]
    pub reference: Option<std::path::PathBuf>,
}

/// Every (segment, datagrams per train) the bench will send, checked: the kernel takes the
/// train in one send.
///
/// # Errors
/// A segment out of range, more than 64 datagrams, or a train over one UDP datagram's bytes.
fn check_shapes(segments: &[usize], trains: &[usize]) -> anyhow::Result<Vec<(Segment, usize)>> {
    let mut shapes = Vec::new();
    for &seg in segments {
        let segment = Segment::new(seg).with_context(|| format!("--segment {seg}"))?;
        for &n in trains {
            let train = seg * n;
            segment
                .check_train(train)
                .with_context(|| format!("--train {n}"))?;
            if train > udp_gso::MAX_SEGMENT {
                bail!(
                    "--segment {seg} --train {n}: a train of {train} bytes exceeds one UDP \
                     datagram's {} bytes",
                    udp_gso::MAX_SEGMENT
                );
            }
            shapes.push((segment, n));
        }
    }
    Ok(shapes)
}

/// The settings of `udp-gso` beside the shared ones.
#[derive(Debug, Serialize)]
struct Own<'a> {
    #[serde(flatten)]
    in_lab: InLab,
    segments: &'a [usize],
    trains: &'a [usize],
    pool_kib: usize,
    /// Hot or cold, measured on the trains of the first shape.
    pool: super::heat::PoolHeat,
    reap_every: u64,
    requests: &'static str,
    reference: Option<ReferenceSettings>,
}

/// How the kernel's program runs beside zcnet.
#[derive(Debug, Serialize)]
struct ReferenceSettings {
    program: std::path::PathBuf,
    labs: [&'static str; 2],
    args: &'static str,
}

/// Runs the bench: `plan` (its sizes the segment sizes) in trains of each of `trains`
/// datagrams, from `pool_kib` KiB of trains, with `reference` beside it in the sink labs.
pub fn bench(
    plan: &Plan<'_, Mode>,
    trains: &[usize],
    pool_kib: usize,
    reference: Option<&Reference>,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let shapes: Vec<(Segment, usize, TrainPool)> = check_shapes(plan.sizes, trains)?
        .into_iter()
        .map(|(segment, n)| {
            let train = segment.get() * n;
            let pool = TrainPool::new(train, segment.get(), pool_kib)?;
            anyhow::Ok((segment, n, pool))
        })
        .collect::<anyhow::Result<_>>()?;
    let heat = {
        let (_, _, p) = shapes[0];
        let trains: Vec<&[u8]> = (0..p.count() as u64).map(|i| p.train(i)).collect();
        super::heat::PoolHeat::measure(pool_kib.div_ceil(1024), &trains)
    };
    let own = Own {
        in_lab: InLab::default(),
        segments: plan.sizes,
        trains,
        pool_kib,
        pool: heat,
        reap_every: REAP_EVERY,
        requests: "datagrams: requests_per_s is datagrams per second",
        reference: reference.map(|r| ReferenceSettings {
            program: r.path().to_path_buf(),
            labs: ["sink", "sink-swgso"],
            args: "-4|-6 -D <sink> -p 9 -l <s> -s <train> [-S <segment>] [-m] [-z] -a",
        }),
    };
    let settings = plan.settings(Mode::name, own);
    let arms_per = plan.modes.len() * (1 + usize::from(reference.is_some()));
    let steps = plan.steps(arms_per) * trains.len();
    let mut session = plan.start("udp-gso", &settings, steps, 0.0)?;
    let build = send::build_lab;
    session.each_lab(remote, plan, build, |s, lab_name, family, lab| {
        let beside = reference.filter(|_| matches!(lab, super::sweep::Lab::Sink(_)));
        for &(segment, n, pool) in &shapes {
            let shape = Shape {
                pool,
                segment,
                seconds: plan.rounds.seconds,
            };
            let modes = fitting_modes(plan.modes, lab_name, &shape, n);
            let mut arms: Vec<Arm> = Vec::new();
            for &m in &modes {
                arms.push(Arm::Zcnet(m));
                if beside.is_some()
                    && let Some(t) = twin::reference_twin(m, family, segment.get())
                {
                    arms.push(Arm::Reference(t));
                }
            }
            let step = plan.step(lab_name, family, Proto::Udp, pool.train_bytes());
            let mut sets = s.measure(&step, &arms, Arm::name, |arm| match arm {
                Arm::Zcnet(m) => send::one_run(&lab, family, m, shape),
                Arm::Reference(m) => {
                    let r = beside.expect("reference arms only beside it").clone();
                    super::sweep::in_sink(&lab, family, move |dest| {
                        twin::reference_run(&r, dest, family, m, shape)
                    })
                }
            })?;
            for set in &mut sets {
                set.params = json!({"proto": "udp", "segment": segment.get(), "segments": n,
                                  "train": pool.train_bytes()});
            }
            let find = |name: &str| sets.iter().find(|s| s.mode == name);
            let base = &sets[0];
            for set in &sets[1..] {
                if !set.mode.starts_with("ref-") {
                    s.compare(set, base, &SENDER_METRICS);
                }
            }
            // zcnet's zero-copy modes over its GSO copy, and each mode over its reference twin.
            if let Some(copy) = find("gso-copy").filter(|_| base.mode != "gso-copy") {
                for m in ["gso-zc", "gso-zc-fixed", "gso-auto"] {
                    if let Some(set) = find(m) {
                        s.compare(set, copy, &SENDER_METRICS);
                    }
                }
            }
            for set in sets.iter().filter(|s| !s.mode.starts_with("ref-")) {
                if let Some(r) = find(&format!("ref-{}", set.mode)) {
                    s.compare(set, r, &[Metric::CpuUsPerMb]);
                }
            }
            let mut rows = summary::summary_rows(lab_name, segment.get(), n, &sets);
            let (refs, ours): (Vec<ResultSet>, Vec<ResultSet>) = sets
                .iter()
                .cloned()
                .partition(|s| s.mode.starts_with("ref-"));
            let what = format!("udp-gso {lab_name} {} B x {n}", segment.get());
            rows.extend(super::reference::beside_rows(
                super::reference::SENDER,
                &what,
                "udpgso_bench_tx",
                &ours,
                &refs,
            ));
            s.keep(sets, rows);
        }
        Ok(())
    })?;
    Ok(session.finish())
}

/// The modes of `asked` that can run at this shape: gso-zc-fixed registers the pool's trains,
/// page-rounded ([`registrable`], as uring-tx does).
fn fitting_modes(asked: &[Mode], lab: &str, shape: &Shape, n: usize) -> Vec<Mode> {
    let pool = shape.pool;
    let page = zcnet::probe::features().host.page_size;
    let registered = ((pool.count() * pool.train_bytes()).next_multiple_of(page)) as u64;
    let seg = shape.segment.get();
    let what = format!("udp-gso {lab} {seg} B x {n}: gso-zc-fixed left out");
    registrable(asked, Mode::GsoZcFixed, registered, &what)
}

/// `zcnet bench udp-gso`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let segments = asked_or(&opt.segments, &[1200, 1472]);
    let trains = asked_or(&opt.trains, &[1, 8, 42]);
    let modes = asked_or(&opt.modes, &Mode::ALL);
    // What it would send is checked before anything is built or said about the machine.
    check_shapes(&segments, &trains)?;
    for lab in &opt.common.labs {
        if !["sink", "sink-swgso", "veth"].contains(&lab.as_str()) {
            bail!("no lab {lab:?} for udp-gso (sink, sink-swgso, veth)");
        }
    }
    let reference = opt.reference.as_deref().map(Reference::new).transpose()?;
    opt.common
        .needs_labs("udp-gso builds its labs in private network namespaces")?;
    let labs: Vec<&str> = if opt.common.labs.is_empty() {
        // The lab without segmentation offload needs ethtool: by default it is left out,
        // saying so, where there is none; asked for by name it is an error.
        if netlab::skip::on_path("ethtool") {
            vec!["sink", "sink-swgso", "veth"]
        } else {
            eprintln!(
                "udp-gso: lab sink-swgso left out: it needs ethtool (Debian package ethtool) to \
                 turn the sink's UDP segmentation offload off"
            );
            vec!["sink", "veth"]
        }
    } else {
        opt.common.labs.iter().map(String::as_str).collect()
    };
    let plan = Plan {
        labs: &labs,
        family: opt.family.into(),
        sizes: &segments,
        modes: &modes,
        rounds: opt.common.rounds(5, 1.0),
    };
    let out = bench(
        &plan,
        &trains,
        opt.pool_kib,
        reference.as_ref(),
        opt.common.remote()?,
    )?;
    out.finish(&opt.common)
}
