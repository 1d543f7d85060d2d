//! `zcnet bench packet`: capture by the `TPACKET_V3` RX ring against one `recvfrom(2)` per
//! packet and against tcpdump, the experiment of the 2005 netdev discussion on zero-copy
//! sniffing (a ring shared with user space beat per-packet copies and calls).
//!
//! In the `veth` lab a generator in namespace A, pinned to CPU 1, floods UDP frames of one size
//! from a TX ring with `PACKET_QDISC_BYPASS` for the run's seconds. The frames are addressed to
//! a MAC that is not veth-b's, as frames seen on a mirror port are: namespace B's stack drops
//! them on arrival (`PACKET_OTHERHOST`), so the capture is the only consumer. IPv6 is off on
//! both ends, so every frame on the link is the generator's. The capture thread (or process)
//! is pinned to CPU 0. Two conditions place the receive processing (the kernel half of each
//! capture: the copy into the ring, or the clone queued on the socket):
//! - `rx-on-generator`: veth delivers in the sender's softirq, on CPU 1, slowing the generator
//!   alike for every method; the capture CPU measured is the capture's alone. The CPU per
//!   packet of the acceptance comes from here.
//! - `rx-on-capture`: Receive Packet Steering moves it to CPU 0, which the capture shares with
//!   it, as on a capture box whose NIC interrupts the capture's CPU. The softirq comes first;
//!   a capture too slow for the rest drops. This kernel has no `IRQ_TIME_ACCOUNTING`, so
//!   softirq time that interrupts the capture is charged to it: read this condition's captured
//!   share and drops, not its CPU per packet.
//!
//! Each capture writes every frame as a pcap record to `/dev/null`, the job of
//! `tcpdump -w -` into /dev/null:
//! - `recvfrom`: [`zcnet::packet::Socket`], one `recvfrom(2)` per frame into a buffer, the time
//!   from the vDSO clock, the queue (`SO_RCVBUF`) as large as the ring;
//! - `ring`: [`zcnet::packet::RxRing`], 32 blocks of 1 MiB, retire timeout 10 ms;
//! - `tcpdump`: `tcpdump -i veth-b -p -n -B <ring KiB> -w -` (stdout /dev/null), libpcap's own V3 ring of
//!   the same size. Its CPU is the process's run time (`/proc/PID/schedstat`) split into user
//!   and system by its ticks (`/proc/PID/stat`), as getrusage does; its counts are the lines it
//!   prints when interrupted.
//!
//! The files: `mode` (the methods and conditions), `lab` (the lab and its generator),
//! `capture` (one run), `summary` (the lines and the summary rows); the settings' start and
//! the result sets are [`super::engine`]'s.

mod capture;
mod lab;
mod mode;
mod summary;

use anyhow::{Context, bail};
use netlab::{Side, VethLab};
use serde::Serialize;
use serde_json::json;
use zcnet::packet::RxConfig;

use super::common::Rounds;
use super::engine::{Sweep, sets_of};
use super::outcome::Outcome;
use crate::measure::{self, Metric};
use crate::remote::Remote;

use capture::one_run;
use lab::{Lab, Place};
pub use mode::{CONDITIONS, Condition, Mode};
use summary::{describe, summary_rows};

/// Frame sizes of the issue: Ethernet header through payload, as a packet socket sees them.
pub const SIZES: [usize; 3] = [64, 512, 1500];

/// Options of `zcnet bench packet`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub sweep: Sweep<Mode>,
    /// Where receive processing runs (repeatable; default both).
    #[arg(long = "condition", value_enum)]
    pub conditions: Vec<Condition>,
}

/// The settings of `packet`.
#[derive(Debug, Serialize)]
struct Settings {
    runs: usize,
    seconds: f64,
    generator: &'static str,
    capture_cpu: usize,
    ring: RingSettings,
    recvfrom_rcvbuf: usize,
    tcpdump_buffer_kib: usize,
    output: &'static str,
    modes: Vec<&'static str>,
}

/// The RX ring's geometry.
#[derive(Debug, Serialize)]
struct RingSettings {
    block_size: usize,
    block_count: usize,
    retire_ms: u128,
}

