//! `zcnet bench relay`: `zcnet relay` on its event loops against the relays a Rust user would
//! run instead (issue 65), at 1 to the descriptor ceiling's worth of connections at once.
//!
//! On loopback, three processes: this one holds the clients; an echo server of our own (this
//! binary again, `--echo-server`) holds the destination's ends; the relay under test is
//! `zcnet relay --engine E` (`loops`: the event loops, peek method; `copy`: the same with the
//! discard-buffer method; `tokio-copy`: `tokio::io::copy_bidirectional` a connection, what a
//! Rust user writes; `tokio-sessions`: the relay before the loops, a tokio task and an epoll
//! set a connection). For each connection count, each run starts each relay in turn (the
//! order rotating), opens every connection, reads the relay's descriptors and resident memory
//! (beyond what it held before the first), then three phases of `--seconds` each: every
//! connection exchanging 1 KiB requests with their echoes (round-trip times kept), the same with
//! 64 KiB, and `--bulk-streams` of them streaming both ways at once. Every byte that comes back
//! is compared with what was sent, by position. The relay's CPU is the sum of its threads' run
//! time (`/proc/PID/task/*/schedstat`) over each phase, per MB through it (both ways).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use netlab::{Family, Side, VethLab};

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::measure::Report;

/// Options of `zcnet bench relay`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Connections at once (repeatable): a number, or `max`, all the relay's descriptors allow
    /// (floor((hard RLIMIT_NOFILE - 100) / 2)). Default: 1, 100, 1000, max.
    #[arg(long = "connections", value_name = "N|max", value_parser = connections)]
    pub connections: Vec<usize>,
    /// Relays to compare (repeatable): loops, copy, tokio-copy, tokio-sessions. Default: loops,
    /// copy, tokio-copy.
    #[arg(long = "mode", value_name = "MODE", value_enum)]
    pub modes: Vec<Mode>,
    /// Connections streaming in the bulk phase, at most.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub bulk_streams: usize,
    /// Run the echo destination (this bench's own far side) until stdin closes.
    #[arg(long, hide = true)]
    pub echo_server: bool,
    /// Where the echo destination listens.
    #[arg(long, hide = true, default_value = "127.0.0.1:0")]
    pub echo_listen: SocketAddr,
}

/// The labs: `loopback`, everything on this host's loopback; `veth`, the clients and the relay
/// in one namespace, the echo destination in another across a veth pair (MTU 1500), as a relay
/// in front of a backend on another host.
const LABS: [&str; 2] = ["loopback", "veth"];

/// One relay under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `zcnet relay`: the event loops, peek offset.
    Loops,
    /// The loops with the discard-buffer method.
    Copy,
    /// `tokio::io::copy_bidirectional` a connection.
    TokioCopy,
    /// The relay before the loops: a tokio task and an epoll set a connection.
    TokioSessions,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Loops => "loops",
            Mode::Copy => "copy",
            Mode::TokioCopy => "tokio-copy",
            Mode::TokioSessions => "tokio-sessions",
        }
    }

    /// `zcnet relay`'s arguments for it.
    fn args(self) -> &'static [&'static str] {
        match self {
            Mode::Loops => &["--engine", "loops"],
            Mode::Copy => &["--engine", "loops", "--method", "discard-buffer"],
            Mode::TokioCopy => &["--engine", "tokio-copy"],
            Mode::TokioSessions => &["--engine", "tokio-sessions"],
        }
    }
}

/// What one run of one relay measured.
#[derive(Clone, Debug, Serialize)]
struct Row {
    lab: &'static str,
    connections: usize,
    mode: Mode,
    run: usize,
    /// Relay CPU per MB through it, each phase (µs).
    cpu_us_per_mb_1k: f64,
    cpu_us_per_mb_64k: f64,
    cpu_us_per_mb_bulk: f64,
    /// Round-trip times of the 1 KiB exchanges (µs).
    rtt_p50_us: f64,
    rtt_p99_us: f64,
    /// The relay's resident memory and descriptors per connection, every one open.
    kib_per_connection: f64,
    descriptors_per_connection: f64,
    /// MB through the relay, each phase.
    mb_1k: f64,
    mb_64k: f64,
    mb_bulk: f64,
}

