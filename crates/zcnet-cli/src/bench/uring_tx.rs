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
//! never read. The report says what each pool measured ([`super::heat`]), not what it was meant
//! to be. `--reference` runs the kernel's program beside zcnet ([`super::reference`]).

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
use super::verdict::{Goal, Verdict};
use crate::measure::{
    Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work, ratio_pairs,
};

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
    segment: None,
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

/// Buffers of a `hot` pool: two batches, one in the kernel while the other comes back.
pub const HOT_BUFFERS: usize = 2 * CONFIG.batch;

/// MiB of a `cold` pool.
pub const COLD_MIB: usize = 256;

/// MiB of the largest pool: `IORING_REGISTER_BUFFERS` takes at most 1 GiB per buffer (the
/// kernel answers `EFAULT` beyond), and the pool is registered as one.
pub const MAX_MIB: usize = 1024;

/// The pool a run sends from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSpec {
    /// [`HOT_BUFFERS`] buffers.
    Hot,
    /// This many MiB of buffers (at least [`HOT_BUFFERS`] of them); `cold` is [`COLD_MIB`].
    Mib(usize),
}

impl PoolSpec {
    /// `hot`, `cold` or a whole number of MiB from 1 to [`MAX_MIB`].
    pub fn parse(s: &str) -> Result<PoolSpec, String> {
        match s {
            "hot" => Ok(PoolSpec::Hot),
            "cold" => Ok(PoolSpec::Mib(COLD_MIB)),
            _ => match s.parse::<usize>() {
                Ok(m) if (1..=MAX_MIB).contains(&m) => Ok(PoolSpec::Mib(m)),
                _ => Err(format!(
                    "{s:?}: give hot, cold (256 MiB) or a size in MiB from 1 to {MAX_MIB} (io_uring \
                     registers at most 1 GiB as one buffer)"
                )),
            },
        }
    }

    /// How the report names it: `hot`, `cold` (256 MiB) or `N MiB`.
    pub fn name(self) -> String {
        match self {
            PoolSpec::Hot => "hot".into(),
            PoolSpec::Mib(COLD_MIB) => "cold".into(),
            PoolSpec::Mib(m) => format!("{m} MiB"),
        }
    }

    /// Buffers of `size` bytes in this pool.
    pub fn buffers(self, size: usize) -> usize {
        let n = match self {
            PoolSpec::Hot => HOT_BUFFERS,
            PoolSpec::Mib(m) => (m << 20) / size.max(1),
        };
        n.max(HOT_BUFFERS)
    }
}

/// A pool and the window its buffers allow.
#[derive(Clone, Debug)]
pub(crate) struct SendPool {
    /// The buffers.
    pub pool: Pool,
    /// Requests in flight at most: the ring's window, and one less than the pool holds, so that
    /// a buffer is always back in hand when the window has room (the sender then waits for
    /// completions in the ring, never by polling for a free buffer).
    pub window: usize,
    /// In the `hot` condition: one buffer (the pool's first) that copy and zc send over and
    /// over, several requests of it in flight at once, as `io_uring_zerocopy_tx.c` sends its one
    /// buffer. zc-fixed (and auto, which registers the pool) send from the pool: their payload is
    /// never read by the CPU, so its heat does not enter their cost.
    pub shared: Option<&'static [u8]>,
}

impl SendPool {
    /// What `mode` sends from: the shared buffer or the pool.
    fn shares(&self, mode: Mode) -> Option<&'static [u8]> {
        self.shared
            .filter(|_| matches!(mode, Mode::Copy | Mode::ZeroCopy))
    }
}

/// The pool for `size`-byte requests: `spec`'s buffers, filled with the pattern.
pub(crate) fn make_pool(size: usize, spec: PoolSpec) -> anyhow::Result<SendPool> {
    let count = spec.buffers(size);
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
    let shared = (spec == PoolSpec::Hot).then(|| {
        let first = pool.acquire().expect("a new pool has its buffers");
        let one = page_aligned(&first);
        drop(first);
        // Back in the pool's order: the first buffer goes last now, as after any send.
        one
    });
    Ok(SendPool {
        pool,
        window: CONFIG.window.min(count - 1),
        shared,
    })
}

