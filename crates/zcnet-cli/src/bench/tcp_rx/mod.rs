//! `zcnet bench tcp-rx`: TCP zero-copy receive against `recv` into a 512 KiB buffer, the
//! experiment of the kernel's `tcp_mmap` reference program.
//!
//! A sender thread streams the verification pattern with `MSG_ZEROCOPY` in 512 KiB calls for a
//! fixed time; on loopback and veth only such a sender produces whole, aligned pages (its
//! deferred copy does), so both modes use it and only the receiver differs: `copy` reads with
//! `recv`, `zc` maps pages with `TCP_ZEROCOPY_RECEIVE`. Sender and receiver are pinned to
//! different CPUs. Modes alternate, copy first, run by run.
//!
//! The sender is a separate process (this binary with `--connect`, started inside the lab's
//! namespace), as in `tcp_mmap`: a sender *thread* shares the receiver's address space, so every
//! zap of the receive window would send a TLB-shootdown IPI to the sender's CPU. Measured here,
//! that added about 30 µs per MB to the zero-copy receiver.
//!
//! The files: `lab` (the conditions and their labs), `stream` (one connection's sender and
//! receiver), `local` (the runs in a lab here), `remote` (across two hosts), `tcp_mmap` (the
//! kernel's `tcp_mmap` beside zcnet, `--reference`).

mod lab;
mod local;
mod remote;
mod stream;
mod tcp_mmap;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use netlab::{CONGESTION, Family};

use crate::bench::outcome::{Outcome, SummaryRow};
use crate::bench::reference::{self, Arm, Reference};
use crate::bench::verdict::{Goal, Verdict};
use crate::measure::{self, Comparison, Metric, Progress, Report, ResultSet};

use super::common::{Common, FamilyArg};

use lab::Lab;
pub use lab::{Condition, conditions};
use local::run_condition;
pub use local::tcp_mmap_line;
use remote::{remote_receiver, remote_sender, with_server};
pub use stream::{Mode, Settings, WARM_UP};
pub use tcp_mmap::{TcpMmap, parse_tcp_mmap};

/// Options of `zcnet bench tcp-rx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Address family (repeatable). Default: both.
    #[arg(long = "family", value_enum)]
    pub families: Vec<FamilyArg>,
    /// Do not check the received bytes (measures the bare path).
    #[arg(long)]
    pub no_verify: bool,
    /// Receiver modes to alternate (repeatable). Default: copy and zc; add zc-kernel-zap to
    /// compare page-release policies side by side.
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// Receiver only: accept the runs of a remote `--connect` sender on ADDR.
    #[arg(long, value_name = "ADDR", conflicts_with = "connect")]
    pub listen: Option<SocketAddr>,
    /// Sender only: stream to a remote `--listen` receiver at ADDR.
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// TCP_MAXSEG for --listen/--connect/--remote (4108 makes 4 KiB payloads with timestamps).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(i32).range(88..=65535))]
    pub mss: Option<i32>,
    /// With --connect: connections to make (default: runs × modes, one per receiver run).
    #[arg(long, value_name = "N", requires = "connect", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections: Option<usize>,
    /// Sender only, started by a lab's receiver: make each connection when a line arrives on
    /// stdin, and stop at its end.
    #[arg(long, hide = true, requires = "connect")]
    pub paced: bool,
    /// A build of the kernel's `tools/testing/selftests/net/tcp_mmap.c` to run beside zcnet in
    /// each lab, same CPUs, same rounds: its server (`-s`, `-z` for zc) receives from its client
    /// (`-z`), with the ratios of zcnet's receiver CPU to its own. Compare with --no-verify:
    /// it never reads what it maps.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["listen", "connect"])]
    pub reference: Option<std::path::PathBuf>,
    /// Receive window (bytes mapped or read per call, and SO_RCVLOWAT), in KiB.
    #[arg(long, value_name = "KIB", default_value_t = 512, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=1048576))]
    pub window_kib: usize,
}

