//! `zcnet bench tcp-rx`: TCP zero-copy receive against `recv` into a 512 KiB buffer, the
//! experiment of the kernel's `tcp_mmap` reference program.
//!
//! A sender thread streams the verification pattern with `MSG_ZEROCOPY` in 512 KiB calls for a
//! fixed time; on loopback and veth only such a sender produces whole, aligned pages (its
//! deferred copy does), so both modes use it and only the receiver differs: `copy` reads with
//! `recv`, `zc` maps pages with `TCP_ZEROCOPY_RECEIVE`. Sender and receiver are pinned to
//! different CPUs. Modes alternate, copy first, run by run.
//!
//! The sender is a separate process (this binary with `--connect`, started inside the lab's
//! namespace), as in `tcp_mmap`: a sender *thread* shares the receiver's address space, so every
//! zap of the receive window would send a TLB-shootdown IPI to the sender's CPU. Measured here,
//! that added about 30 µs per MB to the zero-copy receiver.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use zcnet::ZeroCopyCounters as _;

use anyhow::{Context, bail};
use netlab::pattern::{self, Verifier};
use netlab::{CONGESTION, Family, LoopbackLab, Netns, Side, VethLab};
use serde_json::json;
use zcnet::msg_zerocopy::{self, CopiedPolicy, Counters as SendCounters, ZeroCopySender};
use zcnet::tcp_rx::{self, Config, Counters as RxStats, Release, TcpZeroCopyReceiver};

use super::common::{Common, FamilyArg};
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::measure::{
    self, Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work, pin,
};
use crate::remote::proto::Role;

/// Bytes per send call and receive window, as `tcp_mmap` uses.
const CHUNK: usize = 512 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of `zcnet bench tcp-rx`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Address family (repeatable). Default: both.
    #[arg(long = "family", value_enum)]
    pub families: Vec<FamilyArg>,
    /// Do not check the received bytes (measures the bare path).
    #[arg(long)]
    pub no_verify: bool,
    /// Receiver modes to alternate (repeatable). Default: copy and zc; add zc-kernel-zap to
    /// compare page-release policies side by side.
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// Receiver only: accept the runs of a remote `--connect` sender on ADDR.
    #[arg(long, value_name = "ADDR", conflicts_with = "connect")]
    pub listen: Option<SocketAddr>,
    /// Sender only: stream to a remote `--listen` receiver at ADDR.
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// TCP_MAXSEG for --listen/--connect/--remote (4108 makes 4 KiB payloads with timestamps).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(i32).range(88..=65535))]
    pub mss: Option<i32>,
    /// With --connect: connections to make (default: runs × modes, one per receiver run).
    #[arg(long, value_name = "N", requires = "connect", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections: Option<usize>,
    /// Receive window (bytes mapped or read per call, and SO_RCVLOWAT), in KiB.
    #[arg(long, value_name = "KIB", default_value_t = 512, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=1048576))]
    pub window_kib: usize,
}

/// Receiver mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `recv(2)` into a 512 KiB buffer (the window).
    Copy,
    /// `TCP_ZEROCOPY_RECEIVE`, pages released by `madvise(MADV_DONTNEED)` right after use and
    /// `TLB_CLEAN_HINT` on the next call (the library's default).
    Zc,
    /// `TCP_ZEROCOPY_RECEIVE`, pages left mapped until the next call zaps the range itself.
    ZcKernelZap,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Zc => "zc",
            Mode::ZcKernelZap => "zc-kernel-zap",
        }
    }
}

/// One experiment: lab, family, and what makes payloads page-sized.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Condition {
    /// `loopback` or `veth`.
    pub lab: &'static str,
    /// Address family.
    pub family: Family,
    /// MTU of the lab's device.
    pub mtu: Option<u32>,
    /// TCP_MAXSEG on both ends.
    pub mss: Option<i32>,
}

impl Condition {
    fn params(&self) -> serde_json::Value {
        json!({"mtu": self.mtu, "mss": self.mss})
    }

    fn label(&self) -> String {
        let what = match (self.mtu, self.mss) {
            (_, Some(mss)) => format!("mss {mss}"),
            (Some(mtu), None) => format!("mtu {mtu}"),
            (None, None) => "defaults".into(),
        };
        format!("{} {} {what}", self.lab, self.family.name())
    }

