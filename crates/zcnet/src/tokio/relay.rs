//! The relay on tokio: see [`relay`].

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ::tokio::io::Interest;
use ::tokio::net::{TcpListener, TcpStream};

use super::IntoStdSocket;
use crate::relay::{
    Attempts, Backoff, Config, Event, Next, RelayError, Report, Serve, Served, Session,
    descriptor_room, lost_newcomer, out_of_resources,
};
use crate::sys::event::Epoll;
use crate::sys::reactor::register_borrowed;

/// Descriptors a connection of [`serve`] holds: the source, the destination and the session's
/// epoll set, which the reactor watches.
pub const DESCRIPTORS_PER_CONNECTION: u64 = 3;

fn io_err(call: &'static str) -> impl FnOnce(std::io::Error) -> RelayError {
    move |source| RelayError::Io { call, source }
}

/// [`crate::relay::relay`] on tokio: the same state machine (bytes dropped from the source's
/// queue only once the destination's TCP acknowledged them, failover from the first
/// unacknowledged byte, the reply copied back, both directions to their ends, the same
/// [`Report`]), whose waits are `.await`s: the session's epoll set (source `EPOLLIN` and
/// `EPOLLOUT`, destination `EPOLLIN`, `EPOLLOUT` and `EPOLLERR` for acknowledgement
/// notifications) is itself watched by the reactor, without a duplicate descriptor, and
/// connects are tokio's. Three descriptors a connection: the source, the destination, the
/// epoll set.
///
/// Cancellation: dropping the future resets the source and the destination (a FIN would tell
/// either that the part it got was the whole stream); what the destination acknowledged was
/// consumed from the source, the rest is lost with the connection.
///
/// # Errors
/// As [`crate::relay::relay`].
///
/// # Panics
/// Outside a tokio runtime with I/O and time enabled.
pub async fn relay<T>(src: T, config: Config) -> Result<Report, RelayError>
where
    T: IntoStdSocket<Std = std::net::TcpStream>,
{
    let config = &config;
    let src = src.into_std_socket().map_err(io_err("fcntl(O_NONBLOCK)"))?;
    let epoll = Epoll::new().map_err(io_err("epoll_create1"))?;
    let mut session = Session::new(src, config, &epoll, 0)?;
    // The session's epoll set itself is what the reactor watches.
    let events = register_borrowed(epoll.as_fd(), Interest::READABLE)
        .map_err(io_err("epoll_ctl(EPOLL_CTL_ADD)"))?;
    let mut next = session.start();
    loop {
        match next {
            Next::Done => return Ok(session.finish()),
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
    let mut attempts = Attempts::new(s, targets.to_vec());
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

/// [`crate::relay::serve`] on tokio: accepts connections on `listener` and relays each on its
/// own task, both directions to their ends, as [`Serve`] says, until [`Serve::count`]
/// connections were relayed or `stop` completes (`std::future::pending()`: never); then it
/// accepts no more and waits for the live connections to end, at most `drain_timeout`, after
/// which it resets those left ([`Event::DrainTimedOut`]). `event` is told of each connection's
/// end and of trouble accepting. Out of descriptors or memory it keeps every live connection,
/// backs off and retries sooner when one ends; it takes no more connections at once than
/// `RLIMIT_NOFILE` leaves descriptors for, so that each one it takes it can relay whole.
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails for another reason than a lost newcomer or a want of
/// resources, [`RelayError::Config`] for `max_connections` 0.
pub async fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    how: &Serve,
    drain_timeout: Duration,
    stop: impl Future<Output = ()>,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    crate::relay::check_max_connections(how.max_connections)?;
    let event = Arc::new(event);
    let live = Arc::new(AtomicUsize::new(0));
    let mut tasks = ::tokio::task::JoinSet::new();
    let mut served = Served::default();
    let mut backoff = Backoff::new();
    let mut full = false;
    let mut stop = std::pin::pin!(stop);
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let room = descriptor_room(DESCRIPTORS_PER_CONNECTION);
    while how.count.is_none_or(|c| served.relayed < c) {
        // Room for one more in the descriptors: else the newcomer waits in the listen queue
        // until a connection ends.
        if let Some((room, limit)) = room
            && live.load(Ordering::SeqCst) >= room
            && !tasks.is_empty()
        {
            if !full {
                event(Event::DescriptorsFull {
                    live: live.load(Ordering::SeqCst),
                    limit,
                });
                full = true;
            }
            ::tokio::select! {
                _ = tasks.join_next() => continue,
                () = &mut stop => break,
            }
        }
        full = false;
        let accepted = ::tokio::select! {
            a = listener.accept() => a,
            () = &mut stop => break,
        };
        let (src, from) = match accepted {
            Ok(a) => a,
            Err(e) if out_of_resources(&e) => {
                served.accept_failures += 1;
                let (pause, first) = backoff.failed();
                if first {
                    let live = live.load(Ordering::SeqCst);
                    event(Event::AcceptStalled { error: e, live });
                }
                // Sooner when a connection ends and gives its descriptors back.
                ::tokio::select! {
                    () = ::tokio::time::sleep(pause) => {}
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                    () = &mut stop => break,
                }
                continue;
            }
            Err(e) if lost_newcomer(&e) => continue,
            Err(e) => return Err(io_err("accept")(e)),
        };
        if let Some(resumed) = backoff.worked() {
            event(resumed);
        }
        if live.load(Ordering::SeqCst) >= how.max_connections {
            served.refused += 1;
            refuse(src);
            event(Event::Refused { from });
            continue;
        }
        served.relayed += 1;
        live.fetch_add(1, Ordering::SeqCst);
        let (config, live, failed, event) =
            (config.clone(), live.clone(), failed.clone(), event.clone());
        tasks.spawn(async move {
            let result = relay(src, Config::clone(&config)).await;
            live.fetch_sub(1, Ordering::SeqCst);
            if result.is_err() {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            event(Event::Ended { from, result });
        });
        while tasks.try_join_next().is_some() {}
    }
    served.reset_at_drain = drain(tasks, drain_timeout).await;
    if served.reset_at_drain > 0 {
        event(Event::DrainTimedOut {
            live: served.reset_at_drain as usize,
        });
    }
    served.failed = failed.load(Ordering::SeqCst);
    Ok(served)
}

/// Turns a connection over `max_connections` away: a reset (`connect(AF_UNSPEC)`), then the
/// close. Taking the socket out of the reactor first (`into_std`) could fail and leave the drop
/// a FIN.
fn refuse(src: TcpStream) {
    let _ = crate::sys::net::disconnect(src.as_fd());
    drop(src);
}

/// The drain: every live connection to its end, or reset when `timeout` is up (dropping a
/// relay's future resets both its connections). How many were reset.
async fn drain(mut tasks: ::tokio::task::JoinSet<()>, timeout: Duration) -> u64 {
    let drained = ::tokio::time::timeout(timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_ok() {
        return 0;
    }
    let left = tasks.len() as u64;
    tasks.shutdown().await;
    left
}
