//! The relay's event loops: a fixed number of threads, each with one epoll set (`epoll(7)`)
//! for the listener and every connection it took. A connection is two descriptors (source and
//! destination) and a [`Session`] in its loop's table: no thread, stack, timer or epoll set of
//! its own. The loops share the caller's listener, each watching it with `EPOLLEXCLUSIVE`
//! (Linux 4.5), so that a newcomer wakes one loop, the one waiting: no acceptor thread hands
//! connections out, and no `SO_REUSEPORT` group would need a listener of the relay's own.
//! Connects are non-blocking; the only clocks are deadlines the sessions ask for (a connect
//! attempt's share of the timeout, the acknowledgement timeout, the backstop while segments
//! are in flight) in one heap per loop, which sets the wait's timeout.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::connect::Attempts;
use super::serve::{
    Backoff, DESCRIPTORS_PER_CONNECTION, Serve, Served, Stop, check_max_connections,
    descriptor_room, lost_newcomer, out_of_resources,
};
use super::session::{DESTINATION, Next, Session, reset};
use super::{Config, Event, RelayError, Report, io_err};

/// Whether a step ended its connection (`Ok(true)`: both directions done, the report ready).
type Ended = Result<bool, RelayError>;
use crate::sys::{
    self,
    event::{Epoll, TimerFd},
};

/// Tokens of the listener and of the stop signal (a connection's are below: its generation in
/// the high half, kept under `u32::MAX`).
const LISTENER: u64 = u64::MAX;
const STOP: u64 = u64::MAX - 1;
const COUNTED: u64 = u64::MAX - 2;
const TIMER: u64 = u64::MAX - 3;

/// Newcomers a loop takes per wake-up, before it serves its connections again.
const ACCEPT_BATCH: usize = 64;

/// Events one wait returns at most.
const EVENTS: usize = 256;

/// How long a loop leaves its listener alone while the descriptors are full (sooner when one
/// of its connections ends).
const FULL_PAUSE: Duration = Duration::from_millis(100);

/// What every loop of one serve shares.
pub(super) struct Shared<'a> {
    pub(super) config: &'a Config,
    pub(super) how: &'a Serve,
    pub(super) stop: &'a Stop,
    pub(super) event: &'a (dyn Fn(Event) + Send + Sync),
    /// Connections the descriptors leave room for, and the limit (`None`: no limit to read).
    pub(super) room: Option<(usize, u64)>,
    pub(super) live: AtomicUsize,
    /// Connections taken (and, under [`Serve::count`], places reserved before an accept).
    pub(super) relayed: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) accept_failures: AtomicU64,
    pub(super) reset_at_drain: AtomicU64,
    pub(super) full_told: AtomicBool,
    pub(super) backoff: Mutex<Backoff>,
    /// Written when [`Serve::count`] connections were taken: every loop then looks whether it
    /// should stop listening (watched edge-triggered: one wake-up a write).
    pub(super) counted: OwnedFd,
}

/// Where a connection is: connecting a destination, or relaying.
enum Phase<'a> {
    Connecting(Connecting<'a>),
    Relaying,
}

/// A destination being connected: the targets' attempts, and the socket of the one under way
/// (writable once its handshake ended) with its target.
struct Connecting<'a> {
    attempts: Attempts<'a>,
    trying: Option<(OwnedFd, usize)>,
}

/// One relayed connection in its loop's table.
struct Conn<'a> {
    generation: u32,
    from: SocketAddr,
    session: Session<'a>,
    phase: Phase<'a>,
    /// When it asked to be stepped without an event.
    deadline: Option<Instant>,
    /// The earliest of its entries in the loop's heap that is not yet superseded: a later
    /// deadline pushes nothing while this one is queued (a session of small exchanges moves its
    /// deadline every step), it is pushed when this one comes out.
    queued: Option<Instant>,
    /// An event or its deadline came since it was last stepped.
    due: bool,
}