    /// The acceptance bound on zc/copy receiver µs per MB, where the issue sets one.
    fn bound(&self) -> Option<f64> {
        match (self.lab, self.family, self.mtu, self.mss) {
            ("loopback", Family::V6, Some(61512), None) => Some(0.6),
            ("loopback", Family::V6, _, Some(4108)) => Some(0.75),
            _ => None,
        }
    }
}

/// The conditions of the issue: loopback with MSS 4108 and with MTU 61512, and veth with an
/// MTU that carries 4 KiB payloads (4096 + 12 timestamp + 20 TCP + 40 IPv6 / 20 IPv4).
pub fn conditions() -> Vec<Condition> {
    let mut out = Vec::new();
    for family in [Family::V6, Family::V4] {
        out.push(Condition {
            lab: "loopback",
            family,
            mtu: None,
            mss: Some(4108),
        });
        out.push(Condition {
            lab: "loopback",
            family,
            mtu: Some(61512),
            mss: None,
        });
        let veth_mtu = if family == Family::V6 { 4168 } else { 4148 };
        out.push(Condition {
            lab: "veth",
            family,
            mtu: Some(veth_mtu),
            mss: None,
        });
    }
    out
}

enum Lab {
    Loopback(LoopbackLab),
    Veth(VethLab),
}

impl Lab {
    fn build(c: &Condition) -> anyhow::Result<Lab> {
        Ok(match c.lab {
            "loopback" => {
                Lab::Loopback(LoopbackLab::new(c.mtu).context("building the loopback lab")?)
            }
            "veth" => Lab::Veth(VethLab::new(c.mtu).context("building the veth lab")?),
            other => bail!("tcp-rx has no lab {other:?} (loopback, veth)"),
        })
    }

    /// (receiver namespace, sender namespace, receiver address)
    fn ends(&self, family: Family) -> (&Netns, &Netns, IpAddr) {
        match self {
            Lab::Loopback(l) => (&l.ns, &l.ns, l.addr(family)),
            Lab::Veth(v) => (&v.b, &v.a, VethLab::addr(Side::B, family)),
        }
    }
}

fn set_mss(s: socket2::SockRef<'_>, mss: Option<i32>) -> anyhow::Result<()> {
    if let Some(m) = mss {
        s.set_tcp_mss(u32::try_from(m).context("MSS")?)
            .context("setsockopt(TCP_MAXSEG)")?;
    }
    Ok(())
}

fn listen(addr: SocketAddr, mss: Option<i32>) -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
    set_mss(socket2::SockRef::from(&l), mss)?;
    Ok(l)
}

fn connect(addr: SocketAddr, mss: Option<i32>) -> anyhow::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .context("socket")?;
    set_mss(socket2::SockRef::from(&s), mss)?;
    s.connect(&addr.into())
        .with_context(|| format!("connecting to {addr}"))?;
    Ok(TcpStream::from(s))
}

/// Streams the pattern for `seconds` on `stream` with MSG_ZEROCOPY, then closes it. The
/// sender keeps zero-copy on although loopback copies: that deferred copy is what makes the
/// receiver's pages mappable.
fn send_for(stream: TcpStream, seconds: f64) -> anyhow::Result<SendCounters> {
    let config = msg_zerocopy::Config {
        policy: CopiedPolicy::Keep,
        ..msg_zerocopy::Config::default()
    };
    let mut tx = ZeroCopySender::new(stream, config)
        .map_err(|e| e.error)
        .context("enabling SO_ZEROCOPY")?;
    let start = Instant::now();
    let mut off = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let chunk = pattern::chunk_at(off, CHUNK);
        tx.send(chunk).map_err(|e| e.error).context("send")?;
        off += chunk.len() as u64;
        tx.reap().context("reading the error queue")?;
        tx.returned().for_each(drop);
    }
    tx.drain(Duration::from_secs(2))
        .context("draining completions")?;
    Ok(tx.counters())
}

/// The share of each run spent warming up, unmeasured.
pub const WARM_UP: f64 = 0.25;