/// The heat of `pool`, measured on its buffers in the order they are handed out.
fn pool_heat(pool: &Pool) -> super::heat::PoolHeat {
    // Every buffer, then all back in the same order (FIFO: the order is kept).
    let all: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    let bufs: Vec<&[u8]> = all.iter().map(|b| &b[..]).collect();
    super::heat::PoolHeat::measure(pool.region_len().div_ceil(1 << 20), &bufs)
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
    sp: &SendPool,
) -> anyhow::Result<Run> {
    let (pool, window) = (&sp.pool, sp.window);
    let config = Config {
        mode,
        window,
        ..CONFIG
    };
    if let Some(one) = sp.shares(mode) {
        return send_shared(socket, config, seconds, one);
    }
    let mut tx = UringSender::with_pool(socket, config, pool).map_err(|e| e.error)?;
    if let Some(why) = tx.fallback_reason() {
        bail!("{} asked for, but {why}", mode.name());
    }
    let size = pool.buf_size();
    // Every buffer of the pool, in its order; each goes out again as it comes back, in the order
    // it came back (as an application resends the buffers it gets back), so the sends cycle
    // through the whole pool without a trip through the pool's free list per request.
    let spare: VecDeque<PoolBuf> = std::iter::from_fn(|| pool.acquire()).collect();
    let meter = Meter::start();
    let (requests, failed) = cycle_pool(&mut tx, spare, seconds)?;
    let c = tx.counters();
    let run = meter
        .finish(Work {
            bytes: requests * size as u64,
            requests: Some(requests),
            zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
            verified: None,
        })
        .with_auto(tx.auto_choice(), c.auto, size);
    if let Some(e) = failed {
        bail!(
            "{} of {requests} sends failed, the first with: {e}",
            c.errors
        );
    }
    Ok(run)
}

