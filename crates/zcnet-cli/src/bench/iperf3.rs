//! `zcnet bench iperf3`: `zcnet iperf3` beside iperf3 itself, on one host, in a namespace whose
//! loopback has MTU 61512 (over IPv6 a segment then carries 61440 bytes: 15 whole pages, what
//! `TCP_ZEROCOPY_RECEIVE` maps, as the kernel's `tcp_mmap` experiment sets it up).
//!
//! Each measurement is one test of `--seconds` between two processes, server and client, each
//! started afresh and pinned to a CPU of its own (the server to the second, the client to the
//! first, where there are two); the CPU of the side measured is what the kernel charged it
//! (`getrusage(RUSAGE_CHILDREN)` before and after it is reaped: all its threads, user and
//! system), over the bytes its client's `-J` reports. The arms alternate, run by run.
//!
//! - **Receivers**, fed by `iperf3 -c -Z` (sendfile): `iperf3 -s` against `zcnet iperf3 -s`
//!   (`TCP_ZEROCOPY_RECEIVE`). A local sender's page-cache pages are never mapped (Linux 6.8,
//!   "tcp: add sanity checks to rx zerocopy"), so this is zcnet's receiver copying against
//!   iperf3's; the same two fed by `zcnet iperf3 -c --mode zc` (MSG_ZEROCOPY, whose copy for a
//!   local receiver leaves whole anonymous pages) show the mapping.
//! - **Senders**, into `iperf3 -s`: `iperf3 -c` and `iperf3 -c -Z` against zcnet's `--mode
//!   auto` (its default), `-Z`, `copy`, `zc` and `zc-fixed`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, LoopbackLab};
use nix::sys::resource::{UsageWho, getrusage};
use serde::Serialize;

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use super::verdict::{Goal, Verdict};
use crate::measure::Report;

/// Options of `zcnet bench iperf3`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// The iperf3 program to run beside zcnet.
    #[arg(long, value_name = "PATH", default_value = "iperf3")]
    pub iperf3: std::path::PathBuf,
}

/// Which program runs a side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Program {
    Iperf3,
    Zcnet,
}

/// The side whose CPU an arm measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Side {
    Receiver,
    Sender,
}

/// One arm: a client and a server, and the side measured.
#[derive(Clone, Copy, Debug)]
struct Arm {
    name: &'static str,
    side: Side,
    client: (Program, &'static [&'static str]),
    server: (Program, &'static [&'static str]),
}