/// Runs the bench: every condition and size, the modes alternating.
pub fn bench(
    conditions: &[Condition],
    sizes: &[usize],
    modes: &[Mode],
    rounds: Rounds,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let ring = RxConfig::default();
    let ring_bytes = ring.block_size * ring.block_count;
    let settings = Settings {
        runs: rounds.runs,
        seconds: rounds.seconds,
        generator: match remote {
            Some(_) => "zcnet serve: UDP sendto to port 9",
            None => "TX ring, qdisc bypass, CPU 1",
        },
        capture_cpu: 0,
        ring: RingSettings {
            block_size: ring.block_size,
            block_count: ring.block_count,
            retire_ms: ring.retire_timeout.as_millis(),
        },
        recvfrom_rcvbuf: ring_bytes,
        tcpdump_buffer_kib: ring_bytes >> 10,
        output: "pcap to /dev/null",
        modes: modes.iter().map(|m| m.name()).collect(),
    };
    let steps = conditions.len() * sizes.len() * rounds.runs * modes.len();
    let mut s = rounds.start("packet", &settings, steps, rounds.seconds + 1.0)?;
    let lab_name = super::labs::remote_lab(&mut s.report, remote.as_ref(), "veth");
    let lab = match remote {
        Some(r) => Lab::remote(r, ring)?,
        None => Lab::new(ring)?,
    };
    for (&cond, &size) in conditions
        .iter()
        .flat_map(|c| sizes.iter().map(move |s| (c, s)))
    {
        // Steering needs CAP_NET_ADMIN of the initial user namespace: a lab in a user namespace
        // (not root) cannot set it. Say so and measure the other conditions. Another host's
        // device is measured as it is configured.
        let steered = match (&lab.place, cond.rps_mask()) {
            (Place::Veth { veth, .. }, Some(mask)) => {
                veth.ns(Side::B).set_rps(VethLab::DEV_B, mask)
            }
            _ => Ok(()),
        };
        if let Err(e) = steered {
            eprintln!(
                "packet: skipping {} {size} B: {} (RPS needs real root)",
                cond.name(),
                crate::error_line::chain(&e)
            );
            continue;
        }
        let per = measure::alternate(modes, rounds.runs, s.progress(), |m, i| {
            let run = one_run(&lab, m, size, rounds.seconds)
                .with_context(|| format!("{} {size} B {} run {}", cond.name(), m.name(), i + 1))?;
            if !rounds.quiet {
                println!(
                    "[{lab_name} {} {size} B] {}",
                    cond.name(),
                    describe(m, &run)
                );
            }
            anyhow::Ok(run)
        })?;
        let params = json!({"condition": cond.name(), "size": size});
        let sets = sets_of(modes, Mode::name, per, (lab_name, "ipv4", None), &params);
        let set = |m: Mode| modes.iter().position(|&x| x == m).map(|i| &sets[i]);
        if let Some(ring) = set(Mode::Ring) {
            for other in [Mode::Recvfrom, Mode::Tcpdump, Mode::Xdp] {
                let Some(o) = set(other) else { continue };
                s.compare(ring, o, &CAPTURE_METRICS);
            }
            s.summary.extend(summary_rows(
                lab_name,
                cond,
                size,
                ring,
                set(Mode::Recvfrom),
                set(Mode::Tcpdump),
                set(Mode::Xdp),
            ));
        }
        s.keep(sets, Vec::new());
    }
    Ok(s.finish())
}

/// What the ring is compared with each other method by: CPU per packet, packets/s, and the
/// share of the offered packets captured.
const CAPTURE_METRICS: [Metric; 3] = [
    Metric::CpuNsPerRequest,
    Metric::RequestsPerS,
    Metric::CaptureShare,
];

/// The modes asked for, tcpdump left out with a reason when it is not installed.
pub fn available_modes(asked: &[Mode]) -> Vec<Mode> {
    let asked = if asked.is_empty() {
        vec![Mode::Recvfrom, Mode::Ring, Mode::Xdp, Mode::Tcpdump]
    } else {
        asked.to_vec()
    };
    let asked = if asked.contains(&Mode::Xdp) && zcnet::probe::features().privileges.user_namespace
    {
        eprintln!(
            "zcnet bench packet: xdp mode skipped: attaching an XDP program needs CAP_BPF and \
             CAP_NET_ADMIN of the initial user namespace (run as root to compare with it)"
        );
        asked.into_iter().filter(|&m| m != Mode::Xdp).collect()
    } else {
        asked
    };
    if asked.contains(&Mode::Tcpdump) && zcnet::probe::features().privileges.user_namespace {
        eprintln!(
            "zcnet bench packet: tcpdump mode skipped: tcpdump switches to its own user, which a \
             user namespace cannot map (run as root to compare with it)"
        );
        return asked.into_iter().filter(|&m| m != Mode::Tcpdump).collect();
    }
    if asked.contains(&Mode::Tcpdump) && !netlab::skip::on_path("tcpdump") {
        eprintln!(
            "zcnet bench packet: tcpdump mode skipped: tcpdump is not installed (Debian package tcpdump)"
        );
        return asked.into_iter().filter(|&m| m != Mode::Tcpdump).collect();
    }
    asked
}

/// `zcnet bench packet`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let common = &opt.sweep.common;
    if common.labs.iter().any(|l| l != "veth") {
        bail!("packet runs in the veth lab only");
    }
    let sizes = opt.sweep.sizes_or(&SIZES);
    if let Some(bad) = sizes
        .iter()
        .find(|&&s| !(netlab::frame::HEADERS..=1514).contains(&s))
    {
        bail!(
            "frame size {bad} out of range: {}..=1514 bytes (Ethernet, IPv4 and UDP headers; MTU 1500)",
            netlab::frame::HEADERS
        );
    }
    let remote = common.remote()?;
    if remote.is_none() {
        netlab::check_privileges()
            .context("packet builds its veth lab in private network namespaces")?;
    }
    let conditions = match (&remote, opt.conditions.is_empty()) {
        (Some(_), _) if opt.conditions.iter().any(|&c| c != Condition::AsConfigured) => {
            bail!(
                "with --remote the capture device is this host's, measured as it is configured: \
                 --condition as-configured"
            )
        }
        (Some(_), _) => vec![Condition::AsConfigured],
        (None, true) => CONDITIONS.to_vec(),
        (None, false) => opt.conditions.clone(),
    };
    // Said once the command is known to run: which modes this machine leaves out.
    let modes = available_modes(&opt.sweep.modes);
    let out = bench(&conditions, &sizes, &modes, common.rounds(5, 2.0), remote)?;
    out.finish(common)
}
