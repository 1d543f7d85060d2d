//! `tcp-rx` in a lab here: the sender as a separate process (this binary with `--connect`,
//! in the lab's namespace), the receiver on this host, one condition's runs alternated.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use netlab::Netns;

use super::lab::{Condition, Lab, listen};
use super::stream::{Mode, Settings, receive};
use crate::measure::{self, Pinned, Progress, Run};

/// The sender child: `zcnet bench tcp-rx --connect` in the lab's sender namespace. It is ended
/// (by its id) if the receiver gives up before it finishes.
pub(super) struct SenderProcess {
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
pub(super) fn run_condition(
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
