//! `--reference PATH`: the kernel's own test program, run beside zcnet in the same lab, pinned to
//! the same CPU and alternated in the same rounds, so that anyone can check zcnet's figures
//! against the program the kernel developers measure with.
//!
//! `bench uring-tx` takes a build of `tools/testing/selftests/net/io_uring_zerocopy_tx.c` (the
//! kernel tree's `make -C tools/testing/selftests/net io_uring_zerocopy_tx`, or `gcc -O2` of the
//! one file). It runs in the `sink` lab only, where it needs no receiver: UDP to the sink's
//! address, `-n` the batch zcnet submits, `-m 0|1|2` for copy, zc and zc-fixed (auto has no
//! twin). It sends one hot buffer over and over, which its copy mode copies from L1.
//!
//! `bench udp-tx` takes a build of `tools/testing/selftests/net/msg_zerocopy.c` (`gcc -O2` of the
//! one file), likewise in the `sink` lab only: `udp` to the sink's address, `-s` the size, `-z`
//! for zc (without it, plain `send`: copy); zc-adaptive and auto have no twin. It too sends one
//! buffer over and over (a static array), and reads its completions every 32 sends.
//!
//! Its figures come from outside it: requests from its own `tx=N` line (each UDP send is one
//! whole datagram of `-s` bytes, which `MB=` confirms), CPU from `getrusage(RUSAGE_CHILDREN)`
//! around its `wait` (user + system of the process, exec and set-up included: about a
//! millisecond against a second of sending), the wall time from its spawn to its exit, the
//! machine's CPU from `/proc/stat` as for zcnet's runs. It reports no zero-copy share: `null`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::Family;

mod table;

pub use table::{RECEIVER, SENDER, Side, beside_rows, table, table_of};

use super::engine::{Session, SizeStep};
use crate::measure::{MachineCpu, Metric, ResultSet, Run, ThreadCpu, Work, record};

/// A reference program given with `--reference`.
#[derive(Clone, Debug)]
pub struct Reference {
    path: PathBuf,
}

/// How the kernel's program runs beside zcnet, for a report's settings.
#[derive(Debug, serde::Serialize)]
pub struct Settings {
    program: &'static str,
    path: PathBuf,
    /// Its arguments, `<whole>` being `-t`'s whole seconds (`whole_seconds`).
    args: String,
    whole_seconds: u64,
    seconds_per_run: f64,
    sends_from: &'static str,
    labs: [&'static str; 1],
}

impl Settings {
    /// `program` at `r`'s path, run with `args` for runs of about `seconds`, sending from
    /// `sends_from`, in the sink lab.
    pub fn new(
        r: &Reference,
        program: &'static str,
        args: &str,
        seconds: f64,
        sends_from: &'static str,
    ) -> Settings {
        let whole = Reference::whole_seconds(seconds);
        Settings {
            program,
            path: r.path().to_path_buf(),
            args: args.to_owned(),
            whole_seconds: whole,
            seconds_per_run: 0.2 + whole as f64,
            sends_from,
            labs: ["sink"],
        }
    }
}

/// Where and what a program sends into the sink lab: `size`-byte datagrams to `dest` port 9
/// over `family`, for about `seconds`.
#[derive(Clone, Copy, Debug)]
pub struct Sink {
    pub dest: IpAddr,
    pub family: Family,
    pub size: usize,
    pub seconds: f64,
}

impl Reference {
    /// The program at `path`, checked to be an executable file (its output is checked at each
    /// run).
    ///
    /// # Errors
    /// A missing file, a directory, or a file without an execute bit.
    pub fn new(path: &Path) -> anyhow::Result<Reference> {
        Reference::named(path, &format!("--reference {}", path.display()))
    }

    /// [`Reference::new`], its errors naming the program as the user named it (`what`: the flag
    /// and what it was given).
    ///
    /// # Errors
    /// As [`Reference::new`].
    pub fn named(path: &Path, what: &str) -> anyhow::Result<Reference> {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(path).with_context(|| format!("{what}: cannot read it"))?;
        if !meta.is_file() {
            bail!("{what}: not a file");
        }
        let executable = meta.permissions().mode() & 0o111 != 0
            && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok();
        if !executable {
            bail!(
                "{what}: not executable by this user (chmod +x, or build the kernel's programs \
                 from its tools/testing/selftests/net: `.ci/selftests DIR` builds msg_zerocopy, \
                 io_uring_zerocopy_tx, udpgso_bench_tx and tcp_mmap with gcc -O2)"
            );
        }
        // The file checked is the file run: a bare name would otherwise be looked up in PATH.
        let path =
            std::fs::canonicalize(path).with_context(|| format!("{what}: cannot resolve it"))?;
        Ok(Reference { path })
    }