/// One loop: its epoll set, its connections, their deadlines.
struct Loop<'s, 'a> {
    shared: &'s Shared<'a>,
    listener: &'s TcpListener,
    epoll: &'s Epoll,
    conns: Vec<Option<Conn<'s>>>,
    free: Vec<usize>,
    generation: u32,
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    /// The loop's clock: armed for the earliest deadline, so that the wait itself has no
    /// timeout. An `epoll_wait` with one arms a kernel timer at every wait, which in a guest
    /// costs exits to the hypervisor (at 1 connection of 1 KiB exchanges, waits without a
    /// timeout took 10-20 % less CPU); this one is re-armed only when the earliest deadline moves
    /// earlier or passed.
    clock: &'s TimerFd,
    /// When `clock` expires (`None`: disarmed, or it expired).
    armed: Option<Instant>,
    /// The listener is in the epoll set; else, when to put it back (`None`: never again).
    listening: bool,
    listen_again: Option<Instant>,
    /// Stopped: the time the live connections have left.
    drain_until: Option<Instant>,
    due: Vec<usize>,
}

/// Runs one loop until it accepts no more and its connections ended (or the drain ran out).
pub(super) fn run(shared: &Shared<'_>, listener: &TcpListener) -> Result<(), RelayError> {
    let epoll = Epoll::new().map_err(io_err("epoll_create1"))?;
    let listen = (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32;
    epoll
        .add(listener.as_fd(), listen, LISTENER)
        .map_err(io_err("epoll_ctl"))?;
    epoll
        .add(shared.stop.fd(), libc::EPOLLIN as u32, STOP)
        .map_err(io_err("epoll_ctl"))?;
    epoll
        .add(
            shared.counted.as_fd(),
            (libc::EPOLLIN | libc::EPOLLET) as u32,
            COUNTED,
        )
        .map_err(io_err("epoll_ctl"))?;
    let clock = TimerFd::new().map_err(io_err("timerfd_create"))?;
    // Edge-triggered: one event an expiry, never read.
    epoll
        .add(clock.as_fd(), (libc::EPOLLIN | libc::EPOLLET) as u32, TIMER)
        .map_err(io_err("epoll_ctl"))?;
    let mut l = Loop {
        shared,
        listener,
        epoll: &epoll,
        conns: Vec::new(),
        free: Vec::new(),
        generation: 0,
        timers: BinaryHeap::new(),
        clock: &clock,
        armed: None,
        listening: true,
        listen_again: None,
        drain_until: None,
        due: Vec::new(),
    };
    let r = l.serve();
    // Whatever is left (an error, a drain that ran out) is reset as its session drops.
    l.conns.clear();
    r
}

impl<'s> Loop<'s, '_> {
    fn serve(&mut self) -> Result<(), RelayError> {
        let mut events = Vec::with_capacity(EVENTS);
        loop {
            if self.shared.stop.is_stopped() && self.drain_until.is_none() {
                self.stopped();
            }
            let live = self.conns.len() - self.free.len();
            if live == 0 && !self.listening && self.listen_again.is_none() {
                return Ok(());
            }
            let now = Instant::now();
            if self.drain_until.is_some_and(|t| now >= t) {
                self.shared
                    .reset_at_drain
                    .fetch_add(live as u64, Ordering::SeqCst);
                return Ok(());
            }
            if self.listen_again.is_some_and(|t| now >= t) {
                self.listen();
            }
            let next = [
                self.timers.peek().map(|Reverse((t, ..))| *t),
                self.listen_again,
                self.drain_until,
            ];
            let timeout = match next.into_iter().flatten().min() {
                Some(t) if t <= now => Duration::ZERO,
                Some(t) => {
                    // Armed later than needed, or not at all: arm it. Armed earlier: it wakes
                    // the loop for nothing once, and is armed again then.
                    if self.armed.is_none_or(|a| t < a) {
                        self.clock.arm(t - now).map_err(io_err("timerfd_settime"))?;
                        self.armed = Some(t);
                    }
                    Duration::MAX
                }
                None => Duration::MAX,
            };
            self.epoll
                .wait_up_to::<EVENTS>(&mut events, timeout)
                .map_err(io_err("epoll_wait"))?;
            for &(ev, token) in &events {
                match token {
                    LISTENER => self.accept()?,
                    STOP => self.stopped(),
                    COUNTED => self.counted(),
                    TIMER => self.armed = None,
                    _ => self.woke(token, ev),
                }
            }
            self.expire();
            while let Some(k) = self.due.pop() {
                self.drive(k);
            }
        }
    }

    /// Stop: no newcomers (the listener shut, so that they are refused rather than left in
    /// its queue); the live connections have the drain timeout to end.
    fn stopped(&mut self) {
        if self.drain_until.is_none() {
            let _ = self.epoll.delete(self.shared.stop.fd());
            self.drain_until = Some(Instant::now() + self.shared.how.drain_timeout);
        }
        self.unlisten(None);
        let _ = sys::net::disconnect(self.listener.as_fd());
    }

    /// Another loop took the last of [`Serve::count`]: listen no more if they are all taken
    /// (a loop whose accept found none gives its place back, and goes on listening).
    fn counted(&mut self) {
        let sh = self.shared;
        if sh
            .how
            .count
            .is_some_and(|c| sh.relayed.load(Ordering::SeqCst) >= c)
        {
            self.unlisten(None);
        }
    }

    /// Takes the listener out of the epoll set, until `again` (`None`: for good).
    fn unlisten(&mut self, again: Option<Instant>) {
        if self.listening {
            let _ = self.epoll.delete(self.listener.as_fd());
            self.listening = false;
        }
        self.listen_again = again;
    }

    /// Puts the listener back after a pause.
    fn listen(&mut self) {
        self.listen_again = None;
        if self.listening || self.drain_until.is_some() {
            return;
        }
        let listen = (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32;
        self.listening = self
            .epoll
            .add(self.listener.as_fd(), listen, LISTENER)
            .is_ok();
    }

    /// Takes newcomers, up to a batch.
    fn accept(&mut self) -> Result<(), RelayError> {
        let sh = self.shared;
        for _ in 0..ACCEPT_BATCH {
            // Another loop may have shut the listener already.
            if sh.stop.is_stopped() {
                self.stopped();
                return Ok(());
            }
            if !self.listening {
                return Ok(());
            }
            // Under --count, a place first, so that the loops together take no more.
            if let Some(c) = sh.how.count {
                let reserve = |r: u64| (r < c).then_some(r + 1);
                if sh
                    .relayed
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, reserve)
                    .is_err()
                {
                    self.unlisten(None);
                    return Ok(());
                }
            }
            let unreserve = || {
                if sh.how.count.is_some() {
                    sh.relayed.fetch_sub(1, Ordering::SeqCst);
                }
            };
            // Room for one more in the descriptors: else the newcomer waits in the listen queue.
            if let Some((room, limit)) = sh.room
                && sh.live.load(Ordering::SeqCst) >= room
            {
                unreserve();
                if !sh.full_told.swap(true, Ordering::SeqCst) {
                    let live = sh.live.load(Ordering::SeqCst);
                    (sh.event)(Event::DescriptorsFull { live, limit });
                }
                self.unlisten(Some(Instant::now() + FULL_PAUSE));
                return Ok(());
            }
            sh.full_told.store(false, Ordering::SeqCst);
            let (fd, from) = match sys::net::accept_nonblocking(self.listener.as_fd()) {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    unreserve();
                    return Ok(());
                }
                Err(e) if out_of_resources(&e) => {
                    unreserve();
                    sh.accept_failures.fetch_add(1, Ordering::SeqCst);
                    let (pause, first) = sh.backoff.lock().unwrap().failed();
                    if first {
                        let live = sh.live.load(Ordering::SeqCst);
                        (sh.event)(Event::AcceptStalled { error: e, live });
                    }
                    self.unlisten(Some(Instant::now() + pause));
                    return Ok(());
                }
                Err(e) if lost_newcomer(&e) => {
                    unreserve();
                    continue;
                }
                Err(e) => {
                    unreserve();
                    return Err(io_err("accept4")(e));
                }
            };
            if let Some(resumed) = sh.backoff.lock().unwrap().worked() {
                (sh.event)(resumed);
            }
            let src = TcpStream::from(fd);
            let from = from.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            if sh.live.load(Ordering::SeqCst) >= sh.how.max_connections {
                unreserve();
                sh.refused.fetch_add(1, Ordering::SeqCst);
                reset(&src);
                (sh.event)(Event::Refused { from });
                continue;
            }
            if sh.how.count.is_none() {
                sh.relayed.fetch_add(1, Ordering::SeqCst);
            }
            sh.live.fetch_add(1, Ordering::SeqCst);
            self.adopt(src, from);
            if sh
                .how
                .count
                .is_some_and(|c| sh.relayed.load(Ordering::SeqCst) >= c)
            {
                let _ = sys::event::eventfd_write(sh.counted.as_fd());
                self.unlisten(None);
                return Ok(());
            }
        }
        Ok(())
    }

    /// A newcomer's session in a free place of the table; it starts connecting.
    fn adopt(&mut self, src: TcpStream, from: SocketAddr) {
        let k = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.generation = self.generation % (u32::MAX - 1) + 1;
        let token = (u64::from(self.generation) << 32) | ((k as u64) << 1);
        let epoll: &'s Epoll = self.epoll;
        match Session::new(src, self.shared.config, epoll, token) {
            Ok(session) => {
                let next = session.start();
                self.conns[k] = Some(Conn {
                    generation: self.generation,
                    from,
                    session,
                    phase: Phase::Relaying,
                    deadline: None,
                    queued: None,
                    due: false,
                });
                let r = self.next(k, next);
                self.settle(k, r);
            }
            Err(e) => {
                self.free.push(k);
                self.ended(from, Err(e));
            }
        }
    }

    /// An event for a connection's socket.
    fn woke(&mut self, token: u64, ev: u32) {
        let k = ((token & u64::from(u32::MAX)) >> 1) as usize;
        let generation = (token >> 32) as u32;
        let Some(Some(c)) = self.conns.get_mut(k) else {
            return;
        };
        if c.generation != generation {
            return;
        }
        let destination = token & DESTINATION != 0;
        let connecting = matches!(c.phase, Phase::Connecting(_));
        let r = if connecting {
            // Its socket under way has the destination's token: writable once the handshake
            // ended. The source's events are kept (what it may read, whether its end came) for
            // when a destination is there.
            if destination {
                self.connected(k)
            } else {
                c.session.event(false, ev)
            }
        } else {
            let r = c.session.event(destination, ev);
            self.mark(k);
            r
        };
        if let Err(e) = r {
            self.end(k, Err(e));
        }
    }

    /// Marks connection `k` to be stepped once this wake-up's events are read.
    fn mark(&mut self, k: usize) {
        if let Some(Some(c)) = self.conns.get_mut(k)
            && !c.due
        {
            c.due = true;
            self.due.push(k);
        }
    }

    /// Deadlines that passed: their connections are due.
    fn expire(&mut self) {
        let now = Instant::now();
        while let Some(&Reverse((t, k, generation))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(Some(c)) = self.conns.get_mut(k) else {
                continue;
            };
            if c.generation != generation || c.queued != Some(t) {
                continue;
            }
            c.queued = None;
            match c.deadline {
                None => continue,
                Some(later) if later > now => {
                    c.queued = Some(later);
                    self.timers.push(Reverse((later, k, generation)));
                    continue;
                }
                Some(_) => {}
            }
            c.deadline = None;
            c.session.timer();
            if matches!(c.phase, Phase::Connecting(_)) {
                let r = self.attempt_over(k);
                self.settle(k, r);
            } else {
                self.mark(k);
            }
        }
    }

    /// Steps a connection due: the session does all it can, then says what it waits for.
    fn drive(&mut self, k: usize) {
        let Some(Some(c)) = self.conns.get_mut(k) else {
            return;
        };
        c.due = false;
        if !matches!(c.phase, Phase::Relaying) {
            return;
        }
        let r = c.session.step().and_then(|next| self.next(k, next));
        self.settle(k, r);
    }

    /// Acts on what a session asked for.
    fn next(&mut self, k: usize, next: Next) -> Ended {
        let c = self.conns[k].as_mut().expect("live");
        match next {
            Next::Done => Ok(true),
            Next::Connect(targets) => {
                c.phase = Phase::Connecting(Connecting {
                    attempts: Attempts::new(self.shared.config, targets),
                    trying: None,
                });
                self.attempt(k).map(|()| false)
            }
            Next::Wait(wait) => {
                self.set_deadline(k, wait.map(|w| Instant::now() + w));
                Ok(false)
            }
        }
    }

    /// After a step: an ended connection leaves the table, with its report or its error.
    fn settle(&mut self, k: usize, r: Ended) {
        match r {
            Ok(false) => {}
            Ok(true) => {
                let c = self.conns[k].take().expect("live");
                self.free.push(k);
                let from = c.from;
                self.ended(from, Ok(c.session.finish()));
            }
            Err(e) => self.end(k, Err(e)),
        }
    }

    /// Ends connection `k` with `result` (a session that did not finish resets both sides as
    /// it drops).
    fn end(&mut self, k: usize, result: Result<Report, RelayError>) {
        if let Some(c) = self.conns[k].take() {
            self.free.push(k);
            let from = c.from;
            drop(c);
            self.ended(from, result);
        }
    }

    /// A connection ended: counted, told, and its place in the descriptors given back.
    fn ended(&mut self, from: SocketAddr, result: Result<Report, RelayError>) {
        let sh = self.shared;
        sh.live.fetch_sub(1, Ordering::SeqCst);
        if result.is_err() {
            sh.failed.fetch_add(1, Ordering::SeqCst);
        }
        (sh.event)(Event::Ended { from, result });
        // Sooner when a connection ends: a paused listener is tried again now.
        if self.listen_again.is_some() {
            self.listen();
        }
    }

    fn set_deadline(&mut self, k: usize, at: Option<Instant>) {
        let c = self.conns[k].as_mut().expect("live");
        c.deadline = at;
        if let Some(t) = at
            && c.queued.is_none_or(|q| t < q)
        {
            c.queued = Some(t);
            self.timers.push(Reverse((t, k, c.generation)));
        }
    }

    /// Starts the next connect attempt of connection `k` (or, after a round of the targets, a
    /// pause); a connect that succeeds at once is adopted at once.
    fn attempt(&mut self, k: usize) -> Result<(), RelayError> {
        loop {
            let c = self.conns[k].as_mut().expect("live");
            let Phase::Connecting(conn) = &mut c.phase else {
                return Ok(());
            };
            let Some((target, addr, left)) = conn.attempts.next() else {
                let Phase::Connecting(conn) = std::mem::replace(&mut c.phase, Phase::Relaying)
                else {
                    unreachable!()
                };
                return Err(conn.attempts.no_destination());
            };
            match sys::net::connect_nonblocking(&addr) {
                Ok((fd, true)) => return self.connected_to(k, fd, target),
                Ok((fd, false)) => {
                    let token = (u64::from(c.generation) << 32) | ((k as u64) << 1) | DESTINATION;
                    self.epoll
                        .add(fd.as_fd(), libc::EPOLLOUT as u32, token)
                        .map_err(io_err("epoll_ctl"))?;
                    conn.trying = Some((fd, target));
                    self.set_deadline(k, Some(Instant::now() + left));
                    return Ok(());
                }
                Err(e) => {
                    conn.attempts.failed(target, &e);
                    if let Some(pause) = conn.attempts.pause() {
                        self.set_deadline(k, Some(Instant::now() + pause));
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The attempt under way of connection `k` ended its handshake: adopted, or failed.
    fn connected(&mut self, k: usize) -> Result<(), RelayError> {
        let c = self.conns[k].as_mut().expect("live");
        let Phase::Connecting(conn) = &mut c.phase else {
            return Ok(());
        };
        let Some((fd, target)) = conn.trying.take() else {
            return Ok(());
        };
        let _ = self.epoll.delete(fd.as_fd());
        match sys::sockopt::take_error(fd.as_fd()) {
            Ok(0) => self.connected_to(k, fd, target),
            Ok(errno) => self.retry(k, target, &io::Error::from_raw_os_error(errno)),
            Err(e) => self.retry(k, target, &e),
        }
    }

    /// The attempt under way (or the pause after a round) of connection `k` is over.
    fn attempt_over(&mut self, k: usize) -> Ended {
        let c = self.conns[k].as_mut().expect("live");
        let Phase::Connecting(conn) = &mut c.phase else {
            return Ok(false);
        };
        match conn.trying.take() {
            Some((fd, target)) => {
                drop(fd);
                let timed_out = io::Error::from(io::ErrorKind::TimedOut);
                self.retry(k, target, &timed_out)
            }
            None => self.attempt(k),
        }
        .map(|()| false)
    }

    /// Target `target` failed for connection `k`: a pause after a round, else the next.
    fn retry(&mut self, k: usize, target: usize, e: &io::Error) -> Result<(), RelayError> {
        let c = self.conns[k].as_mut().expect("live");
        let Phase::Connecting(conn) = &mut c.phase else {
            return Ok(());
        };
        conn.attempts.failed(target, e);
        if let Some(pause) = conn.attempts.pause() {
            self.set_deadline(k, Some(Instant::now() + pause));
            return Ok(());
        }
        self.attempt(k)
    }

    /// Connection `k`'s destination is connected: the session takes it and is stepped.
    fn connected_to(&mut self, k: usize, fd: OwnedFd, target: usize) -> Result<(), RelayError> {
        let c = self.conns[k].as_mut().expect("live");
        c.phase = Phase::Relaying;
        c.deadline = None;
        c.session.adopt(TcpStream::from(fd), target)?;
        self.mark(k);
        Ok(())
    }
}

/// Accepts connections on `listener` and relays them on [`Serve::threads`] event loops (both
/// directions, to their ends), as [`Serve`] says; `event` is told of each connection's end and
/// of trouble accepting. Each loop is a thread with one epoll set for the listener (watched
/// with `EPOLLEXCLUSIVE`: a newcomer wakes one loop) and for every connection it took: two
/// descriptors a connection ([`DESCRIPTORS_PER_CONNECTION`]), no thread, timer or buffer of its
/// own while idle. Out of descriptors or memory it keeps every live connection and backs off
/// ([`Event::AcceptStalled`]); it accepts no more connections at once than `RLIMIT_NOFILE`
/// leaves descriptors for (raise the soft limit to the hard one first, as `zcnet relay` does),
/// so that every connection it takes it can relay whole. Returns once [`Serve::count`]
/// connections were relayed and ended (however long they take), or after a [`Stop`] and its
/// drain. `listener` is made non-blocking, and a stop shuts it (`connect(2)` to `AF_UNSPEC`):
/// newcomers are refused rather than left in its queue.
///
/// # Errors
/// [`RelayError::Io`] when `accept` fails for another reason than a lost newcomer or a want
/// of resources (the other loops end too, their connections reset), [`RelayError::Config`] for
/// `max_connections` 0.
pub fn serve(
    listener: &TcpListener,
    config: Arc<Config>,
    how: &Serve,
    stop: &Stop,
    event: impl Fn(Event) + Send + Sync + 'static,
) -> Result<Served, RelayError> {
    check_max_connections(how.max_connections)?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("fcntl(O_NONBLOCK)"))?;
    let threads = match how.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let shared = Shared {
        config: &config,
        how,
        stop,
        event: &event,
        room: descriptor_room(DESCRIPTORS_PER_CONNECTION),
        live: AtomicUsize::new(0),
        relayed: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        accept_failures: AtomicU64::new(0),
        reset_at_drain: AtomicU64::new(0),
        full_told: AtomicBool::new(false),
        backoff: Mutex::new(Backoff::new()),
        counted: sys::event::eventfd().map_err(io_err("eventfd"))?,
    };
    // A loop that fails stops the others: they drain as after a stop.
    let failure = Mutex::new(None);
    std::thread::scope(|scope| {
        for i in 0..threads {
            let (shared, failure) = (&shared, &failure);
            std::thread::Builder::new()
                .name(format!("zcnet-relay-{i}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = run(shared, listener) {
                        failure.lock().unwrap().get_or_insert(e);
                        shared.stop.stop();
                    }
                })
                .expect("spawning an event loop");
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    let reset_at_drain = shared.reset_at_drain.load(Ordering::SeqCst);
    if reset_at_drain > 0 {
        event(Event::DrainTimedOut {
            live: reset_at_drain as usize,
        });
    }
    Ok(Served {
        relayed: shared.relayed.load(Ordering::SeqCst),
        refused: shared.refused.load(Ordering::SeqCst),
        failed: shared.failed.load(Ordering::SeqCst),
        reset_at_drain,
        accept_failures: shared.accept_failures.load(Ordering::SeqCst),
    })
}