/// Receives one connection to its end, measuring the receiving thread after a warm-up.
fn receive(conn: TcpStream, mode: Mode, s: &Settings) -> anyhow::Result<(Run, RxStats)> {
    let config = Config {
        window: s.window,
        rcvlowat: Some(s.window),
        mode: if mode == Mode::Copy {
            tcp_rx::Mode::Copy
        } else {
            tcp_rx::Mode::ZeroCopy
        },
        release: if mode == Mode::ZcKernelZap {
            Release::KernelZap
        } else {
            Release::Madvise
        },
        timeout: Some(IO_TIMEOUT),
    };
    let verify = s.verify;
    let mut rx = TcpZeroCopyReceiver::new(conn, config).context("setting up the receiver")?;
    if mode != Mode::Copy
        && let Some(why) = rx.fallback_reason()
    {
        bail!("zero-copy receive is not available: {why}");
    }
    let mut v = Verifier::new();
    // The first WARM_UP of the run, in this mode, is not measured: what the previous run left
    // behind (its freed pages, the caches) settles there rather than in the figures.
    let start = Instant::now();
    let warm_up = Duration::from_secs_f64(s.seconds * WARM_UP);
    let mut meter = None;
    let mut warm_bytes = 0;
    while let Some(r) = rx.recv().context("receiving")? {
        if verify {
            for part in r.parts() {
                v.check(part);
            }
        }
        if meter.is_none() && start.elapsed() >= warm_up {
            warm_bytes = rx.counters().bytes();
            meter = Some(Meter::start());
        }
    }
    let stats = rx.counters();
    let meter = meter.context("the connection ended within the warm-up")?;
    let run = meter.finish(Work {
        bytes: stats.bytes() - warm_bytes,
        requests: None,
        zero_copy_share: Some(stats.zero_copy_share().unwrap_or(0.0)),
        verified: verify.then(|| v.ok()),
    });
    if let Some(at) = v.first_bad() {
        eprintln!(
            "tcp-rx: {} mode: received bytes differ from the stream at offset {at}",
            mode.name()
        );
    }
    Ok((run, stats))
}

/// How the receiver runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Runs per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// Check every received byte.
    pub verify: bool,
    /// Receiver modes, alternated in this order; the first is the baseline of comparisons.
    pub modes: Vec<Mode>,
    /// Receive window in bytes.
    pub window: usize,
}

impl Settings {
    /// The settings as the report records them.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "runs": self.runs, "seconds": self.seconds, "verify": self.verify,
            "modes": self.modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "window": self.window, "sender": "separate process, MSG_ZEROCOPY, 512 KiB calls",
            "sender_cpu": 0, "receiver_cpu": 1,
            "order": "one discarded warm-up run per mode, then mirrored rounds (A B B A ...), one connection per run",
            "warm_up_share": WARM_UP,
        })
    }
}