/// Runs the bench over `conds`, with the kernel's `tcp_mmap` beside zcnet where `reference`.
pub fn bench(
    conds: &[Condition],
    s: &Settings,
    reference: Option<&Reference>,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let mut report = Report::new("tcp-rx");
    report.settings = s.json()?;
    if let Some(r) = reference {
        report.settings["reference"] = serde_json::to_value(ReferenceSettings::of(r))?;
    }
    let mut summary = Vec::new();
    let mut tables = Vec::new();
    let modes = &s.modes;
    let twins = modes.iter().filter(|&&m| m != Mode::ZcKernelZap).count();
    let arms = modes.len() + if reference.is_some() { twins } else { 0 };
    let steps = conds.len() * s.runs * arms;
    let progress = Progress::new(
        "tcp-rx",
        steps as u64,
        Duration::from_secs_f64(s.seconds * steps as f64),
    );
    for c in conds {
        let lab = Lab::build(c)?;
        let (arms, (per_arm, after)) = run_condition(&lab, c, s, reference, &progress, quiet)?;
        drop(lab);
        let index = |a: Arm<Mode>| arms.iter().position(|&x| x == a);
        // The order effect on the baseline: its runs after the second mode against its runs
        // after itself.
        if let (Some(i0), Some(i1)) = (
            index(Arm::Zcnet(modes[0])),
            modes.get(1).and_then(|&m| index(Arm::Zcnet(m))),
        ) && let Some((same, other, n)) =
            measure::order_effect(&per_arm[i0], &after[i0], i0, i1, Metric::CpuUsPerMb)
        {
            let (a, b) = (modes[0].name(), modes[1].name());
            let ratio = other / same;
            report.order_effects.push(measure::OrderEffect {
                condition: c.label(),
                mode: a.into(),
                other: b.into(),
                metric: Metric::CpuUsPerMb,
                after_same: same,
                after_other: other,
                ratio,
                runs_each: n,
            });
            // A median of one or two runs says more about this machine's noise than about
            // order: the verdict needs three of each (--runs 6).
            let pick = |prev: usize| -> Vec<f64> {
                per_arm[i0]
                    .iter()
                    .zip(&after[i0])
                    .filter(|(_, a)| **a == Some(prev))
                    .filter_map(|(r, _)| Metric::CpuUsPerMb.of(r))
                    .collect()
            };
            let goal = (n >= 3).then_some(Goal::NearOne(0.05));
            let mut verdict = Verdict::judge_samples(&pick(i0), &pick(i1), goal);
            if n < 3 {
                verdict = verdict.note(format!("{n} run(s) each: --runs 6 or more to judge"));
            }
            summary.push(SummaryRow::new(
                format!("tcp-rx {} {a} after {b} vs after {a}", c.label()),
                "recv us/MB",
                (same, other),
                None,
                &verdict,
            ));
        }
        let set = |name: &str, runs: Vec<_>| {
            ResultSet::new(
                c.lab,
                c.family.name(),
                Some(CONGESTION),
                c.params(),
                name,
                runs,
            )
        };
        let (mut sets, mut refs) = (Vec::new(), Vec::new());
        for (arm, runs) in arms.iter().zip(per_arm) {
            match arm {
                Arm::Zcnet(_) => sets.push(set(arm.name(Mode::name), runs)),
                Arm::Reference(_) => refs.push(set(arm.name(Mode::name), runs)),
            }
        }
        let base = &sets[0];
        for other in &sets[1..] {
            for metric in [Metric::CpuUsPerMb, Metric::MachineCpuUsPerMb, Metric::Gbit] {
                report
                    .comparisons
                    .extend(Comparison::new(other, base, metric));
            }
        }
        let by = |m: Mode| sets.iter().find(|r| r.mode == m.name());
        if let (Some(copy), Some(zc)) = (by(Mode::Copy), by(Mode::Zc)) {
            summary.push(summary_row(c, copy, zc));
        }
        for r in &refs {
            let twin = sets
                .iter()
                .find(|o| format!("ref-{}", o.mode) == r.mode)
                .expect("every reference arm has its zcnet twin");
            for metric in [Metric::CpuUsPerMb, Metric::Gbit] {
                report.comparisons.extend(Comparison::new(twin, r, metric));
            }
        }
        let what = format!("tcp-rx {}", c.label());
        summary.extend(reference::beside_rows(
            reference::RECEIVER,
            &what,
            "tcp_mmap",
            &sets,
            &refs,
        ));
        if !refs.is_empty() {
            let rows = [(s.window, sets.clone(), refs.clone())];
            let program = ("tcp_mmap", Some(TABLE_NOTE));
            tables.push(reference::table_of(
                reference::RECEIVER,
                "tcp-rx",
                program,
                &c.label(),
                &rows,
            ));
        }
        report.results.extend(sets);
        report.results.extend(refs);
    }
    super::engine::print_tables(&tables, quiet);
    Ok(Outcome::new(report, summary))
}