    /// Its path (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `-t` for a run of about `seconds`: it runs `0.2 + t` s, and `t` must be at least 1.
    pub fn whole_seconds(seconds: f64) -> u64 {
        ((seconds - 0.2).round().max(1.0)) as u64
    }

    /// The largest `-s` the program takes: 65535 less the IPv6, TCP and TCP option headers.
    pub const MAX_SIZE: usize = 65535 - 40 - 20 - 40;

    /// The program of `--reference PATH`, if given, for a bench that runs it in the sink lab:
    /// refused with `--remote`, without `--lab sink`, or with a size over
    /// [`Reference::MAX_SIZE`].
    ///
    /// # Errors
    /// Those, and [`Reference::new`]'s.
    pub fn for_sink(
        path: Option<&Path>,
        remote: bool,
        labs: &[&str],
        sizes: &[usize],
    ) -> anyhow::Result<Option<Reference>> {
        let Some(path) = path else {
            return Ok(None);
        };
        if remote {
            bail!("--reference runs the kernel's program in the sink lab here: not with --remote");
        }
        if !labs.contains(&"sink") {
            bail!("--reference runs the kernel's program in the sink lab: add --lab sink");
        }
        let max = Reference::MAX_SIZE;
        if let Some(s) = sizes.iter().find(|&&s| s > max) {
            bail!("--size {s}: the kernel's program sends at most {max} bytes (--reference)");
        }
        Reference::new(path).map(Some)
    }

    /// One run of `io_uring_zerocopy_tx` sending `size`-byte UDP datagrams to `dest` port 9,
    /// `batch` per submission, in `mode` (`-m`: 0 copy, 1 zc, 2 zc-fixed), for about `seconds`
    /// (its `-t` takes whole seconds and adds 0.2: the nearest, at least 1, as it divides by the
    /// whole seconds it ran when it prints its rate). Call it on a thread inside the
    /// lab's namespace, pinned to the sender's CPU: the program inherits both.
    pub fn run_uring_tx(&self, to: Sink, mode: u8, batch: usize) -> anyhow::Result<Run> {
        let extra = ["-n", &batch.to_string(), "-m", &mode.to_string(), "udp"].map(String::from);
        self.run_into_sink(
            to,
            &extra,
            "`tx=N (MB=M)` (is it io_uring_zerocopy_tx?)",
            parse_uring_tx,
        )
    }

    /// One run of `msg_zerocopy` sending `size`-byte UDP datagrams to `dest` port 9, with
    /// `MSG_ZEROCOPY` where `zerocopy` (`-z`), for about `seconds` (`-t`, as
    /// [`Reference::run_uring_tx`]). Call it on a thread inside the lab's namespace, pinned to
    /// the sender's CPU: the program inherits both.
    pub fn run_msg_zerocopy(&self, to: Sink, zerocopy: bool) -> anyhow::Result<Run> {
        let extra: Vec<String> = zerocopy
            .then_some("-z")
            .into_iter()
            .chain(["udp"])
            .map(String::from)
            .collect();
        self.run_into_sink(
            to,
            &extra,
            "`tx=N (M MB) txc=C zc=y|n` (is it msg_zerocopy?)",
            |e| parse_msg_zerocopy(e).map(|t| (t.packets, t.mb)),
        )
    }