/// The sender child: `zcnet bench tcp-rx --connect` in the lab's sender namespace. It is ended
/// (by its id) if the receiver gives up before it finishes.
struct SenderProcess {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl SenderProcess {
    /// Starts a sender making `2 × runs` connections (one per run and mode).
    fn start(
        ns: &Netns,
        addr: SocketAddr,
        mss: Option<i32>,
        runs: usize,
        seconds: f64,
    ) -> anyhow::Result<SenderProcess> {
        use std::io::BufRead;
        use std::process::Stdio;
        let exe = std::env::current_exe().context("locating the zcnet binary for the sender")?;
        let mut cmd = ns.command(&exe.to_string_lossy());
        cmd.args(["bench", "tcp-rx", "--json", "--connect", &addr.to_string()])
            .args([
                "--runs",
                &runs.to_string(),
                "--seconds",
                &seconds.to_string(),
            ]);
        if let Some(m) = mss {
            cmd.args(["--mss", &m.to_string()]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .context("starting the sender process")?;
        let stdout = child.stdout.take().expect("stdout is piped");
        Ok(SenderProcess {
            child,
            lines: std::io::BufReader::new(stdout).lines(),
        })
    }

    /// The byte count the sender reports for its next connection.
    fn sent(&mut self) -> anyhow::Result<u64> {
        let line = self
            .lines
            .next()
            .context("the sender process ended early")??;
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("sender said {line:?}"))?;
        v["bytes"].as_u64().context("sender line without bytes")
    }
}

impl Drop for SenderProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs every alternation of one condition: one sender process, one connection per run, the
/// receiver on this thread pinned to CPU 1.
fn run_condition(
    lab: &Lab,
    c: &Condition,
    s: &Settings,
    modes: &[Mode],
    progress: &Progress,
    quiet: bool,
) -> anyhow::Result<measure::OrderedRuns> {
    let (recv_ns, send_ns, ip) = lab.ends(c.family);
    let mss = c.mss;
    let listener = recv_ns.run(move || listen(SocketAddr::new(ip, 0), mss))??;
    let addr = listener.local_addr()?;
    // One more connection per mode: a discarded warm-up round before the measured ones (the
    // first run in a fresh lab cost several times the others).
    let conns = (s.runs + 1) * modes.len();
    let mut sender = SenderProcess::start(send_ns, addr, mss, conns, s.seconds)?;
    let _pinned = Pinned::to(1);
    let mut one = |mode: Mode, what: &dyn Fn() -> String| -> anyhow::Result<Run> {
        let (conn, _) = listener.accept().with_context(what)?;
        let (run, stats) = receive(conn, mode, s).with_context(what)?;
        let sent = sender.sent().with_context(what)?;
        if sent != stats.bytes() {
            bail!(
                "{}: the sender sent {sent} bytes but {} arrived",
                what(),
                stats.bytes()
            );
        }
        Ok(run)
    };
    for &mode in modes {
        one(mode, &|| {
            format!("{} {} warm-up run", c.label(), mode.name())
        })?;
    }
    // Mirrored rounds (copy zc zc copy ...): a copy run that follows a zero-copy run cost
    // ~50 % more CPU than one that follows a copy run (issue 17); each mode now follows each
    // mode equally often, and the report gives the effect it measured.
    measure::alternate_abba(modes, s.runs, progress, |mode, i| {
        let run = one(mode, &|| {
            format!("{} {} run {}", c.label(), mode.name(), i + 1)
        })?;
        if !quiet {
            println!("[{}] {:<4} {}", c.label(), mode.name(), tcp_mmap_line(&run));
        }
        Ok(run)
    })
}

/// The reference program's line: `received 32768 MB (99.99 % mmap'ed) in 7.98 s, 34.4 Gbit,
/// cpu usage user:0.03 sys:1.40, 43.5 usec per MB, 65447 c-switches` (voluntary switches).
pub fn tcp_mmap_line(r: &Run) -> String {
    format!(
        "received {:.0} MB ({:.4} % mmap'ed) in {:.2} s, {:.1} Gbit, cpu usage user:{:.2} sys:{:.2}, {:.1} usec per MB, {} c-switches{}",
        r.bytes as f64 / (1u64 << 20) as f64,
        100.0 * r.zero_copy_share.unwrap_or(0.0),
        r.seconds,
        r.gbit,
        r.cpu_user_s,
        r.cpu_sys_s,
        r.cpu_us_per_mb,
        r.voluntary_ctx_switches,
        match r.verified {
            Some(true) => ", verified",
            Some(false) => ", VERIFICATION FAILED",
            None => "",
        }
    ) + &r.far_part()
}

/// Runs the bench over `conds`.
pub fn bench(conds: &[Condition], s: &Settings, quiet: bool) -> anyhow::Result<Outcome> {
    let mut report = Report::new("tcp-rx");
    report.settings = s.json();
    let mut summary = Vec::new();
    let modes = &s.modes;
    let steps = conds.len() * s.runs * modes.len();
    let progress = Progress::new(
        "tcp-rx",
        steps as u64,
        Duration::from_secs_f64(s.seconds * steps as f64),
    );
    for c in conds {
        let lab = Lab::build(c)?;
        let (per_mode, after) = run_condition(&lab, c, s, modes, &progress, quiet)?;
        drop(lab);
        // The order effect on the baseline: its runs after the second mode against its runs
        // after itself.
        if modes.len() > 1 {
            if let Some((same, other, n)) =
                measure::order_effect(&per_mode[0], &after[0], 0, 1, Metric::CpuUsPerMb)
            {
                let (a, b) = (modes[0].name(), modes[1].name());
                let ratio = other / same;
                report.order_effects.push(measure::OrderEffect {
                    condition: c.label(),
                    mode: a.into(),
                    other: b.into(),
                    metric: Metric::CpuUsPerMb,
                    after_same: same,
                    after_other: other,
                    ratio,
                    runs_each: n,
                });
                // A median of one or two runs says more about this machine's noise than about
                // order: the verdict needs three of each (--runs 6).
                let pick = |prev: usize| -> Vec<f64> {
                    per_mode[0]
                        .iter()
                        .zip(&after[0])
                        .filter(|(_, a)| **a == Some(prev))
                        .filter_map(|(r, _)| Metric::CpuUsPerMb.of(r))
                        .collect()
                };
                let goal = (n >= 3).then_some(Goal::NearOne(0.05));
                let mut verdict = Verdict::judge_samples(&pick(0), &pick(1), goal);
                if n < 3 {
                    verdict = verdict.note(format!("{n} run(s) each: --runs 6 or more to judge"));
                }
                summary.push(SummaryRow::new(
                    format!("tcp-rx {} {a} after {b} vs after {a}", c.label()),
                    "recv us/MB",
                    (same, other),
                    None,
                    &verdict,
                ));
            }
        }
        let sets: Vec<ResultSet> = modes
            .iter()
            .zip(per_mode)
            .map(|(m, runs)| {
                ResultSet::new(
                    c.lab,
                    c.family.name(),
                    Some(CONGESTION),
                    c.params(),
                    m.name(),
                    runs,
                )
            })
            .collect();
        let base = &sets[0];
        for other in &sets[1..] {
            for metric in [Metric::CpuUsPerMb, Metric::MachineCpuUsPerMb, Metric::Gbit] {
                report
                    .comparisons
                    .extend(Comparison::new(other, base, metric));
            }
        }
        let by = |m: Mode| sets.iter().find(|r| r.mode == m.name());
        if let (Some(copy), Some(zc)) = (by(Mode::Copy), by(Mode::Zc)) {
            summary.push(summary_row(c, copy, zc));
        }
        report.results.extend(sets);
    }
    Ok(Outcome::new(report, summary))
}

fn summary_row(c: &Condition, copy: &ResultSet, zc: &ResultSet) -> SummaryRow {
    let med = |s: &ResultSet, k: Metric| s.median_of(k).unwrap_or(f64::NAN);
    let pairs = measure::ratio_pairs(&zc.runs, &copy.runs, Metric::CpuUsPerMb);
    let share = zc.median_of(Metric::ZeroCopyShare);
    let verified = [copy, zc].iter().all(|s| s.verified());
    let mut verdict = Verdict::judge(&pairs, c.bound().map(Goal::AtMost))
        .require(share.is_some_and(|s| s >= 0.999), "mapped < 99.9 %");
    if !verified {
        verdict = verdict.fail("wrong bytes");
    }
    SummaryRow::new(
        format!("tcp-rx {}", c.label()),
        "recv us/MB",
        (med(copy, Metric::CpuUsPerMb), med(zc, Metric::CpuUsPerMb)),
        share,
        &verdict,
    )
}

fn selected(opt: &Opt) -> anyhow::Result<Vec<Condition>> {
    let families: Vec<Family> = opt.families.iter().map(|&f| f.into()).collect();
    for lab in &opt.common.labs {
        if lab != "loopback" && lab != "veth" {
            bail!("tcp-rx runs in the loopback and veth labs, not {lab:?}");
        }
    }
    Ok(conditions()
        .into_iter()
        .filter(|c| opt.common.labs.is_empty() || opt.common.labs.iter().any(|l| l == c.lab))
        .filter(|c| families.is_empty() || families.contains(&c.family))
        .collect())
}

/// `zcnet bench tcp-rx`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let settings = Settings {
        runs: opt.common.runs.unwrap_or(5),
        seconds: opt.common.seconds.unwrap_or(5.0),
        verify: !opt.no_verify,
        modes: super::engine::asked_or(&opt.modes, &[Mode::Copy, Mode::Zc]),
        window: opt.window_kib.max(4) * 1024,
    };
    if let Some(addr) = opt.connect {
        return remote_sender(
            addr,
            opt.mss,
            settings.runs,
            settings.seconds,
            opt.common.json,
        );
    }
    if let Some(addr) = opt.listen {
        return remote_receiver(addr, opt.mss, &settings, opt.common.json);
    }
    if let Some(remote) = opt.common.remote()? {
        return with_server(remote, opt.mss, &settings, opt.common.json)?.finish(&opt.common);
    }
    netlab::check_privileges().context("tcp-rx builds its labs in private network namespaces")?;
    let conds = selected(&opt)?;
    let out = bench(&conds, &settings, opt.common.json)?;
    out.finish(&opt.common)
}

