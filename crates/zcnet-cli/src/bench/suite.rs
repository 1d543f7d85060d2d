//! `zcnet bench` without a name, the main job: every bench in a short mode, in the conditions its
//! issue's acceptance names, then one summary table.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::common::Common;
use super::common::Rounds;
use super::engine::Plan;
use super::outcome::{Outcome, SummaryRow, finish_document, render_summary};
use super::reference::Reference;
use super::{
    async_serve, file_tx, iperf3, packet, packet_tx, peek, relay, sweep, tcp_rx, tx, udp_gso,
    uring_tx,
};
use crate::measure::Report;

/// What `zcnet bench --json` prints: the probe, every bench's report, and the summary.
#[derive(Debug, Serialize)]
struct Suite<'a> {
    probe: &'a zcnet::probe::Features,
    reports: Vec<Report>,
    summary: Vec<SummaryRow>,
}

/// The main job: every bench in a short mode, then one summary table; with `selftests`, the
/// kernel's programs in that directory beside their seeds' steps.
pub(super) fn run(common: Common, selftests: Option<&Path>) -> anyhow::Result<()> {
    if common.remote.is_some() {
        anyhow::bail!(
            "the suite runs in this machine's labs: with --remote, name a bench (tcp-rx, udp-tx, \
             tcp-tx, file-tx, uring-tx, peek, packet, async-serve)"
        );
    }
    let programs = selftests.map(Programs::in_dir).transpose()?;
    let probe = zcnet::probe::features();
    if !common.json {
        print!("{}", crate::probe::render(probe));
    }
    // Five runs of a second each (issue 46): with three, a verdict's interval is the range of
    // its pairs, which holds the median 75 % of the time; with five, 94 %, about the 95 % its
    // label says, for the same time in all (docs/verdicts.md).
    let runs = common.runs.unwrap_or(5);
    let seconds = common.seconds.unwrap_or(1.0);
    let quiet = common.json;
    let mut reports = Vec::new();
    let mut summary = Vec::new();
    match netlab::check_privileges() {
        Err(e) => eprintln!(
            "zcnet bench: benches skipped: {}",
            crate::error_line::chain(&e)
        ),
        Ok(()) => {
            for (name, step) in suite_steps(runs, seconds, quiet, programs.as_ref()) {
                if !quiet {
                    println!("\n== {name}, {runs} alternations per mode");
                }
                let out = step().with_context(|| format!("bench {name}"))?;
                if !quiet {
                    println!("\n{}", crate::measure::render(&out.report));
                }
                reports.push(out.report);
                summary.extend(out.summary);
            }
        }
    }
    if !common.json {
        println!("{}", render_summary(&summary));
    }
    let suite = Suite {
        probe,
        reports,
        summary,
    };
    if common.json {
        println!("{}", serde_json::to_string_pretty(&suite)?);
    }
    finish_document(serde_json::to_value(&suite)?, &common)
}

/// The kernel's own programs the suite runs beside its seeds (`--selftests DIR`).
#[derive(Clone, Debug)]
struct Programs {
    tcp_mmap: Reference,
    msg_zerocopy: Reference,
    io_uring_zerocopy_tx: Reference,
    udpgso_bench_tx: Reference,
}

impl Programs {
    /// The four programs in `dir`, each checked as `--reference` checks one.
    fn in_dir(dir: &Path) -> anyhow::Result<Programs> {
        let one = |name: &str| {
            let path = dir.join(name);
            if !path.is_file() {
                anyhow::bail!(
                    "--selftests {}: no {name} there (`.ci/selftests DIR` builds the four \
                     programs: tcp_mmap, msg_zerocopy, io_uring_zerocopy_tx, udpgso_bench_tx)",
                    dir.display()
                );
            }
            Reference::named(&path, &format!("--selftests {}: {name}", dir.display()))
        };
        Ok(Programs {
            tcp_mmap: one("tcp_mmap")?,
            msg_zerocopy: one("msg_zerocopy")?,
            io_uring_zerocopy_tx: one("io_uring_zerocopy_tx")?,
            udpgso_bench_tx: one("udpgso_bench_tx")?,
        })
    }
}

/// One bench of the suite, run in its short mode.
type Step = Box<dyn FnOnce() -> anyhow::Result<Outcome>>;

