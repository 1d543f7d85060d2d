//! `zcnet bench file-tx`: a file in page cache sent over loopback by each strategy of
//! `zcnet::file`, the sender's CPU per MB compared with `read` + `send`.
//!
//! The receiver, pinned to CPU 1, discards with `recv(MSG_TRUNC)`, which drops TCP data without
//! copying it, so that it never becomes the bottleneck; the sender is pinned to CPU 0.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use netlab::{CONGESTION, Family, LoopbackLab, pattern};
use serde_json::json;
use zcnet::file::{self, Options, Strategy};

use super::{Common, Outcome, Pinned, SummaryRow, pin};
use crate::measure::{self, Comparison, Meter, Progress, Report, ResultSet, Run, Work};
use crate::send::StrategyArg;

/// Options of `zcnet bench file-tx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// File size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub size_mib: u64,
    /// Strategies to alternate (repeatable); the first is the baseline. Default: copy, sendfile,
    /// splice, mmap-zc.
    #[arg(long = "strategy", value_enum)]
    pub strategies: Vec<StrategyArg>,
}

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

fn one_run(lab: &LoopbackLab, f: &CachedFile, strategy: Strategy) -> anyhow::Result<Run> {
    let ip = lab.addr(Family::V4);
    let listener = lab
        .ns
        .run(move || TcpListener::bind(SocketAddr::new(ip, 0)))??;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> anyhow::Result<u64> {
        pin(1);
        let (c, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            // MSG_TRUNC on TCP discards the bytes without copying them.
            match zcnet::sys::recv(c.as_fd(), &mut buf, libc::MSG_TRUNC) {
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
        let meter = Meter::start();
        let sent = file::send_file(s.as_fd(), &file, 0, len, strategy, Options::default())?;
        let run = meter.finish(Work {
            bytes: sent.bytes,
            requests: None,
            zero_copy_share: Some(sent.zero_copy_share()),
            verified: None,
        });
        s.shutdown(std::net::Shutdown::Write)?;
        Ok(run)
    })??;
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    if received != run.bytes {
        bail!("sent {} bytes but {received} arrived", run.bytes);
    }
    Ok(run)
}

/// Runs the bench.
pub fn bench(
    size_mib: u64,
    strategies: &[Strategy],
    runs: usize,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let mut report = Report::new("file-tx");
    report.settings = json!({
        "runs": runs, "file_mib": size_mib, "strategies": strategies.iter().map(|s| s.name()).collect::<Vec<_>>(),
        "receiver": "recv(MSG_TRUNC) on CPU 1", "sender_cpu": 0, "page_cache": "warm",
        "rps": "lo rx-0 -> CPU 1",
    });
    let f = CachedFile::create(size_mib << 20)?;
    let lab = LoopbackLab::new(None)?;
    // Receive processing on the receiver's CPU, as a NIC's queue would place it; without RPS,
    // loopback runs the receiver's TCP stack in softirq on the sending CPU and charges it to the
    // sender, whatever the strategy.
    lab.ns.set_rps("lo", 1 << 1)?;
    let _pinned = Pinned::to(1);
    let progress = Progress::new(
        "file-tx",
        (runs * strategies.len()) as u64,
        Duration::from_secs((runs * strategies.len()) as u64),
    );
    let per = measure::alternate(strategies, runs, &progress, |s, i| {
        let run = one_run(&lab, &f, s).with_context(|| format!("{} run {}", s.name(), i + 1))?;
        if !quiet {
            println!(
                "[loopback {size_mib} MiB] {:<9} {:>7.2} Gbit, sender {:>6.1} us/MB (user {:.3} s, sys {:.3} s), {:>6.2} % without a user copy",
                s.name(),
                run.gbit,
                run.cpu_us_per_mb,
                run.cpu_user_s,
                run.cpu_sys_s,
                100.0 * run.zero_copy_share.unwrap_or(0.0)
            );
        }
        anyhow::Ok(run)
    })?;
    let sets: Vec<ResultSet> = strategies
        .iter()
        .zip(per)
        .map(|(s, runs)| {
            ResultSet::new(
                "loopback",
                "ipv4",
                Some(CONGESTION),
                json!({"file_mib": size_mib}),
                s.name(),
                runs,
            )
        })
        .collect();
    let mut summary = Vec::new();
    for other in &sets[1..] {
        for metric in ["cpu_us_per_mb", "gbit"] {
            report
                .comparisons
                .extend(Comparison::new(other, &sets[0], metric));
        }
        if let Some(c) = Comparison::new(other, &sets[0], "cpu_us_per_mb") {
            let med = |s: &ResultSet, k: &str| {
                s.median.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN)
            };
            let verdict = if other.mode == "sendfile" && sets[0].mode == "copy" {
                if c.ratio_median <= 0.5 {
                    "ok (<= 0.5)".to_owned()
                } else {
                    "MISS (needs <= 0.5)".to_owned()
                }
            } else {
                "info".to_owned()
            };
            summary.push(SummaryRow {
                experiment: format!("file-tx loopback {size_mib} MiB {}", other.mode),
                metric: "sender us/MB".into(),
                copy: med(&sets[0], "cpu_us_per_mb"),
                zero_copy: med(other, "cpu_us_per_mb"),
                ratio: c.ratio_median,
                zero_copy_share: other.median.get("zero_copy_share").and_then(|v| v.as_f64()),
                verdict,
            });
        }
    }
    report.results = sets;
    Ok(Outcome { report, summary })
}

/// `zcnet bench file-tx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    netlab::check_privileges()
        .context("file-tx builds its loopback lab in a private network namespace")?;
    let strategies: Vec<Strategy> = if opt.strategies.is_empty() {
        vec![
            Strategy::Copy,
            Strategy::Sendfile,
            Strategy::Splice,
            Strategy::MmapZc,
        ]
    } else {
        opt.strategies
            .iter()
            .map(|&s| Strategy::from(s).resolve())
            .collect()
    };
    let out = bench(
        opt.size_mib,
        &strategies,
        opt.common.runs.unwrap_or(5),
        opt.common.json,
    )?;
    out.print(opt.common.json)
}
