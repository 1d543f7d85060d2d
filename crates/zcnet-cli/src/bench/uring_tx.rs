//! `zcnet bench uring-tx`: io_uring `SEND` against `SEND_ZC` and `SEND_ZC` with registered
//! buffers, the table of Pavel Begunkov's io_uring zero-copy send patches.
//!
//! UDP goes into the `sink` lab, where the `ifb` device drops what it transmits, standing in for
//! the `dummy` device of the patches: the only lab here where zero-copy is real. TCP runs over
//! `loopback` and `veth`, where local delivery copies every zero-copy send and the notifications
//! say so. A sender thread pinned to CPU 0 keeps a window of requests in flight and submits them
//! in batches; its buffers cycle through a pool (256 MiB by default: cold, as for a server
//! sending distinct data; the report gives the heat measured), the same pool for all three
//! modes, registered with the ring for `zc-fixed`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, pattern};
use serde_json::json;
use zcnet::ZeroCopyCounters as _;
use zcnet::uring::{Config, Mode, Pool, PoolBuf, UringSender};

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use super::sweep::{self, Lab, Proto};
use crate::measure::{Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work};

/// The IO sizes of the patches' table.
pub const SIZES: [usize; 9] = [600, 1000, 1200, 1500, 4000, 8000, 16000, 32000, 64000];

/// Ring settings of every run: 256 entries, at most 128 requests in flight, 16 per submission.
pub const CONFIG: Config = Config {
    mode: Mode::Copy,
    entries: 256,
    window: 128,
    batch: 16,
    stall_timeout: Duration::from_secs(10),
    // Each run's sender stays on its thread: set up as liburing's send-zerocopy.c does.
    setup: zcnet::uring::RingSetup::ONE_THREAD,
};

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

/// Options of `zcnet bench uring-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// IO size per request (repeatable). Default: 600 1000 1200 1500 4000 8000 16000 32000 64000.
    #[arg(long = "size", value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65507))]
    pub sizes: Vec<usize>,
    /// Modes to alternate (repeatable); the first is the baseline. Default: copy zc zc-fixed auto.
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<ModeArg>,
    /// Address family. Default: IPv4.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: super::common::FamilyArg,
    /// Size of the buffer pool in MiB (registered whole for zc-fixed). 256 (default) is meant to
    /// be cold in cache, 2 to stay hot; the report says which it was, measured
    /// (`settings.pool`).
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16384))]
    pub pool_mib: usize,
}

