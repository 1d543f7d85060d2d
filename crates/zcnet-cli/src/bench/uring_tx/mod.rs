//! `zcnet bench uring-tx`: io_uring `SEND` against `SEND_ZC` and `SEND_ZC` with registered
//! buffers, the table of Pavel Begunkov's io_uring zero-copy send patches.
//!
//! UDP goes into the `sink` lab, where the `ifb` device drops what it transmits, standing in for
//! the `dummy` device of the patches: the only lab here where zero-copy is real. TCP runs over
//! `loopback` and `veth`, where local delivery copies every zero-copy send and the notifications
//! say so. A sender thread pinned to CPU 0 keeps a window of requests in flight and submits them
//! in batches; its buffers cycle through a pool, the same pool for all modes, registered with the
//! ring for `zc-fixed`.
//!
//! The pool is the condition ([`PoolSpec`]). `hot` (the default) makes the comparison about the
//! send path, as the kernel's own `io_uring_zerocopy_tx.c` makes it: copy and zc send one hot
//! buffer over and over (one page-aligned `&'static [u8]`, several requests of it in flight, as
//! the program's one page-aligned buffer), zc-fixed from the fewest
//! registered buffers that keep a batch in the kernel while the one before comes back. `cold`
//! (256 MiB) is a server sending distinct data, where copy pays for memory the zero-copy modes
//! never read. The report says what each pool measured ([`super::heat`], measured in `pool`), not what it was meant
//! to be. `--reference` runs the kernel's program beside zcnet ([`super::reference`]).
//!
//! The hot pool and the shared buffer go again as they come back without leaving the sender
//! (`UringSender::resend_returned`, issue 51), as an application that resends its buffers would
//! use it; the cold pool goes round in the order its buffers come back, each taken and sent, so
//! that all of it is read.
//!
//! The files: `ring` (the ring's settings), `pool` (the pool condition and its buffers),
//! `send` (one run), `tables` (the tables printed); the alternation, the settings shared
//! and the summary rows are [`super::engine`]'s.

mod pool;
mod ring;
mod send;
mod tables;

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Serialize;
use zcnet::uring::Mode;

use super::engine::{
    Flags, InLab, Plan, SENDER_METRICS, SendFlags, registrable, rows_against_base,
};
use super::heat::PoolHeat;
use super::outcome::{Outcome, SummaryRow};
use super::reference::{self, Arm, Reference, Sink};
use super::sweep::{self, Lab};
use super::verdict::{Goal, Verdict};
use crate::measure::{Metric, ResultSet};

pub use pool::{COLD_MIB, HOT_BUFFERS, MAX_MIB, PoolSpec};
pub(crate) use pool::{SendPool, make_pool};
pub use ring::CONFIG;
pub(crate) use send::{cycle_pool, one_run, proto_of};
pub use tables::{PATCHES, change};

/// The IO sizes of the patches' table.
pub const SIZES: [usize; 9] = [600, 1000, 1200, 1500, 4000, 8000, 16000, 32000, 64000];

/// Sender mode, as the command line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// `IORING_OP_SEND`.
    Copy,
    /// `IORING_OP_SEND_ZC`.
    Zc,
    /// `IORING_OP_SEND_ZC` with `IORING_RECVSEND_FIXED_BUF` from a registered pool.
    ZcFixed,
    /// `Mode::Auto`: `SEND_ZC` (from the registered pool where the memlock limit allows) from the
    /// profile's threshold for this route (`zcnet tune`), `SEND` below it.
    Auto,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Copy => Mode::Copy,
            ModeArg::Zc => Mode::ZeroCopy,
            ModeArg::ZcFixed => Mode::ZeroCopyFixed,
            ModeArg::Auto => Mode::Auto,
        }
    }
}

impl Flags for ModeArg {
    const SIZE_HELP: &'static str = "IO size per request (repeatable). Default: 600 1000 1200 \
         1500 4000 8000 16000 32000 64000";
    const SIZES: std::ops::RangeInclusive<u64> = 1..=65507;
    const MODE_HELP: &'static str = "Modes to alternate (repeatable); the first is the baseline. Default: copy zc zc-fixed auto";
}