    /// One run of a program that sends `to.size`-byte datagrams into the sink for `to.seconds`
    /// with `extra` arguments after the shared ones, and says at its end how many it sent and
    /// their MiB (`parse`, its `line` named in the error where it did not).
    fn run_into_sink(
        &self,
        to: Sink,
        extra: &[String],
        line: &str,
        parse: impl Fn(&str) -> Option<(u64, u64)>,
    ) -> anyhow::Result<Run> {
        let whole = Self::whole_seconds(to.seconds);
        let family = match to.family {
            Family::V4 => "-4",
            Family::V6 => "-6",
        };
        let (dest, size) = (to.dest.to_string(), to.size.to_string());
        let mut args: Vec<String> = [family, "-D", &dest, "-p", "9", "-s", &size, "-t"]
            .map(String::from)
            .to_vec();
        args.push(whole.to_string());
        args.extend_from_slice(extra);
        let m = self.measured(&args, whole)?;
        let (stderr, said) = (&m.stderr, &m.said);
        let Some((packets, mb)) = parse(stderr) else {
            bail!(
                "the reference {} printed no {line} line: {said}",
                self.path.display()
            );
        };
        if packets == 0 {
            bail!("the reference sent nothing ({said})");
        }
        let size = to.size;
        let Some(bytes) = packets.checked_mul(size as u64).filter(|&b| b >> 20 == mb) else {
            bail!(
                "the reference counted {packets} datagrams of {size} bytes but {mb} MB: some \
                 sends were short, or the line is not its own"
            );
        };
        let work = Work {
            bytes,
            requests: Some(packets),
            // msg_zerocopy's `zc=y` says only that its last completion was not flagged copied.
            zero_copy_share: None,
            verified: None,
        };
        Ok(record(work, m.seconds, m.cpu, m.machine))
    }

