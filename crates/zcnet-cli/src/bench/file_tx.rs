//! `zcnet bench file-tx`: a file in page cache sent over loopback by each strategy of
//! `zcnet::file`, the sender's CPU per MB compared with `read` + `send`.
//!
//! The receiver, pinned to CPU 1, discards with `recv(MSG_TRUNC)`, which drops TCP data without
//! copying it, so that it never becomes the bottleneck; the sender is pinned to CPU 0.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use netlab::{Family, LoopbackLab, pattern};
use serde::Serialize;
use serde_json::json;
use zcnet::ZeroCopyCounters as _;
use zcnet::file::{self, FileSender, Mode as Strategy};

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::measure::{
    self, Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work, pin,
    ratio_pairs,
};
use crate::remote::Remote;
use crate::remote::client::received_all;
use crate::remote::proto::Role;
use crate::send::StrategyArg;

/// Options of `zcnet bench file-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// File size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=65536))]
    pub size_mib: u64,
    /// Strategies to alternate (repeatable). Default: copy, sendfile, splice, mmap-zc, auto.
    #[arg(long = "strategy", value_enum)]
    pub strategies: Vec<StrategyArg>,
    /// Buffer sizes of the `copy` baseline, KiB (repeatable): one copy mode per size, every other
    /// strategy compared with each. Default: 16 (netcat's buffer) and 256 (zcnet's own copy).
    #[arg(long = "copy-buffer-kib", value_name = "KIB", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1048576))]
    pub copy_buffer_kib: Vec<usize>,
}

/// One mode of the bench: a strategy, and for `copy` the size of its `read`/`send` buffer.
///
/// The copying baseline's cost depends on that buffer more than on anything else here: with
/// 16 KiB (OpenBSD netcat's buffer; socat uses 8 KiB) the loop makes 16 `read` and 16 `send`
/// calls per 256 KiB, with 256 KiB one of each, and a 256 KiB buffer still sits in this machine's
/// 2 MiB L2. Both are honest baselines, so the bench measures both side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// The file strategy.
    pub strategy: Strategy,
    /// Bytes per call: the `read`/`send` buffer of `copy`, the chunk of the others.
    pub chunk: usize,
}

impl Mode {
    /// Every strategy with the library's default chunk, `copy` once per buffer size (KiB).
    pub fn list(strategies: &[Strategy], copy_buffer_kib: &[usize]) -> Vec<Mode> {
        let default = file::Config::default().chunk;
        let mut modes = Vec::new();
        for &strategy in strategies {
            if strategy == Strategy::Copy {
                modes.extend(copy_buffer_kib.iter().map(|&k| Mode {
                    strategy,
                    chunk: k << 10,
                }));
            } else {
                modes.push(Mode {
                    strategy,
                    chunk: default,
                });
            }
        }
        modes
    }

    /// `copy/16k` for the copying baseline, the strategy's name otherwise.
    pub fn name(self) -> String {
        if self.strategy == Strategy::Copy {
            format!("copy/{}k", self.chunk >> 10)
        } else {
            self.strategy.name().to_owned()
        }
    }
}

/// The copy buffers measured when none are given, KiB.
pub const COPY_BUFFERS_KIB: [usize; 2] = [16, 256];