/// A process started by the bench, killed by its id when dropped.
struct Process {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts this binary with `args` (in this thread's network namespace); its first stderr
    /// line names the address it listens on.
    fn start(args: &[&str]) -> anyhow::Result<Process> {
        Process::spawn(Command::new(std::env::current_exe()?), args)
    }

    /// Starts `command` (this binary, or `ip netns exec` of it, which execs it under the same
    /// process id) with `args`.
    fn spawn(mut command: Command, args: &[&str]) -> anyhow::Result<Process> {
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting zcnet")?;
        let mut err = BufReader::new(child.stderr.take().context("stderr")?);
        let mut line = String::new();
        err.read_line(&mut line)?;
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("no address in {line:?}"))?;
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Ok(Process { child, addr })
    }

    /// The run time of all its threads so far (s).
    fn cpu_s(&self) -> f64 {
        let dir = format!("/proc/{}/task", self.child.id());
        let Ok(tasks) = std::fs::read_dir(dir) else {
            return 0.0;
        };
        let ns: u64 = tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        ns as f64 / 1e9
    }

    /// Its open descriptors and resident memory (KiB).
    fn footprint(&self) -> (usize, u64) {
        crate::measure::cpu::footprint(self.child.id())
    }
}

/// The byte at `offset` of connection `id`'s stream: a pattern that reorders or mixes show.
fn pattern(id: usize, offset: u64) -> u8 {
    (offset.wrapping_mul(0x9e37_79b9) >> 7) as u8 ^ (id as u8)
}

fn fill(buf: &mut [u8], id: usize, from: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = pattern(id, from + k as u64);
    }
}

/// Whether `got` is connection `id`'s stream from `from` on.
fn intact(got: &[u8], id: usize, from: u64) -> bool {
    got.iter()
        .enumerate()
        .all(|(k, &b)| b == pattern(id, from + k as u64))
}

/// Exchanges of `size` bytes on `c` until `end`: each written, then read back whole; the
/// round-trip times (µs) and the bytes sent; an error for an echo that differs.
async fn exchanges(
    c: &mut TcpStream,
    id: usize,
    size: usize,
    end: Instant,
    at: &mut u64,
) -> anyhow::Result<Vec<u32>> {
    let (mut out, mut back) = (vec![0u8; size], vec![0u8; size]);
    let mut rtts = Vec::new();
    while Instant::now() < end {
        fill(&mut out, id, *at);
        let t = Instant::now();
        c.write_all(&out).await?;
        c.read_exact(&mut back).await?;
        rtts.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
        if !intact(&back, id, *at) {
            bail!("connection {id}: the echo at {} differs", *at);
        }
        *at += size as u64;
    }
    Ok(rtts)
}

/// Streams both ways on `c` until `end`: writes as fast as the relay takes, then half-closes;
/// reads back and checks concurrently, to the echo's end. The bytes sent.
async fn bulk(c: &mut TcpStream, id: usize, end: Instant, at: u64) -> anyhow::Result<u64> {
    let (mut r, mut w) = c.split();
    let writer = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut sent = at;
        while Instant::now() < end {
            fill(&mut buf, id, sent);
            w.write_all(&buf).await?;
            sent += buf.len() as u64;
        }
        w.shutdown().await?;
        anyhow::Ok(sent)
    };
    let reader = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut got = at;
        loop {
            let n = r.read(&mut buf).await?;
            if n == 0 {
                return anyhow::Ok(got);
            }
            if !intact(&buf[..n], id, got) {
                bail!("connection {id}: the echo at {got} differs");
            }
            got += n as u64;
        }
    };
    let (sent, got) = tokio::try_join!(writer, reader)?;
    if got != sent {
        bail!(
            "connection {id}: {} bytes echoed of {}",
            got - at,
            sent - at
        );
    }
    Ok(sent - at)
}

/// The `q` quantile of `v` (sorted here).
fn quantile(v: &mut [u32], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    f64::from(v[((v.len() - 1) as f64 * q).round() as usize])
}

