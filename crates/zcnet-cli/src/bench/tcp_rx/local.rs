//! `tcp-rx` in a lab here: the sender as a separate process (this binary with `--connect`,
//! in the lab's namespace), the receiver on this host, one condition's runs alternated; with
//! `--reference`, the kernel's `tcp_mmap` in the same rounds ([`super::tcp_mmap`]).

use std::net::SocketAddr;

use anyhow::{Context, bail};
use netlab::Netns;

use super::lab::{Condition, Lab, listen};
use super::stream::{Mode, Settings, receive};
use super::tcp_mmap::{Ends, run_tcp_mmap};
use crate::bench::reference::{Arm, Reference};
use crate::measure::{self, Pinned, Progress, Run};

/// The sender child: `zcnet bench tcp-rx --connect --paced` in the lab's sender namespace,
/// which makes each connection when told to (a line on its stdin), so that none waits in the
/// listener's queue, its seconds running, while another arm runs. It is ended (by its id) if
/// the receiver gives up before it finishes.
pub(super) struct SenderProcess {
    child: std::process::Child,
    go: Option<std::process::ChildStdin>,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl SenderProcess {
    /// Starts a sender making up to `2 × runs` connections, each when told to.
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
        cmd.args([
            "bench",
            "tcp-rx",
            "--json",
            "--paced",
            "--connect",
            &addr.to_string(),
        ])
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
            .stdin(Stdio::piped())
            .spawn()
            .context("starting the sender process")?;
        let stdout = child.stdout.take().expect("stdout is piped");
        Ok(SenderProcess {
            go: child.stdin.take(),
            child,
            lines: std::io::BufReader::new(stdout).lines(),
        })
    }

    /// Tells the sender to make its next connection.
    fn go(&mut self) -> anyhow::Result<()> {
        use std::io::Write as _;
        let stdin = self.go.as_mut().context("the sender's stdin is closed")?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .context("the sender process ended early")
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
        // Its stdin's end tells it to stop; a sender stuck in a connection is ended by its id.
        drop(self.go.take());
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs every alternation of one condition: one sender process, one connection per run, the
/// receiver on this thread pinned to CPU 1; with `reference`, its arms (the kernel's
/// `tcp_mmap`, copy and zc) beside zcnet's modes. Returns the arms and their runs in order.
pub(super) fn run_condition(
    lab: &Lab,
    c: &Condition,
    s: &Settings,
    reference: Option<&Reference>,
    progress: &Progress,
    quiet: bool,
) -> anyhow::Result<(Vec<Arm<Mode>>, measure::OrderedRuns)> {
    let (recv_ns, send_ns, ip) = lab.ends(c.family);
    let mss = c.mss;
    let listener = recv_ns.run(move || listen(SocketAddr::new(ip, 0), mss))??;
    let addr = listener.local_addr()?;
    let arms = Arm::alternate(&s.modes, reference.is_some(), |m| m != Mode::ZcKernelZap);
    // One more connection per mode: a discarded warm-up round before the measured ones (the
    // first run in a fresh lab cost several times the others).
    let conns = (s.runs + 1) * s.modes.len();
    let mut sender = SenderProcess::start(send_ns, addr, mss, conns, s.seconds)?;
    let _pinned = Pinned::to(1);
    let ends = Ends {
        recv_ns,
        send_ns,
        ip,
        family: c.family,
        mss,
    };
    let mut one = |arm: Arm<Mode>, what: &dyn Fn() -> String| -> anyhow::Result<Run> {
        let mode = match arm {
            Arm::Zcnet(mode) => mode,
            Arm::Reference(mode) => {
                let r = reference.expect("reference arms only with a reference");
                return run_tcp_mmap(r, &ends, mode != Mode::Copy, s.seconds).with_context(what);
            }
        };
        sender.go().with_context(what)?;
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
    let name = |a: Arm<Mode>| a.name(Mode::name);
    for &arm in &arms {
        one(arm, &|| format!("{} {} warm-up run", c.label(), name(arm)))?;
    }
    // Mirrored rounds (copy zc zc copy ...): a copy run that follows a zero-copy run cost
    // ~50 % more CPU than one that follows a copy run (issue 17); each mode now follows each
    // mode equally often, and the report gives the effect it measured.
    let runs = measure::alternate_abba(&arms, s.runs, progress, |arm, i| {
        let run = one(arm, &|| {
            format!("{} {} run {}", c.label(), name(arm), i + 1)
        })?;
        if !quiet {
            println!("[{}] {:<8} {}", c.label(), name(arm), tcp_mmap_line(&run));
        }
        anyhow::Ok(run)
    })?;
    Ok((arms, runs))
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
