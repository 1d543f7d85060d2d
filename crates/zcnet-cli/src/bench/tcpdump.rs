//! tcpdump as a capture method of `zcnet bench packet`: started at the capture point and pinned
//! to CPU 0, writing every frame with `-w -` into /dev/null; its CPU read from `/proc` (it is
//! another process), its counts parsed from the lines it prints when interrupted.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::Netns;

use crate::measure::{Pinned, ProcessCpu};

/// tcpdump's block retire timeout (libpcap's default packet buffer timeout, 1 s): a partly
/// filled block reaches it at most this long after the last frame.
const TCPDUMP_TIMEOUT: Duration = Duration::from_millis(1000);

/// The counts tcpdump prints when interrupted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpdumpCounts {
    /// "N packets captured": written to the file.
    pub captured: u64,
    /// "N packets received by filter".
    pub received: u64,
    /// "N packets dropped by kernel".
    pub dropped: u64,
}

/// Parses tcpdump's closing lines; `None` when one of the three is missing.
pub fn parse_tcpdump_counts(stderr: &str) -> Option<TcpdumpCounts> {
    let count = |what: &str| -> Option<u64> {
        stderr.lines().find_map(|l| {
            let (n, rest) = l.trim().split_once(' ')?;
            (rest == what).then(|| n.parse().ok()).flatten()
        })
    };
    Some(TcpdumpCounts {
        captured: count("packets captured")?,
        received: count("packets received by filter")?,
        dropped: count("packets dropped by kernel")?,
    })
}

/// A tcpdump we started, killed (by its id) if still running when dropped.
pub(super) struct Tcpdump {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Tcpdump {
    /// Starts tcpdump on `dev` (in `ns`, else in this namespace) with a buffer of `buffer_kib`
    /// KiB, pinned to CPU 0, and waits until it listens. With `port` it keeps the UDP frames to
    /// that port only.
    pub(super) fn start(
        ns: Option<&Netns>,
        dev: &str,
        buffer_kib: usize,
        port: Option<u16>,
    ) -> anyhow::Result<Tcpdump> {
        let kib = buffer_kib.to_string();
        let mut cmd = match ns {
            Some(ns) => ns.command("tcpdump"),
            None => std::process::Command::new("tcpdump"),
        };
        // `-w -` into the null stdout given below: tcpdump, run as root, drops to its own user
        // and chowns the file it writes; `-w /dev/null` left the host's /dev/null owned by
        // `tcpdump`.
        cmd.args(["-i", dev, "-p", "-n", "-B", &kib, "-w", "-"]);
        if let Some(port) = port {
            cmd.args(["udp", "dst", "port", &port.to_string()]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The child inherits the affinity of the thread that forks it.
        let mut child = {
            let _on_cpu0 = Pinned::to(0);
            cmd.spawn().context("starting tcpdump")?
        };
        let stderr = child.stderr.take().context("tcpdump's stderr")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut t = Tcpdump {
            child,
            lines,
            seen: Vec::new(),
        };
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match t.lines.recv_timeout(left) {
                Ok(l) if l.contains("listening on") => break,
                Ok(l) => t.seen.push(l),
                Err(_) => bail!("tcpdump did not start: {}", t.seen.join("; ")),
            }
        }
        let comm =
            std::fs::read_to_string(format!("/proc/{}/comm", t.child.id())).unwrap_or_default();
        if comm.trim() != "tcpdump" {
            bail!("process {} is {comm:?}, not tcpdump", t.child.id());
        }
        Ok(t)
    }

    /// tcpdump's CPU so far.
    pub(super) fn cpu(&self) -> anyhow::Result<ProcessCpu> {
        ProcessCpu::read(self.child.id()).context("reading tcpdump's CPU from /proc")
    }

    /// Waits until tcpdump has read what the generator sent: its last block retires after
    /// [`TCPDUMP_TIMEOUT`], then its run time stops growing.
    pub(super) fn drain(&self) -> anyhow::Result<ProcessCpu> {
        std::thread::sleep(TCPDUMP_TIMEOUT + Duration::from_millis(100));
        let mut last = self.cpu()?;
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.cpu()?;
            if now.run_ns == last.run_ns {
                break;
            }
            last = now;
        }
        Ok(last)
    }

    /// Interrupts tcpdump (SIGINT, by its id) and reads its counts.
    pub(super) fn finish(mut self) -> anyhow::Result<TcpdumpCounts> {
        use nix::sys::signal::{Signal, kill};
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        kill(pid, Signal::SIGINT).context("interrupting tcpdump")?;
        let end = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > end {
                bail!("tcpdump did not exit within 10 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The reader ends at end of file (tcpdump has exited): at most a short wait.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(l);
        }
        let all = self.seen.join("\n");
        parse_tcpdump_counts(&all).with_context(|| format!("tcpdump's counts missing in: {all}"))
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcpdump_closing_lines() {
        let err = "tcpdump: listening on veth-b, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n\
                   ^C1843200 packets captured\n\
                   1900000 packets received by filter\n\
                   56800 packets dropped by kernel\n";
        // The first count follows the ^C tcpdump's terminal echoed; a count line stands alone.
        let counts = parse_tcpdump_counts(&err.replace("^C", ""));
        assert_eq!(
            counts,
            Some(TcpdumpCounts {
                captured: 1_843_200,
                received: 1_900_000,
                dropped: 56_800
            })
        );
        assert_eq!(parse_tcpdump_counts("12 packets captured\n"), None);
        assert_eq!(
            parse_tcpdump_counts(
                "x packets captured\n1 packets received by filter\n0 packets dropped by kernel"
            ),
            None
        );
    }
}
