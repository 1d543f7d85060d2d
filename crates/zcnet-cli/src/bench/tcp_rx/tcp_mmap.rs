//! `tcp-rx --reference PATH`: the kernel's `tools/testing/selftests/net/tcp_mmap.c` run beside
//! zcnet's receiver in the same lab, on the same CPUs, in the same rounds.
//!
//! Each run of the program is one connection, as each of zcnet's is: its server (`tcp_mmap -s`,
//! with `-z` for zero copy: `TCP_ZEROCOPY_RECEIVE` into a 512 KiB window, `madvise
//! (MADV_DONTNEED)` after each batch, `recv` of what the kernel says to skip) in the receiver's
//! namespace on the receiver's CPU (1), and its client (`tcp_mmap -H`, `-z`: `MSG_ZEROCOPY` in
//! 512 KiB calls, the deferred copy that makes loopback's pages mappable, as zcnet's sender does)
//! in the sender's namespace on CPU 0; `-M` the condition's MSS where it sets one. The client
//! is ended (by its id) after the run's seconds; the server's thread then reads to the end of
//! the stream and prints its figures, which are the run's: bytes, the share mapped, its
//! seconds, its thread's user and system CPU (`getrusage(RUSAGE_THREAD)`) and voluntary context
//! switches. Its stdout is a pseudo-terminal, so that the line arrives when printed (a pipe
//! would hold it in stdio's buffer of a server that never exits). The server is then ended by
//! its id.
//!
//! Unlike zcnet's runs, the program's count its whole connection, the first quarter too (zcnet
//! leaves out a [`WARM_UP`](super::WARM_UP) share), and it never reads the bytes it maps: run
//! zcnet with `--no-verify` to compare like with like.

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, Netns};

use crate::bench::reference::Reference;
use crate::measure::{MachineCpu, Run, ThreadCpu, Work, pin, record};

/// What `tcp_mmap`'s server prints when a connection ends:
/// `received 32768 MB (99.99 % mmap'ed) in 7.98 s, 34.4 Gbit` and
/// `  cpu usage user:0.03 sys:1.4, 43.5 usec per MB, 65447 c-switches`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpMmap {
    /// MiB received.
    pub mb: f64,
    /// The share of them mapped, percent.
    pub mmap_percent: f64,
    /// Seconds from the connection's accept to its end.
    pub seconds: f64,
    /// The receiving thread's user and system CPU, seconds.
    pub user_s: f64,
    pub sys_s: f64,
    /// Its CPU per MiB, µs (as it computes it, over whole MiB).
    pub usec_per_mb: f64,
    /// Its voluntary context switches.
    pub c_switches: i64,
}

/// The last summary of `tcp_mmap`'s server in `out` (its two lines, in order).
pub fn parse_tcp_mmap(out: &str) -> Option<TcpMmap> {
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    let i = lines.iter().rposition(|l| l.starts_with("received "))?;
    let (first, second) = (lines[i], *lines.get(i + 1)?);
    // received <mb> MB (<pct> % mmap'ed) in <s> s, <gbit> Gbit
    let w: Vec<&str> = first.split_whitespace().collect();
    let num = |s: &str| s.trim_end_matches(',').parse::<f64>().ok();
    let shape = w.len() == 11
        && w[2] == "MB"
        && w[4] == "%"
        && w[5] == "mmap'ed)"
        && w[6] == "in"
        && w[8] == "s,"
        && w[10] == "Gbit";
    if !shape {
        return None;
    }
    let mb = num(w[1])?;
    let mmap_percent = num(w[3].strip_prefix('(')?)?;
    let seconds = num(w[7])?;
    num(w[9])?;
    // cpu usage user:<u> sys:<s>, <n> usec per MB, <c> c-switches
    let w: Vec<&str> = second.split_whitespace().collect();
    let shape = w.len() == 10
        && w[0] == "cpu"
        && w[1] == "usage"
        && w[5] == "usec"
        && w[6] == "per"
        && w[7] == "MB,"
        && w[9] == "c-switches";
    if !shape {
        return None;
    }
    Some(TcpMmap {
        mb,
        mmap_percent,
        seconds,
        user_s: num(w[2].strip_prefix("user:")?)?,
        sys_s: num(w[3].strip_prefix("sys:")?)?,
        usec_per_mb: num(w[4])?,
        c_switches: w[8].parse().ok()?,
    })
}