/// Options of `zcnet bench uring-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub flags: SendFlags<ModeArg>,
    /// The buffer pool (registered whole for zc-fixed): `hot` (default), one buffer sent over and
    /// over by copy and zc, and the fewest registered buffers that keep the window going for
    /// zc-fixed and auto (32: two batches), for a comparison about the send path alone;
    /// `cold`, 256 MiB, a server sending distinct data; or a size in MiB (`--pool-mib` is the
    /// old name). The report says which heat it measured (`settings.pool`).
    #[arg(long, alias = "pool-mib", value_name = "hot|cold|MIB", default_value = "hot", value_parser = PoolSpec::parse)]
    pub pool: PoolSpec,
    /// A build of the kernel's `tools/testing/selftests/net/io_uring_zerocopy_tx.c` to run beside
    /// zcnet in the sink lab, same CPU, same rounds (copy, zc and zc-fixed), with the ratios of
    /// zcnet's cost to its cost.
    #[arg(long, value_name = "PATH")]
    pub reference: Option<std::path::PathBuf>,
}

/// `io_uring_zerocopy_tx -m` for `mode`: 0 copy, 1 zc, 2 zc-fixed; auto has no twin there.
fn selftest_mode(mode: Mode) -> Option<u8> {
    match mode {
        Mode::Copy => Some(0),
        Mode::ZeroCopy => Some(1),
        Mode::ZeroCopyFixed => Some(2),
        _ => None,
    }
}

/// The settings of `uring-tx` beside the shared ones.
#[derive(Debug, Serialize)]
struct Own {
    #[serde(flatten)]
    in_lab: InLab,
    pool_condition: String,
    pool_mib: Option<usize>,
    /// Buffers of the pool, by size.
    pool_buffers: BTreeMap<String, usize>,
    ring_entries: u32,
    /// Requests in flight at most, by size.
    window: BTreeMap<String, usize>,
    batch: usize,
    report_usage: bool,
    ring_setup_asked: zcnet::uring::RingSetup,
    ring_setup: serde_json::Value,
    /// Hot or cold, measured on the pool of the largest size.
    pool: PoolHeat,
    /// What copy and zc send in the hot condition, measured the same way.
    shared_buffer: Option<PoolHeat>,
    /// What each mode sends from.
    sends_from: BTreeMap<&'static str, &'static str>,
    reference: Option<reference::Settings>,
}

impl Own {
    fn new(plan: &Plan<'_, Mode>, spec: PoolSpec, heat: PoolHeat, shared: Option<PoolHeat>) -> Own {
        let by_size = |f: &dyn Fn(usize) -> usize| {
            plan.sizes.iter().map(|&s| (s.to_string(), f(s))).collect()
        };
        let one = if spec == PoolSpec::Hot {
            "one buffer"
        } else {
            "pool"
        };
        Own {
            in_lab: InLab::default(),
            pool_condition: spec.name(),
            pool_mib: match spec {
                PoolSpec::Mib(m) => Some(m),
                PoolSpec::Hot => None,
            },
            pool_buffers: by_size(&|s| spec.buffers(s)),
            ring_entries: CONFIG.entries,
            window: by_size(&|s| CONFIG.window.min(spec.buffers(s) - 1)),
            batch: CONFIG.batch,
            report_usage: true,
            ring_setup_asked: CONFIG.setup,
            ring_setup: ring::granted_setup(),
            pool: heat,
            shared_buffer: shared,
            sends_from: BTreeMap::from([
                ("copy", one),
                ("zc", one),
                ("zc-fixed", "pool"),
                ("auto", "pool"),
            ]),
            reference: None,
        }
    }
}

