//! `zcnet send`: a netcat-like sender on the zero-copy file paths.
//!
//! `zcnet send FILE HOST:PORT` sends a file with `sendfile`, `splice`, an mmap window with
//! `MSG_ZEROCOPY`, or `read` + `send`; `-` sends standard input. A sized file goes by the
//! strategy; a pipe or FIFO is spliced (copied with `--strategy copy`); anything else (a
//! character device, a file of /proc or sysfs, whose size is a placeholder) is read to its end
//! and copied, `--limit` bounding an endless source such as /dev/zero. At the end it prints the
//! bytes, the strategy really used, the share sent without a user-space copy, and Gbit.
//!
//! A sized file is a regular file of non-zero size on a filesystem whose sizes are the content's
//! (not proc, sysfs, debugfs, tracefs, securityfs, configfs, cgroup, bpf, efivarfs or pstore).
//! Its size is what the receiver must get: one that ends short (truncated while it is sent) is
//! an error, exit 1, and the connection is reset, so that the receiver sees an incomplete
//! transfer rather than a clean end; `--allow-short` sends what it holds and ends cleanly.

use std::fs::File;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::FileTypeExt;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::json;
use zcnet::ZeroCopyCounters as _;
use zcnet::file::{self, FileSender, Mode as Strategy};

/// `--strategy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// The best available (sendfile, else splice, else copy).
    Auto,
    /// sendfile(2): no user copy, no "safe to modify" signal.
    Sendfile,
    /// splice(2) through a pipe.
    Splice,
    /// mmap window + MSG_ZEROCOPY: unmapped only after its completions.
    MmapZc,
    /// read(2) + send(2), the copying baseline.
    Copy,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Strategy {
        match s {
            StrategyArg::Auto => Strategy::Auto,
            StrategyArg::Sendfile => Strategy::Sendfile,
            StrategyArg::Splice => Strategy::Splice,
            StrategyArg::MmapZc => Strategy::MmapZeroCopy,
            StrategyArg::Copy => Strategy::Copy,
        }
    }
}

/// Options of `zcnet send`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// The file to send, or `-` for standard input.
    file: String,
    /// Where to send it, HOST:PORT.
    addr: String,
    /// How to send it.
    #[arg(long, value_enum, default_value = "auto")]
    strategy: StrategyArg,
    /// Send at most this many bytes (a bound for endless sources such as /dev/zero).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// A file that ends before its size (truncated while it is sent) is sent as far as it goes
    /// and ended cleanly, with a warning; without this it is an error and the connection is
    /// reset.
    #[arg(long)]
    allow_short: bool,
    /// Give up connecting after this many seconds.
    #[arg(long, value_name = "S", default_value = "10", value_parser = crate::args::seconds)]
    connect_timeout: f64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What the input is, decided before connecting.
enum Input {
    /// A sized file (see the module docs): where to start (its offset: standard input may be
    /// part-read already, as `cat` reads it from there) and the bytes from there, after
    /// `--limit`.
    File(File, u64, u64),
    /// A pipe or FIFO.
    Pipe(File),
    /// Anything else, read to its end.
    Stream(File),
}

fn classify(mut f: File, limit: Option<u64>, what: &str) -> anyhow::Result<Input> {
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {what}"))?;
    let ty = meta.file_type();
    if ty.is_dir() {
        bail!("cannot send {what}: it is a directory");
    }
    Ok(
        if ty.is_file() && meta.len() > 0 && !sizes_are_placeholders(&f) {
            use std::io::Seek as _;
            let at = f
                .stream_position()
                .with_context(|| format!("lseek({what})"))?
                .min(meta.len());
            let left = meta.len() - at;
            Input::File(f, at, limit.map_or(left, |l| l.min(left)))
        } else if ty.is_fifo() {
            Input::Pipe(f)
        } else {
            // A size of 0 is also what /proc files report: read them to the end.
            Input::Stream(f)
        },
    )
}

/// Whether `f` is on a filesystem whose file sizes do not say how much a read returns: sysfs
/// reports 4096 for a few bytes, proc 0 for a page, tracefs and cgroup files change as they are
/// read. Such files are read to their end, not sent by their size.
fn sizes_are_placeholders(f: &File) -> bool {
    use nix::sys::statfs::{
        BPF_FS_MAGIC, CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC, FsType,
        PROC_SUPER_MAGIC, SECURITYFS_MAGIC, SYSFS_MAGIC, TRACEFS_MAGIC, fstatfs,
    };
    // configfs, efivarfs and pstore, which nix does not name (linux/magic.h).
    let (configfs, efivarfs, pstore) = (
        FsType(0x6265_6570),
        FsType(0xde5e_81e4),
        FsType(0x6165_676c),
    );
    fstatfs(f).is_ok_and(|fs| {
        [
            PROC_SUPER_MAGIC,
            SYSFS_MAGIC,
            DEBUGFS_MAGIC,
            TRACEFS_MAGIC,
            SECURITYFS_MAGIC,
            CGROUP_SUPER_MAGIC,
            CGROUP2_SUPER_MAGIC,
            BPF_FS_MAGIC,
            configfs,
            efivarfs,
            pstore,
        ]
        .contains(&fs.filesystem_type())
    })
}