/// What the table of zcnet beside `tcp_mmap` says of how the two measure.
const TABLE_NOTE: &str = "tcp_mmap counts its whole connection and never reads the bytes; zcnet \
     leaves out the first quarter of each run and reads them unless --no-verify";

/// How `tcp_mmap` runs beside zcnet, for the report's settings.
#[derive(serde::Serialize)]
struct ReferenceSettings {
    program: &'static str,
    path: std::path::PathBuf,
    server: &'static str,
    client: &'static str,
    server_cpu: usize,
    client_cpu: usize,
    measured: &'static str,
}

impl ReferenceSettings {
    fn of(r: &Reference) -> ReferenceSettings {
        ReferenceSettings {
            program: "tcp_mmap",
            path: r.path().to_path_buf(),
            server: "-4|-6 -p <port> [-M <mss>] -s -H <receiver> [-z]",
            client: "-4|-6 -p <port> [-M <mss>] -H <receiver> -z, ended after the run's seconds",
            server_cpu: 1,
            client_cpu: 0,
            measured: "the server's own summary: its thread's getrusage over the whole \
                       connection, bytes and share mapped",
        }
    }
}

fn summary_row(c: &Condition, copy: &ResultSet, zc: &ResultSet) -> SummaryRow {
    let med = |s: &ResultSet, k: Metric| s.median_of(k).unwrap_or(f64::NAN);
    let pairs = measure::ratio_pairs(&zc.runs, &copy.runs, Metric::CpuUsPerMb);
    let share = zc.median_of(Metric::ZeroCopyShare);
    let verified = [copy, zc].iter().all(|s| s.verified());
    let mut verdict = Verdict::judge(&pairs, c.bound().map(Goal::AtMost))
        .require(share.is_some_and(|s| s >= 0.999), "mapped < 99.9 %");
    if !verified {
        verdict = verdict.fail("wrong bytes");
    }
    SummaryRow::new(
        format!("tcp-rx {}", c.label()),
        "recv us/MB",
        (med(copy, Metric::CpuUsPerMb), med(zc, Metric::CpuUsPerMb)),
        share,
        &verdict,
    )
}

fn selected(opt: &Opt) -> anyhow::Result<Vec<Condition>> {
    let families: Vec<Family> = opt.families.iter().map(|&f| f.into()).collect();
    for lab in &opt.common.labs {
        if lab != "loopback" && lab != "veth" {
            bail!("tcp-rx runs in the loopback and veth labs, not {lab:?}");
        }
    }
    Ok(conditions()
        .into_iter()
        .filter(|c| opt.common.labs.is_empty() || opt.common.labs.iter().any(|l| l == c.lab))
        .filter(|c| families.is_empty() || families.contains(&c.family))
        .collect())
}

/// `zcnet bench tcp-rx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let settings = Settings {
        runs: opt.common.runs.unwrap_or(5),
        seconds: opt.common.seconds.unwrap_or(5.0),
        verify: !opt.no_verify,
        modes: super::engine::asked_or(&opt.modes, &[Mode::Copy, Mode::Zc]),
        window: opt.window_kib.max(4) * 1024,
    };
    if let Some(addr) = opt.connect {
        return remote_sender(
            addr,
            opt.mss,
            settings.runs,
            settings.seconds,
            (opt.common.json, opt.paced),
        );
    }
    if let Some(addr) = opt.listen {
        return remote_receiver(addr, opt.mss, &settings, opt.common.json);
    }
    if opt.reference.is_some() && opt.common.remote.is_some() {
        bail!("--reference runs the kernel's tcp_mmap in a lab here: not with --remote");
    }
    if let Some(remote) = opt.common.remote()? {
        return with_server(remote, opt.mss, &settings, opt.common.json)?.finish(&opt.common);
    }
    let reference = opt.reference.as_deref().map(Reference::new).transpose()?;
    netlab::check_privileges().context("tcp-rx builds its labs in private network namespaces")?;
    let conds = selected(&opt)?;
    let out = bench(&conds, &settings, reference.as_ref(), opt.common.json)?;
    out.finish(&opt.common)
}