const ARMS: [Arm; 11] = [
    Arm {
        name: "iperf3 -s <- iperf3 -c -Z",
        side: Side::Receiver,
        client: (Program::Iperf3, &["-Z"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -s <- iperf3 -c -Z",
        side: Side::Receiver,
        client: (Program::Iperf3, &["-Z"]),
        server: (Program::Zcnet, &[]),
    },
    Arm {
        name: "iperf3 -s <- zcnet -c --mode zc",
        side: Side::Receiver,
        client: (Program::Zcnet, &["--mode", "zc"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -s <- zcnet -c --mode zc",
        side: Side::Receiver,
        client: (Program::Zcnet, &["--mode", "zc"]),
        server: (Program::Zcnet, &[]),
    },
    Arm {
        name: "iperf3 -c",
        side: Side::Sender,
        client: (Program::Iperf3, &[]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "iperf3 -c -Z",
        side: Side::Sender,
        client: (Program::Iperf3, &["-Z"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -c --mode auto",
        side: Side::Sender,
        client: (Program::Zcnet, &["--mode", "auto"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -c -Z",
        side: Side::Sender,
        client: (Program::Zcnet, &["-Z"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -c --mode copy",
        side: Side::Sender,
        client: (Program::Zcnet, &["--mode", "copy"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -c --mode zc",
        side: Side::Sender,
        client: (Program::Zcnet, &["--mode", "zc"]),
        server: (Program::Iperf3, &[]),
    },
    Arm {
        name: "zcnet -c --mode zc-fixed",
        side: Side::Sender,
        client: (Program::Zcnet, &["--mode", "zc-fixed"]),
        server: (Program::Iperf3, &[]),
    },
];

/// The verdicts: (zcnet's arm, iperf3's arm, goal). Goals where the issue sets them; the others
/// are information.
const VERDICTS: [(&str, &str, Option<f64>); 7] = [
    (
        "zcnet -s <- iperf3 -c -Z",
        "iperf3 -s <- iperf3 -c -Z",
        Some(0.9),
    ),
    (
        "zcnet -s <- zcnet -c --mode zc",
        "iperf3 -s <- zcnet -c --mode zc",
        None,
    ),
    ("zcnet -c -Z", "iperf3 -c -Z", Some(1.0)),
    ("zcnet -c --mode auto", "iperf3 -c", Some(1.0)),
    ("zcnet -c --mode copy", "iperf3 -c", None),
    ("zcnet -c --mode zc", "iperf3 -c", None),
    ("zcnet -c --mode zc-fixed", "iperf3 -c", None),
];

/// The port of every test (the lab's namespace is this bench's alone).
const PORT: &str = "5201";

/// One test's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    arm: &'static str,
    side: Side,
    run: usize,
    /// Bytes the measured side moved (its client's `-J`: `end.sum_received` or `sum_sent`).
    bytes: u64,
    /// CPU seconds of the measured side's process, all its threads.
    cpu_s: f64,
    cpu_us_per_mb: f64,
    /// zcnet's client only: the share it sent without a copy (its `-J`'s `zcnet` object).
    zero_copy_share: Option<f64>,
}

/// `zcnet bench iperf3`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    if opt.common.remote.is_some() {
        bail!("bench iperf3 runs on this host, in a namespace of its own, not with --remote");
    }
    if let Some(lab) = opt.common.labs.iter().find(|l| l.as_str() != "loopback") {
        bail!("bench iperf3 runs in its loopback lab (MTU 61512, IPv6), not {lab:?}");
    }
    opt.common
        .needs_labs("bench iperf3 builds a namespace with a loopback of MTU 61512")?;
    if !installed(&opt.iperf3) {
        bail!(
            "bench iperf3 needs iperf3 ({} does not run; Debian: apt-get install iperf3, or \
             give --iperf3 PATH)",
            opt.iperf3.display()
        );
    }
    let runs = opt.common.runs.unwrap_or(5);
    let seconds = opt.common.seconds.unwrap_or(2.0).max(1.0).round() as u32;
    bench(&opt.iperf3, runs, seconds, opt.common.json)?.finish(&opt.common)
}

/// Whether `iperf3` runs (`iperf3 --version`).
pub fn installed(iperf3: &std::path::Path) -> bool {
    Command::new(iperf3)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs every arm `runs` times, alternated, tests of `seconds`.
///
/// # Errors
/// The lab cannot be built; a process does not start, does not end in time, or its client's
/// `-J` has no byte count.
pub fn bench(
    iperf3: &std::path::Path,
    runs: usize,
    seconds: u32,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let lab = LoopbackLab::new(Some(61512)).context("building the loopback lab")?;
    let addr = lab.addr(Family::V6).to_string();
    let exe = std::env::current_exe()?;
    let programs = Programs {
        iperf3: iperf3.to_str().context("the iperf3 path is not UTF-8")?,
        zcnet: exe.to_str().context("this program's path is not UTF-8")?,
    };
    let mut rows = Vec::new();
    for run in 0..runs {
        for k in 0..ARMS.len() {
            let arm = ARMS[(k + run) % ARMS.len()];
            let row = one_test(&lab, &programs, &addr, arm, seconds, run)
                .with_context(|| format!("{}, run {run}", arm.name))?;
            if !quiet {
                eprintln!(
                    "{:<34} run {run}: {:>7.1} µs/MB, {:.2} GB{}",
                    arm.name,
                    row.cpu_us_per_mb,
                    row.bytes as f64 / 1e9,
                    row.zero_copy_share
                        .map(|s| format!(", {:.1} % without a copy", 100.0 * s))
                        .unwrap_or_default()
                );
            }
            rows.push(row);
        }
    }
    drop(lab);
    let mut report = Report::new("iperf3");
    report.settings = serde_json::json!({
        "lab": "a namespace whose loopback has MTU 61512, over ::1 (61440-byte segments)",
        "runs": runs,
        "seconds": seconds,
        "iperf3": iperf3_version(iperf3),
        "port": PORT,
        "cpu": "getrusage(RUSAGE_CHILDREN) around the reaping of the measured process: all its \
                threads; server pinned to the second CPU, client to the first, where two",
        "arms": ARMS.iter().map(|a| a.name).collect::<Vec<_>>(),
    });
    report.rows = rows
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    Ok(Outcome::new(report, verdicts(&rows)))
}

/// The paths of the two programs.
struct Programs<'a> {
    iperf3: &'a str,
    zcnet: &'a str,
}

impl Programs<'_> {
    /// The command of `program` as `role` (`-s` or `-c ADDR`) in `lab`'s namespace, its own
    /// arguments after.
    fn command(&self, lab: &LoopbackLab, program: Program, role: &[&str], own: &[&str]) -> Command {
        let mut c = match program {
            Program::Iperf3 => lab.ns.command(self.iperf3),
            Program::Zcnet => {
                let mut c = lab.ns.command(self.zcnet);
                c.arg("iperf3");
                c
            }
        };
        c.args(role).args(["-p", PORT]).args(own);
        c
    }
}

fn iperf3_version(iperf3: &std::path::Path) -> String {
    Command::new(iperf3)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default()
}

/// Pins process `pid` to CPU `cpu`, where this machine has it.
fn pin(pid: u32, cpu: usize) {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid as i32), &set);
    }
}

/// CPU seconds of the children reaped so far.
fn children_cpu() -> f64 {
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// Waits (at most until `deadline`) for `child` to end and reaps it: its exit status and the
/// CPU it took (what reaping it added to the children's rusage). Killed at the deadline.
fn reap(mut child: Child, deadline: Instant, what: &str) -> anyhow::Result<(bool, f64)> {
    let before = children_cpu();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status.success(), children_cpu() - before));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not end in time");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` (in its namespace) has a TCP socket listening on [`PORT`].
fn listening(pid: u32) -> bool {
    let port = format!(":{:04X} ", PORT.parse::<u16>().unwrap_or(5201));
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.get(1)
                    .is_some_and(|a| format!("{a} ").ends_with(&port))
                    && cols.get(3) == Some(&"0A")
            })
        })
    })
}