/// The pool for `size`-byte requests: `pool_mib` MiB of pattern bytes in `size`-byte buffers.
pub(crate) fn make_pool(size: usize, pool_mib: usize) -> anyhow::Result<Pool> {
    let count = ((pool_mib.max(1) << 20) / size).max(2 * CONFIG.window);
    let pool = Pool::new(count, size).context("allocating the buffer pool")?;
    // Fill every buffer once (FIFO: acquiring them all and dropping them keeps the order).
    let all: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    for mut b in all {
        let off = (b.index() * size) as u64;
        let mut at = 0;
        while at < size {
            let chunk = pattern::chunk_at(off + at as u64, (size - at).min(pattern::MAX_CHUNK));
            b[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        }
    }
    Ok(pool)
}

/// The heat of `pool` (a `pool_mib` MiB pool), measured on its buffers in the order they are
/// handed out.
fn pool_heat(pool: &Pool, pool_mib: usize) -> super::heat::PoolHeat {
    // Every buffer, then all back in the same order (FIFO: the order is kept).
    let all: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    let bufs: Vec<&[u8]> = all.iter().map(|b| &b[..]).collect();
    super::heat::PoolHeat::measure(pool_mib, &bufs)
}

/// The ring set-up this kernel grants to [`CONFIG`] (flags and registrations), from a sender
/// that submits nothing; `null` where io_uring cannot be set up.
fn granted_setup() -> serde_json::Value {
    let Ok(sock) = std::net::UdpSocket::bind("127.0.0.1:0") else {
        return serde_json::Value::Null;
    };
    let config = Config {
        mode: Mode::Copy,
        ..CONFIG
    };
    match UringSender::<_, Vec<u8>>::new(sock, config) {
        Ok(mut tx) => {
            // The first (empty) submission enables the ring and registers its fd.
            let _ = tx.flush();
            json!(tx.setup())
        }
        Err(_) => serde_json::Value::Null,
    }
}

/// Sends `size`-byte requests for `seconds` in `mode`, measuring the sending thread.
fn send_for<S: zcnet::uring::ExclusiveSocket>(
    socket: S,
    mode: Mode,
    seconds: f64,
    pool: &Pool,
) -> anyhow::Result<Run> {
    let config = Config { mode, ..CONFIG };
    let mut tx = UringSender::with_pool(socket, config, pool)?;
    if let Some(why) = tx.fallback_reason() {
        bail!("{} asked for, but {why}", mode.name());
    }
    let size = pool.buf_size();
    // Every buffer of the pool, in its order; each goes out again as it comes back, in the order
    // it came back (as an application resends the buffers it gets back), so the sends cycle
    // through the whole pool without a trip through the pool's free list per request.
    let mut spare: VecDeque<PoolBuf> = std::iter::from_fn(|| pool.acquire()).collect();
    let meter = Meter::start();
    let start = Instant::now();
    let mut requests = 0u64;
    let mut failed = None;
    // The clock is read once a batch, as the kernel's io_uring_zerocopy_tx.c reads it once per
    // batch it submits: a read per request was a fifth of the sender's user time.
    let check_every = CONFIG.batch.max(1) as u64;
    while requests % check_every != 0 || start.elapsed().as_secs_f64() < seconds {
        let buf = loop {
            if let Some(b) = spare.pop_front() {
                break b;
            }
            tx.reap().context("io_uring_enter")?;
            for r in tx.returned() {
                failed = failed.or(r.error);
                spare.push_back(r.buf);
            }
        };
        tx.send(buf)
            .map_err(|e| e.error)
            .context("queueing a send")?;
        requests += 1;
    }
    tx.drain(Duration::from_secs(5))
        .context("waiting for notifications")?;
    for r in tx.returned() {
        failed = failed.or(r.error);
    }
    let c = tx.counters();
    let run = meter.finish(Work {
        bytes: requests * size as u64,
        requests: Some(requests),
        zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
        verified: None,
    });
    if let Some(e) = failed {
        bail!(
            "{} of {requests} sends failed, the first with: {e}",
            c.errors
        );
    }
    Ok(run)
}

pub(crate) fn one_run(
    lab: &Lab,
    proto: Proto,
    family: Family,
    mode: Mode,
    seconds: f64,
    pool: &Pool,
) -> anyhow::Result<Run> {
    // Buffers come back in completion order and go out again in that order: the receiver
    // checks that every buffer's worth of the stream is one whole buffer of the pool.
    let check = crate::remote::proto::Check::Buffers {
        size: pool.buf_size() as u64,
        count: pool.count() as u64,
    };
    let pool = pool.clone();
    let far = (seconds, check);
    sweep::run_in_lab(lab, proto, family, far, move |conn| match conn {
        sweep::Conn::Udp(s) => send_for(s, mode, seconds, &pool),
        sweep::Conn::Tcp(s) => send_for(s, mode, seconds, &pool),
    })
}

/// The protocol each lab runs: UDP into the sink, TCP elsewhere.
pub(crate) fn proto_of(lab: &str) -> Proto {
    if lab == "sink" {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}

/// Runs the bench.
#[allow(clippy::too_many_arguments)]
pub fn bench(
    labs: &[&str],
    family: Family,
    sizes: &[usize],
    modes: &[Mode],
    runs: usize,
    seconds: f64,
    pool_mib: usize,
    quiet: bool,
    remote: Option<crate::remote::Remote>,
) -> anyhow::Result<Outcome> {
    // Hot or cold, measured on the pool of the largest size (its buffers the nearest to the
    // measurement's 64 KiB copies), which the first lab then sends from; every other pool has
    // the same size and layout.
    let mut measured = match sizes.iter().max() {
        Some(&largest) => Some((largest, make_pool(largest, pool_mib)?)),
        None => None,
    };
    let heat = match &measured {
        Some((_, pool)) => pool_heat(pool, pool_mib),
        None => super::heat::PoolHeat::measure(pool_mib, &[]),
    };
    let mut report = Report::new("uring-tx");
    report.settings = json!({
        "runs": runs, "seconds": seconds, "modes": modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "sender_cpu": 0, "receiver_cpu": 1, "pool_mib": pool_mib,
        "ring_entries": CONFIG.entries, "window": CONFIG.window, "batch": CONFIG.batch,
        "report_usage": true,
        "ring_setup_asked": CONFIG.setup,
        "ring_setup": granted_setup(),
        "pool": heat,
        "auto_profile": zcnet::auto::active().origin(),
    });
    let mut summary = Vec::new();
    let mut seed_tables = Vec::new();
    let steps = labs.len() * sizes.len() * runs * modes.len();
    let progress = Progress::new(
        "uring-tx",
        steps as u64,
        Duration::from_secs_f64(seconds * steps as f64),
    );
    let _pinned = Pinned::to(1);
    let (family, labs) = super::labs::remote_labs(&mut report, remote.as_ref(), family, labs);
    let mut remote = remote.map(std::sync::Mutex::new);
    for &lab_name in &labs {
        let proto = proto_of(lab_name);
        let lab = match remote.take() {
            Some(r) => Lab::Remote(r),
            None => Lab::build(lab_name, proto)?,
        };
        let mut table = Vec::new();
        for &size in sizes {
            let pool = match measured.take_if(|(s, _)| *s == size) {
                Some((_, pool)) => pool,
                None => make_pool(size, pool_mib)?,
            };
            // Registered buffers count against RLIMIT_MEMLOCK (8 MiB for an ordinary user):
            // where the pool does not fit, zc-fixed is left out with the limit and the way to
            // raise it, and the other modes run.
            let fits = zcnet::uring::memlock_check(pool.region_len() as u64);
            let modes: Vec<Mode> = match &fits {
                Err(e) if modes.contains(&Mode::ZeroCopyFixed) => {
                    eprintln!(
                        "uring-tx {lab_name} {size} B: zc-fixed skipped: {}",
                        crate::error_line::chain(e)
                    );
                    modes
                        .iter()
                        .copied()
                        .filter(|&m| m != Mode::ZeroCopyFixed)
                        .collect()
                }
                _ => modes.to_vec(),
            };
            let modes = &modes[..];
            pins_beyond_the_limit(lab_name, size, modes);
            let step = sweep::SizeStep {
                lab: lab_name,
                family,
                proto,
                size,
                runs,
                quiet,
            };
            let sets = step.measure(modes, Mode::name, &progress, &mut report, |mode| {
                one_run(&lab, proto, family, mode, seconds, &pool)
            })?;
            summary.extend(summary_rows(lab_name, size, heat, &sets));
            table.push((size, sets.clone()));
            report.results.extend(sets);
        }
        seed_tables.push(seed_table(lab_name, proto, &table));
    }
    if !quiet {
        for t in &seed_tables {
            println!("\n{t}");
        }
    }
    Ok(Outcome { report, summary })
}

/// Says, once per lab and size, that `SEND_ZC` will not pin everything it is asked to: each
/// request pins its buffer's pages until its notification, counted against `RLIMIT_MEMLOCK`
/// like a registration, and a request the kernel cannot pin is sent again by copy. The runs go
/// on; their share really zero-copied shows how much went by copy.
fn pins_beyond_the_limit(lab: &str, size: usize, modes: &[Mode]) {
    if !modes
        .iter()
        .any(|m| matches!(m, Mode::ZeroCopy | Mode::Auto))
    {
        return;
    }
    let in_flight = (CONFIG.window * size) as u64;
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

/// The patches' table: IO size | non-zc | zc (+x %) | zc-fixed (+x %), requests/s medians, the
/// change against copy from the pairwise ratios, and the share really zero-copied.
fn seed_table(lab: &str, proto: Proto, rows: &[(usize, Vec<ResultSet>)]) -> String {
    use std::fmt::Write as _;
    let proto = if proto == Proto::Udp { "UDP" } else { "TCP" };
    let mut out = format!(
        "uring-tx {lab} {proto}: requests/s (medians; change vs copy's median; zero-copied share)\n"
    );
    let Some((_, first)) = rows.first() else {
        return out;
    };
    let _ = write!(out, "{:>8} |", "IO size");
    for s in first {
        let _ = write!(out, " {:>28} |", s.mode);
    }
    out.push('\n');
    for (size, sets) in rows {
        let _ = write!(out, "{size:>8} |");
        let copy = &sets[0];
        let copy_rps = copy.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
        for s in sets {
            let rps = s.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
            let share = s.median_of(Metric::ZeroCopyShare).unwrap_or(0.0);
            let cell = if std::ptr::eq(s, copy) {
                format!("{rps:.0}")
            } else {
                format!(
                    "{rps:.0} ({}, zc {:.0} %)",
                    change(copy_rps, rps),
                    100.0 * share
                )
            };
            let _ = write!(out, " {cell:>28} |");
        }
        out.push('\n');
    }
    out
}

/// The change of `median` against `base` in whole percent, from the two medians themselves, so
/// that its sign always agrees with them (issue 17: "424483 (-10 %)" was shown beside a median
/// above copy's, the change being the median of pairwise ratios).
pub fn change(base: f64, median: f64) -> String {
    let pct = 100.0 * (median / base - 1.0);
    if !pct.is_finite() {
        return "n/a".into();
    }
    // Rounded; a change that rounds to 0 keeps its sign ("+0 %", "-0 %").
    let shown = pct.round();
    if shown != 0.0 {
        format!("{shown:+.0} %")
    } else if pct > 0.0 {
        "+0 %".into()
    } else if pct < 0.0 {
        "-0 %".into()
    } else {
        "0 %".into()
    }
}

#[cfg(test)]
#[test]
fn changes_agree_in_sign_with_the_medians() {
    assert_eq!(change(100.0, 90.0), "-10 %");
    assert_eq!(change(100.0, 110.0), "+10 %");
    assert_eq!(change(100.0, 100.4), "+0 %");
    assert_eq!(change(100.0, 99.6), "-0 %");
    assert_eq!(change(100.0, 100.0), "0 %");
    assert_eq!(change(0.0, 5.0), "n/a");
    // The case of the issue: a median above copy's shows a positive change.
    assert!(change(400_000.0, 424_483.0).starts_with('+'));
}

fn summary_rows(
    lab: &str,
    size: usize,
    heat: super::heat::PoolHeat,
    sets: &[ResultSet],
) -> Vec<SummaryRow> {
    let hot = heat.suffix();
    let med = |s: &ResultSet, k: Metric| s.median_of(k);
    let Some(copy) = sets.iter().find(|s| s.mode == "copy") else {
        return Vec::new();
    };
    sets.iter()
        .filter(|s| s.mode != "copy")
        .filter_map(|s| {
            let ratio = Comparison::new(s, copy, Metric::RequestsPerS)?.ratio_median;
            let share = med(s, Metric::ZeroCopyShare);
            // The bounds of the seed issue hold for a cold pool; a hot one is information.
            let bound = match (lab, size, s.mode.as_str()) {
                ("sink", 64000, "zc-fixed") if !heat.is_hot() => Some(3.0),
                ("sink", 8000, "zc-fixed") if !heat.is_hot() => Some(1.3),
                _ => None,
            };
            let verdict = match bound {
                _ if s.mode == "auto" => super::outcome::auto_verdict(s, sets),
                Some(b) if ratio >= b => format!("ok (>= {b})"),
                Some(b) => format!("MISS (needs >= {b})"),
                None if lab != "sink" => "info (kernel copies)".into(),
                None if ratio >= 1.0 => "info (zc wins)".into(),
                None => "info (copy wins)".into(),
            };
            Some(SummaryRow {
                experiment: format!("uring-tx {lab} {size} B{hot} {}", s.mode),
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

/// `zcnet bench uring-tx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    opt.common
        .needs_labs("uring-tx builds its labs in private network namespaces")?;
    let labs: Vec<&str> = if opt.common.labs.is_empty() {
        vec!["sink", "loopback", "veth"]
    } else {
        opt.common.labs.iter().map(String::as_str).collect()
    };
    let sizes = if opt.sizes.is_empty() {
        SIZES.to_vec()
    } else {
        opt.sizes.clone()
    };
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s > 65507) {
        bail!("--size {s}: give 1 to 65507 bytes (the largest UDP datagram over IPv4)");
    }
    let modes: Vec<Mode> = if opt.modes.is_empty() {
        vec![Mode::Copy, Mode::ZeroCopy, Mode::ZeroCopyFixed, Mode::Auto]
    } else {
        opt.modes.iter().map(|&m| m.into()).collect()
    };
    if modes[0] != Mode::Copy {
        bail!("the first --mode is the baseline of the comparisons and must be copy");
    }
    let runs = opt.common.runs.unwrap_or(5);
    let seconds = opt.common.seconds.unwrap_or(1.0);
    let out = bench(
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
