//! `async_relay LISTEN TARGET [TARGET ...]`: a TCP relay on tokio that drops source bytes only
//! once a destination's TCP acknowledged them (SO_PEEK_OFF), failing over to the next target
//! from the first unacknowledged byte. Ctrl-C ends it.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use zcnet::relay::Config;

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
    let served = zcnet::tokio::relay::serve(&listener, config, 1024, None, |peer, r| match r {
        Ok(report) => eprintln!(
            "{peer}: {} bytes relayed and acknowledged, {} failovers",
            report.bytes,
            report.failovers.len()
        ),
        Err(e) => eprintln!("{peer}: {e}"),
    })
    .await?;
    eprintln!("{served:?}");
    Ok(())
}
