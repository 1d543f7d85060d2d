//! `zcnet iperf3 -s`: one test at a time, as iperf3's server runs them. A connection that
//! arrives during a test with another cookie is told `ACCESS_DENIED` and closed; one that
//! sends no cookie within [`COOKIE_WAIT`], garbage parameters, or vanishes mid-test ends its
//! test and the server serves on.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::interval::Sampler;
use super::opt::{Opt, Receive, Send};
use super::output;
use super::proto::{self, COOKIE_LEN, Params, Results, State};
use super::streams::{Plan, Shared, Socket};
use super::udp;

/// How long a new connection has to send its cookie, and a test's client its parameters and
/// streams.
const COOKIE_WAIT: Duration = Duration::from_secs(10);

/// Connections at most waiting for their cookie at once.
const MAX_ARRIVING: usize = 256;

/// The test under way: its cookie, and where its data streams go.
struct Running {
    cookie: [u8; COOKIE_LEN],
    /// Each data stream with its place in the order of accepts: the client numbers its streams
    /// in the order it made them, and the results exchange pairs them by number.
    streams: Sender<(u64, TcpStream)>,
}

/// A data stream and its place in the order of accepts.
type Arrived = (u64, TcpStream);

type Slot = Arc<Mutex<Option<Running>>>;

/// What every test of this server shares: its options and where it listens.
#[derive(Clone, Copy)]
struct Side {
    json: bool,
    /// Between interval lines (`-i`).
    interval: Duration,
    send: Send,
    receive: Receive,
    /// The TCP listener's address: UDP streams are taken on the same.
    local: SocketAddr,
}