/// Runs `zcnet send`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    // Open (and check) the input before connecting.
    let input = if opt.file == "-" {
        let fd = std::os::fd::AsFd::as_fd(&std::io::stdin())
            .try_clone_to_owned()
            .context("stdin")?;
        classify(File::from(fd), opt.limit, "standard input")?
    } else {
        let f = File::open(&opt.file).with_context(|| format!("cannot read {}", opt.file))?;
        classify(f, opt.limit, &opt.file)?
    };
    let addrs =
        crate::args::peer(&opt.addr).map_err(|e| anyhow!("bad address {:?}: {e}", opt.addr))?;
    let timeout = Duration::from_secs_f64(opt.connect_timeout);
    let mut last = None;
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some((addr, e))) => {
            return Err(e).with_context(|| format!("cannot connect to {addr}"));
        }
        (None, None) => unreachable!("addrs is not empty"),
    };
    let addr = stream.peer_addr().context("getpeername")?;
    // Until the last byte is sent, the connection closes with a reset, whatever ends the
    // command (an error, SIGINT, SIGTERM, SIGHUP, SIGKILL): a FIN would tell the receiver it has
    // the whole file. Lifted at the clean end, before the half-close.
    let linger = socket2::SockRef::from(&stream);
    linger
        .set_linger(Some(Duration::ZERO))
        .context("setsockopt(SO_LINGER)")?;
    let mode = Strategy::from(opt.strategy);
    let mut tx = FileSender::new(
        &stream,
        file::Config {
            mode,
            ..file::Config::default()
        },
    )?;
    if let Some(why) = tx.fallback_reason() {
        eprintln!("zcnet send: {why}");
    }
    let start = Instant::now();
    let used = match input {
        Input::File(mut f, at, len) => {
            let result = tx.send_file(&f, at, len);
            // Standard input is left where the send ended, as a read of it would leave it.
            use std::io::Seek as _;
            let _ = f.seek(std::io::SeekFrom::Start(at + tx.counters().bytes));
            if let Err(e) = result {
                let file::FileError::Io { source, sent, .. } = &e else {
                    return Err(e.into());
                };
                // Ended short: the read found the end (sendfile, splice, copy), or the mmap
                // window's pages were gone (EFAULT): either way the file is now shorter.
                let short = source.kind() == std::io::ErrorKind::UnexpectedEof
                    || f.metadata().is_ok_and(|m| m.len() < at + len);
                if !short {
                    return Err(e.into());
                }
                if !opt.allow_short {
                    // A clean end would tell the receiver it has the whole file: the error's
                    // close resets the connection (SO_LINGER 0, set above).
                    bail!(
                        "{} ended after {sent} of the {len} bytes its size gave (it shrank while \
                         being sent); the connection is reset so that the receiver sees the \
                         transfer incomplete (--allow-short sends what a file holds)",
                        opt.file
                    );
                }
                eprintln!(
                    "zcnet send: {} ended after {sent} of the {len} bytes its size gave; sent \
                     what it held (--allow-short)",
                    opt.file
                );
            }
            tx.used().name()
        }
        Input::Pipe(f) if mode != Strategy::Copy && opt.limit.is_none() => {
            tx.send_pipe(&f)?;
            "splice"
        }
        Input::Pipe(f) | Input::Stream(f) => {
            match opt.limit {
                Some(l) => tx.send_reader(&mut f.take(l))?,
                None => tx.send_reader(&mut &f)?,
            };
            "copy"
        }
    };
    let sent = tx.counters();
    // Every byte went out: from here on a close is a FIN.
    linger.set_linger(None).context("setsockopt(SO_LINGER)")?;
    // Half-close and wait for the peer's end, so that "sent" means delivered to it.
    wait_for_close(&stream, sent.bytes)?;
    let seconds = start.elapsed().as_secs_f64();
    let gbit = if seconds > 0.0 {
        sent.bytes as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    let share = sent.zero_copy_share().unwrap_or(0.0);
    if opt.json {
        println!(
            "{}",
            json!({"bytes": sent.bytes, "strategy": used, "zero_copy_share": share,
                   "seconds": seconds, "gbit": gbit, "peer": addr.to_string()})
        );
    } else {
        eprintln!(
            "sent {} bytes by {used} ({:.2} % without a user copy) in {seconds:.2} s, {gbit:.2} Gbit, to {addr}",
            sent.bytes,
            100.0 * share
        );
    }
    Ok(())
}

/// Half-closes, then reads (and drops) what the peer sends until its FIN. A reset instead means
/// it did not read everything: a receiver that closes with unread data resets the connection
/// (RFC 2525 2.17), so "sent" would be a lie. Issue 22 item 1.
fn wait_for_close(stream: &TcpStream, sent: u64) -> anyhow::Result<()> {
    let reset = |e: std::io::Error| {
        // A reset that came before the shutdown leaves ENOTCONN to it: report the reset.
        let e = stream.take_error().ok().flatten().unwrap_or(e);
        let acked = zcnet::tcp_info::tcp_info(stream)
            .ok()
            .and_then(|i| i.acked_data_bytes())
            .map(|a| format!(", {} acknowledged by its TCP", a.min(sent)))
            .unwrap_or_default();
        anyhow::Error::new(e).context(format!(
            "the receiver ended the connection without reading everything: {sent} bytes \
             sent{acked}, not all of them read"
        ))
    };
    stream.shutdown(std::net::Shutdown::Write).map_err(reset)?;
    let mut rest = [0u8; 4096];
    loop {
        match Read::read(&mut &*stream, &mut rest) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(reset(e)),
        }
    }
}