/// The report of a two-host run: a set per mode, lab `remote`.
fn two_host_report(
    modes: &[Mode],
    per_mode: Vec<Vec<Run>>,
    family: Family,
    mss: Option<i32>,
    s: &Settings,
) -> Report {
    let mut report = Report::new("tcp-rx");
    report.settings = s.json();
    let sets: Vec<ResultSet> = modes
        .iter()
        .zip(per_mode)
        .map(|(m, runs)| {
            let params = json!({"mss": mss});
            ResultSet::new("remote", family.name(), None, params, m.name(), runs)
        })
        .collect();
    for other in sets.iter().skip(1) {
        for metric in [Metric::CpuUsPerMb, Metric::Gbit] {
            report
                .comparisons
                .extend(Comparison::new(other, &sets[0], metric));
        }
    }
    report.results = sets;
    report
}

/// `--remote`: this host receives, the `zcnet serve` there sends (`MSG_ZEROCOPY`, so that a
/// loopback or veth receiver can map pages too): one connection per run, a discarded warm-up
/// run per mode, then mirrored rounds.
fn with_server(
    mut remote: crate::remote::Remote,
    mss: Option<i32>,
    s: &Settings,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let modes = &s.modes;
    let role = Role::Send {
        zerocopy: true,
        mss,
    };
    let mut one = |mode: Mode| -> anyhow::Result<Run> {
        let settings = s.clone();
        let ((run, stats), far) = remote.run_with(role.clone(), s.seconds, move |dest| {
            pin(1);
            let s = connect(dest.addr, mss)?;
            dest.introduce(&s)?;
            receive(s, mode, &settings)
        })?;
        if far.bytes != stats.bytes() {
            bail!(
                "the far side sent {} bytes but {} arrived",
                far.bytes,
                stats.bytes()
            );
        }
        Ok(run.with_far(&far))
    };
    for &mode in modes {
        one(mode).with_context(|| format!("{} warm-up run", mode.name()))?;
    }
    let progress = Progress::new(
        "tcp-rx",
        (s.runs * modes.len()) as u64,
        Duration::from_secs_f64(s.seconds * (s.runs * modes.len()) as f64),
    );
    let (per_mode, _) = measure::alternate_abba(modes, s.runs, &progress, |mode, i| {
        let run = one(mode).with_context(|| format!("{} run {}", mode.name(), i + 1))?;
        if !quiet {
            println!("[remote] {:<4} {}", mode.name(), tcp_mmap_line(&run));
        }
        anyhow::Ok(run)
    })?;
    let family = Family::of(remote.addr().ip());
    let mut report = two_host_report(modes, per_mode, family, mss, s);
    super::labs::remote_lab(&mut report, Some(&remote), "remote");
    Ok(Outcome::new(report, Vec::new()))
}