/// Sends the buffers of `spare` for `seconds`, each again as it comes back, in the order it
/// came back (as an application resends the buffers it gets back), so the sends cycle through
/// the whole pool without a trip through its free list per request; then waits for every
/// notification. Returns the requests sent and the first error a returned buffer carried.
///
/// The clock is read once a batch, as the kernel's io_uring_zerocopy_tx.c reads it once per
/// batch it submits: a read per request was a fifth of the sender's user time.
pub(crate) fn cycle_pool<S: zcnet::uring::ExclusiveSocket>(
    tx: &mut UringSender<S, PoolBuf>,
    mut spare: VecDeque<PoolBuf>,
    seconds: f64,
) -> anyhow::Result<(u64, Option<std::io::Error>)> {
    let start = Instant::now();
    let mut requests = 0u64;
    let mut failed = None;
    let check_every = CONFIG.batch.max(1) as u64;
    while requests % check_every != 0 || start.elapsed().as_secs_f64() < seconds {
        let buf = loop {
            if let Some(b) = spare.pop_front() {
                break b;
            }
            for r in tx.returned() {
                failed = failed.or(r.error);
                spare.push_back(r.buf);
            }
            // The window is smaller than the pool: with none in hand, some came back already
            // (the sender collected them while it waited for room). Reaping is for safety only.
            if spare.is_empty() {
                tx.reap().context("io_uring_enter")?;
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
    Ok((requests, failed))
}

/// A page-aligned copy of `bytes` that lives as long as the process, made once per content: the
/// buffer the hot condition's copy and zc send. Aligned as `io_uring_zerocopy_tx.c` aligns its
/// one buffer: a zero-copy send pins and maps every page the buffer touches, and 8000 bytes at
/// an allocator's offset touch three pages where aligned they touch two.
fn page_aligned(bytes: &[u8]) -> &'static [u8] {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static MADE: Mutex<Option<HashMap<Vec<u8>, &'static [u8]>>> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(&one) = made.get(bytes) {
        return one;
    }
    const PAGE: usize = 4096;
    let room: &'static mut [u8] = Box::leak(vec![0u8; bytes.len() + PAGE].into_boxed_slice());
    let skip = (PAGE - room.as_ptr() as usize % PAGE) % PAGE;
    let one = &mut room[skip..skip + bytes.len()];
    one.copy_from_slice(bytes);
    let one: &'static [u8] = one;
    made.insert(bytes.to_vec(), one);
    one
}

/// [`send_for`] of one shared buffer: each request sends it again (`&'static [u8]` is an
/// [`zcnet::uring::OwnedBuf`]: several requests may read one buffer nobody writes).
fn send_shared<S: zcnet::uring::ExclusiveSocket>(
    socket: S,
    config: Config,
    seconds: f64,
    one: &'static [u8],
) -> anyhow::Result<Run> {
    let mut tx = UringSender::new(socket, config).map_err(|e| e.error)?;
    if let Some(why) = tx.fallback_reason() {
        bail!("{} asked for, but {why}", config.mode.name());
    }
    let meter = Meter::start();
    let start = Instant::now();
    let mut requests = 0u64;
    let mut failed = None;
    let check_every = CONFIG.batch.max(1) as u64;
    while requests % check_every != 0 || start.elapsed().as_secs_f64() < seconds {
        tx.send(one)
            .map_err(|e| e.error)
            .context("queueing a send")?;
        requests += 1;
        // The clones come back as their requests complete: dropped once a batch.
        if requests % check_every == 0 {
            for r in tx.returned() {
                failed = failed.or(r.error);
            }
        }
    }
    tx.drain(Duration::from_secs(5))
        .context("waiting for notifications")?;
    for r in tx.returned() {
        failed = failed.or(r.error);
    }
    let c = tx.counters();
    let run = meter
        .finish(Work {
            bytes: requests * one.len() as u64,
            requests: Some(requests),
            zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
            verified: None,
        })
        .with_auto(tx.auto_choice(), c.auto, one.len());
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
    pool: &SendPool,
) -> anyhow::Result<Run> {
    // Buffers come back in completion order and go out again in that order: the receiver
    // checks that every buffer's worth of the stream is one whole buffer of the pool.
    let check = crate::remote::proto::Check::Buffers {
        size: pool.pool.buf_size() as u64,
        // The shared buffer is the pool's first: one buffer, over and over.
        count: match pool.shares(mode) {
            Some(_) => 1,
            None => pool.pool.count() as u64,
        },
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

/// One arm of a size step's alternation: a zcnet mode, or the reference program in that mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    Zcnet(Mode),
    Reference(Mode),
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Zcnet(m) => m.name(),
            Arm::Reference(Mode::Copy) => "ref-copy",
            Arm::Reference(Mode::ZeroCopy) => "ref-zc",
            Arm::Reference(Mode::ZeroCopyFixed) => "ref-zc-fixed",
            Arm::Reference(_) => "ref-other",
        }
    }
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

/// What the bench runs: labs, sizes, modes and the pool, with the reference beside it.
pub struct Plan<'a> {
    /// Lab names.
    pub labs: &'a [&'a str],
    /// Address family.
    pub family: Family,
    /// IO sizes.
    pub sizes: &'a [usize],
    /// Modes; the first is copy, the baseline.
    pub modes: &'a [Mode],
    /// Alternations per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// The pool condition.
    pub pool: PoolSpec,
    /// No per-run lines and tables.
    pub quiet: bool,
    /// The kernel's program to run beside zcnet in the sink lab.
    pub reference: Option<&'a super::reference::Reference>,
}