/// UDP MSG_ZEROCOPY into the sink: copy, zc and auto at `sizes` from a `pool_mib` pool, the
/// kernel's `msg_zerocopy` beside them where given.
fn udp_sink(
    sizes: &[usize],
    pool_mib: usize,
    rounds: Rounds,
    reference: Option<&Reference>,
) -> anyhow::Result<Outcome> {
    let modes = [tx::Mode::Copy, tx::Mode::Zc, tx::Mode::Auto];
    let plan = Plan::ipv4(&["sink"], sizes, &modes, rounds);
    tx::bench(sweep::Proto::Udp, &plan, pool_mib, reference, None)
}

/// io_uring into the sink: every mode at `sizes` from a `pool` pool, the kernel's
/// `io_uring_zerocopy_tx` beside them where given.
fn uring_sink(
    sizes: &[usize],
    pool: uring_tx::PoolSpec,
    rounds: Rounds,
    reference: Option<&Reference>,
) -> anyhow::Result<Outcome> {
    use zcnet::uring::Mode;
    let modes = [Mode::Copy, Mode::ZeroCopy, Mode::ZeroCopyFixed, Mode::Auto];
    let plan = Plan::ipv4(&["sink"], sizes, &modes, rounds);
    uring_tx::bench(&plan, pool, reference, None)
}