/// `--connect`: the sender of a two-host run, one connection per run and mode (`2 × runs`
/// of them); with `--json`, one JSON line per connection on stdout (`{"bytes": N, ...}`).
fn remote_sender(
    addr: SocketAddr,
    mss: Option<i32>,
    runs: usize,
    seconds: f64,
    json: bool,
) -> anyhow::Result<()> {
    pin(0);
    for i in 0..runs * 2 {
        let c = send_for(connect(addr, mss)?, seconds)
            .with_context(|| format!("connection {}", i + 1))?;
        let bytes = c.loaned_bytes + c.copy_bytes;
        if json {
            println!(
                "{}",
                json!({"bytes": bytes, "loaned_calls": c.loaned_calls, "completed_calls": c.completed_calls,
                       "copied_calls": c.copied_calls, "enobufs_fallbacks": c.enobufs_fallbacks})
            );
        } else {
            eprintln!(
                "sent {:.0} MB, {} MSG_ZEROCOPY calls, {} completed ({} flagged copied)",
                bytes as f64 / (1u64 << 20) as f64,
                c.loaned_calls,
                c.completed_calls,
                c.copied_calls
            );
        }
    }
    Ok(())
}

/// `--listen`: the receiver of a two-host run, alternating copy and zc per connection.
fn remote_receiver(
    addr: SocketAddr,
    mss: Option<i32>,
    s: &Settings,
    json: bool,
) -> anyhow::Result<()> {
    let _pinned = Pinned::to(1);
    let listener = listen(addr, mss)?;
    let modes = &s.modes;
    let (per_mode, _) = measure::alternate_abba(modes, s.runs, &Progress::hidden(), |mode, _| {
        let (conn, peer) = listener.accept().context("accept")?;
        let (run, _) = receive(conn, mode, s)?;
        if !json {
            println!("[{peer}] {:<4} {}", mode.name(), tcp_mmap_line(&run));
        }
        anyhow::Ok(run)
    })?;
    let report = two_host_report(modes, per_mode, Family::of(addr.ip()), mss, s);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("\n{}", measure::render(&report));
    }
    Ok(())
}
