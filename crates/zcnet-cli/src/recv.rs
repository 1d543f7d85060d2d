//! `zcnet recv`: a netcat-like receiver on the TCP zero-copy receive path.
//!
//! It accepts one connection, receives until the sender closes, writes everything to a file or
//! stdout, and says how much of it the kernel mapped instead of copying. Any sender works
//! (socat, nc, `zcnet send`); pages get mapped only when the payload arrives in whole 4 KiB
//! pages (see `zcnet::tcp_rx`). Writing the data out is itself a copy into the file's pages:
//! "mapped" speaks of the receive side only.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::time::Instant;
use zcnet::ZeroCopyCounters as _;

use anyhow::{Context, anyhow};
use serde_json::json;
use zcnet::tcp_rx::{Config, TcpZeroCopyReceiver};

use crate::output::{self, Output};

/// Options of `zcnet recv`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Address to listen on, HOST:PORT (`[::1]:9000`, `127.0.0.1:9000`, `localhost:9000`).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: String,
    /// Where the received bytes go: a file, or `-` for stdout.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: String,
    /// TCP_MAXSEG on the listening socket (4108 gives 4 KiB payloads on loopback).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(i32).range(88..=65535))]
    mss: Option<i32>,
    /// Receive window in KiB (also SO_RCVLOWAT: the receiver wakes per window or at the end).
    #[arg(long, value_name = "KIB", default_value_t = 512, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=1048576))]
    window_kib: usize,
    /// Read by copy instead of mapping (the copying twin, for comparison).
    #[arg(long)]
    copy: bool,
    /// Print the summary as JSON (on stdout, or on stderr when the data goes to stdout).
    #[arg(long)]
    json: bool,
}

fn parse_addr(s: &str) -> anyhow::Result<SocketAddr> {
    crate::args::host_port(s).map_err(|e| anyhow!("bad address {s:?}: {e}"))
}

/// Runs `zcnet recv`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let addr = parse_addr(&opt.listen)?;
    // A signal while waiting for the peer must not leave the new output's temporary behind.
    crate::interrupt::watch().context("taking SIGINT and SIGTERM")?;
    // Open the output before listening, so that a bad path fails before any peer connects;
    // an existing file is truncated only once a peer has connected.
    let mut file = match opt.output.as_str() {
        "-" if stdout_was_closed() => anyhow::bail!(
            "standard output is closed: -o - would write the stream nowhere (give a file, or \
             redirect it)"
        ),
        "-" => None,
        path => Some(
            Output::open(std::path::Path::new(path))
                .with_context(|| format!("cannot write {}", output::shown(path)))?,
        ),
    };
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    if let Some(m) = opt.mss {
        socket2::SockRef::from(&listener)
            .set_tcp_mss(u32::try_from(m).context("--mss")?)
            .context("setsockopt(TCP_MAXSEG)")?;
    }
    let (conn, peer) = listener.accept().context("accept")?;
    drop(listener);
    if let Some(f) = file.as_mut() {
        f.begin()
            .with_context(|| format!("cannot write {}", output::shown(&opt.output)))?;
    }
    let mut out: Box<dyn Write> = match file {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stdout().lock()),
    };
    let window = opt.window_kib.max(4) * 1024;
    let config = Config {
        window,
        rcvlowat: Some(window),
        mode: if opt.copy {
            zcnet::tcp_rx::Mode::Copy
        } else {
            zcnet::tcp_rx::Mode::ZeroCopy
        },
        ..Config::default()
    };
    let mut rx = TcpZeroCopyReceiver::new(conn, config)?;
    if let Some(why) = rx.fallback_reason() {
        eprintln!("zcnet recv: receiving by copy: {why}");
    }
    let start = Instant::now();
    let result = rx.copy_to(&mut out);
    let seconds = start.elapsed().as_secs_f64();
    let stats = rx.counters();
    let bytes = stats.bytes();
    let gbit = if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    let summary = json!({
        "peer": peer.to_string(), "bytes": bytes, "seconds": seconds, "gbit": gbit,
        "mapped_share": stats.zero_copy_share().unwrap_or(0.0), "mapped_bytes": stats.mapped_bytes,
        "copied_bytes": stats.copied_bytes, "complete": result.is_ok(),
    });
    let line = format!(
        "received {bytes} bytes ({:.2} % mmap'ed) in {seconds:.2} s, {gbit:.2} Gbit, from {peer}",
        100.0 * stats.zero_copy_share().unwrap_or(0.0)
    );
    if opt.json {
        if opt.output == "-" {
            eprintln!("{summary}");
        } else {
            println!("{summary}");
        }
    } else {
        eprintln!("{line}");
    }
    result.with_context(|| format!("receiving from {peer}"))?;
    Ok(())
}

/// Whether standard output was closed when the process started: Rust's start-up then opens
/// `/dev/null` read-write in its place (a shell's `> /dev/null` opens it write-only), and what
/// `-o -` wrote would be lost with exit 0 (issue 48 item 15).
fn stdout_was_closed() -> bool {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::unix::fs::MetadataExt as _;
    let stdout = std::io::stdout();
    let Ok(flags) = fcntl(&stdout, FcntlArg::F_GETFL) else {
        return true;
    };
    let rdwr = OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE == OFlag::O_RDWR;
    let fd = std::os::fd::AsFd::as_fd(&stdout);
    let null = |m: &std::fs::Metadata| {
        std::fs::metadata("/dev/null").is_ok_and(|n| n.rdev() == m.rdev() && m.rdev() != 0)
    };
    let meta = fd
        .try_clone_to_owned()
        .ok()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata().ok());
    rdwr && meta.is_some_and(|m| null(&m))
}
