//! `zcnet bench async-serve`: the async file server of [`crate::file_server`] with zcnet
//! (`zcnet::tokio::FileSender`, `Mode::Auto`: `sendfile`) against the same server with
//! `tokio::io::copy` from a `tokio::fs::File`, 64 concurrent clients fetching one file over and
//! over across the veth lab.
//!
//! The server runs on a tokio runtime of its own, one worker pinned to CPU 0; its CPU is the sum
//! over every thread of that runtime, workers and blocking pool (where `tokio::fs` reads), read
//! from `/proc/self/task/TID` at the start and end of the measured window. The clients run on
//! another runtime pinned to CPU 1 and are not counted.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use netlab::{Family, Side, VethLab, pattern};
use serde::Serialize;
use serde_json::json;

use super::common::Common;
use super::common::Rounds;
use super::engine::{asked_or, sets_of};
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::file_server::{Engine, Stats, fetch, serve};
use crate::measure::cpu::{MachineCpu, ProcessCpu, ThreadCpu};
use crate::measure::{self, Comparison, Metric, Progress, Report, Run, Work, pin, ratio_pairs};
use crate::remote::Remote;
use crate::remote::proto::Role;

/// Options of `zcnet bench async-serve`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// File size in bytes, at most 1 GiB (repeatable). Default: 65536 and 16777216.
    #[arg(long = "size", value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=(1u64 << 30)))]
    pub sizes: Vec<u64>,
    /// Concurrent clients.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub clients: usize,
}

/// The sizes of the issue: a small and a large file.
pub const SIZES: [u64; 2] = [64 << 10, 16 << 20];

/// The engines, the zcnet one first, then the baseline (`tokio::io::copy`), then plain
/// tokio with a 256 KiB buffer.
pub const ENGINES: [Engine; 3] = [Engine::Zcnet, Engine::TokioCopy, Engine::TokioCopyBuf];

/// A directory holding one file of pattern bytes, read once into the page cache; removed on drop.
struct Files {
    dir: PathBuf,
    size: u64,
}