    /// Runs the program with `args` for its `whole` seconds (plus ten for a slow start and its
    /// last notifications), measuring its CPU (`getrusage(RUSAGE_CHILDREN)`), the wall time
    /// from its spawn to its exit and the machine's CPU.
    ///
    /// # Errors
    /// It could not run, ran past its limit, or exited with a failure (what it said with it).
    fn measured(&self, args: &[String], whole: u64) -> anyhow::Result<Measured> {
        let machine = MachineCpu::now();
        let before = ThreadCpu::children();
        let start = Instant::now();
        let limit = Duration::from_secs(whole + 10);
        let out = output_of(
            Command::new(&self.path).args(args).stdin(Stdio::null()),
            limit,
        )
        .with_context(|| format!("running the reference {}", self.path.display()))?;
        let seconds = start.elapsed().as_secs_f64();
        let cpu = ThreadCpu::children().since(&before);
        let machine = MachineCpu::elapsed(machine);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let said = match stderr.trim() {
            "" => "nothing on stderr".to_owned(),
            s => format!("it said {s:?}"),
        };
        if !out.status.success() {
            bail!(
                "the reference {} {} failed ({}): {said}",
                self.path.display(),
                args.join(" "),
                out.status,
            );
        }
        Ok(Measured {
            stderr,
            said,
            seconds,
            cpu,
            machine,
        })
    }
}

/// A finished run of the reference program.
struct Measured {
    stderr: String,
    /// What it printed on stderr, for a message.
    said: String,
    seconds: f64,
    cpu: ThreadCpu,
    /// The machine's CPU during the run (`/proc/stat`), where it could be read.
    machine: Option<(f64, f64, f64)>,
}

/// One run of the kernel's `udpgso_bench_tx` ([`Reference::run_udpgso_tx`]).
#[derive(Clone, Copy, Debug)]
pub struct UdpGso {
    /// Where to: the sink's address (port 9).
    pub dest: IpAddr,
    /// `-4` or `-6`.
    pub family: Family,
    /// `-s`: bytes per send (a train, or what its plain modes cut into 1472-byte datagrams).
    pub len: usize,
    /// `-S`: the GSO segment size; `None` for its plain and sendmmsg modes.
    pub segment: Option<usize>,
    /// `-m`: the datagrams of `len` in one `sendmmsg`.
    pub sendmmsg: bool,
    /// `-z`: `MSG_ZEROCOPY`.
    pub zerocopy: bool,
    /// The run's length (`-l` takes whole seconds: the nearest, at least 1).
    pub seconds: f64,
}

impl Reference {
    /// One run of `tools/testing/selftests/net/udpgso_bench_tx` in `run`'s mode, with `-a`
    /// for its summary, whose `msgs` (sends of `-s` bytes) give the bytes. Call it on a thread
    /// inside the lab's namespace, pinned to the sender's CPU: the program inherits both.
    pub fn run_udpgso_tx(&self, run: UdpGso) -> anyhow::Result<Run> {
        let whole = ((run.seconds).round().max(1.0)) as u64;
        let mut args = vec![
            match run.family {
                Family::V4 => "-4".to_owned(),
                Family::V6 => "-6".to_owned(),
            },
            "-D".to_owned(),
            run.dest.to_string(),
            "-p".to_owned(),
            "9".to_owned(),
            "-l".to_owned(),
            whole.to_string(),
            "-s".to_owned(),
            run.len.to_string(),
            "-a".to_owned(),
        ];
        if let Some(seg) = run.segment {
            args.extend(["-S".to_owned(), seg.to_string()]);
        }
        if run.sendmmsg {
            args.push("-m".to_owned());
        }
        if run.zerocopy {
            args.push("-z".to_owned());
        }
        let m = self.measured(&args, whole)?;
        let (stderr, said) = (&m.stderr, &m.said);
        let Some((calls, msgs)) = parse_udpgso_sum(stderr) else {
            bail!(
                "the reference {} printed no `sum udp tx:` line (is it udpgso_bench_tx, run \
                 with -a?): {said}",
                self.path.display(),
            );
        };
        if msgs == 0 {
            bail!("the reference sent nothing ({said})");
        }
        // Datagrams: a train's segments, else one per send call (its plain mode cuts each
        // `-s` into 1472-byte sends; sendmmsg counts the messages it sent).
        let datagrams = match run.segment {
            Some(seg) => msgs * run.len.div_ceil(seg) as u64,
            None => calls,
        };
        let work = Work {
            bytes: msgs * run.len as u64,
            requests: Some(datagrams),
            zero_copy_share: None,
            verified: None,
        };
        Ok(record(work, m.seconds, m.cpu, m.machine))
    }
}

/// The calls and msgs of `udpgso_bench_tx -a`'s summary line:
/// `sum udp tx:  12345 MB/s      67890 calls (1234/s)      67890 msgs (1234/s)`.
pub fn parse_udpgso_sum(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("sum udp tx:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = |word: &str| {
        let i = words.iter().position(|w| *w == word)?;
        words.get(i.checked_sub(1)?)?.parse::<u64>().ok()
    };
    Some((before("calls")?, before("msgs")?))
}

/// The most bytes kept of each of a program's outputs: its last ones, where its summary is (a
/// chatty program took a bench to 2.3 GB in 11 s when all of it was kept; issue 48 item 13).
const KEPT: usize = 256 << 10;

/// Runs `cmd` to its end, at most `limit`: past it the program (this process's child, by its
/// id) and every process it started that is still running (by their ids, from `/proc`) are
/// killed and the run is an error. It stays in this process's group, so that a Ctrl-C at the
/// terminal stops it with the bench. A program written a moment ago may still be open for
/// writing in a child forked meanwhile by another thread (until that child execs): `ETXTBSY`,
/// tried again for up to a second. Its output is read as it comes (a talkative program never
/// blocks on a full pipe), its last [`KEPT`] bytes kept, and once it has ended for at most a
/// second more: what it left running may hold its pipes open.
fn output_of(cmd: &mut Command, limit: Duration) -> anyhow::Result<std::process::Output> {
    use std::io::Read as _;
    use std::sync::mpsc;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            r => break r?,
        }
    };
    // Each pipe's last KEPT bytes as they come, and a word at its end.
    type Kept = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<u8>>>;
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = mpsc::channel::<()>();
        let kept = Kept::default();
        let mine = kept.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            if let Some(mut p) = pipe {
                while let Ok(n) = p.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut kept = mine.lock().unwrap_or_else(|e| e.into_inner());
                    kept.extend(&buf[..n]);
                    let over = kept.len().saturating_sub(KEPT);
                    kept.drain(..over);
                }
            }
            let _ = tx.send(());
        });
        (rx, kept)
    };
    let out = read(child.stdout.take().map(|p| Box::new(p) as Box<_>));
    let err = read(child.stderr.take().map(|p| Box::new(p) as Box<_>));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            // What it started first (found from its id while it still lives), then itself.
            let started = crate::measure::machine::descendants(child.id());
            for pid in started {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "it did not end within {:.1} s and was killed, with what it had started",
                limit.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let until = Instant::now() + Duration::from_secs(1);
    let gather = |(rx, kept): (mpsc::Receiver<()>, Kept)| {
        let _ = rx.recv_timeout(until.saturating_duration_since(Instant::now()));
        let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().copied().collect::<Vec<u8>>()
    };
    Ok(std::process::Output {
        status,
        stdout: gather(out),
        stderr: gather(err),
    })
}