/// Runs the bench: `plan` from `spec`'s pools, with `reference` beside it in the sink lab.
pub fn bench(
    plan: &Plan<'_, Mode>,
    spec: PoolSpec,
    reference: Option<&Reference>,
    remote: Option<crate::remote::Remote>,
) -> anyhow::Result<Outcome> {
    let (sizes, modes, seconds) = (plan.sizes, plan.modes, plan.rounds.seconds);
    // Hot or cold, measured on the pool of the largest size (its buffers the nearest to the
    // measurement's 64 KiB copies), which the first lab then sends from; every other pool is
    // made by the same rule.
    let mut measured = match sizes.iter().max() {
        Some(&largest) => Some((largest, make_pool(largest, spec)?)),
        None => None,
    };
    let heat = match &measured {
        Some((_, sp)) => pool::pool_heat(&sp.pool),
        None => PoolHeat::measure(0, &[]),
    };
    // What copy and zc send in the hot condition: its heat, measured the same way.
    let shared_heat = measured
        .as_ref()
        .and_then(|(_, sp)| sp.shared)
        .map(|one| PoolHeat::measure(0, &[one]));
    let mut own = Own::new(plan, spec, heat, shared_heat);
    own.reference = reference.map(|r| {
        let args = format!(
            "-4|-6 -D <sink> -p 9 -s <size> -t <whole> -n {} -m 0|1|2 udp",
            CONFIG.batch
        );
        let from = "one buffer, page-aligned, in every mode";
        reference::Settings::new(r, "io_uring_zerocopy_tx", &args, seconds, from)
    });
    let settings = plan.settings(Mode::name, own);
    let twins = |lab: &str| {
        if reference.is_some() && lab == "sink" {
            modes
                .iter()
                .filter(|&&m| selftest_mode(m).is_some())
                .count()
        } else {
            0
        }
    };
    let steps: usize = plan
        .labs
        .iter()
        .map(|l| sizes.len() * plan.rounds.runs * (modes.len() + twins(l)))
        .sum();
    let mut session = plan.start("uring-tx", &settings, steps, 0.0)?;
    let mut tables = Vec::new();
    let build = |name: &str| Lab::build(name, proto_of(name));
    session.each_lab(remote, plan, build, |s, lab_name, family, lab| {
        let proto = proto_of(lab_name);
        let beside = reference.filter(|_| matches!(lab, Lab::Sink(_)));
        if reference.is_some() && beside.is_none() {
            eprintln!("uring-tx {lab_name}: the reference runs in the sink lab only");
        }
        let mut table = Vec::new();
        let mut against = Vec::new();
        for &size in sizes {
            let sp = match measured.take_if(|(s, _)| *s == size) {
                Some((_, sp)) => sp,
                None => make_pool(size, spec)?,
            };
            // The whole pool is registered for zc-fixed.
            let registered = sp.pool.region_len() as u64;
            let what = format!("uring-tx {lab_name} {size} B: zc-fixed skipped");
            let modes = registrable(modes, Mode::ZeroCopyFixed, registered, &what);
            pins_beyond_the_limit(lab_name, size, sp.window, &modes);
            let arms = Arm::alternate(&modes, beside.is_some(), |m| selftest_mode(m).is_some());
            let step = plan.step(lab_name, family, proto, size);
            let sets = Arm::measure(s, &step, &arms, Mode::name, |arm| match arm {
                Arm::Zcnet(mode) => one_run(&lab, proto, family, mode, seconds, &sp),
                Arm::Reference(mode) => {
                    let r = beside
                        .expect("arms of the reference only beside it")
                        .clone();
                    let m = selftest_mode(mode).expect("a reference arm has a -m");
                    sweep::in_sink(&lab, family, move |dest| {
                        let to = Sink {
                            dest,
                            family,
                            size,
                            seconds,
                        };
                        r.run_uring_tx(to, m, CONFIG.batch)
                    })
                }
            })?;
            let (ours, refs) = Arm::split(&arms, sets, s, &SENDER_METRICS);
            let rows = summary_rows(lab_name, size, heat, &ours);
            let what = format!("uring-tx {lab_name} {size} B{}", heat.suffix());
            let program = "io_uring_zerocopy_tx";
            let beside_rows =
                reference::beside_rows(reference::SENDER, &what, program, &ours, &refs);
            table.push((size, ours.clone()));
            against.push((size, ours.clone(), refs.clone()));
            s.keep(ours, rows);
            s.keep(refs, beside_rows);
        }
        tables.push(tables::seed_table(lab_name, proto, &table, &against));
        let note = (spec != PoolSpec::Hot).then(|| {
            format!(
                "zcnet sent from the {} pool, the program from one hot buffer: unlike sources \
                 (--pool hot compares the send paths alone)",
                spec.name()
            )
        });
        let program = ("io_uring_zerocopy_tx", note.as_deref());
        tables.extend(beside.map(|_| reference::table("uring-tx", program, lab_name, &against)));
        Ok(())
    })?;
    super::engine::print_tables(&tables, plan.rounds.quiet);
    Ok(session.finish())
}

