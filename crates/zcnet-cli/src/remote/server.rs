//! The server of the control protocol: one session at a time, every other client told it is
//! busy; a bad message ends its session with an `error` and the server accepts the next.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::bounds::{GRACE, Signals};
use super::far;
use super::greeting::{Door, Outcome};
use super::proto::{self, Limits, Message, ProtoError, VERSION};

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// What it accepts.
    pub limits: Limits,
    /// The shared token a client must send, if any.
    pub token: Option<String>,
    /// Longest wait for a client's next message between runs.
    pub idle: Duration,
    /// Stop after this many sessions (tests); `None`: serve forever.
    pub sessions: Option<u64>,
}

/// How long a client that comes while another is served waits for its turn, counted from its
/// valid hello: a bench's next invocation, connecting as the last one leaves, is served; the
/// others hear `busy` within this time, however many wait.
pub const TURN_WAIT: Duration = Duration::from_secs(2);

/// Most clients waiting for their turn at once; more are told `busy` at their hello. Only
/// clients past the door (a valid hello, the token where one is wanted) wait here.
const MAX_WAITING: usize = 64;

/// What woke the accept loop: the listener, a session's end, or (from [`DOOR`] up) a
/// connection at the door.
const LISTENER: u64 = 0;
const SESSION_ENDED: u64 = 1;
const DOOR: u64 = 2;

/// A client waiting for its turn, its hello read and checked.
struct Waiting {
    conn: TcpStream,
    peer: SocketAddr,
    since: Instant,
}

/// Serves clients on `listener` until `config.sessions` have been served (or forever).
///
/// This thread accepts, reads every hello without blocking ([`greeting`]: strangers hold
/// nothing a client needs) and keeps the queue of clients past the door; each session runs on
/// a thread of its own, so that every waiting client's 2 s run in parallel.
///
/// # Errors
/// `accept` or the wait for events fails for a reason other than a client that went away.
pub fn serve(listener: &TcpListener, config: &Config) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    // A session's thread says it ended on this counter, which wakes the loop at once.
    let ended = Arc::new(EventFd::from_flags(
        EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
    )?);
    let events = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    events.add(listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
    events.add(
        ended.as_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN, SESSION_ENDED),
    )?;
    let mut door = Door::new(config.token.clone(), DOOR);
    let mut queue: VecDeque<Waiting> = VecDeque::new();
    let mut current: Option<std::thread::JoinHandle<()>> = None;
    let mut served = 0u64;
    // Out of descriptors or memory, accepting pauses: the listener leaves the epoll set (its
    // pending connections would wake it at once, again and again) until the back-off ends.
    let mut stall = Stall::default();
    let done = |served: u64| config.sessions.is_some_and(|n| served >= n);
    let mut ready = vec![EpollEvent::empty(); 64];
    loop {
        if current.is_none()
            && !done(served)
            && let Some(w) = queue.pop_front()
        {
            served += 1;
            current = Some(start(w, config, &ended));
        }
        if done(served) {
            let why = "this server ends: it has served its --count clients";
            for w in queue.drain(..) {
                refuse(w.conn, w.peer, why);
            }
            door.close_all(why);
            if let Some(h) = current.take() {
                let _ = h.join();
            }
            return Ok(());
        }
        while queue
            .front()
            .is_some_and(|w| w.since.elapsed() >= TURN_WAIT)
        {
            let w = queue.pop_front().expect("a front");
            refuse(w.conn, w.peer, BUSY);
        }
        // Closing a descriptor takes it out of the epoll set.
        door.expire(Instant::now());
        if stall.until.is_some_and(|t| Instant::now() >= t) {
            stall.until = None;
            events.add(listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
        }
        // Until a client comes or speaks, the session ends, the longest waiter's time is up,
        // a door connection's time is up, or a pause of accepting ends.
        let deadline = [
            queue.front().map(|w| w.since + TURN_WAIT),
            door.next_deadline(),
            stall.until,
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout = deadline.map_or(EpollTimeout::NONE, |t| {
            let left = t.saturating_duration_since(Instant::now());
            // Rounded up: woken a millisecond early, the loop would wait again for nothing.
            EpollTimeout::try_from(left + Duration::from_millis(1)).unwrap_or(EpollTimeout::MAX)
        });
        let n = match events.wait(&mut ready, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        // The door's hellos first, new connections last: a client whose hello came is a client
        // before a crowd behind it can push it out.
        let mut accept = false;
        for ev in &ready[..n] {
            match ev.data() {
                SESSION_ENDED => {
                    let _ = ended.read();
                    if let Some(h) = current.take() {
                        // It has said it ended: the join waits for nothing but its return.
                        let _ = h.join();
                    }
                }
                LISTENER => accept = true,
                key => {
                    if let Outcome::Client(conn, peer) = door.readable(key) {
                        let _ = events.delete(&conn);
                        if queue.len() >= MAX_WAITING {
                            refuse(conn, peer, BUSY);
                        } else {
                            queue.push_back(Waiting {
                                conn,
                                peer,
                                since: Instant::now(),
                            });
                        }
                    }
                }
            }
        }
        if accept {
            let live = queue.len() + usize::from(current.is_some()) + door.len();
            if let Some(e) = accept_all(listener, &events, &mut door, &mut stall)? {
                let pause = stall.failed(&e, live);
                events.delete(listener)?;
                stall.until = Some(Instant::now() + pause);
            }
        }
    }
}

/// The answer of a client that waited its turn in vain.
const BUSY: &str = "busy: this server runs one client at a time; try again later";

/// A pause of accepting for want of descriptors or memory, and its back-off: 5 ms, doubling,
/// at most 1 s; one line a burst.
#[derive(Default)]
struct Stall {
    until: Option<Instant>,
    failures: u32,
    since: Option<Instant>,
}

impl Stall {
    /// One more failed accept: says so at the first of a burst; the pause before the next try.
    fn failed(&mut self, e: &std::io::Error, live: usize) -> Duration {
        if self.since.is_none() {
            self.since = Some(Instant::now());
            eprintln!(
                "zcnet serve: accept failed: {e}: the {live} connection(s) here go on; newcomers \
                 wait while it retries"
            );
        }
        self.failures += 1;
        Duration::from_millis((5u64 << (self.failures - 1).min(8)).min(1000))
    }

    /// An accept worked: the end of a burst, said.
    fn worked(&mut self) {
        if let Some(since) = self.since.take() {
            eprintln!(
                "zcnet serve: accepting again after {} failed accept(s) in {:.1} s",
                std::mem::take(&mut self.failures),
                since.elapsed().as_secs_f64()
            );
        }
    }
}

/// Most connections taken from the listen queue before the loop looks at the door again: the
/// hellos that came meanwhile are read between two batches, so that a flood of connections
/// (tens of thousands a second) cannot push a client out of the door before its hello, which
/// is on its way as soon as it is connected, is read.
const ACCEPT_BATCH: usize = 16;

/// Takes up to [`ACCEPT_BATCH`] pending connections to the door, watched for their hellos on
/// `events` (the listener stays ready while more wait: epoll says so again). Returns the error
/// of an accept that failed for want of descriptors or memory (`EMFILE`, `ENFILE`, `ENOMEM`,
/// `ENOBUFS`), which passes: the caller pauses accepting.
fn accept_all(
    listener: &TcpListener,
    events: &Epoll,
    door: &mut Door,
    stall: &mut Stall,
) -> std::io::Result<Option<std::io::Error>> {
    for _ in 0..ACCEPT_BATCH {
        let (conn, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR)) => {
                continue;
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
                ) =>
            {
                return Ok(Some(e));
            }
            Err(e) => return Err(e),
        };
        stall.worked();
        if conn.set_nonblocking(true).is_err() {
            continue;
        }
        let (key, conn) = door.admit(conn, peer);
        events.add(conn, EpollEvent::new(EpollFlags::EPOLLIN, key))?;
    }
    Ok(None)
}