/// A temporary file of `bytes` pattern bytes, read once so it sits in page cache; removed on drop.
struct CachedFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl CachedFile {
    fn create(bytes: u64) -> anyhow::Result<CachedFile> {
        let path = std::env::temp_dir().join(format!("zcnet-file-tx-{}", std::process::id()));
        let mut f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        // From here on the guard removes the file, also when writing fails.
        let mut guard = CachedFile {
            path,
            file: f.try_clone()?,
            len: bytes,
        };
        let mut off = 0u64;
        while off < bytes {
            let chunk =
                pattern::chunk_at(off, (bytes - off).min(pattern::MAX_CHUNK as u64) as usize);
            f.write_all(chunk)
                .with_context(|| format!("writing {}", guard.path.display()))?;
            off += chunk.len() as u64;
        }
        f.sync_all().ok();
        // Read it back once: every page in cache before the first run.
        guard.file = File::open(&guard.path)?;
        std::io::copy(&mut guard.file, &mut std::io::sink())?;
        Ok(guard)
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where the file goes: a receiver in the loopback lab, or a `zcnet serve` on another host.
enum Place {
    Lab(LoopbackLab),
    Remote(Remote),
}

fn one_run(place: &mut Place, f: &CachedFile, mode: Mode) -> anyhow::Result<Run> {
    let lab = match place {
        Place::Lab(lab) => lab,
        Place::Remote(remote) => {
            // The file is the pattern from offset 0: the far side checks every byte.
            let role = Role::pattern_sink(None);
            let (file, len) = (f.file.try_clone()?, f.len);
            // One file, bounded by its length; the time asked is the server's limit.
            let seconds = remote.limits.max_seconds;
            let (run, far) = remote.run_with(role.clone(), seconds, move |dest| {
                pin(0);
                send_file(&dest.connect()?, &file, len, mode)
            })?;
            received_all(&role, run.bytes, &far)?;
            return Ok(run.with_far(&far));
        }
    };
    let ip = lab.addr(Family::V4);
    let listener = lab
        .ns
        .run(move || TcpListener::bind(SocketAddr::new(ip, 0)))??;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> anyhow::Result<u64> {
        pin(1);
        let (c, _) = listener.accept()?;
        let mut total = 0u64;
        loop {
            // MSG_TRUNC on TCP discards the bytes without copying them.
            match zcnet::peek::discard(&c, 1 << 20) {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    });
    let file = f.file.try_clone()?;
    let len = f.len;
    let run = lab.ns.run(move || -> anyhow::Result<Run> {
        pin(0);
        let s = TcpStream::connect(addr)?;
        send_file(&s, &file, len, mode)
    })??;
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    if received != run.bytes {
        bail!("sent {} bytes but {received} arrived", run.bytes);
    }
    Ok(run)
}

/// The loopback lab, its receive processing steered to CPU 1 where this process may (`true`
/// where it was).
fn loopback_lab() -> anyhow::Result<(LoopbackLab, bool)> {
    let lab = LoopbackLab::new(None)?;
    // Receive processing on the receiver's CPU, as a NIC's queue would place it; without RPS,
    // loopback runs the receiver's TCP stack in softirq on the sending CPU and charges it to the
    // sender, whatever the strategy.
    // RPS needs CAP_NET_ADMIN of the initial user namespace: in a user-namespace lab (not root)
    // receive processing stays on the sending CPU, which charges the sender more; say so.
    let rps = match lab.ns.set_rps("lo", 1 << 1) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "zcnet bench file-tx: receive processing not steered to CPU 1 ({}; needs root): \
                 the sender's CPU also carries the receiver's softirq work",
                crate::error_line::chain(&e)
            );
            false
        }
    };
    Ok((lab, rps))
}

/// The settings of `file-tx`.
#[derive(Debug, Serialize)]
struct Settings {
    runs: usize,
    file_mib: u64,
    modes: Vec<String>,
    /// Who receives: a receiver on CPU 1, or the `--remote` server.
    receiver: &'static str,
    sender_cpu: usize,
    page_cache: &'static str,
    /// Where receive processing was steered (none where it could not be, or `--remote`).
    rps: Option<&'static str>,
}

/// Sends the whole file on `s` by `mode`, measuring this thread, then shuts the write side.
fn send_file(s: &TcpStream, file: &File, len: u64, mode: Mode) -> anyhow::Result<Run> {
    let meter = Meter::start();
    let config = file::Config {
        mode: mode.strategy,
        chunk: mode.chunk,
        ..file::Config::default()
    };
    let mut tx = FileSender::new(s, config)?;
    tx.send_file(file, 0, len)?;
    let sent = tx.counters();
    let run = meter.finish(Work {
        bytes: sent.bytes,
        requests: None,
        zero_copy_share: Some(sent.zero_copy_share().unwrap_or(0.0)),
        verified: None,
    });
    s.shutdown(std::net::Shutdown::Write)?;
    Ok(run)
}