/// Runs the bench.
pub fn bench(plan: &Plan<'_>, remote: Option<crate::remote::Remote>) -> anyhow::Result<Outcome> {
    let &Plan {
        labs,
        family,
        sizes,
        modes,
        runs,
        seconds,
        pool: spec,
        quiet,
        reference,
    } = plan;
    // Hot or cold, measured on the pool of the largest size (its buffers the nearest to the
    // measurement's 64 KiB copies), which the first lab then sends from; every other pool is
    // made by the same rule.
    let mut measured = match sizes.iter().max() {
        Some(&largest) => Some((largest, make_pool(largest, spec)?)),
        None => None,
    };
    let heat = match &measured {
        Some((_, sp)) => pool_heat(&sp.pool),
        None => super::heat::PoolHeat::measure(0, &[]),
    };
    // What copy and zc send in the hot condition: its heat, measured the same way.
    let shared_heat = measured
        .as_ref()
        .and_then(|(_, sp)| sp.shared)
        .map(|one| super::heat::PoolHeat::measure(0, &[one]));
    let mut report = Report::new("uring-tx");
    report.settings = json!({
        "runs": runs, "seconds": seconds, "modes": modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "sender_cpu": 0, "receiver_cpu": 1,
        "pool_condition": spec.name(),
        "pool_mib": match spec { PoolSpec::Mib(m) => Some(m), PoolSpec::Hot => None },
        "pool_buffers": sizes.iter().map(|&s| (s.to_string(), json!(spec.buffers(s)))).collect::<serde_json::Map<_, _>>(),
        "ring_entries": CONFIG.entries,
        "window": sizes.iter().map(|&s| (s.to_string(), json!(CONFIG.window.min(spec.buffers(s) - 1)))).collect::<serde_json::Map<_, _>>(),
        "batch": CONFIG.batch,
        "report_usage": true,
        "ring_setup_asked": CONFIG.setup,
        "ring_setup": granted_setup(),
        "pool": heat,
        "shared_buffer": shared_heat,
        "sends_from": if spec == PoolSpec::Hot {
            json!({"copy": "one buffer", "zc": "one buffer", "zc-fixed": "pool", "auto": "pool"})
        } else {
            json!({"copy": "pool", "zc": "pool", "zc-fixed": "pool", "auto": "pool"})
        },
        "auto_profile": zcnet::auto::active().origin(),
        "order": "mirrored rounds: A B C, then C B A, ...",
        "reference": reference.map(|r| json!({
            "program": "io_uring_zerocopy_tx",
            "path": r.path(),
            "args": format!("-4|-6 -D <sink> -p 9 -s <size> -t {} -n {} -m 0|1|2 udp",
                super::reference::Reference::whole_seconds(seconds), CONFIG.batch),
            "seconds_per_run": 0.2 + super::reference::Reference::whole_seconds(seconds) as f64,
            "sends_from": "one buffer, page-aligned, in every mode",
            "labs": ["sink"],
        })),
    });
    let mut summary = Vec::new();
    let mut tables = Vec::new();
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
    let steps: usize = labs
        .iter()
        .map(|l| sizes.len() * runs * (modes.len() + twins(l)))
        .sum();
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
            // Registered buffers count against RLIMIT_MEMLOCK (8 MiB for an ordinary user):
            // where the pool does not fit, zc-fixed is left out with the limit and the way to
            // raise it, and the other modes run.
            let fits = zcnet::uring::memlock_check(sp.pool.region_len() as u64);
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
            pins_beyond_the_limit(lab_name, size, sp.window, &modes);
            // Each zcnet mode beside the reference in the same mode: A A' B B', then mirrored
            // (B' B A' A) in the next round, so neither always runs right after the other.
            let arms: Vec<Arm> = modes
                .iter()
                .flat_map(|&m| {
                    let twin = beside.and(selftest_mode(m)).map(|_| Arm::Reference(m));
                    std::iter::once(Arm::Zcnet(m)).chain(twin)
                })
                .collect();
            let step = sweep::SizeStep {
                lab: lab_name,
                family,
                proto,
                size,
                runs,
                quiet,
                mirrored: true,
            };
            let sets = step.measure_sets(&arms, Arm::name, &progress, |arm| match arm {
                Arm::Zcnet(mode) => one_run(&lab, proto, family, mode, seconds, &sp),
                Arm::Reference(mode) => {
                    let r = beside
                        .expect("arms of the reference only beside it")
                        .clone();
                    let m = selftest_mode(mode).expect("a reference arm has a -m");
                    sweep::in_sink(&lab, family, move |dest| {
                        r.run_uring_tx(dest, family, size, m, CONFIG.batch, seconds)
                    })
                }
            })?;
            let (ours, refs): (Vec<_>, Vec<_>) = arms
                .iter()
                .zip(sets)
                .partition(|(arm, _)| matches!(arm, Arm::Zcnet(_)));
            let ours: Vec<ResultSet> = ours.into_iter().map(|(_, s)| s).collect();
            let refs: Vec<ResultSet> = refs.into_iter().map(|(_, s)| s).collect();
            for other in &ours[1..] {
                sweep::compare(&mut report, other, &ours[0]);
            }
            if let Some((base, rest)) = refs.split_first() {
                for other in rest {
                    sweep::compare(&mut report, other, base);
                }
            }
            // zcnet over the kernel's program, mode by mode: the figures of issue 34.
            for r in &refs {
                let twin = ours
                    .iter()
                    .find(|o| format!("ref-{}", o.mode) == r.mode)
                    .expect("every reference arm has its zcnet twin");
                sweep::compare(&mut report, twin, r);
            }
            summary.extend(summary_rows(lab_name, size, heat, &ours));
            table.push((size, ours.clone()));
            against.push((size, ours.clone(), refs.clone()));
            report.results.extend(ours);
            report.results.extend(refs);
        }
        tables.push(seed_table(lab_name, proto, &table, &against));
        if beside.is_some() {
            let mut t = reference_table(lab_name, &against);
            if spec != PoolSpec::Hot {
                t.push_str(&format!(
                    "note: zcnet sent from the {} pool, the program from one hot buffer: unlike \
                     sources (--pool hot compares the send paths alone)\n",
                    spec.name()
                ));
            }
            tables.push(t);
        }
    }
    if !quiet {
        for t in &tables {
            println!("\n{t}");
        }
    }
    Ok(Outcome::new(report, summary))
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