impl Files {
    fn new(size: u64) -> anyhow::Result<Files> {
        let dir =
            std::env::temp_dir().join(format!("zcnet-async-serve-{}-{size}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // From here on the guard removes the directory, also when writing fails.
        let files = Files { dir, size };
        let path = files.dir.join("f");
        let mut f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut off = 0u64;
        while off < size {
            let n = (size - off).min(pattern::MAX_CHUNK as u64) as usize;
            std::io::Write::write_all(&mut f, pattern::chunk_at(off, n))
                .with_context(|| format!("writing {}", path.display()))?;
            off += n as u64;
        }
        // Read back once: every page in cache before the first run.
        std::io::copy(&mut std::fs::File::open(&path)?, &mut std::io::sink())?;
        Ok(files)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The threads of a runtime, as they start.
#[derive(Clone, Default)]
struct Threads(Arc<Mutex<Vec<u32>>>);

impl Threads {
    fn record(&self) {
        let tid = nix::unistd::gettid().as_raw() as u32;
        self.0.lock().expect("not poisoned").push(tid);
    }

    fn cpu(&self) -> Vec<(u32, ProcessCpu)> {
        let tids = self.0.lock().expect("not poisoned").clone();
        tids.into_iter()
            .filter_map(|t| Some((t, ProcessCpu::read(t)?)))
            .collect()
    }
}

/// CPU of every thread in `now` since `before` (a thread started since counts from zero).
fn cpu_since(before: &[(u32, ProcessCpu)], now: &[(u32, ProcessCpu)]) -> ThreadCpu {
    let mut sum = ThreadCpu::default();
    for (tid, n) in now {
        let b = before
            .iter()
            .find(|(t, _)| t == tid)
            .map(|(_, c)| *c)
            .unwrap_or_default();
        let d = n.since(&b);
        sum.user_s += d.user_s;
        sum.sys_s += d.sys_s;
        sum.voluntary += d.voluntary;
        sum.involuntary += d.involuntary;
    }
    sum
}

/// A runtime whose threads, blocking pool included, are pinned to `cpu` and recorded.
fn runtime(cpu: usize, workers: usize) -> anyhow::Result<(tokio::runtime::Runtime, Threads)> {
    let threads = Threads::default();
    let t = threads.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        // Blocking threads live through the run, so that none leaves with its CPU time.
        .thread_keep_alive(Duration::from_secs(3600))
        .on_thread_start(move || {
            pin(cpu);
            t.record();
        })
        .enable_all()
        .build()?;
    Ok((rt, threads))
}

/// Where the clients are: in the veth lab's B side, or a `zcnet serve` on another host
/// fetching from this one.
enum Place {
    Lab(VethLab),
    Remote(Remote),
}

fn one_run(
    place: &mut Place,
    files: &Files,
    engine: Engine,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<Run> {
    match place {
        Place::Lab(lab) => lab_run(lab, files, engine, clients, seconds),
        Place::Remote(remote) => remote_run(remote, files, engine, clients, seconds),
    }
}

/// The file server on a runtime of its own pinned to CPU 0.
struct Serving {
    rt: tokio::runtime::Runtime,
    /// The runtime's threads, for their CPU.
    threads: Threads,
    stats: Arc<Stats>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Serving {
    /// Serves `files` by `engine` on `listener` (non-blocking).
    fn start(
        listener: std::net::TcpListener,
        files: &Files,
        engine: Engine,
    ) -> anyhow::Result<Serving> {
        let (rt, threads) = runtime(0, 1)?;
        let stats = Arc::new(Stats::default());
        let task = {
            let _guard = rt.enter();
            let listener = tokio::net::TcpListener::from_std(listener)?;
            rt.spawn(serve(listener, files.dir.clone(), engine, stats.clone()))
        };
        Ok(Serving {
            rt,
            threads,
            stats,
            task,
        })
    }
}

/// A run whose clients are a `zcnet serve`'s: the server's CPU from the start of the far side's
/// fetches to their end (their last files included), the bytes its clients fetched and checked.
fn remote_run(
    remote: &mut Remote,
    files: &Files,
    engine: Engine,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<Run> {
    let ip = remote.local_ip()?;
    let listener = std::net::TcpListener::bind((ip, 0))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let server = Serving::start(listener, files, engine)?;
    let (cpu0, machine0) = (server.threads.cpu(), MachineCpu::now());
    let role = Role::Fetch {
        port,
        clients,
        size: files.size,
    };
    let far = remote.start(role, seconds).and_then(|_| remote.finish());
    let cpu = cpu_since(&cpu0, &server.threads.cpu());
    let machine = MachineCpu::elapsed(machine0);
    server.task.abort();
    server.rt.shutdown_timeout(Duration::from_secs(5));
    let far = far?;
    if let Some(at) = far.first_bad {
        anyhow::bail!("the far side's clients got different bytes, from file offset {at}");
    }
    let failed = server.stats.failed.load(Ordering::Relaxed);
    anyhow::ensure!(failed == 0, "{failed} server connections failed");
    let (sent, zc) = copies_accounted(&server.stats, engine)?;
    let run = measure::record(
        Work {
            bytes: far.bytes,
            requests: None,
            zero_copy_share: (sent > 0).then(|| zc as f64 / sent as f64),
            verified: None,
        },
        far.seconds,
        cpu,
        machine,
    );
    Ok(explored(run.with_far(&far), &server.stats, engine))
}

fn lab_run(
    lab: &VethLab,
    files: &Files,
    engine: Engine,
    clients: usize,
    seconds: f64,
) -> anyhow::Result<Run> {
    let server_ip = VethLab::addr(Side::A, Family::V4);
    let listener = lab.a.run(move || -> std::io::Result<_> {
        let l = std::net::TcpListener::bind((server_ip, 0))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })??;
    let addr = listener.local_addr()?;
    let server = Serving::start(listener, files, engine)?;
    // The clients' sockets are made inside side B, then driven by their own runtime.
    let socks = lab
        .b
        .run(move || -> std::io::Result<Vec<std::net::TcpStream>> {
            (0..clients)
                .map(|_| {
                    let s = std::net::TcpStream::connect(addr)?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                })
                .collect()
        })??;
    let (client_rt, _) = runtime(1, 1)?;
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = {
        let _guard = client_rt.enter();
        socks
            .into_iter()
            .map(|s| {
                let (received, stop) = (received.clone(), stop.clone());
                client_rt.spawn(async move {
                    let mut s = tokio::io::BufReader::new(tokio::net::TcpStream::from_std(s)?);
                    while !stop.load(Ordering::Relaxed) {
                        let (code, _) = fetch(&mut s, "f", |p| {
                            received.fetch_add(p.len() as u64, Ordering::Relaxed);
                        })
                        .await?;
                        anyhow::ensure!(code == 200, "the server answered {code}");
                    }
                    anyhow::Ok(())
                })
            })
            .collect()
    };
    // A quarter of the run to settle, then the measured window.
    std::thread::sleep(Duration::from_secs_f64(seconds / 4.0));
    let (cpu0, bytes0) = (server.threads.cpu(), received.load(Ordering::Relaxed));
    let machine0 = MachineCpu::now();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_since(&cpu0, &server.threads.cpu());
    let bytes = received.load(Ordering::Relaxed) - bytes0;
    let machine = MachineCpu::elapsed(machine0);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        client_rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), t).await })
            .context("a client did not finish its last file within 60 s")???;
    }
    // The server stops before its counters are read, so no connection is between updating
    // one and the next; then the clients close.
    server.task.abort();
    server.rt.shutdown_timeout(Duration::from_secs(5));
    client_rt.shutdown_timeout(Duration::from_secs(5));
    // Every body the server finished in the run (the clients finished their last files).
    let failed = server.stats.failed.load(Ordering::Relaxed);
    anyhow::ensure!(failed == 0, "{failed} server connections failed");
    let (sent, zc) = copies_accounted(&server.stats, engine)?;
    let run = measure::record(
        Work {
            bytes,
            requests: None,
            // Of every body the server sent in the run (counted per finished file).
            zero_copy_share: (sent > 0).then(|| zc as f64 / sent as f64),
            verified: None,
        },
        elapsed,
        cpu,
        machine,
    );
    Ok(explored(run, &server.stats, engine))
}

/// The body bytes the server sent and how many of them without a user copy, once it is
/// checked that zcnet copied no byte its `Mode::Auto` did not choose to copy (exploring, or the
/// way a size class learned): a copy nothing accounts for would be a lie about zero copy.
fn copies_accounted(stats: &Stats, engine: Engine) -> anyhow::Result<(u64, u64)> {
    let sent = stats.bytes.load(Ordering::Relaxed);
    let zc = stats.zero_copy_bytes.load(Ordering::Relaxed);
    if engine == Engine::Zcnet {
        let chosen = stats.auto_copied_bytes.load(Ordering::Relaxed);
        anyhow::ensure!(
            zc + chosen == sent,
            "zcnet's counts do not add up: {zc} body bytes without a copy and {chosen} copied \
             by Mode::Auto's choice, of {sent} sent"
        );
    }
    Ok((sent, zc))
}

/// zcnet's run with the share of files its `Mode::Auto` senders sent exploring (one call a
/// file; each connection's sender learns on its own).
fn explored(mut run: Run, stats: &Stats, engine: Engine) -> Run {
    let files = stats.files.load(Ordering::Relaxed);
    if engine == Engine::Zcnet && files > 0 {
        run.auto_explore_share =
            Some(stats.explore_files.load(Ordering::Relaxed) as f64 / files as f64);
    }
    run
}

/// Makes sure this process may open the descriptors `clients` connections need (the client's
/// socket, the server's and its duplicate, and a file each), raising the soft
/// `RLIMIT_NOFILE` to the hard one if it must.
fn enough_descriptors(clients: usize) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let need = 4 * clients as u64 + 256;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= need {
        return Ok(());
    }
    if hard >= need && setrlimit(Resource::RLIMIT_NOFILE, need, hard).is_ok() {
        return Ok(());
    }
    anyhow::bail!(
        "{clients} clients need about {need} file descriptors, but RLIMIT_NOFILE is {soft} \
         (hard limit {hard}): raise it (ulimit -n {need}) or give fewer --clients"
    )
}

/// The settings of `async-serve`.
#[derive(Debug, Serialize)]
struct Settings<'a> {
    runs: usize,
    seconds: f64,
    clients: usize,
    sizes: &'a [u64],
    engines: Vec<&'static str>,
    server: &'static str,
    /// The clients' CPU (none with `--remote`: another host's).
    clients_cpu: Option<usize>,
    lab: &'static str,
    page_cache: &'static str,
}

