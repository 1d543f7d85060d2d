//! `zcnet iperf3`: a client and a server that speak iperf3's protocol (as iperf3 3.12 does), so
//! that an iperf3 a fleet already runs is a far side for zcnet, and zcnet's server one for
//! iperf3's client. Tests run over TCP or UDP (`-u`, `-b`), forward and `-R`, with `-P`
//! streams, for `-t` seconds or `-n` bytes. TCP sends by `--mode` (auto by default: the
//! library's `Mode::Auto` on `MSG_ZEROCOPY`; `copy`, `zc`, `zc-fixed`) or `sendfile` (`-Z`),
//! and receives by `TCP_ZEROCOPY_RECEIVE` (copy with `--mode copy`); each side's zcnet line
//! says what the kernel really did. Options iperf3 has and zcnet does not (`--bidir`, `-O`,
//! ...) are refused by name (exit 2).

use anyhow::Context;

mod client;
mod interval;
mod opt;
mod output;
pub mod proto;
mod server;
mod streams;
mod udp;
mod units;

pub use opt::{Mode, Opt};

/// Runs the client or the server.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    if opt.server {
        let listener = server::listen(&opt)?;
        return server::run(&opt, listener);
    }
    let host = opt.client.clone().context("give -c HOST or -s")?;
    let outcome = match client::run(&opt, &host) {
        Ok(o) => o,
        Err(e) if opt.json => {
            // As iperf3 -J does: a document with the error, on stdout; exit 1.
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "start": {}, "intervals": [], "end": {}, "error": format!("{e:#}"),
                }))?
            );
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if opt.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&output::json(opt.port, &host, &outcome))?
        );
    } else {
        output::client_summary(&outcome);
    }
    Ok(())
}