/// Serves tests until `-1`'s one ended (or for ever).
pub fn run(opt: &Opt, listener: TcpListener) -> anyhow::Result<()> {
    let slot: Slot = Arc::new(Mutex::new(None));
    let arriving = Arc::new(AtomicUsize::new(0));
    let local = listener.local_addr()?;
    let (ended_tx, ended) = channel::<()>();
    // Tests served, for the banner iperf3 prints before each.
    let tests = Arc::new(AtomicUsize::new(1));
    if !opt.json {
        output::server_listening(local.port(), 1);
    }
    for (order, conn) in (0u64..).zip(listener.incoming()) {
        if ended.try_recv().is_ok() {
            return Ok(());
        }
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("zcnet iperf3: accept: {e}");
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        // A flood of connections that send nothing holds a thread each for COOKIE_WAIT: past
        // MAX_ARRIVING, newcomers are closed at once (the server lives on, and serves again as
        // the flood's connections time out), and a thread that cannot be made drops its
        // connection rather than ending the server.
        if arriving.load(Ordering::Relaxed) >= MAX_ARRIVING {
            drop(conn);
            continue;
        }
        arriving.fetch_add(1, Ordering::Relaxed);
        let (slot, ended_tx, left) = (slot.clone(), ended_tx.clone(), arriving.clone());
        let tests = tests.clone();
        let one = opt.one_off;
        let side = Side {
            json: opt.json,
            interval: Duration::from_secs_f64(opt.interval),
            send: opt.send(),
            receive: opt.receive(),
            local,
        };
        let spawned = std::thread::Builder::new().spawn(move || {
            let arrived = arrive(conn, order, &slot);
            left.fetch_sub(1, Ordering::Relaxed);
            let Some((ctrl, cookie, streams)) = arrived else {
                return;
            };
            // The next test may start as soon as this one's client said IPERF_DONE (its next
            // run comes at once), before this one's summary is printed.
            let free = || {
                let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
                if s.as_ref().is_some_and(|r| r.cookie == cookie) {
                    *s = None;
                }
            };
            // A panic frees the slot too (else every later client is told busy); a reader
            // of our output that went away ends the server, as SIGPIPE ends iperf3's.
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                serve_test(ctrl, side, streams, &free)
            }));
            let printing = match served {
                Ok(Ok(printing)) => printing,
                Ok(Err(e)) => {
                    eprintln!("zcnet iperf3: the test ended early: {e:#}");
                    print_lock()
                }
                Err(p) if crate::interrupt::is_broken_pipe(p.as_ref()) => {
                    std::process::exit(crate::interrupt::BROKEN_PIPE_EXIT.into())
                }
                Err(_) => print_lock(),
            };
            free();
            if !one && !side.json {
                let next = tests.fetch_add(1, Ordering::Relaxed) + 1;
                output::server_listening(local.port(), next);
            }
            drop(printing);
            if one {
                let _ = ended_tx.send(());
                // Wakes the accept loop, which sees the end.
                let _ = TcpStream::connect(wake_address(local));
            }
        });
        if spawned.is_err() {
            arriving.fetch_sub(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Where this server can reach itself: its address, loopback for a wildcard.
fn wake_address(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        std::net::IpAddr::V4(a) if a.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(a) if a.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

/// A new connection: reads its cookie; a data stream of the test under way is handed to it, a
/// stranger during a test is denied, a control connection with no test under way starts one
/// (returned: the connection, its cookie and where its streams will come).
fn arrive(
    mut conn: TcpStream,
    order: u64,
    slot: &Slot,
) -> Option<(TcpStream, [u8; COOKIE_LEN], Receiver<Arrived>)> {
    let cookie = read_cookie(&mut conn)?;
    let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
    match s.as_ref() {
        Some(r) if r.cookie == cookie => {
            let _ = r.streams.send((order, conn));
            None
        }
        Some(_) => {
            // iperf3's answer to a second client: ACCESS_DENIED, then the close.
            let _ = proto::send_state(&mut conn, State::AccessDenied);
            None
        }
        None => {
            let (tx, rx) = channel();
            *s = Some(Running {
                cookie,
                streams: tx,
            });
            Some((conn, cookie, rx))
        }
    }
}

/// The cookie of a new connection, within [`COOKIE_WAIT`] in all (a peer that sends a byte now
/// and then does not hold its thread longer); `None` if it does not come whole.
fn read_cookie(conn: &mut TcpStream) -> Option<[u8; COOKIE_LEN]> {
    let deadline = Instant::now() + COOKIE_WAIT;
    let mut cookie = [0u8; COOKIE_LEN];
    let mut got = 0;
    while got < COOKIE_LEN {
        let left = deadline.checked_duration_since(Instant::now())?;
        conn.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match conn.read(&mut cookie[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    conn.set_read_timeout(None).ok()?;
    Some(cookie)
}

/// Held while a test prints its end (its summary, the next banner) and while a new test says it
/// was accepted: two tests' lines do not interleave, though the next test may start as soon as
/// the last one's client said `IPERF_DONE`.
static PRINTING: Mutex<()> = Mutex::new(());

fn print_lock() -> MutexGuard<'static, ()> {
    PRINTING.lock().unwrap_or_else(|p| p.into_inner())
}

/// One test on control connection `ctrl`, its streams from `streams`; returns holding the print
/// lock, for the caller's banner.
fn serve_test(
    mut ctrl: TcpStream,
    side: Side,
    streams: Receiver<Arrived>,
    done: &dyn Fn(),
) -> anyhow::Result<MutexGuard<'static, ()>> {
    let json = side.json;
    let peer = ctrl.peer_addr()?;
    if !json {
        let _printing = print_lock();
        println!(
            "Accepted connection from {}, port {}",
            peer.ip().to_canonical(),
            peer.port()
        );
    }
    ctrl.set_read_timeout(Some(COOKIE_WAIT))?;
    proto::send_state(&mut ctrl, State::ParamExchange)?;
    let params: Params = proto::read_json(&mut ctrl).context("the client's parameters")?;
    if let Some(what) = params.unserved() {
        // iperf3's client prints IEUNIMP as "an option you are trying to set is not
        // implemented yet".
        send_error(&mut ctrl, IEUNIMP, 0);
        anyhow::bail!("the client asked for {what}, which this server does not serve");
    }
    let n = usize::try_from(params.parallel).unwrap_or(1);
    let len = match params.len {
        0 if params.udp => 1460,
        0 => proto::TCP_BLOCK,
        l => usize::try_from(l).unwrap_or(proto::TCP_BLOCK),
    };
    // UDP: the port's UDP listener is there before the client is told to make its streams, as
    // iperf3's (its `protocol->listen` at the parameters' exchange).
    let mut udp_listener = if params.udp {
        match udp::bind_shared(side.local) {
            Ok(l) => Some(l),
            Err(e) => {
                send_error(&mut ctrl, IESTREAMLISTEN, e.raw_os_error().unwrap_or(0));
                return Err(e).context("the UDP listener");
            }
        }
    } else {
        None
    };
    proto::send_state(&mut ctrl, State::CreateStreams)?;
    // The streams, in the order the client made them. Waited for at most COOKIE_WAIT, and only
    // while the client is there: one that leaves frees the server at once.
    let mut sockets: Vec<(u64, Socket)> = Vec::with_capacity(n);
    let deadline = Instant::now() + COOKIE_WAIT;
    let slice = Duration::from_millis(100);
    while sockets.len() < n {
        if Instant::now() > deadline {
            anyhow::bail!("the client's data streams did not all come within {COOKIE_WAIT:?}");
        }
        if client_left(&ctrl) {
            anyhow::bail!("the client left before its data streams came");
        }
        if let Some(listener) = udp_listener.take() {
            if !udp::accept(&listener, slice).context("a UDP stream's handshake")? {
                udp_listener = Some(listener);
                continue;
            }
            udp_listener = Some(udp::bind_shared(side.local).context("the next UDP listener")?);
            udp::reply(&listener).context("a UDP stream's handshake")?;
            sockets.push((sockets.len() as u64, Socket::Udp(listener)));
        } else {
            match streams.recv_timeout(slice) {
                Ok((order, s)) => sockets.push((order, Socket::Tcp(s))),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(e) => return Err(e).context("the client's data streams"),
            }
        }
    }
    sockets.sort_by_key(|(order, _)| *order);
    if params.asks("nodelay") {
        for (_, s) in &sockets {
            if let Socket::Tcp(s) = s {
                s.set_nodelay(true)?;
            }
        }
    }
    let sockets: Vec<Socket> = sockets.into_iter().map(|(_, s)| s).collect();
    let pairs = sockets
        .iter()
        .map(Socket::addrs)
        .collect::<std::io::Result<Vec<_>>>()?;
    if !json {
        for (k, (l, r)) in pairs.iter().enumerate() {
            output::connected(k, *l, *r);
        }
    }
    drop(udp_listener);
    let shared = Shared::new(if params.reverse { params.num } else { 0 });
    let cpu0 = super::streams::cpu_now();
    let started = Instant::now();
    proto::send_state(&mut ctrl, State::TestStart)?;
    proto::send_state(&mut ctrl, State::TestRunning)?;
    let plan = Plan {
        sending: params.reverse,
        len,
        rate: params.bandwidth,
        // The client's -Z asks the sending side for sendfile (iperf3's server honours it).
        send: if params.asks("zerocopy") {
            Send::Sendfile
        } else {
            side.send
        },
        receive: side.receive,
        past_budget: params.udp.then_some(UDP_PAST_BUDGET),
    };
    let mut running = super::streams::start(sockets, plan, &shared)?;
    // Intervals on this side's clock, as iperf3's server keeps them (its own `-i`).
    let mut sampler = Sampler::new(
        running.len(),
        side.interval,
        !json,
        params.udp,
        params.reverse,
    );
    // The client ends the test (its time or bytes are up), or vanishes, or goes silent.
    let end = wait_for_test_end(&mut ctrl, &params, &running, started, &mut sampler);
    sampler.tick(started.elapsed(), true, &running);
    shared
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    for s in &mut running {
        if params.reverse {
            let _ = s.end();
        } else {
            let _ = s.join();
        }
    }
    match end? {
        State::TestEnd => {}
        State::ClientTerminate => anyhow::bail!("the client ended the test (CLIENT_TERMINATE)"),
        other => anyhow::bail!("the client sent {other:?} where TEST_END belongs"),
    }
    let cpu = cpu0
        .zip(super::streams::cpu_now())
        .map(|(a, b)| (b.0 - a.0, b.1 - a.1));
    // The results and IPERF_DONE come at once from a client that is there.
    ctrl.set_read_timeout(Some(COOKIE_WAIT))?;
    proto::send_state(&mut ctrl, State::ExchangeResults)?;
    let theirs: Results = proto::read_json(&mut ctrl).context("the client's results")?;
    let ours = super::streams::results(&running, seconds, cpu.as_ref(), params.reverse);
    proto::send_json(&mut ctrl, &ours)?;
    proto::send_state(&mut ctrl, State::DisplayResults)?;
    // IPERF_DONE, or the client's close.
    let _ = proto::read_state(&mut ctrl);
    let printing = print_lock();
    done();
    if json {
        // As iperf3 -s -J: a document a test, this side's.
        let outcome = output::Outcome {
            client: false,
            server: ctrl.local_addr()?,
            tallies: running.iter().map(super::streams::Stream::tally).collect(),
            params,
            ours,
            theirs,
            seconds,
            streams: pairs,
            intervals: sampler.finish(),
        };
        let host = peer.ip().to_canonical().to_string();
        let doc = output::json(side.local.port(), &host, &outcome);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        output::server_summary(&running, &ours, seconds, &params);
    }
    Ok(printing)
}

/// How long past its `-t` a test may run before the server ends it (iperf3's server ends a
/// timed test 40 s past its time), and how long a test may move no byte (iperf3's
/// `--rcv-timeout`): a client that goes silent without closing frees the server then.
const GRACE: Duration = Duration::from_secs(40);
const IDLE: Duration = Duration::from_secs(120);

/// Waits for the client's `TEST_END` (or its close), at most [`GRACE`] past the test's time and
/// at most [`IDLE`] without a byte moving on its streams, taking the intervals on the way.
fn wait_for_test_end(
    ctrl: &mut TcpStream,
    params: &Params,
    running: &[super::streams::Stream],
    started: Instant,
    sampler: &mut Sampler,
) -> anyhow::Result<State> {
    let limit = (params.time > 0).then(|| Duration::from_secs(u64::from(params.time)) + GRACE);
    let mut seen = (Instant::now(), 0u64);
    loop {
        // Woken by the client's next state, the next interval, or each second at most.
        let until = sampler.next().saturating_sub(started.elapsed());
        ctrl.set_read_timeout(Some(
            until.clamp(Duration::from_millis(1), Duration::from_secs(1)),
        ))?;
        match proto::read_state(ctrl) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("the control connection"),
        }
        sampler.tick(started.elapsed(), false, running);
        let moved: u64 = running.iter().map(super::streams::Stream::count).sum();
        if moved != seen.1 {
            seen = (Instant::now(), moved);
        }
        if limit.is_some_and(|l| started.elapsed() > l) {
            anyhow::bail!("the client did not end its test {GRACE:?} past its time");
        }
        if seen.0.elapsed() > IDLE {
            anyhow::bail!("the test moved no byte for {IDLE:?}: the client went silent");
        }
    }
}

/// Sending UDP for `-R -n`: how long after its budget's last datagram the server waits for the
/// client to end the test before it sends on (some datagrams were lost, and the client ends
/// the test only once it has its bytes; iperf3's server sends until then from the start).
const UDP_PAST_BUDGET: Duration = Duration::from_millis(500);

/// iperf3's `IEUNIMP`: "an option you are trying to set is not implemented yet".
const IEUNIMP: i32 = 13;
/// iperf3's `IESTREAMLISTEN`: "unable to start stream listener".
const IESTREAMLISTEN: i32 = 202;

/// Whether the client of `ctrl` closed it (or it failed): a look that does not wait.
fn client_left(ctrl: &TcpStream) -> bool {
    if ctrl.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let left = match ctrl.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = ctrl.set_nonblocking(false);
    left
}

/// `SERVER_ERROR` and the two numbers iperf3's client prints (`i_errno`, `errno`).
fn send_error(ctrl: &mut TcpStream, i_errno: i32, errno: i32) {
    use std::io::Write as _;
    let mut msg = vec![State::ServerError.byte()];
    msg.extend_from_slice(&i_errno.to_be_bytes());
    msg.extend_from_slice(&errno.to_be_bytes());
    let _ = ctrl.write_all(&msg);
}

/// The listener for `-s`: `--bind`, else the wildcard of `-4`/`-6` (both by default; `-6`
/// IPv6 only, as iperf3's).
pub fn listen(opt: &Opt) -> anyhow::Result<TcpListener> {
    let port = opt.port;
    if let Some(ip) = opt.bind
        && ((opt.ipv4 && !ip.is_ipv4()) || (opt.ipv6 && !ip.is_ipv6()))
    {
        anyhow::bail!(
            "-B {ip} is not of the family {} asks for",
            if opt.ipv4 { "-4" } else { "-6" }
        );
    }
    let addr = match opt.bind {
        Some(ip) => SocketAddr::new(ip, port),
        None if opt.ipv4 => SocketAddr::from(([0, 0, 0, 0], port)),
        None => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
    };
    let bind = |addr: SocketAddr, v6_only: bool| -> std::io::Result<TcpListener> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            s.set_only_v6(v6_only)?;
        }
        s.bind(&addr.into())?;
        // A crowd of connections waits in the accept queue while the accept loop hands each to
        // its thread: as deep as the kernel allows (net.core.somaxconn caps it), as std's is.
        s.listen(4096)?;
        Ok(s.into())
    };
    let l = bind(addr, opt.ipv6).or_else(|e| {
        // No IPv6 on this host: the IPv4 wildcard.
        if opt.bind.is_none() && !opt.ipv6 {
            bind(SocketAddr::from(([0, 0, 0, 0], port)), false)
        } else {
            Err(e)
        }
    });
    l.with_context(|| format!("cannot listen on {addr}"))
}
