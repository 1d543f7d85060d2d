//! `zcnet relay --listen ADDR --to ADDR [--fallback ADDR]`: [`zcnet::relay`] behind a command
//! line. The guarantee, the method and the memory bound are documented there.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use zcnet::peek;
use zcnet::relay::{self, Config, Event, Serve};

mod compare;

pub use compare::Engine;

/// Options of `zcnet relay`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Address to accept connections on (port 0: any; the address is printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port)]
    pub listen: SocketAddr,
    /// Destination.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::peer_port)]
    pub to: SocketAddr,
    /// Second destination, tried in turn with --to when one fails.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::peer_port)]
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
    /// Connections relayed at once, each counted until both its directions ended; more are
    /// refused (reset at once).
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
    /// Relay this many connections (refused ones do not count), then stop accepting and exit
    /// once they ended, both directions (0: forever).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub count: u64,
    /// After SIGINT, SIGTERM or SIGHUP (it accepts no more): how long the live connections have
    /// to end, both directions, before they are reset, seconds (a second signal ends at once).
    #[arg(long, visible_alias = "drain-seconds", value_name = "S", default_value_t = 10.0, value_parser = crate::args::seconds)]
    pub drain_timeout: f64,
    /// Event loops: threads, each with one epoll set for its connections (default: one per CPU
    /// the process may run on).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// Print each finished connection as one JSON line on stdout.
    #[arg(long)]
    pub json: bool,
    /// What relays: zcnet's event loops, or, for `zcnet bench relay` to compare, the relay
    /// before them (a tokio task and an epoll set per connection) or a tokio
    /// `copy_bidirectional` relay (what a Rust user writes, without zcnet's guarantee).
    #[arg(long, value_enum, default_value = "loops", hide = true)]
    pub engine: Engine,
    /// End at once when stdin ends: `zcnet bench relay` starts its relays so, and one killed
    /// (SIGKILL leaves no time to stop them) takes them along.
    #[arg(long, hide = true)]
    pub until_stdin_ends: bool,
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
/// Ends this process (status 0) when its stdin ends: a child of a bench whose parent died
/// however it died, which closed the pipe.
pub fn exit_when_stdin_ends() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
}

pub fn run(opt: Opt) -> anyhow::Result<()> {
    if opt.until_stdin_ends {
        exit_when_stdin_ends();
    }
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
    let listener =
        listen(opt.listen).with_context(|| format!("cannot listen on {}", opt.listen))?;
    // A server holds a crowd: every descriptor the hard limit allows (as nginx's
    // worker_rlimit_nofile and Go's runtime do), before any thread starts.
    let nofile = raise_nofile();
    // SIGINT, SIGTERM, SIGHUP: no new connections, the live ones drain (a second one ends the
    // process at once).
    crate::interrupt::watch().context("taking over SIGINT, SIGTERM and SIGHUP")?;
    let _graceful = crate::interrupt::graceful_saying(
        "zcnet relay: stopping: no new connections; the live ones have --drain-timeout to end \
         (again: now)",
    );
    eprintln!("zcnet relay: listening on {}", listener.local_addr()?);
    eprintln!(
        "zcnet relay: {nofile}, {} a connection",
        relay::DESCRIPTORS_PER_CONNECTION
    );
    let json = opt.json;
    if opt.engine != Engine::Loops {
        let how = compare::How {
            engine: opt.engine,
            to: opt.to,
            threads: opt.threads.unwrap_or(0),
            max_connections: opt.max_connections,
            drain: Duration::from_secs_f64(opt.drain_timeout),
        };
        return compare::run(&how, listener, config, said(json));
    }
    let how = Serve {
        max_connections: opt.max_connections,
        count: (opt.count > 0).then_some(opt.count),
        threads: opt.threads.unwrap_or(0),
        drain_timeout: Duration::from_secs_f64(opt.drain_timeout),
    };
    // The first signal wakes the loops: no new connections, the live ones drain.
    let stop = relay::Stop::new().context("eventfd")?;
    let stopper = stop.clone();
    crate::interrupt::on_stop(move || stopper.stop());
    if crate::interrupt::stop_requested().is_some() {
        stop.stop();
    }
    let served = relay::serve(&listener, config, &how, &stop, said(json))?;
    if served.refused > 0 {
        eprintln!(
            "zcnet relay: {} connection(s) refused: {} were being relayed",
            served.refused, opt.max_connections
        );
    }
    // A stop that ran out of drain time is still the stop asked for: exit 0, having said so
    // (each source saw a reset, never a clean end of a cut stream).
    if served.reset_at_drain > 0 {
        eprintln!(
            "zcnet relay: {} connection(s) still live after the drain timeout ({} s) were reset",
            served.reset_at_drain, opt.drain_timeout
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

/// A listener on `addr` with a listen queue for a crowd: the kernel's most (`somaxconn`, 4096 by
/// default) rather than std's 128, so that a burst of clients waits in it instead of having its
/// handshakes dropped and retried a second later.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(i32::MAX)?;
    Ok(s.into())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; says what it is now.
pub fn raise_nofile() -> String {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return "descriptors: limit unknown".into();
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return format!("descriptors: {hard}, raised from {soft}");
    }
    format!("descriptors: {soft}")
}

/// What is said as each connection ends, and of trouble accepting (one line a burst).
fn said(json: bool) -> impl Fn(Event) + Send + Sync + 'static {
    move |event| match event {
        Event::Ended {
            from,
            result: Ok(report),
        } => {
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
        Event::Ended {
            from,
            result: Err(e),
        } => eprintln!("zcnet relay: {from}: {:#}", anyhow::Error::from(e)),
        Event::Refused { from } => {
            eprintln!("zcnet relay: {from}: refused: --max-connections are being relayed")
        }
        Event::AcceptStalled { error, live } => eprintln!(
            "zcnet relay: accept failed: {error}: the {live} live connection(s) go on; newcomers \
             wait while it retries"
        ),
        Event::AcceptResumed { failures, waited } => eprintln!(
            "zcnet relay: accepting again after {failures} failed accept(s) in {:.1} s",
            waited.as_secs_f64()
        ),
        Event::DescriptorsFull { live, limit } => eprintln!(
            "zcnet relay: {live} live connection(s) use the descriptors RLIMIT_NOFILE {limit} \
             leaves: newcomers wait until one ends"
        ),
        Event::DrainTimedOut { live } => {
            eprintln!("zcnet relay: drain timeout: {live} live connection(s) reset");
        }
    }
}
