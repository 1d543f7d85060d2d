//! The relays `zcnet bench relay` compares zcnet's event loops with (`--engine`, hidden): the
//! relay before them, `zcnet::tokio::relay::serve` (a task and an epoll set a connection), and
//! the relay a Rust user writes with tokio, `copy_bidirectional` a connection (no peek cursor:
//! bytes acknowledged to the source are lost when the destination fails).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use zcnet::relay::{Config, Event, Serve};

/// `--engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// `relay::serve`: event loops.
    Loops,
    /// `zcnet::tokio::relay::serve`: a task and an epoll set per connection.
    TokioSessions,
    /// `tokio::io::copy_bidirectional` per connection: no peek, no guarantee.
    TokioCopy,
}

/// What the comparison relays are told.
pub struct How {
    pub engine: Engine,
    pub to: std::net::SocketAddr,
    pub threads: usize,
    pub max_connections: usize,
    pub drain: Duration,
}

/// Runs `how.engine` on `listener` until the first signal; a second ends the process.
pub fn run(
    opt: &How,
    listener: TcpListener,
    config: Arc<Config>,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(match opt.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        })
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let stopped = Arc::new(tokio::sync::Notify::new());
    let notify = stopped.clone();
    crate::interrupt::on_stop(move || notify.notify_one());
    let (engine, to, max, drain) = (opt.engine, opt.to, opt.max_connections, opt.drain);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let stop = stopped.notified();
        match engine {
            Engine::TokioSessions => {
                let how = Serve::new(max);
                zcnet::tokio::relay::serve(&listener, config, &how, drain, stop, event).await?;
            }
            Engine::TokioCopy => copy_bidirectional(&listener, to, stop).await,
            Engine::Loops => unreachable!("the event loops are not a comparison"),
        }
        anyhow::Ok(())
    })
}

/// Accepts until `stop`, each connection copied both ways to `to` by a task of its own.
async fn copy_bidirectional(
    listener: &tokio::net::TcpListener,
    to: std::net::SocketAddr,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        let (mut src, _) = tokio::select! {
            () = &mut stop => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("zcnet relay: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        tokio::spawn(async move {
            let Ok(mut dest) = tokio::net::TcpStream::connect(to).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut src, &mut dest).await;
        });
    }
}
