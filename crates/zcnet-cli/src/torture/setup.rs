//! What a run drives: the mechanisms and faults that can run here (and why not the others),
//! and each round's plan, drawn from the seed and the round's number.

use std::time::{Duration, Instant};

use netlab::Family;

use super::check::Rng;
use super::net::{Labs, Link};
use super::round::{End, Fault, Faults, Mechanism, Plan};
use super::summary::Skip;
use super::{check, ffi};

/// What `--mechanism` and `--fault` asked for (empty: all).
pub(super) struct Wanted<'a> {
    /// The mechanisms asked for.
    pub(super) mechanisms: &'a [Mechanism],
    /// The faults asked for.
    pub(super) faults: &'a [Fault],
}

/// What can run here, and why not where it cannot.
pub(super) struct Setup {
    /// The mechanisms that can run here.
    pub(super) mechanisms: Vec<Mechanism>,
    /// The faults that can be injected here.
    pub(super) faults: Vec<Fault>,
    /// The C program that drives the FFI mechanism, where it is built.
    pub(super) ffi_helper: Option<std::path::PathBuf>,
    /// What cannot run here, and why.
    pub(super) skipped: Vec<Skip>,
}

pub(super) fn setup(asked: &Wanted<'_>, labs: &Labs) -> Setup {
    let mut skipped = Vec::new();
    let mut skip = |what: String, reason: String| {
        eprintln!("torture: skipping {what}: {reason}");
        skipped.push(Skip { what, reason });
    };
    let mut wanted: Vec<Mechanism> = if asked.mechanisms.is_empty() {
        Mechanism::ALL.to_vec()
    } else {
        asked.mechanisms.to_vec()
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
    let mut wanted: Vec<Fault> = if asked.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        asked.faults.to_vec()
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
pub(super) fn plan(
    seed: u64,
    round: u64,
    setup: &Setup,
    links: &[Link],
    end: Instant,
    corrupt: bool,
) -> Plan {
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