/// Runs `w`'s session on a thread of its own, which says on `ended` when it is over.
fn start(w: Waiting, config: &Config, ended: &Arc<EventFd>) -> std::thread::JoinHandle<()> {
    let (config, ended) = (config.clone(), Arc::clone(ended));
    std::thread::spawn(move || {
        let Waiting { conn, peer, .. } = w;
        match session(conn, &config) {
            Ok(runs) => eprintln!("zcnet serve: [{peer}] done, {runs} runs"),
            Err(e) => eprintln!("zcnet serve: [{peer}] {e}"),
        }
        // Cannot fail short of a counter at 2^64 - 2: nothing but this thread writes it.
        let _ = ended.write(1);
    })
}

/// Tells a client why it is not served, without waiting on it, and logs it.
fn refuse(conn: TcpStream, peer: SocketAddr, why: &str) {
    proto::refuse(conn, why);
    eprintln!("zcnet serve: [{peer}] refused: {why}");
}

/// Ends the session: sends `why` as an `error` (best effort) and returns it.
fn end(conn: &mut TcpStream, why: String) -> String {
    let _ = proto::write(
        conn,
        &Message::Error {
            message: why.clone(),
        },
    );
    why
}

/// One client, its hello checked at the door: welcome, then runs until `bye`, the end of the
/// connection or an error.
fn session(mut conn: TcpStream, config: &Config) -> Result<u64, String> {
    let local = conn.local_addr().map_err(|e| e.to_string())?.ip();
    let peer = conn.peer_addr().map_err(|e| e.to_string())?.ip();
    let _ = conn.set_nodelay(true);
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let host = serde_json::to_value(crate::measure::HostInfo::this()).unwrap_or_default();
    let welcome = Message::Welcome {
        version: VERSION,
        host,
        limits: config.limits,
    };
    proto::write(&mut conn, &welcome).map_err(|e| e.to_string())?;
    let mut runs = 0u64;
    loop {
        let _ = conn.set_read_timeout(Some(config.idle));
        let (role, seconds) = match proto::read(&mut conn) {
            Ok(Message::Start { role, seconds }) => (role, seconds),
            Ok(Message::Bye) | Err(ProtoError::Closed) => return Ok(runs),
            Ok(other) => {
                return Err(end(
                    &mut conn,
                    format!("expected start or bye, got {}", other.name()),
                ));
            }
            Err(e) => return Err(end(&mut conn, e.to_string())),
        };
        let prepared = far::prepare(&role, seconds, &config.limits, local, peer)
            .map_err(|e| end(&mut conn, crate::error_line::one_line(&e)))?;
        proto::write(
            &mut conn,
            &Message::Ready {
                port: prepared.port,
                key: prepared.key.clone(),
            },
        )
        .map_err(|e| e.to_string())?;
        let signals = Signals::default();
        let max_bytes = config.limits.max_bytes;
        let ran = EventFd::from_flags(EfdFlags::EFD_CLOEXEC).map_err(|e| e.to_string())?;
        let outcome = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let _said = SayEnded(&ran);
                prepared.run(seconds, max_bytes, &signals)
            });
            // The client's finish comes when its side is over: within the run and its grace.
            let _ = conn.set_read_timeout(Some(
                Duration::from_secs_f64(seconds) + GRACE + Duration::from_secs(5),
            ));
            let told = proto::read(&mut conn);
            match &told {
                Ok(Message::Finish) => {
                    signals.finish.store(true, Ordering::Release);
                    if until_ended_or_closed(&conn, &ran) == Ended::Closed {
                        signals.abort.store(true, Ordering::Release);
                    }
                }
                _ => signals.abort.store(true, Ordering::Release),
            }
            let far = worker
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the run's thread panicked")));
            (told, far)
        });
        match outcome {
            (Ok(Message::Finish), Ok(f)) => {
                runs += 1;
                eprintln!(
                    "zcnet serve: run {runs}: {} bytes, {} messages, {:.1} us/MB{}",
                    f.bytes,
                    f.messages,
                    f.cpu_us_per_mb,
                    match f.verified {
                        Some(true) => ", verified",
                        Some(false) => ", DIFFERENT BYTES",
                        None => "",
                    }
                );
                proto::write(&mut conn, &Message::Done(f)).map_err(|e| e.to_string())?;
            }
            (Ok(Message::Finish), Err(e)) => {
                return Err(end(&mut conn, crate::error_line::one_line(&e)));
            }
            (Ok(other), _) => {
                return Err(end(
                    &mut conn,
                    format!("expected finish, got {}", other.name()),
                ));
            }
            (Err(e), _) => return Err(end(&mut conn, format!("waiting for finish: {e}"))),
        }
    }
}