/// The requests and MB of `io_uring_zerocopy_tx`'s last line:
/// `tx=196528 (MB=11995), tx/s=196528 (MB/s=11995)`.
pub fn parse_uring_tx(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr.lines().rev().find(|l| l.starts_with("tx="))?;
    let rest = line.strip_prefix("tx=")?;
    let (packets, rest) = rest.split_once(' ')?;
    let mb = rest.strip_prefix("(MB=")?.split_once(')')?.0;
    Some((packets.parse().ok()?, mb.parse().ok()?))
}

/// One arm of a size step's alternation: a zcnet mode, or the reference program in that mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm<M> {
    Zcnet(M),
    Reference(M),
}

/// The names of the program's runs: `ref-` and the mode of their zcnet twin.
const REF_NAMES: [&str; 3] = ["ref-copy", "ref-zc", "ref-zc-fixed"];

impl<M: Copy> Arm<M> {
    /// The arm's name: the mode's (`name`), or `ref-` and it.
    pub fn name(self, name: fn(M) -> &'static str) -> &'static str {
        match self {
            Arm::Zcnet(m) => name(m),
            Arm::Reference(m) => REF_NAMES
                .iter()
                .find(|r| r[4..] == *name(m))
                .copied()
                .unwrap_or("ref-other"),
        }
    }

    /// Each mode, followed by its twin where the program runs `beside` and has one (`twin`):
    /// A A' B B'; the engine mirrors them in the next round, so that neither always runs right
    /// after the other.
    pub fn alternate(modes: &[M], beside: bool, twin: fn(M) -> bool) -> Vec<Arm<M>> {
        modes
            .iter()
            .flat_map(|&m| {
                let twin = (beside && twin(m)).then_some(Arm::Reference(m));
                std::iter::once(Arm::Zcnet(m)).chain(twin)
            })
            .collect()
    }

    /// The runs of `arms` in `step`, alternated by `session` ([`Session::measure`]), each arm
    /// named by its mode's `name`.
    ///
    /// # Errors
    /// A run failed.
    pub fn measure(
        session: &Session,
        step: &SizeStep<'_>,
        arms: &[Arm<M>],
        name: fn(M) -> &'static str,
        one: impl FnMut(Arm<M>) -> anyhow::Result<Run>,
    ) -> anyhow::Result<Vec<ResultSet>> {
        session.measure(step, arms, |a| a.name(name), one)
    }

    /// The runs of each arm: (zcnet's, the program's), each compared with its own first (copy)
    /// and the program's with their zcnet twin, mode by mode, in `session`.
    pub fn split(
        arms: &[Arm<M>],
        sets: Vec<ResultSet>,
        session: &mut Session,
        metrics: &[Metric],
    ) -> (Vec<ResultSet>, Vec<ResultSet>) {
        let (ours, refs): (Vec<_>, Vec<_>) = arms
            .iter()
            .zip(sets)
            .partition(|(arm, _)| matches!(arm, Arm::Zcnet(_)));
        let ours: Vec<ResultSet> = ours.into_iter().map(|(_, s)| s).collect();
        let refs: Vec<ResultSet> = refs.into_iter().map(|(_, s)| s).collect();
        session.compare_to_first(&ours, metrics);
        session.compare_to_first(&refs, metrics);
        // zcnet over the kernel's program, mode by mode.
        for r in &refs {
            let twin = ours
                .iter()
                .find(|o| format!("ref-{}", o.mode) == r.mode)
                .expect("every reference arm has its zcnet twin");
            session.compare(twin, r, metrics);
        }
        (ours, refs)
    }
}

/// What `msg_zerocopy`'s sender says at its end: `tx=196528 (11995 MB) txc=196528 zc=y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgZerocopyTx {
    /// Sends.
    pub packets: u64,
    /// Their bytes in whole MiB.
    pub mb: u64,
    /// Completions read (`-z`).
    pub completions: u64,
    /// Whether the last completion said the kernel did not copy.
    pub zero_copy: bool,
}

