//! `zcnet serve --listen ADDR`: the far side of every bench for `zcnet bench NAME --remote
//! ADDR` on another host (the protocol: [`crate::remote::proto`]).

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::Context;

use crate::remote::proto::Limits;
use crate::remote::server::{self, Config};

/// Options of `zcnet serve`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Address to accept bench clients on; data sockets are opened on the address a client
    /// reached, nowhere else (port 0: any; the address is printed on stderr).
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port)]
    pub listen: SocketAddr,
    /// A file whose contents (trimmed, at most 4 KiB) a client must send (its `--token-file`).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,
    /// Refuse runs longer than this, seconds.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = crate::args::bench_seconds)]
    pub max_seconds: f64,
    /// End a run that moves more than this many bytes, with an error.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 40, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=1 << 50))]
    pub max_bytes: u64,
    /// Refuse fetches by more connections than this.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub max_clients: usize,
    /// Serve this many clients, then exit (0: forever).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub count: u64,
}

/// `zcnet serve`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let token = opt
        .token_file
        .as_deref()
        .map(crate::remote::proto::read_token)
        .transpose()?;
    let listener =
        TcpListener::bind(opt.listen).with_context(|| format!("listening on {}", opt.listen))?;
    // Every descriptor the hard limit allows, as `zcnet relay` does; out of them anyway, it
    // pauses accepting and says so, the client being served goes on.
    let _ = crate::relay::raise_nofile();
    let config = Config {
        limits: Limits {
            max_seconds: opt.max_seconds,
            max_bytes: opt.max_bytes,
            max_clients: opt.max_clients,
        },
        token,
        idle: Duration::from_secs(30),
        sessions: (opt.count > 0).then_some(opt.count),
    };
    // The host facts every welcome carries, measured once a process (the copy cost, pinned to
    // CPU 0: about 0.5 s, 3 s in a debug build; the probe of features), before the first client
    // and before the server says it listens: measured at the first hello, they held that client
    // and every one queued behind it (the test of a hello cut at 10 s saw the next client served
    // 2.6 s late). Clients that connect meanwhile wait in the listen backlog.
    let _ = crate::measure::HostInfo::this();
    eprintln!(
        "zcnet serve: listening on {} (runs up to {} s and {} bytes, one client at a time{})",
        listener.local_addr()?,
        opt.max_seconds,
        opt.max_bytes,
        if config.token.is_some() {
            ", token required"
        } else {
            ""
        }
    );
    server::serve(&listener, &config).context("accept")?;
    Ok(())
}
