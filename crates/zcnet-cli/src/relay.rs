//! `zcnet relay --listen ADDR --to ADDR [--fallback ADDR]`: [`zcnet::relay`] behind a command
//! line. The guarantee, the method and the memory bound are documented there.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use zcnet::peek;
use zcnet::relay::{self, Config};

/// Options of `zcnet relay`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Address to accept connections on (port 0: any; the address is printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port)]
    pub listen: SocketAddr,
    /// Destination.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port)]
    pub to: SocketAddr,
    /// Second destination, tried in turn with --to when one fails.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port)]
    pub fallback: Option<SocketAddr>,
    /// How to peek: peek-offset (SO_PEEK_OFF where the kernel has it, else the discard buffer,
    /// with the reason; `auto` is the same), discard-buffer.
    #[arg(long, value_enum, default_value = "peek-offset")]
    pub method: MethodArg,
    /// Stop peeking while this many bytes are unacknowledged, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=4096))]
    pub max_unacked_mib: u64,
    /// Fail over when the destination stays silent this long while it owes an answer (bytes in
    /// flight, or two window probes unanswered), seconds. An idle destination, or one whose
    /// window is closed while its TCP answers the window probes, is never failed over.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = crate::args::seconds)]
    pub ack_timeout: f64,
    /// Give up on a connection when no destination accepts for this long, seconds.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = crate::args::seconds)]
    pub connect_timeout: f64,
    /// SO_SNDBUF of the destination sockets, KiB (the kernel doubles it); default: autotuned.
    #[arg(long, value_name = "KIB", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1048576))]
    pub sndbuf_kib: Option<usize>,
    /// Connections relayed at once; more are closed at once.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub max_connections: usize,
    /// Relay this many connections, then exit (0: forever).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub count: u64,
    /// Print each finished connection as one JSON line on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `--method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MethodArg {
    /// SO_PEEK_OFF where the kernel has it, else the discard buffer (the reason is printed).
    #[value(alias = "auto")]
    PeekOffset,
    /// MSG_PEEK through a discard buffer.
    DiscardBuffer,
}

/// `zcnet relay`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let mut targets = vec![opt.to];
    targets.extend(opt.fallback);
    let config = Arc::new(Config {
        mode: match opt.method {
            MethodArg::PeekOffset => peek::Mode::ZeroCopy,
            MethodArg::DiscardBuffer => peek::Mode::Copy,
        },
        max_unacked: opt.max_unacked_mib << 20,
        ack_timeout: Duration::from_secs_f64(opt.ack_timeout),
        connect_timeout: Duration::from_secs_f64(opt.connect_timeout),
        dest_sndbuf: opt.sndbuf_kib.map(|k| k << 10),
        ..Config::new(targets)
    });
    let listener = TcpListener::bind(opt.listen)
        .with_context(|| format!("cannot listen on {}", opt.listen))?;
    eprintln!("zcnet relay: listening on {}", listener.local_addr()?);
    let json = opt.json;
    let count = (opt.count > 0).then_some(opt.count);
    // Each connection is a task of one tokio runtime (`zcnet::tokio::relay`), not a thread.
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let served =
            zcnet::tokio::relay::serve(&listener, config, opt.max_connections, count, done(json))
                .await?;
        anyhow::Ok(served)
    })?;
    if served.refused > 0 {
        eprintln!(
            "zcnet relay: {} connection(s) refused: {} were being relayed",
            served.refused, opt.max_connections
        );
    }
    if served.failed > 0 {
        bail!(
            "{} connection(s) could not be relayed in full",
            served.failed
        );
    }
    Ok(())
}

/// What is said as each connection ends.
fn done(
    json: bool,
) -> impl Fn(std::net::SocketAddr, Result<relay::Report, relay::RelayError>) + Send + Sync + 'static
{
    move |from, r| match r {
        Ok(report) => {
            if let Some(why) = &report.fallback_reason {
                eprintln!("zcnet relay: {from}: {why}");
            }
            if report.ack_polling {
                eprintln!(
                    "zcnet relay: {from}: no acknowledgement notifications (SO_TIMESTAMPING \
                         TX_ACK, Linux 4.6): polled TCP_INFO every millisecond"
                );
            }
            for f in &report.failovers {
                eprintln!(
                    "zcnet relay: {from}: destination {} failed ({}) with {} bytes \
                         acknowledged; resumed there on {}",
                    f.from, f.why, f.acknowledged, f.to
                );
            }
            if json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            }
            eprintln!(
                "zcnet relay: {from}: {} bytes relayed and acknowledged ({}), {} failover(s), \
                     {} B re-read",
                report.bytes,
                report.method,
                report.failovers.len(),
                report.peek.reread_bytes
            );
        }
        Err(e) => eprintln!("zcnet relay: {from}: {:#}", anyhow::Error::from(e)),
    }
}