/// The last `tx=` line of `msg_zerocopy`'s stderr.
pub fn parse_msg_zerocopy(stderr: &str) -> Option<MsgZerocopyTx> {
    let line = stderr.lines().rev().find(|l| l.starts_with("tx="))?;
    let mut words = line.split_whitespace();
    let packets = words.next()?.strip_prefix("tx=")?.parse().ok()?;
    let mb = words.next()?.strip_prefix('(')?.parse().ok()?;
    if words.next()? != "MB)" {
        return None;
    }
    let completions = words.next()?.strip_prefix("txc=")?.parse().ok()?;
    let zero_copy = match words.next()?.strip_prefix("zc=")? {
        "y" => true,
        "n" => false,
        _ => return None,
    };
    Some(MsgZerocopyTx {
        packets,
        mb,
        completions,
        zero_copy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_udpgso_summary_line() {
        let err = "udp tx:   1203 MB/s    20412 calls/s  20412 msg/s\n\
                   Summary over 1.000 seconds...\n\
                   sum udp tx:   1203 MB/s      20412 calls (20412/s)      20412 msgs (20412/s)\n\
                   Zerocopy acks:               20412\n";
        assert_eq!(parse_udpgso_sum(err), Some((20412, 20412)));
        assert_eq!(parse_udpgso_sum("udp tx: 1 MB/s 2 calls/s 3 msg/s"), None);
        assert_eq!(
            parse_udpgso_sum("sum udp tx: 1 MB/s x calls (1/s) 3 msgs (1/s)"),
            None
        );
        assert_eq!(parse_udpgso_sum(""), None);
    }

    #[test]
    fn the_msg_zerocopy_line() {
        let err = "tx=196528 (11995 MB) txc=196528 zc=y\n";
        assert_eq!(
            parse_msg_zerocopy(err),
            Some(MsgZerocopyTx {
                packets: 196528,
                mb: 11995,
                completions: 196528,
                zero_copy: true
            })
        );
        let err = "missing notifications: 1 < 2\ntx=20 (1 MB) txc=0 zc=n\n";
        assert_eq!(
            parse_msg_zerocopy(err).map(|t| (t.packets, t.zero_copy)),
            Some((20, false))
        );
        for bad in [
            "",
            "tx=",
            "tx=20 (1 MB)",
            "tx=20 (1 MB) txc=0 zc=?",
            "tx=20 (x MB) txc=0 zc=y",
            "tx=20 (1 GB) txc=0 zc=y",
            "rx=20 (1 MB)",
        ] {
            assert_eq!(parse_msg_zerocopy(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_selftests_line() {
        let out = "tx=196528 (MB=11995), tx/s=196528 (MB/s=11995)\n";
        assert_eq!(parse_uring_tx(out), Some((196528, 11995)));
        // The last tx line counts; other lines around it are ignored.
        let out = "warning: x\ntx=1 (MB=0), tx/s=1 (MB/s=0)\ntx=20 (MB=1), tx/s=20 (MB/s=1)\n";
        assert_eq!(parse_uring_tx(out), Some((20, 1)));
        for bad in [
            "",
            "tx=",
            "tx=12",
            "tx=x (MB=1), tx/s=1",
            "tx=12 (MB=y), tx/s=1",
            "rx=12 (MB=1)",
            // msg_zerocopy.c's line is not this program's.
            "tx=12 (1 MB) txc=12 zc=y",
        ] {
            assert_eq!(parse_uring_tx(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_missing_or_unexecutable_program_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("zcnet-ref-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing");
        let e = format!("{:#}", Reference::new(&missing).unwrap_err());
        assert!(e.contains("missing") && e.contains("cannot read"), "{e}");
        let e = format!("{:#}", Reference::new(&dir).unwrap_err());
        assert!(e.contains("not a file"), "{e}");
        let plain = dir.join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let e = format!("{:#}", Reference::new(&plain).unwrap_err());
        assert!(e.contains("not executable"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_program_that_fails_or_says_nothing_useful_is_an_error_with_its_words() {
        let dir = std::env::temp_dir().join(format!("zcnet-ref-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt as _;
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            Reference::new(&p).unwrap()
        };
        let sink = |size| Sink {
            dest: "127.0.0.1".parse().unwrap(),
            family: Family::V4,
            size,
            seconds: 0.2,
        };
        // What a run of `r` that must fail says, all its causes.
        let error_of = |r: &Reference, size: usize| {
            let e = r.run_uring_tx(sink(size), 0, 16);
            format!("{:#}", e.unwrap_err())
        };
        // What running `r` says when it outlasts `limit` and is killed.
        let killed = |r: &Reference, limit: Duration| {
            let e = output_of(Command::new(r.path()).stdin(Stdio::null()), limit);
            format!("{:#}", e.unwrap_err())
        };
        let fails = script("fails", "echo 'io_uring: queue init: nope' >&2; exit 1");
        let e = error_of(&fails, 1000);
        assert!(e.contains("failed") && e.contains("nope"), "{e}");
        let mute = script("mute", "echo hello >&2");
        let e = error_of(&mute, 1000);
        assert!(e.contains("no `tx=N") && e.contains("hello"), "{e}");
        let silent = script("silent", "exit 0");
        let e = error_of(&silent, 1000);
        assert!(e.ends_with("nothing on stderr"), "{e}");
        // A program that does not end is killed at its limit.
        let hangs = script("hangs", "exec sleep 30");
        let started = Instant::now();
        let e = killed(&hangs, Duration::from_millis(300));
        assert!(e.contains("did not end within 0.3 s"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // One that leaves something running, holding its stderr open, is still read and done
        // with at once.
        let leaves = script(
            "leaves",
            "sleep 3 & echo 'tx=2048 (MB=2), tx/s=2048 (MB/s=2)' >&2",
        );
        let started = Instant::now();
        let run = leaves.run_uring_tx(sink(1024), 0, 16).unwrap();
        assert_eq!(run.bytes, 2 << 20);
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{:?}",
            started.elapsed()
        );
        // Issue 48 item 13: a chatty program is read to its end but only its last KEPT bytes are
        // kept (its whole output took a bench to 2.3 GB), its summary among them.
        let chatty = script(
            "chatty",
            "head -c 50000000 /dev/zero | tr '\\0' x >&2; \
             echo 'tx=2048 (MB=2), tx/s=2048 (MB/s=2)' >&2",
        );
        let out = output_of(
            Command::new(chatty.path()).stdin(Stdio::null()),
            Duration::from_secs(30),
        )
        .unwrap();
        assert!(out.stderr.len() <= KEPT, "{} bytes kept", out.stderr.len());
        assert!(
            String::from_utf8_lossy(&out.stderr).ends_with("tx=2048 (MB=2), tx/s=2048 (MB/s=2)\n")
        );
        // A hung one is killed with what it started (a `sleep` left behind outlived the kill).
        let pidfile = dir.join("started");
        let hangs_with_a_child = script(
            "hangs-with-a-child",
            &format!("sleep 30 & echo $! > {}; wait", pidfile.display()),
        );
        let e = killed(&hangs_with_a_child, Duration::from_millis(500));
        assert!(e.contains("with what it had started"), "{e}");
        let started: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = (0..100).any(|_| {
            let state =
                std::fs::read_to_string(format!("/proc/{started}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for its new parent to reap it.
            let dead = state.is_empty()
                || state
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'));
            if !dead {
                std::thread::sleep(Duration::from_millis(20));
            }
            dead
        });
        assert!(gone, "the program's child {started} outlived the kill");
        // Nothing sent, or more than a u64 of bytes: errors, not figures.
        let none = script("none", "echo 'tx=0 (MB=0), tx/s=0 (MB/s=0)' >&2");
        let e = error_of(&none, 1024);
        assert!(e.contains("sent nothing"), "{e}");
        let huge = script(
            "huge",
            "echo 'tx=18446744073709551615 (MB=1), tx/s=0 (MB/s=0)' >&2",
        );
        let e = error_of(&huge, 1024);
        assert!(e.contains("not its own"), "{e}");
        // The path run is the file checked, made absolute: a bare name would be looked up in
        // PATH.
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let roundabout = Reference::new(&dir.join("sub/../leaves")).unwrap();
        assert_eq!(
            roundabout.path(),
            dir.join("leaves").canonicalize().unwrap()
        );
        assert!(roundabout.path().is_absolute());
        // A line whose MB disagrees with whole datagrams of the size asked for.
        let short = script("short", "echo 'tx=2048 (MB=7), tx/s=2048 (MB/s=7)' >&2");
        let e = error_of(&short, 1024);
        assert!(e.contains("short"), "{e}");
        // A well-formed one becomes a run: 2048 datagrams of 1024 bytes = 2 MB.
        let ok = script("ok", "echo 'tx=2048 (MB=2), tx/s=2048 (MB/s=2)' >&2");
        let run = ok.run_uring_tx(sink(1024), 2, 16).unwrap();
        assert_eq!((run.bytes, run.zero_copy_share), (2 << 20, None));
        assert!(run.requests_per_s.is_some_and(|r| r > 0.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