/// Runs the bench.
pub fn bench(
    size_mib: u64,
    modes: &[Mode],
    runs: usize,
    quiet: bool,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let mut report = Report::new("file-tx");
    let f = CachedFile::create(size_mib << 20)?;
    let (mut place, receiver, rps) = match remote {
        Some(r) => (Place::Remote(r), "zcnet serve, checking every byte", false),
        None => {
            let (lab, rps) = loopback_lab()?;
            (Place::Lab(lab), "recv(MSG_TRUNC) on CPU 1", rps)
        }
    };
    let settings = Settings {
        runs,
        file_mib: size_mib,
        modes: modes.iter().map(|m| m.name()).collect(),
        receiver,
        sender_cpu: 0,
        page_cache: "warm",
        rps: rps.then_some("lo rx-0 -> CPU 1"),
    };
    report.settings = serde_json::to_value(&settings)?;
    let far = match &place {
        Place::Remote(r) => Some(r),
        Place::Lab(_) => None,
    };
    let lab_name = super::labs::remote_lab(&mut report, far, "loopback");
    let _pinned = Pinned::to(1);
    let progress = Progress::new(
        "file-tx",
        (runs * modes.len()) as u64,
        Duration::from_secs((runs * modes.len()) as u64),
    );
    let per = measure::alternate(modes, runs, &progress, |m, i| {
        let run =
            one_run(&mut place, &f, m).with_context(|| format!("{} run {}", m.name(), i + 1))?;
        if !quiet {
            let condition = format!("{lab_name} {size_mib} MiB");
            println!("{}", run.line(&condition, &m.name(), "sender"));
        }
        anyhow::Ok(run)
    })?;
    let sets: Vec<(Mode, ResultSet)> = modes
        .iter()
        .zip(per)
        .map(|(&m, runs)| {
            // The copy buffer is in the mode's name (`copy/16k`): params are shared by the
            // modes a comparison sets side by side.
            let params = json!({"file_mib": size_mib});
            let set = ResultSet::new(
                lab_name,
                "ipv4",
                super::labs::congestion(lab_name).as_deref(),
                params,
                &m.name(),
                runs,
            );
            (m, set)
        })
        .collect();
    let mut summary = Vec::new();
    let med = |s: &ResultSet, k: Metric| s.median_of(k);
    let copies = sets.iter().filter(|(m, _)| m.strategy == Strategy::Copy);
    for (copy_mode, copy) in copies {
        for (mode, other) in sets.iter().filter(|(m, _)| m.strategy != Strategy::Copy) {
            for metric in [Metric::CpuUsPerMb, Metric::Gbit] {
                report
                    .comparisons
                    .extend(Comparison::new(other, copy, metric));
            }
            let pairs = ratio_pairs(&other.runs, &copy.runs, Metric::CpuUsPerMb);
            if pairs.is_empty() {
                continue;
            }
            // The bound: sendfile at most half the sender CPU of read + send.
            let goal = (mode.strategy == Strategy::Sendfile).then_some(Goal::AtMost(0.5));
            summary.push(SummaryRow::new(
                format!(
                    "file-tx lo {size_mib} MiB {} vs {}",
                    other.mode,
                    copy_mode.name()
                ),
                "sender us/MB",
                (
                    med(copy, Metric::CpuUsPerMb).unwrap_or(f64::NAN),
                    med(other, Metric::CpuUsPerMb).unwrap_or(f64::NAN),
                ),
                med(other, Metric::ZeroCopyShare),
                &Verdict::judge(&pairs, goal),
            ));
        }
    }
    let sets: Vec<ResultSet> = sets.into_iter().map(|(_, s)| s).collect();
    report.results = sets;
    Ok(Outcome::new(report, summary))
}

/// `zcnet bench file-tx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    opt.common
        .needs_labs("file-tx builds its loopback lab in a private network namespace")?;
    let copy_kib = super::engine::asked_or(&opt.copy_buffer_kib, &COPY_BUFFERS_KIB);
    if let Some(k) = copy_kib.iter().find(|&&k| k == 0 || k > 1 << 20) {
        bail!("--copy-buffer-kib {k}: give 1 to 1048576 KiB");
    }
    let strategies: Vec<Strategy> = if opt.strategies.is_empty() {
        vec![
            Strategy::Copy,
            Strategy::Sendfile,
            Strategy::Splice,
            Strategy::MmapZeroCopy,
            Strategy::Auto,
        ]
    } else {
        opt.strategies.iter().map(|&s| Strategy::from(s)).collect()
    };
    let modes = Mode::list(&strategies, &copy_kib);
    if !modes.iter().any(|m| m.strategy == Strategy::Copy) {
        bail!("file-tx compares with the copying baseline: add --strategy copy");
    }
    let out = bench(
        opt.size_mib,
        &modes,
        opt.common.runs.unwrap_or(5),
        opt.common.json,
        opt.common.remote()?,
    )?;
    out.finish(&opt.common)
}
