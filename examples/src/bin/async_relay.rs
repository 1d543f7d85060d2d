//! `async_relay LISTEN TARGET [TARGET ...]`: a TCP relay on tokio that drops source bytes only
//! once a destination's TCP acknowledged them (SO_PEEK_OFF), failing over to the next target
//! from the first unacknowledged byte. Ctrl-C stops it: the live connections get 10 s to end.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use zcnet::relay::{Config, Event, Serve};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .ok_or("usage: async_relay LISTEN TARGET [TARGET ...]")?;
    let targets: Vec<SocketAddr> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    if targets.is_empty() {
        return Err("give at least one TARGET (HOST:PORT)".into());
    }
    let listener = TcpListener::bind(&listen).await?;
    eprintln!("relaying {} to {targets:?}", listener.local_addr()?);
    let config = Arc::new(Config::new(targets));
    // Ctrl-C: no new connections; the live ones get 10 s to end, both directions.
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let how = Serve::new(1024);
    let drain = Duration::from_secs(10);
    let served = zcnet::tokio::relay::serve(&listener, config, &how, drain, stop, |e| match e {
        Event::Ended {
            from,
            result: Ok(report),
        } => eprintln!(
            "{from}: {} bytes relayed and acknowledged, {} failovers",
            report.bytes,
            report.failovers.len()
        ),
        Event::Ended {
            from,
            result: Err(e),
        } => eprintln!("{from}: {e}"),
        other => eprintln!("{other:?}"),
    })
    .await?;
    eprintln!("{served:?}");
    Ok(())
}