/// Requests/s of the io_uring zero-copy send patches' cover letter (UDP to a `dummy` device):
/// (IO size, `SEND`, `SEND_ZC`).
pub const PATCHES: [(usize, f64, f64); 4] = [
    (600, 2.11e6, 2.38e6),
    (1200, 2.07e6, 2.36e6),
    (4000, 1.87e6, 2.34e6),
    (8000, 1.30e6, 2.40e6),
];

/// The patches' table: IO size | non-zc | zc (+x %) | zc-fixed (+x %), requests/s medians, the
/// change against copy from the pairwise ratios, and the share really zero-copied; and beside
/// it the figure to check it against: the same changes of the kernel's program run beside zcnet
/// (`--reference`), else the patches' own where they measured the size.
fn seed_table(
    lab: &str,
    proto: Proto,
    rows: &[(usize, Vec<ResultSet>)],
    against: &[(usize, Vec<ResultSet>, Vec<ResultSet>)],
) -> String {
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
    let _ = writeln!(out, " check against");
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
        let refs = against
            .iter()
            .find(|(s, _, _)| s == size)
            .map(|(_, _, r)| &r[..])
            .unwrap_or(&[]);
        let _ = writeln!(out, " {}", check_against(*size, refs));
    }
    out
}

/// What a reader checks a row's changes against: the kernel's program's changes vs its copy,
/// measured beside zcnet, or the patches' zc change at this size, or nothing.
fn check_against(size: usize, refs: &[ResultSet]) -> String {
    if let Some((base, rest)) = refs.split_first() {
        let base_rps = base.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
        let cells: Vec<String> = rest
            .iter()
            .map(|r| {
                let rps = r.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
                format!(
                    "{} {}",
                    r.mode.trim_start_matches("ref-"),
                    change(base_rps, rps)
                )
            })
            .collect();
        return format!("io_uring_zerocopy_tx here: {}", cells.join(", "));
    }
    match PATCHES.iter().find(|(s, _, _)| *s == size) {
        Some((_, copy, zc)) => format!("the patches (dummy device): zc {}", change(*copy, *zc)),
        None => "-".into(),
    }
}

