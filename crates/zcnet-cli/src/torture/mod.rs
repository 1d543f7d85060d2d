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
mod play;
pub mod round;
mod rx;
mod setup;
mod summary;
mod tx;

use std::time::{Duration, Instant};

use net::Labs;
use play::run_round;
use round::{End, Fault, Mechanism};
use setup::{Setup, Wanted, plan, setup};
use summary::{Failure, Summary};

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
    let wanted = Wanted {
        mechanisms: &opt.mechanisms,
        faults: &opt.faults,
    };
    let setup = setup(&wanted, &labs);
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