/// Says, once per lab and size, that `SEND_ZC` will not pin everything it is asked to: each
/// request pins its buffer's pages until its notification, counted against `RLIMIT_MEMLOCK`
/// like a registration, and a request the kernel cannot pin is sent again by copy. The runs go
/// on; their share really zero-copied shows how much went by copy.
fn pins_beyond_the_limit(lab: &str, size: usize, window: usize, modes: &[Mode]) {
    if !modes
        .iter()
        .any(|m| matches!(m, Mode::ZeroCopy | Mode::Auto))
    {
        return;
    }
    let in_flight = (window * size) as u64;
    if let Err(zcnet::uring::UringError::Memlock {
        need_kib, limit, ..
    }) = zcnet::uring::memlock_check(in_flight)
    {
        eprintln!(
            "uring-tx {lab} {size} B: zc and auto pin up to {in_flight} bytes in flight, over \
             RLIMIT_MEMLOCK ({limit} bytes, no CAP_IPC_LOCK): what the kernel cannot pin is sent \
             again by copy (the zero-copy share says how much); `ulimit -l` above {need_kib} would \
             let it pin everything"
        );
    }
}

/// Each mode against copy in requests/s, judged where the seed issue set a bound (for a cold
/// pool; a hot one is information).
fn summary_rows(lab: &str, size: usize, heat: PoolHeat, sets: &[ResultSet]) -> Vec<SummaryRow> {
    let name = |s: &ResultSet| format!("uring-tx {lab} {size} B{} {}", heat.suffix(), s.mode);
    let verdict = |s: &ResultSet, pairs: &[f64]| {
        // The bounds of the seed issue hold for a cold pool; a hot one is information.
        let bound = match (lab, size, s.mode.as_str()) {
            ("sink", 64000, "zc-fixed") if !heat.is_hot() => Some(3.0),
            ("sink", 8000, "zc-fixed") if !heat.is_hot() => Some(1.3),
            _ => None,
        };
        match bound {
            _ if s.mode == "auto" => super::outcome::auto_verdict(s, sets),
            Some(b) => Verdict::judge(pairs, Some(Goal::AtLeast(b))),
            None if lab != "sink" => Verdict::info(pairs, "kernel copies"),
            None => Verdict::info(pairs, ""),
        }
    };
    rows_against_base(sets, ("req/s", Metric::RequestsPerS), true, name, verdict)
}

/// `zcnet bench uring-tx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let sweep = &opt.flags.sweep;
    let common = &sweep.common;
    common.needs_labs("uring-tx builds its labs in private network namespaces")?;
    let labs = common.labs_or(&["sink", "loopback", "veth"]);
    let sizes = sweep.sizes_or(&SIZES);
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s > 65507) {
        bail!("--size {s}: give 1 to 65507 bytes (the largest UDP datagram over IPv4)");
    }
    let modes: Vec<Mode> = sweep
        .modes_or(&[ModeArg::Copy, ModeArg::Zc, ModeArg::ZcFixed, ModeArg::Auto])
        .into_iter()
        .map(Mode::from)
        .collect();
    if modes[0] != Mode::Copy {
        bail!("the first --mode is the baseline of the comparisons and must be copy");
    }
    let rounds = common.rounds(5, 1.0);
    let remote = common.remote.is_some();
    let reference = Reference::for_sink(opt.reference.as_deref(), remote, &labs, &sizes)?;
    let plan = Plan {
        labs: &labs,
        family: opt.flags.family.into(),
        sizes: &sizes,
        modes: &modes,
        rounds,
    };
    let out = bench(&plan, opt.pool, reference.as_ref(), common.remote()?)?;
    out.finish(common)
}
