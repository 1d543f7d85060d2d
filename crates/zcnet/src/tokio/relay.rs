//! The relay on tokio: see [`relay`].

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use ::tokio::net::{TcpListener, TcpStream};

use super::IntoStdSocket;
use crate::relay::{Attempts, Backward, Config, Next, RelayError, Report, Served, Session};
use crate::sys::Epoll;
use crate::sys::reactor::{Registered, register};

fn io_err(call: &'static str) -> impl FnOnce(std::io::Error) -> RelayError {
    move |source| RelayError::Io { call, source }
}

/// [`crate::relay::relay`] on tokio: the same state machine (bytes dropped from the source's
/// queue only once the destination's TCP acknowledged them, failover from the first
/// unacknowledged byte, the same [`Report`]), whose waits are `.await`s: the session's epoll set
/// (source `EPOLLIN`, destination `EPOLLOUT` and `EPOLLERR` for acknowledgement notifications)
/// is itself watched by the reactor, connects are tokio's, and the copy from destination back to
/// source is a task instead of a thread.
///
/// Cancellation: dropping the future resets the source and the destination (a FIN would tell
/// the destination that the part it got was the whole stream); what the destination
/// acknowledged was consumed from the source, the rest is lost with the connection. The reverse
/// copy task ends with the reset.
///
/// # Errors
/// As [`crate::relay::relay`].
///
/// # Panics
/// Outside a tokio runtime with I/O and time enabled.
pub async fn relay<T>(src: T, config: &Config) -> Result<Report, RelayError>
where
    T: IntoStdSocket<Std = std::net::TcpStream>,
{
    let src = src.into_std_socket().map_err(io_err("fcntl(O_NONBLOCK)"))?;
    let mut session = Session::new(src, config, spawn_reverse)?;
    // The session's epoll fd, duplicated, is what the reactor watches.
    let events: AsyncFd<Registered<OwnedFd>> = session
        .epoll()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| register(fd, Interest::READABLE))
        .map_err(io_err("epoll_ctl(EPOLL_CTL_ADD)"))?;
    let mut next = session.start();
    loop {
        match next {
            Next::Done => return session.finish(),
            Next::Connect(targets) => {
                let (stream, target) = connect(config, &targets).await?;
                session.adopt(stream, target)?;
            }
            Next::Wait(wait) => match until(wait, events.readable()).await {
                // The backstop: step again.
                Err(_) => {
                    session.woke(Duration::ZERO)?;
                }
                Ok(guard) => {
                    let mut guard = guard.map_err(io_err("epoll_wait"))?;
                    // Fewer than a full batch read: the set is empty, its fd readable again
                    // only with a new event.
                    if session.woke(Duration::ZERO)? < Epoll::MAX_EVENTS {
                        guard.clear_ready();
                    }
                }
            },
        }
        next = session.step()?;
    }
}

/// `future`, for at most `wait` (`None`: for as long as it takes).
async fn until<F: Future>(wait: Option<Duration>, future: F) -> Result<F::Output, ()> {
    match wait {
        Some(wait) => ::tokio::time::timeout(wait, future).await.map_err(drop),
        None => Ok(future.await),
    }
}

/// Connects to `targets` (indices into [`Config::targets`]) in turn, for at most the connect
/// timeout.
async fn connect(
    s: &Config,
    targets: &[usize],
) -> Result<(std::net::TcpStream, usize), RelayError> {
    let mut attempts = Attempts::new(s, targets);
    while let Some((k, target, left)) = attempts.next() {
        match until(Some(left), TcpStream::connect(target)).await {
            Ok(Ok(stream)) => {
                let stream = stream.into_std().map_err(io_err("connect"))?;
                return Ok((stream, k));
            }
            Ok(Err(e)) => attempts.failed(k, &e),
            Err(()) => attempts.failed(k, &"connection timed out"),
        }
        if let Some(pause) = attempts.pause() {
            ::tokio::time::sleep(pause).await;
        }
    }
    Err(attempts.no_destination())
}

/// Copies destination to source on a task while copy `mine` is current; passes the
/// destination's FIN on.
fn spawn_reverse(
    from: std::net::TcpStream,
    to: std::net::TcpStream,
    backward: Arc<Backward>,
    mine: u64,
) {
    ::tokio::spawn(async move {
        let (Ok(mut from), Ok(mut to)) = (TcpStream::from_std(from), TcpStream::from_std(to))
        else {
            return;
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) => {
                    if backward.fin(mine, &from) {
                        let _ = to.shutdown().await;
                    }
                    return;
                }
                Ok(n) => {
                    if !backward.is_current(mine) || to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
}

/// [`crate::relay::serve`] on tokio: accepts connections on `listener` and relays each on its
/// own task, at most `max_connections` at once (more are closed at once), until `count`
/// connections were accepted (`None`: forever); `done` is called as each ends. Returns after the
/// last relay ended.
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails, [`RelayError::Config`] for `max_connections` 0.
pub async fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    max_connections: usize,
    count: Option<u64>,
    done: impl Fn(SocketAddr, Result<Report, RelayError>) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    crate::relay::check_max_connections(max_connections)?;
    let done = Arc::new(done);
    let active = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = ::tokio::task::JoinSet::new();
    let mut served = Served::default();
    while count.is_none_or(|c| served.accepted < c) {
        let (src, from) = listener.accept().await.map_err(io_err("accept"))?;
        served.accepted += 1;
        if active.load(Ordering::SeqCst) >= max_connections {
            served.refused += 1;
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (config, active, failed, done) =
            (config.clone(), active.clone(), failed.clone(), done.clone());
        tasks.spawn(async move {
            let r = relay(src, &config).await;
            active.fetch_sub(1, Ordering::SeqCst);
            if r.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            done(from, r);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    served.failed = failed.load(Ordering::SeqCst);
    Ok(served)
}