/// A process of a test, killed (and reaped) if the test ends before it was reaped.
struct Started(Option<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Started {
    /// Reaps it (see [`reap`]).
    fn reap(&mut self, deadline: Instant, what: &str) -> anyhow::Result<(bool, f64)> {
        match self.0.take() {
            Some(c) => reap(c, deadline, what),
            None => bail!("{what} was reaped already"),
        }
    }
}

/// Reads all of `r` on a thread of its own (a child's pipe, read while it runs: a `-J` of a long
/// test fills a pipe's 64 KiB before it ends).
fn read_all(r: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// One test of `arm`: its server, then its client; the measured side's CPU over its bytes.
fn one_test(
    lab: &LoopbackLab,
    programs: &Programs<'_>,
    addr: &str,
    arm: Arm,
    seconds: u32,
    run: usize,
) -> anyhow::Result<Row> {
    let deadline = Instant::now() + Duration::from_secs(u64::from(seconds) + 30);
    let mut server = Started(Some(
        programs
            .command(lab, arm.server.0, &["-s", "-1"], arm.server.1)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the server")?,
    ));
    let server_pid = server.0.as_ref().map_or(0, Child::id);
    pin(server_pid, 1);
    while !listening(server_pid) {
        if Instant::now() > deadline {
            bail!("the server did not listen on {PORT}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let t = seconds.to_string();
    let mut client = Started(Some(
        programs
            .command(
                lab,
                arm.client.0,
                &["-c", addr, "-t", &t, "-J"],
                arm.client.1,
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the client")?,
    ));
    let child = client.0.as_mut().context("the client")?;
    pin(child.id(), 0);
    let (out, err) = (read_all(child.stdout.take()), read_all(child.stderr.take()));
    let (client_ok, client_cpu) = client.reap(deadline, "the client")?;
    let (_, server_cpu) = server.reap(deadline, "the server")?;
    let text = out.join().unwrap_or_default();
    let said = err.join().unwrap_or_default();
    if !client_ok {
        bail!("the client failed: {}{}", said.trim(), text.trim());
    }
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("the client's -J: {said}"))?;
    let (sum, cpu_s) = match arm.side {
        Side::Receiver => ("sum_received", server_cpu),
        Side::Sender => ("sum_sent", client_cpu),
    };
    let bytes = doc["end"][sum]["bytes"]
        .as_u64()
        .with_context(|| format!("no end.{sum}.bytes in the client's -J"))?;
    if bytes == 0 {
        bail!("the test moved no byte");
    }
    Ok(Row {
        arm: arm.name,
        side: arm.side,
        run,
        bytes,
        cpu_s,
        cpu_us_per_mb: cpu_s * 1e6 / (bytes as f64 / 1e6),
        zero_copy_share: (arm.client.0 == Program::Zcnet && arm.side == Side::Sender)
            .then(|| doc["zcnet"]["zero_copy_share"].as_f64())
            .flatten(),
    })
}

/// zcnet's arm over iperf3's, run by run, each with its interval and goal.
fn verdicts(rows: &[Row]) -> Vec<SummaryRow> {
    let median = |v: Vec<f64>| crate::measure::stats::median(&v).unwrap_or(f64::NAN);
    let of = |name: &str| -> Vec<&Row> { rows.iter().filter(|r| r.arm == name).collect() };
    VERDICTS
        .iter()
        .map(|&(ours, theirs, goal)| {
            let (a, b) = (of(ours), of(theirs));
            let pairs: Vec<f64> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| x.cpu_us_per_mb / y.cpu_us_per_mb)
                .collect();
            let share = median(a.iter().filter_map(|r| r.zero_copy_share).collect());
            SummaryRow::new(
                format!("iperf3 {ours} vs {theirs}"),
                "CPU/MB",
                (
                    median(b.iter().map(|r| r.cpu_us_per_mb).collect()),
                    median(a.iter().map(|r| r.cpu_us_per_mb).collect()),
                ),
                share.is_finite().then_some(share),
                &Verdict::judge(&pairs, goal.map(Goal::AtMost)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_names_two_arms_of_the_same_side() {
        let side = |n: &str| ARMS.iter().find(|a| a.name == n).map(|a| a.side);
        for (ours, theirs, _) in VERDICTS {
            assert!(side(ours).is_some(), "{ours}");
            assert_eq!(side(ours), side(theirs), "{ours} vs {theirs}");
        }
    }
}