/// zcnet beside the kernel's program, mode by mode: CPU µs per MB (medians) and zcnet's over the
/// program's, pair by pair (median, min-max); then each one's zero copy over its copy in
/// requests/s.
fn reference_table(lab: &str, rows: &[(usize, Vec<ResultSet>, Vec<ResultSet>)]) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "uring-tx {lab}: zcnet beside the kernel's io_uring_zerocopy_tx (sender CPU us/MB, \
         medians; zcnet / selftest: median of pairs, min-max)\n"
    );
    let _ = writeln!(
        out,
        "{:>8} | {:<9} | {:>9} | {:>9} | {:>20} | {:>16} | {:>16}",
        "IO size",
        "mode",
        "selftest",
        "zcnet",
        "zcnet / selftest",
        "selftest / copy",
        "zcnet / copy"
    );
    for (size, ours, refs) in rows {
        let (Some(ref_copy), Some(our_copy)) = (refs.first(), ours.first()) else {
            continue;
        };
        for r in refs {
            let Some(o) = ours.iter().find(|o| format!("ref-{}", o.mode) == r.mode) else {
                continue;
            };
            let cpu = |s: &ResultSet| s.median_of(Metric::CpuUsPerMb).unwrap_or(f64::NAN);
            let ratio = Comparison::new(o, r, Metric::CpuUsPerMb)
                .map(|c| {
                    format!(
                        "{:.3} ({:.2}-{:.2})",
                        c.ratio_median, c.ratio_min, c.ratio_max
                    )
                })
                .unwrap_or_else(|| "n/a".into());
            let gain = |s: &ResultSet, base: &ResultSet| {
                if std::ptr::eq(s, base) {
                    return "-".to_owned();
                }
                Comparison::new(s, base, Metric::RequestsPerS)
                    .map(|c| format!("{:.2}x", c.ratio_median))
                    .unwrap_or_else(|| "n/a".into())
            };
            let _ = writeln!(
                out,
                "{size:>8} | {:<9} | {:>9.1} | {:>9.1} | {ratio:>20} | {:>16} | {:>16}",
                o.mode,
                cpu(r),
                cpu(o),
                gain(r, ref_copy),
                gain(o, our_copy),
            );
        }
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
            let pairs = ratio_pairs(&s.runs, &copy.runs, Metric::RequestsPerS);
            if pairs.is_empty() {
                return None;
            }
            let share = med(s, Metric::ZeroCopyShare);
            // The bounds of the seed issue hold for a cold pool; a hot one is information.
            let bound = match (lab, size, s.mode.as_str()) {
                ("sink", 64000, "zc-fixed") if !heat.is_hot() => Some(3.0),
                ("sink", 8000, "zc-fixed") if !heat.is_hot() => Some(1.3),
                _ => None,
            };
            let verdict = match bound {
                _ if s.mode == "auto" => super::outcome::auto_verdict(s, sets),
                Some(b) => Verdict::judge(&pairs, Some(Goal::AtLeast(b))),
                None if lab != "sink" => Verdict::info(&pairs, "kernel copies"),
                None => Verdict::info(&pairs, ""),
            };
            Some(SummaryRow::new(
                format!("uring-tx {lab} {size} B{hot} {}", s.mode),
                "req/s",
                (
                    med(copy, Metric::RequestsPerS).unwrap_or(f64::NAN),
                    med(s, Metric::RequestsPerS).unwrap_or(f64::NAN),
                ),
                share,
                &verdict,
            ))
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
    let reference = match &opt.reference {
        Some(path) => {
            if opt.common.remote.is_some() {
                bail!(
                    "--reference runs the kernel's program in the sink lab here: not with --remote"
                );
            }
            if !labs.contains(&"sink") {
                bail!("--reference runs the kernel's program in the sink lab: add --lab sink");
            }
            let max = super::reference::Reference::MAX_SIZE;
            if let Some(s) = sizes.iter().find(|&&s| s > max) {
                bail!("--size {s}: the kernel's program sends at most {max} bytes (--reference)");
            }
            Some(super::reference::Reference::new(path)?)
        }
        None => None,
    };
    let plan = Plan {
        labs: &labs,
        family: opt.family.into(),
        sizes: &sizes,
        modes: &modes,
        runs,
        seconds,
        pool: opt.pool,
        quiet: opt.common.json,
        reference: reference.as_ref(),
    };
    let out = bench(&plan, opt.common.remote()?)?;
    out.finish(&opt.common)
}