/// One run of relay `mode` with `n` connections to `echo`.
fn one_run(
    rt: &tokio::runtime::Runtime,
    echo: SocketAddr,
    mode: Mode,
    n: usize,
    run: usize,
    seconds: f64,
    bulk_streams: usize,
) -> anyhow::Result<Row> {
    let to = echo.to_string();
    let mut args = vec!["relay", "--listen", "127.0.0.1:0", "--to", &to];
    args.extend(["--max-connections", "1000000", "--until-stdin-ends"]);
    args.extend(mode.args());
    let relay = Process::start(&args)?;
    std::thread::sleep(Duration::from_millis(100));
    let base = relay.footprint();
    let addr = relay.addr;
    let mut conns = rt.block_on(async {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let c = TcpStream::connect(addr).await?;
            c.set_nodelay(true)?;
            v.push(c);
        }
        anyhow::Ok(v)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    let peak = relay.footprint();
    let phase = Duration::from_secs_f64(seconds);
    let mut offsets = vec![0u64; n];
    let phase_of = |size: usize, conns: &mut Vec<TcpStream>, offsets: &mut Vec<u64>| {
        let cpu = relay.cpu_s();
        let end = Instant::now() + phase;
        let tasks: Vec<_> = std::mem::take(conns)
            .into_iter()
            .zip(offsets.iter().copied())
            .enumerate()
            .map(|(id, (mut c, mut at))| {
                rt.spawn(async move {
                    let r = exchanges(&mut c, id, size, end, &mut at).await;
                    (c, at, r)
                })
            })
            .collect();
        let mut rtts = Vec::new();
        let mut sent = 0u64;
        for (id, t) in tasks.into_iter().enumerate() {
            let (c, at, r) = rt.block_on(t)?;
            sent += at - offsets[id];
            offsets[id] = at;
            rtts.extend(r?);
            conns.push(c);
        }
        anyhow::Ok((relay.cpu_s() - cpu, 2.0 * sent as f64 / 1e6, rtts))
    };
    let (cpu_1k, mb_1k, mut rtts) = phase_of(1024, &mut conns, &mut offsets)?;
    let (cpu_64k, mb_64k, _) = phase_of(64 << 10, &mut conns, &mut offsets)?;
    let cpu = relay.cpu_s();
    let end = Instant::now() + phase;
    let streams = n.min(bulk_streams);
    let tasks: Vec<_> = conns
        .drain(..streams)
        .zip(offsets.iter().copied())
        .enumerate()
        .map(|(id, (mut c, at))| rt.spawn(async move { bulk(&mut c, id, end, at).await }))
        .collect();
    let mut sent = 0u64;
    for t in tasks {
        sent += rt.block_on(t)??;
    }
    let (cpu_bulk, mb_bulk) = (relay.cpu_s() - cpu, 2.0 * sent as f64 / 1e6);
    drop(conns);
    let per_mb = |cpu: f64, mb: f64| cpu * 1e6 / mb;
    Ok(Row {
        lab: "loopback",
        connections: n,
        mode,
        run,
        cpu_us_per_mb_1k: per_mb(cpu_1k, mb_1k),
        cpu_us_per_mb_64k: per_mb(cpu_64k, mb_64k),
        cpu_us_per_mb_bulk: per_mb(cpu_bulk, mb_bulk),
        rtt_p50_us: quantile(&mut rtts, 0.5),
        rtt_p99_us: quantile(&mut rtts, 0.99),
        kib_per_connection: peak.1.saturating_sub(base.1) as f64 / n as f64,
        descriptors_per_connection: peak.0.saturating_sub(base.0) as f64 / n as f64,
        mb_1k,
        mb_64k,
        mb_bulk,
    })
}

/// The echo destination: every byte back as it comes, until this process's stdin closes.
fn echo_server(listen: SocketAddr) -> anyhow::Result<()> {
    crate::relay::raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listener = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind(listen)?;
        anyhow::Ok(s.listen(u32::MAX)?)
    })?;
    eprintln!("echo: listening on {}", listener.local_addr()?);
    // Until the bench's end of our stdin closes (it ended, or dropped us).
    crate::relay::exit_when_stdin_ends();
    rt.block_on(async move {
        loop {
            let Ok((mut c, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            // As a request/response server does: no Nagle. With it, an echo written in pieces
            // (tokio's copy writes 8 KiB at a time) waits for the acknowledgement of the first
            // piece, which a relay that wrote the request whole (the loops) gets only after the
            // delayed-ACK timer, 40 ms later: seen here as 64 KiB exchanges at 40 ms each.
            let _ = c.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let mut r = tokio::io::BufReader::with_capacity(64 << 10, &mut r);
                let _ = tokio::io::copy_buf(&mut r, &mut w).await;
            });
        }
    })
}

