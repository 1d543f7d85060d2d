//! `zcnet send`: a netcat-like sender on the zero-copy file paths.
//!
//! `zcnet send FILE HOST:PORT` sends a file with `sendfile`, `splice`, an mmap window with
//! `MSG_ZEROCOPY`, or `read` + `send`; `-` sends standard input (spliced when it is a pipe,
//! sent with sendfile when it is a regular file, copied otherwise). At the end it prints the
//! bytes, the strategy used, the share sent without a user-space copy, and Gbit.

use std::fs::File;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use serde_json::json;
use zcnet::file::{self, FileSent, Options, Strategy};

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
            StrategyArg::MmapZc => Strategy::MmapZc,
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
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `zcnet send`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let strategy: Strategy = Strategy::from(opt.strategy).resolve();
    // Open (and check) the input before connecting.
    let input = if opt.file == "-" {
        None
    } else {
        let f = File::open(&opt.file).with_context(|| format!("cannot read {}", opt.file))?;
        let meta = f
            .metadata()
            .with_context(|| format!("cannot read {}", opt.file))?;
        if meta.is_dir() {
            bail!("cannot send {}: it is a directory", opt.file);
        }
        Some((f, meta.len()))
    };
    let addr = opt
        .addr
        .to_socket_addrs()
        .map_err(|e| anyhow!("bad address {:?}: {e} (expected HOST:PORT)", opt.addr))?
        .next()
        .ok_or_else(|| anyhow!("bad address {:?}: it resolves to nothing", opt.addr))?;
    let stream = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    let socket = stream.as_fd();
    let start = Instant::now();
    let (used, sent): (&str, FileSent) = match input {
        Some((f, len)) => (
            strategy.name(),
            file::send_file(socket, &f, 0, len, strategy, Options::default())?,
        ),
        None => send_stdin(socket, strategy)?,
    };
    // Half-close and wait for the peer to finish reading, so that "sent" means delivered to it.
    stream
        .shutdown(std::net::Shutdown::Write)
        .context("shutdown")?;
    let mut rest = [0u8; 64];
    while std::io::Read::read(&mut &stream, &mut rest)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
    let seconds = start.elapsed().as_secs_f64();
    let gbit = if seconds > 0.0 {
        sent.bytes as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    if opt.json {
        println!(
            "{}",
            json!({"bytes": sent.bytes, "strategy": used, "zero_copy_share": sent.zero_copy_share(),
                   "seconds": seconds, "gbit": gbit, "peer": addr.to_string()})
        );
    } else {
        eprintln!(
            "sent {} bytes by {used} ({:.2} % without a user copy) in {seconds:.2} s, {gbit:.2} Gbit, to {addr}",
            sent.bytes,
            100.0 * sent.zero_copy_share()
        );
    }
    Ok(())
}

/// Standard input: a regular file goes by the file strategies, a pipe by splice, else by copy.
fn send_stdin(
    socket: std::os::fd::BorrowedFd<'_>,
    strategy: Strategy,
) -> anyhow::Result<(&'static str, FileSent)> {
    let stdin = std::io::stdin();
    let fd = stdin.as_fd().try_clone_to_owned().context("stdin")?;
    let f = File::from(fd);
    let meta = f.metadata().context("stdin")?;
    if meta.is_file() {
        let len = meta.len();
        return Ok((
            strategy.name(),
            file::send_file(socket, &f, 0, len, strategy, Options::default())?,
        ));
    }
    use std::os::unix::fs::FileTypeExt;
    if meta.file_type().is_fifo() {
        return Ok(("splice", file::send_pipe(socket, f.as_fd())?));
    }
    Ok((
        "copy",
        file::send_reader(socket, &mut stdin.lock(), 256 * 1024)?,
    ))
}
