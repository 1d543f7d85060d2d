//! `zcnet iperf3 -s`: one test at a time, as iperf3's server runs them. A connection that
//! arrives during a test with another cookie is told `ACCESS_DENIED` and closed; one that
//! sends no cookie within [`COOKIE_WAIT`], garbage parameters, or vanishes mid-test ends its
//! test and the server serves on.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

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
    streams: Sender<TcpStream>,
}

type Slot = Arc<Mutex<Option<Running>>>;

/// What every test of this server shares: its options and where it listens.
#[derive(Clone, Copy)]
struct Side {
    json: bool,
    length: Option<usize>,
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
    output::server_listening(opt, local);
    for conn in listener.incoming() {
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
        let one = opt.one_off;
        let side = Side {
            json: opt.json,
            length: opt.length,
            send: opt.send(),
            receive: opt.receive(),
            local,
        };
        let spawned = std::thread::Builder::new().spawn(move || {
            let arrived = arrive(conn, &slot);
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
            if let Err(e) = serve_test(ctrl, side, streams, &free) {
                eprintln!("zcnet iperf3: the test ended early: {e:#}");
            }
            free();
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
    slot: &Slot,
) -> Option<(TcpStream, [u8; COOKIE_LEN], Receiver<TcpStream>)> {
    let _ = conn.set_read_timeout(Some(COOKIE_WAIT));
    let mut cookie = [0u8; COOKIE_LEN];
    conn.read_exact(&mut cookie).ok()?;
    let _ = conn.set_read_timeout(None);
    let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
    match s.as_ref() {
        Some(r) if r.cookie == cookie => {
            let _ = r.streams.send(conn);
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

/// One test on control connection `ctrl`, its streams from `streams`.
fn serve_test(
    mut ctrl: TcpStream,
    side: Side,
    streams: Receiver<TcpStream>,
    done: &dyn Fn(),
) -> anyhow::Result<()> {
    let json = side.json;
    let peer = ctrl.peer_addr()?;
    if !json {
        println!(
            "Accepted connection from {}, port {}",
            peer.ip(),
            peer.port()
        );
    }
    ctrl.set_read_timeout(Some(COOKIE_WAIT))?;
    proto::send_state(&mut ctrl, State::ParamExchange)?;
    let params: Params = proto::read_json(&mut ctrl).context("the client's parameters")?;
    if params.bidirectional {
        send_error(&mut ctrl, 1, libc::EOPNOTSUPP);
        anyhow::bail!("bidirectional tests are not served yet");
    }
    let n = usize::try_from(params.parallel.clamp(1, 128)).unwrap_or(1);
    let len = match params.len {
        0 if params.udp => 1460,
        0 => side.length.unwrap_or(proto::TCP_BLOCK),
        l if params.udp => usize::try_from(l)
            .unwrap_or(0)
            .clamp(udp::HEADER, udp::MAX_DATAGRAM),
        l => usize::try_from(l.min(1 << 30)).unwrap_or(proto::TCP_BLOCK),
    };
    // UDP: the port's UDP listener is there before the client is told to make its streams, as
    // iperf3's (its `protocol->listen` at the parameters' exchange).
    let mut udp_listener = if params.udp {
        match udp::bind_shared(side.local) {
            Ok(l) => Some(l),
            Err(e) => {
                // iperf3's IESTREAMLISTEN.
                send_error(&mut ctrl, 116, e.raw_os_error().unwrap_or(0));
                return Err(e).context("the UDP listener");
            }
        }
    } else {
        None
    };
    proto::send_state(&mut ctrl, State::CreateStreams)?;
    let mut sockets = Vec::with_capacity(n);
    let deadline = Instant::now() + COOKIE_WAIT;
    while sockets.len() < n {
        let (s, l, r) = if let Some(listener) = udp_listener.take() {
            let s = udp::accept(listener).context("a UDP stream's handshake")?;
            udp_listener = Some(udp::bind_shared(side.local).context("the next UDP listener")?);
            udp::reply(&s).context("a UDP stream's handshake")?;
            let (l, r) = (s.local_addr()?, s.peer_addr()?);
            (Socket::Udp(s), l, r)
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            let s = streams
                .recv_timeout(left)
                .context("the client's data streams did not all come")?;
            let (l, r) = (s.local_addr()?, s.peer_addr()?);
            (Socket::Tcp(s), l, r)
        };
        if !json {
            output::connected(sockets.len(), l, r);
        }
        sockets.push(s);
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
        send: side.send,
        receive: side.receive,
    };
    let mut running = super::streams::start(sockets, plan, &shared)?;
    // The client ends the test (its time or bytes are up), or vanishes.
    ctrl.set_read_timeout(None)?;
    let end = proto::read_state(&mut ctrl);
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
    proto::send_state(&mut ctrl, State::ExchangeResults)?;
    let theirs: Results = proto::read_json(&mut ctrl).context("the client's results")?;
    let ours = super::streams::results(&running, seconds, cpu.as_ref(), params.reverse);
    proto::send_json(&mut ctrl, &ours)?;
    proto::send_state(&mut ctrl, State::DisplayResults)?;
    // IPERF_DONE, or the client's close.
    let _ = proto::read_state(&mut ctrl);
    done();
    if !json {
        output::server_summary(&running, &ours, &theirs, seconds, &params);
    }
    Ok(())
}

/// `SERVER_ERROR` and the two numbers iperf3's client prints (`i_errno`, `errno`).
fn send_error(ctrl: &mut TcpStream, i_errno: i32, errno: i32) {
    use std::io::Write as _;
    let mut msg = vec![State::ServerError.byte()];
    msg.extend_from_slice(&i_errno.to_be_bytes());
    msg.extend_from_slice(&errno.to_be_bytes());
    let _ = ctrl.write_all(&msg);
}

/// The listener for `-s`: `--bind`, else the wildcard of `-4`/`-6` (both by default).
pub fn listen(opt: &Opt) -> anyhow::Result<TcpListener> {
    let port = opt.port;
    let addr = match opt.bind {
        Some(ip) => SocketAddr::new(ip, port),
        None if opt.ipv4 => SocketAddr::from(([0, 0, 0, 0], port)),
        None => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
    };
    let l = TcpListener::bind(addr).or_else(|e| {
        // No IPv6 on this host: the IPv4 wildcard.
        if opt.bind.is_none() && !opt.ipv6 {
            TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port)))
        } else {
            Err(e)
        }
    });
    l.with_context(|| format!("cannot listen on {addr}"))
}