/// Says on its counter that the run's thread ended, also when it panicked.
struct SayEnded<'a>(&'a EventFd);

impl Drop for SayEnded<'_> {
    fn drop(&mut self) {
        let _ = self.0.write(1);
    }
}

/// How the wait for a run after the client's `finish` ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// The run's thread ended.
    Run,
    /// The client closed the control connection first.
    Closed,
}

/// Waits for the run's thread to say it `ran`, or for the client to close `conn`. After its
/// `finish` a client only waits for `done`: a close means nobody will read the figures, and
/// a run that goes on past the client's side (a fetch runs out its seconds) is ended at once
/// rather than at its time. Where the wait cannot be set up, the run is awaited as before.
fn until_ended_or_closed(conn: &TcpStream, ran: &EventFd) -> Ended {
    const RUN: u64 = 0;
    const CONN: u64 = 1;
    let wait = || -> nix::Result<Ended> {
        let events = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        events.add(ran.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, RUN))?;
        // Only the peer's FIN (and, always, errors and hang-ups): a message the client sends
        // early is read, as an error, after `done`.
        events.add(conn, EpollEvent::new(EpollFlags::EPOLLRDHUP, CONN))?;
        let mut ready = [EpollEvent::empty(); 2];
        loop {
            match events.wait(&mut ready, EpollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e),
                Ok(n) => {
                    // The run's end first: figures that are ready are worth sending.
                    if ready[..n].iter().any(|e| e.data() == RUN) {
                        return Ok(Ended::Run);
                    }
                    if n > 0 {
                        return Ok(Ended::Closed);
                    }
                }
            }
        }
    };
    wait().unwrap_or(Ended::Run)
}