/// The suite: each bench in the conditions its issue's acceptance names; the kernel's
/// `programs` beside the seeds' steps where given (each where it sends as zcnet does: the sink
/// from a hot source, tcp-rx without reading the bytes).
fn suite_steps(
    runs: usize,
    seconds: f64,
    quiet: bool,
    programs: Option<&Programs>,
) -> Vec<(&'static str, Step)> {
    use netlab::Family;
    let tcp_mmap = programs.map(|p| p.tcp_mmap.clone());
    let msg_zerocopy = programs.map(|p| p.msg_zerocopy.clone());
    let uring_program = programs.map(|p| p.io_uring_zerocopy_tx.clone());
    let udpgso_program = programs.map(|p| p.udpgso_bench_tx.clone());
    let rounds = Rounds {
        runs,
        seconds,
        quiet,
    };
    let mut steps: Vec<(&'static str, Step)> = vec![
        (
            // The two loopback conditions of the RX acceptance, IPv6.
            "tcp-rx (loopback, IPv6)",
            Box::new(move || {
                let conds: Vec<_> = tcp_rx::conditions()
                    .into_iter()
                    .filter(|c| c.lab == "loopback" && c.family == Family::V6)
                    .collect();
                let settings = tcp_rx::Settings {
                    runs,
                    seconds,
                    verify: tcp_mmap.is_none(),
                    modes: vec![tcp_rx::Mode::Copy, tcp_rx::Mode::Zc],
                    window: zcnet::tcp_rx::DEFAULT_WINDOW,
                };
                tcp_rx::bench(&conds, &settings, tcp_mmap.as_ref(), quiet)
            }),
        ),
        (
            // The sink, where zero-copy is real: the seed's largest size and a mid size.
            "udp-tx (sink)",
            Box::new(move || udp_sink(&[8000, 64000], 256, rounds, None)),
        ),
        (
            // The same with a small pool (2 MiB), meant to be hot: copy at its cheapest, as the
            // kernel's msg_zerocopy.c measures it. Its report says whether it measured hot.
            "udp-tx (sink, 2 MiB pool)",
            Box::new(move || udp_sink(&[64000], 2, rounds, msg_zerocopy.as_ref())),
        ),
        (
            // Loopback copies: the adaptive policy must cost nothing against copy.
            "tcp-tx (loopback)",
            Box::new(move || {
                let modes = [
                    tx::Mode::Copy,
                    tx::Mode::Zc,
                    tx::Mode::ZcAdaptive,
                    tx::Mode::Auto,
                ];
                let plan = Plan::ipv4(&["loopback"], &[65536], &modes, rounds);
                tx::bench(sweep::Proto::Tcp, &plan, 256, None, None)
            }),
        ),
        (
            // 256 MiB in page cache, each strategy.
            "file-tx (loopback)",
            Box::new(move || {
                use zcnet::file::Mode as Strategy;
                let strategies = [
                    Strategy::Copy,
                    Strategy::Sendfile,
                    Strategy::Splice,
                    Strategy::MmapZeroCopy,
                    Strategy::Auto,
                ];
                let modes = file_tx::Mode::list(&strategies, &file_tx::COPY_BUFFERS_KIB);
                file_tx::bench(256, &modes, runs, quiet, None)
            }),
        ),
        (
            // io_uring into the sink from a hot pool, the send path alone as the kernel's own
            // program measures it: the sizes of the acceptance and the smallest of the table.
            "uring-tx (sink, hot pool)",
            Box::new(move || {
                let pool = uring_tx::PoolSpec::Hot;
                uring_sink(&[600, 8000, 64000], pool, rounds, uring_program.as_ref())
            }),
        ),
        (
            // The same from a 256 MiB pool, cold as a server sending distinct data: the
            // condition of the acceptance bounds (zc-fixed / copy).
            "uring-tx (sink, cold pool)",
            Box::new(move || {
                let pool = uring_tx::PoolSpec::Mib(uring_tx::COLD_MIB);
                uring_sink(&[8000, 64000], pool, rounds, None)
            }),
        ),
        (
            // UDP GSO trains of the acceptance (1472-byte segments, 42 to a train) into the
            // sink: one send per datagram, sendmmsg, and the train by copy, MSG_ZEROCOPY,
            // SEND_ZC from registered buffers and Mode::Auto.
            "udp-gso (sink, 1472 B x 42)",
            Box::new(move || {
                let plan = Plan::ipv4(&["sink"], &[1472], &udp_gso::Mode::ALL, rounds);
                udp_gso::bench(&plan, &[42], 256, udpgso_program.as_ref(), None)
            }),
        ),
        (
            // The relay holding 64 KiB, 1 MiB and 4 MiB unacknowledged, rate-limited veth.
            "peek (veth)",
            Box::new(move || peek::bench(&peek::CONDITIONS, rounds, None)),
        ),
        (
            // The relay's event loops against tokio's copy_bidirectional, 1 to 1000 connections
            // at once: CPU per MB of 1 KiB and 64 KiB exchanges and of bulk streams.
            "relay (loopback, 1 to 1000 connections)",
            Box::new(move || {
                let plan = relay::Plan {
                    counts: vec![1, 100, 1000],
                    modes: vec![relay::Mode::Loops, relay::Mode::TokioCopy],
                    runs: rounds.runs,
                    seconds: rounds.seconds,
                    bulk_streams: 128,
                    quiet: rounds.quiet,
                };
                relay::bench(&plan, &["loopback"])
            }),
        ),
        (
            // The async file server, zcnet vs plain tokio: the sizes of issue 19's goal.
            "async-serve (veth)",
            Box::new(move || async_serve::bench(&async_serve::SIZES, 64, rounds, None)),
        ),
        (
            // Capture of 64-byte frames, the size of the RING acceptance, by every method, with
            // receive processing on the generator's CPU and on the capture's.
            "packet (veth)",
            Box::new(move || {
                let modes = packet::available_modes(&[]);
                packet::bench(&packet::CONDITIONS, &[64], &modes, rounds, None)
            }),
        ),
        (
            // Sending frames at 64 B, where per-packet costs show most: issue 18's acceptance,
            // judged in the sink (the sending paths alone), veth beside it.
            "packet-tx (sink, veth)",
            Box::new(move || {
                let mut modes = packet_tx::MODES.to_vec();
                if zcnet::probe::features().privileges.user_namespace {
                    modes.retain(|&m| m != packet_tx::Mode::Xdp);
                }
                let plan = Plan::ipv4(&packet_tx::LABS, &[64], &modes, rounds);
                packet_tx::bench(&plan)
            }),
        ),
    ];
    // zcnet iperf3 beside iperf3 itself (tests of whole seconds), where iperf3 is installed.
    let program = Path::new("iperf3");
    if iperf3::installed(program) {
        steps.push((
            "iperf3 (beside iperf3, loopback of MTU 61512)",
            Box::new(move || {
                let seconds = rounds.seconds.max(1.0).round() as u32;
                iperf3::bench(program, rounds.runs, seconds, rounds.quiet)
            }),
        ));
    } else {
        eprintln!(
            "zcnet bench: the iperf3 step skipped: iperf3 is not installed (Debian: apt-get \
             install iperf3)"
        );
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--selftests DIR` names what the user gave it, and the program that is wrong: not a
    /// `--reference` the user never typed.
    #[test]
    fn selftests_name_the_directory_and_the_program() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("zcnet-selftests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["tcp_mmap", "msg_zerocopy", "io_uring_zerocopy_tx"] {
            let p = dir.join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let e = format!("{:#}", Programs::in_dir(&dir).unwrap_err());
        assert!(e.contains("no udpgso_bench_tx there"), "{e}");
        std::fs::write(dir.join("udpgso_bench_tx"), "#!/bin/sh\n").unwrap();
        let e = format!("{:#}", Programs::in_dir(&dir).unwrap_err());
        let want = format!(
            "--selftests {}: udpgso_bench_tx: not executable",
            dir.display()
        );
        assert!(e.starts_with(&want) && !e.contains("--reference"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