/// The most connections the relay's descriptors hold: floor((hard RLIMIT_NOFILE - 100) / 2).
fn ceiling() -> usize {
    let hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |l| l.1);
    (hard.saturating_sub(100) / 2) as usize
}

/// `--connections`: a count from 1 to the ceiling, or `max`.
fn connections(s: &str) -> Result<usize, String> {
    let max = ceiling();
    match s {
        "max" => Ok(max),
        n => match n.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!("give 1 to {max} (the relay's descriptors), or max")),
        },
    }
}

/// `zcnet bench relay`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    if opt.echo_server {
        return echo_server(opt.echo_listen);
    }
    if opt.common.remote.is_some() {
        bail!("bench relay runs on this host (its labs: loopback, veth), not with --remote");
    }
    if let Some(lab) = opt.common.labs.iter().find(|l| !LABS.contains(&l.as_str())) {
        bail!("bench relay runs in the loopback and veth labs, not {lab:?}");
    }
    let plan = Plan {
        counts: if opt.connections.is_empty() {
            vec![1, 100, 1000, ceiling()]
        } else {
            opt.connections.clone()
        },
        modes: if opt.modes.is_empty() {
            vec![Mode::Loops, Mode::Copy, Mode::TokioCopy]
        } else {
            opt.modes.clone()
        },
        runs: opt.common.runs.unwrap_or(3),
        seconds: opt.common.seconds.unwrap_or(1.0),
        bulk_streams: opt.bulk_streams,
        quiet: opt.common.json,
    };
    let labs = opt.common.labs_or(&["loopback"]);
    if labs.contains(&"veth") {
        opt.common
            .needs_labs("bench relay --lab veth builds its namespaces")?;
    }
    bench(&plan, &labs)?.finish(&opt.common)
}

/// Runs `plan` in each of `labs` (`loopback`, `veth`): each run's rows in the report's
/// settings, the verdicts of the loops against each other relay as its summary rows.
///
/// # Errors
/// A lab that cannot be built, a process that does not start, an echo that differs.
pub fn bench(plan: &Plan, labs: &[&str]) -> anyhow::Result<Outcome> {
    crate::relay::raise_nofile();
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for &lab in labs {
        if lab == "loopback" {
            let echo = Process::start(&["bench", "relay", "--echo-server"])?;
            rows.extend(plan.measure("loopback", echo.addr)?);
            continue;
        }
        let veth = VethLab::new(None).context("building the veth lab")?;
        let far = VethLab::addr(Side::B, Family::V4);
        let listen = SocketAddr::new(far, 0).to_string();
        let exe = exe.to_str().context("this program's path is not UTF-8")?;
        let echo = Process::spawn(
            veth.b.command(exe),
            &["bench", "relay", "--echo-server", "--echo-listen", &listen],
        )?;
        let (p, to) = (plan.clone(), echo.addr);
        // The clients and the relay (a child of this thread) in side A.
        rows.extend(veth.a.run(move || p.measure("veth", to))??);
    }
    let mut report = Report::new("relay");
    report.settings = serde_json::json!({
        "labs": labs,
        "connections": plan.counts,
        "modes": plan.modes,
        "runs": plan.runs,
        "seconds": plan.seconds,
        "bulk_streams": plan.bulk_streams,
        "relay": "zcnet relay --engine E (a process of its own); CPU of all its threads",
        "destination": "an echo server of this bench's own (tokio, TCP_NODELAY)",
    });
    report.rows = rows
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let mut summary = Vec::new();
    for lab in LABS {
        let of: Vec<Row> = rows.iter().filter(|r| r.lab == lab).cloned().collect();
        if !of.is_empty() {
            summary.extend(verdicts(lab, &of, &plan.counts, &plan.modes));
        }
    }
    Ok(Outcome::new(report, summary))
}