/// Where one run of the program goes: the lab's two namespaces, the receiver's address, and
/// what the condition sets.
pub(super) struct Ends<'a> {
    pub(super) recv_ns: &'a Netns,
    pub(super) send_ns: &'a Netns,
    pub(super) ip: IpAddr,
    pub(super) family: Family,
    pub(super) mss: Option<i32>,
}

/// A child of this process, ended by its id and waited for when dropped.
struct Ended(Child);

impl Drop for Ended {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// One run of `tcp_mmap` at `r`: its server (`-z` where `zerocopy`) receiving from its client
/// (always `-z`) for about `seconds`, as the module says.
///
/// # Errors
/// Either side could not start or failed, or the server printed no summary within ten seconds
/// of the client's end.
pub(super) fn run_tcp_mmap(
    r: &Reference,
    ends: &Ends<'_>,
    zerocopy: bool,
    seconds: f64,
) -> anyhow::Result<Run> {
    let family = match ends.family {
        Family::V4 => "-4",
        Family::V6 => "-6",
    };
    let ip = ends.ip;
    // A port free in the lab's own namespace (no one else binds there).
    let port = ends
        .recv_ns
        .run(move || -> anyhow::Result<u16> {
            Ok(TcpListener::bind(SocketAddr::new(ip, 0))?
                .local_addr()?
                .port())
        })
        .context("finding a free port for tcp_mmap")??;
    let mut shared = vec![family.to_owned(), "-p".into(), port.to_string()];
    if let Some(m) = ends.mss {
        shared.extend(["-M".into(), m.to_string()]);
    }
    let mut server_args = shared.clone();
    server_args.extend(["-s".into(), "-H".into(), ip.to_string()]);
    if zerocopy {
        server_args.push("-z".into());
    }
    let mut client_args = shared;
    client_args.extend(["-H".into(), ip.to_string(), "-z".into()]);

    let machine = MachineCpu::now();
    let (mut server, mut lines) = start_server(r, ends.recv_ns, server_args)?;
    wait_listening(&mut server.0, port, ends.family, &mut lines)?;
    let path = r.path().to_path_buf();
    let mut client = Ended(
        ends.send_ns
            .run(move || {
                pin(0);
                Command::new(&path)
                    .args(&client_args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .context("entering the sender's namespace")?
            .context("starting tcp_mmap's client")?,
    );
    // The client sends 32 GiB and ends by itself; here it is ended after the run's seconds.
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        if let Some(status) = client.0.try_wait()? {
            if !status.success() {
                let mut said = String::new();
                if let Some(mut e) = client.0.stderr.take() {
                    let _ = e.read_to_string(&mut said);
                }
                bail!("tcp_mmap's client failed ({status}): {:?}", said.trim());
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(client);
    let summary = lines.summary(Duration::from_secs(10));
    let machine = MachineCpu::elapsed(machine);
    drop(server);
    let said = lines.all();
    let Some(t) = summary else {
        bail!(
            "tcp_mmap's server printed no `received N MB (P % mmap'ed) ...` summary (is it \
             tcp_mmap?): {:?}",
            said.trim()
        );
    };
    let work = Work {
        bytes: (t.mb * (1u64 << 20) as f64).round() as u64,
        requests: None,
        zero_copy_share: Some(t.mmap_percent / 100.0),
        verified: None,
    };
    let cpu = ThreadCpu {
        user_s: t.user_s,
        sys_s: t.sys_s,
        voluntary: t.c_switches,
        involuntary: 0,
    };
    Ok(record(work, t.seconds, cpu, machine))
}

/// The server's output as it comes, from the master side of its pseudo-terminal.
struct Lines {
    rx: mpsc::Receiver<Vec<u8>>,
    got: Vec<u8>,
}

impl Lines {
    /// Takes what arrived, waiting up to `wait` for more; false when nothing came.
    fn take(&mut self, wait: Duration) -> bool {
        match self.rx.recv_timeout(wait) {
            Ok(b) => {
                self.got.extend(b);
                true
            }
            Err(_) => false,
        }
    }

    /// The first complete summary within `limit` (`None` past it, or once the server closed
    /// its terminal without one).
    fn summary(&mut self, limit: Duration) -> Option<TcpMmap> {
        let deadline = Instant::now() + limit;
        loop {
            let text = String::from_utf8_lossy(&self.got);
            // Both lines, the second ended.
            if text.ends_with('\n')
                && let Some(t) = parse_tcp_mmap(&text)
            {
                return Some(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.take(left) {
                return None;
            }
        }
    }

    /// What the server said so far.
    fn all(&mut self) -> String {
        while self.take(Duration::from_millis(20)) {}
        String::from_utf8_lossy(&self.got).into_owned()
    }
}

/// Starts the server in `ns` on CPU 1 with `args`, its stdout and stderr a pseudo-terminal.
fn start_server(r: &Reference, ns: &Netns, args: Vec<String>) -> anyhow::Result<(Ended, Lines)> {
    let pty = nix::pty::openpty(None, None).context("opening a pseudo-terminal for tcp_mmap")?;
    let (master, slave) = (pty.master, pty.slave);
    let err = slave.try_clone().context("duplicating the terminal")?;
    let path = r.path().to_path_buf();
    let child = ns
        .run(move || {
            pin(1);
            Command::new(&path)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::from(slave))
                .stderr(Stdio::from(err))
                .spawn()
        })
        .context("entering the receiver's namespace")?
        .context("starting tcp_mmap's server")?;
    let (tx, rx) = mpsc::channel();
    let mut master = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once the server (the terminal's last holder) has gone.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let lines = Lines {
        rx,
        got: Vec::new(),
    };
    Ok((Ended(child), lines))
}

/// Waits (two seconds at most) until the server listens on `port`: its own
/// `/proc/PID/net/tcp{,6}`, the table of the namespace it runs in.
fn wait_listening(
    server: &mut Child,
    port: u16,
    family: Family,
    lines: &mut Lines,
) -> anyhow::Result<()> {
    let table = match family {
        Family::V4 => format!("/proc/{}/net/tcp", server.id()),
        Family::V6 => format!("/proc/{}/net/tcp6", server.id()),
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(status) = server.try_wait()? {
            bail!(
                "tcp_mmap's server ended at its start ({status}): {:?}",
                lines.all().trim()
            );
        }
        // Unreadable once the server has exited (a zombie has no namespace): the next turn says so.
        let text = std::fs::read_to_string(&table).unwrap_or_default();
        if listens(&text, port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "tcp_mmap's server did not listen on port {port} within 2 s: {:?}",
                lines.all().trim()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `/proc/net/tcp{,6}`'s `text` has a socket listening (state `0A`) on `port`.
fn listens(text: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_summary() {
        let out = "received 32768 MB (99.9878 % mmap'ed) in 7.98115 s, 34.4415 Gbit\r\n  \
                   cpu usage user:0.034 sys:1.40061, 43.7866 usec per MB, 65447 c-switches\r\n";
        assert_eq!(
            parse_tcp_mmap(out),
            Some(TcpMmap {
                mb: 32768.0,
                mmap_percent: 99.9878,
                seconds: 7.98115,
                user_s: 0.034,
                sys_s: 1.40061,
                usec_per_mb: 43.7866,
                c_switches: 65447,
            })
        );
        // %lg's exponent form, and the last of two summaries.
        let two = format!(
            "{out}received 1.23457e+06 MB (0 % mmap'ed) in 1 s, 1e+04 Gbit\n  cpu usage user:0 sys:1, 2 usec per MB, 3 c-switches\n"
        );
        let t = parse_tcp_mmap(&two).unwrap();
        assert_eq!((t.mb, t.mmap_percent, t.c_switches), (1.23457e6, 0.0, 3));
        // Half a summary, another program's line, nothing.
        assert_eq!(parse_tcp_mmap(out.lines().next().unwrap()), None);
        assert_eq!(parse_tcp_mmap("received 3 MB in 2 s\ncpu usage\n"), None);
        assert_eq!(parse_tcp_mmap(""), None);
        let bad = out.replace("sys:1.40061", "sys:x");
        assert_eq!(parse_tcp_mmap(&bad), None);
    }

    #[test]
    fn a_listening_socket_in_proc_net_tcp() {
        let text = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                    0: 00000000000000000000000000000000:2253 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   \
                    1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D0A2 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n";
        assert!(listens(text, 0x2253));
        assert!(!listens(text, 0x1F90), "established, not listening");
        assert!(!listens(text, 0x53), "a port is four hex digits");
    }
}
