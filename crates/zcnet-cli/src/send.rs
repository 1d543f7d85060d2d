//! `zcnet send`: a netcat-like sender on the zero-copy file paths.
//!
//! `zcnet send FILE HOST:PORT` sends a file with `sendfile`, `splice`, an mmap window with
//! `MSG_ZEROCOPY`, or `read` + `send`; `-` sends standard input. A regular file of known size
//! goes by the strategy; a pipe or FIFO is spliced (copied with `--strategy copy`); anything
//! else (a character device, a /proc file whose size reads 0) is read to its end and copied,
//! `--limit` bounding an endless source such as /dev/zero. At the end it prints the bytes, the
//! strategy really used, the share sent without a user-space copy, and Gbit.

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
            StrategyArg::MmapZc => Strategy::MmapZerocopy,
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
    /// Give up connecting after this many seconds.
    #[arg(long, value_name = "S", default_value = "10", value_parser = crate::args::seconds)]
    connect_timeout: f64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What the input is, decided before connecting.
enum Input {
    /// A regular file of known, non-zero size (after `--limit`).
    File(File, u64),
    /// A pipe or FIFO.
    Pipe(File),
    /// Anything else, read to its end.
    Stream(File),
}

fn classify(f: File, limit: Option<u64>, what: &str) -> anyhow::Result<Input> {
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {what}"))?;
    let ty = meta.file_type();
    if ty.is_dir() {
        bail!("cannot send {what}: it is a directory");
    }
    Ok(if ty.is_file() && meta.len() > 0 {
        Input::File(f, limit.map_or(meta.len(), |l| l.min(meta.len())))
    } else if ty.is_fifo() {
        Input::Pipe(f)
    } else {
        // A size of 0 is also what /proc and sysfs files report: read them to the end.
        Input::Stream(f)
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
        crate::args::resolve(&opt.addr).map_err(|e| anyhow!("bad address {:?}: {e}", opt.addr))?;
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
        Input::File(f, len) => {
            match tx.send_file(&f, 0, len) {
                Ok(_) => {}
                // A file shorter than its size (sysfs reports 4096 for a few bytes; a file
                // truncated meanwhile) ends where its data ends: that is its end, not an error.
                Err(file::FileError::Io { source, sent, .. })
                    if source.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    eprintln!(
                        "zcnet send: {} ended after {sent} of the {len} bytes its size gave; \
                         sent what it held",
                        opt.file
                    );
                }
                Err(e) => return Err(e.into()),
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