/// What to measure in each lab.
#[derive(Clone)]
pub struct Plan {
    /// Connections at once, each in turn.
    pub counts: Vec<usize>,
    /// The relays, alternated.
    pub modes: Vec<Mode>,
    pub runs: usize,
    /// Length of each phase of a run.
    pub seconds: f64,
    /// Connections streaming in the bulk phase, at most.
    pub bulk_streams: usize,
    /// No line per run (`--json`, the suite's quiet).
    pub quiet: bool,
}

impl Plan {
    /// Every count, run and mode (alternated) against the echo at `echo`, from this thread's
    /// network namespace.
    fn measure(&self, lab: &'static str, echo: SocketAddr) -> anyhow::Result<Vec<Row>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut rows = Vec::new();
        for &n in &self.counts {
            for run in 0..self.runs {
                for k in 0..self.modes.len() {
                    let mode = self.modes[(k + run) % self.modes.len()];
                    let seconds = self.seconds;
                    let row = one_run(&rt, echo, mode, n, run, seconds, self.bulk_streams)
                        .with_context(|| {
                            format!("{lab}: {} with {n} connections, run {run}", mode.name())
                        })?;
                    let row = Row { lab, ..row };
                    if !self.quiet {
                        eprintln!(
                            "{lab:<8} {n:>6} {:<14} run {run}: {:>7.0} {:>7.0} {:>7.0} µs/MB, p50 \
                             {:>6.0} p99 {:>7.0} µs, {:.2} KiB {:.2} fds a connection",
                            mode.name(),
                            row.cpu_us_per_mb_1k,
                            row.cpu_us_per_mb_64k,
                            row.cpu_us_per_mb_bulk,
                            row.rtt_p50_us,
                            row.rtt_p99_us,
                            row.kib_per_connection,
                            row.descriptors_per_connection
                        );
                    }
                    rows.push(row);
                }
            }
        }
        Ok(rows)
    }
}

fn verdicts(lab: &str, rows: &[Row], counts: &[usize], modes: &[Mode]) -> Vec<SummaryRow> {
    type Figure = fn(&Row) -> f64;
    let figures: [(&str, Figure); 3] = [
        ("CPU/MB 1 KiB", |r| r.cpu_us_per_mb_1k),
        ("CPU/MB 64 KiB", |r| r.cpu_us_per_mb_64k),
        ("CPU/MB bulk", |r| r.cpu_us_per_mb_bulk),
    ];
    let median = |v: Vec<f64>| crate::measure::stats::median(&v).unwrap_or(f64::NAN);
    let mut out = Vec::new();
    for &n in counts {
        let of = |m: Mode| -> Vec<&Row> {
            rows.iter()
                .filter(|r| r.connections == n && r.mode == m)
                .collect()
        };
        let loops = of(Mode::Loops);
        for &other in modes.iter().filter(|&&m| m != Mode::Loops) {
            let theirs = of(other);
            let mut judge = |what: &str, f: Figure, goal: Option<Goal>| {
                let pairs: Vec<f64> = loops
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| f(a) / f(b))
                    .collect();
                let medians = (
                    median(theirs.iter().map(|r| f(r)).collect()),
                    median(loops.iter().map(|r| f(r)).collect()),
                );
                out.push(SummaryRow::new(
                    format!("relay {lab} {n} conns, loops vs {}", other.name()),
                    what,
                    medians,
                    None,
                    &Verdict::judge(&pairs, goal),
                ));
            };
            for (what, f) in figures {
                judge(what, f, Some(Goal::AtMost(1.0)));
            }
            if other == Mode::TokioCopy {
                let goal = (n >= 1000).then_some(Goal::AtMost(1.1));
                judge("p99 1 KiB", |r| r.rtt_p99_us, goal);
            }
        }
    }
    out
}