/// Runs the bench.
pub fn bench(
    sizes: &[u64],
    clients: usize,
    rounds: Rounds,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let (runs, seconds) = (rounds.runs, rounds.seconds);
    let mut report = Report::new("async-serve");
    let settings = Settings {
        runs,
        seconds,
        clients,
        sizes,
        engines: ENGINES.iter().map(|e| e.name()).collect(),
        server: "tokio runtime, 1 worker + blocking pool, on CPU 0; CPU of all its threads",
        clients_cpu: remote.is_none().then_some(1),
        lab: if remote.is_some() { "remote" } else { "veth" },
        page_cache: "warm",
    };
    report.settings = serde_json::to_value(&settings)?;
    enough_descriptors(clients)?;
    let lab_name = super::labs::remote_lab(&mut report, remote.as_ref(), "veth");
    let mut place = match remote {
        Some(r) => Place::Remote(r),
        None => Place::Lab(VethLab::new(None)?),
    };
    let mtu = match &place {
        Place::Lab(lab) => Some(lab.mtu),
        Place::Remote(_) => None,
    };
    let progress = Progress::new(
        "async-serve",
        (runs * ENGINES.len() * sizes.len()) as u64,
        Duration::from_secs_f64(seconds * 1.5 * (runs * ENGINES.len() * sizes.len()) as f64),
    );
    let mut summary = Vec::new();
    let congestion = super::labs::congestion(lab_name);
    for &size in sizes {
        let files = Files::new(size)?;
        let per = measure::alternate(&ENGINES, runs, &progress, |engine, i| {
            let run = one_run(&mut place, &files, engine, clients, seconds)
                .with_context(|| format!("{} {size} B run {}", engine.name(), i + 1))?;
            if !rounds.quiet {
                let condition = format!("{lab_name} {size} B x {clients}");
                println!("{}", run.line(&condition, engine.name(), "server"));
            }
            anyhow::Ok(run)
        })?;
        let params = json!({"size": size, "clients": clients, "mtu": mtu});
        let condition = (lab_name, "ipv4", congestion.as_deref());
        let sets = sets_of(&ENGINES, Engine::name, per, condition, &params);
        let zc = &sets[0];
        for (k, copy) in sets.iter().enumerate().skip(1) {
            for metric in [Metric::CpuUsPerMb, Metric::Gbit] {
                report.comparisons.extend(Comparison::new(zc, copy, metric));
            }
            let pairs = ratio_pairs(&zc.runs, &copy.runs, Metric::CpuUsPerMb);
            if pairs.is_empty() {
                continue;
            }
            // The goal: at most half the plain tokio server's CPU per MB at 16 MiB
            // (against `tokio::io::copy`; the 256 KiB variant is shown beside it).
            let goal = (k == 1 && size >= 16 << 20).then_some(Goal::AtMost(0.5));
            summary.push(SummaryRow::new(
                format!(
                    "async-serve {lab_name} {size} B x {clients}, zcnet vs {}",
                    copy.mode
                ),
                "server us/MB",
                (
                    copy.median_of(Metric::CpuUsPerMb).unwrap_or(f64::NAN),
                    zc.median_of(Metric::CpuUsPerMb).unwrap_or(f64::NAN),
                ),
                zc.median_of(Metric::ZeroCopyShare),
                &Verdict::judge(&pairs, goal),
            ));
        }
        report.results.extend(sets);
    }
    Ok(Outcome::new(report, summary))
}

/// `zcnet bench async-serve`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    if let Some(lab) = opt.common.labs.iter().find(|l| *l != "veth") {
        anyhow::bail!("async-serve runs in the veth lab only, not {lab:?}");
    }
    enough_descriptors(opt.clients)?;
    opt.common
        .needs_labs("async-serve builds its veth lab in private network namespaces")?;
    let sizes = asked_or(&opt.sizes, &SIZES);
    let out = bench(
        &sizes,
        opt.clients,
        opt.common.rounds(5, 2.0),
        opt.common.remote()?,
    )?;
    out.finish(&opt.common)
}
