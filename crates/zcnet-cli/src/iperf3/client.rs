//! `zcnet iperf3 -c HOST`: a test against any iperf3 server (or ours), TCP or UDP, forward or
//! `-R`, `-P` streams, for `-t` seconds or `-n` bytes.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::interval::{Interval, Sampler};
use super::opt::Opt;
use super::output::{self, Outcome};
use super::proto::{self, Params, Results, State};
use super::streams::{Plan, Shared, Socket, Stream};
use super::udp;

/// Runs one test against `host`.
pub fn run(opt: &Opt, host: &str) -> anyhow::Result<Outcome> {
    let server = resolve(host, opt)?;
    if !opt.json {
        println!("Connecting to host {host}, port {}", opt.port);
        if opt.reverse {
            println!("Reverse mode, remote host {host} is sending");
        }
    }
    let mut ctrl = match opt.bind {
        Some(ip) => {
            let s = socket2::Socket::new(
                socket2::Domain::for_address(server),
                socket2::Type::STREAM,
                None,
            )?;
            s.bind(&SocketAddr::new(ip, 0).into())
                .with_context(|| format!("cannot bind to {ip}"))?;
            s.connect(&server.into())
                .with_context(|| format!("cannot reach {server}"))?;
            TcpStream::from(s)
        }
        None => TcpStream::connect_timeout(&server, Duration::from_secs(10))
            .with_context(|| format!("cannot reach {server}"))?,
    };
    ctrl.set_nodelay(true)?;
    let cookie = proto::new_cookie();
    std::io::Write::write_all(&mut ctrl, &cookie)?;
    let len = block_len(opt, &ctrl)?;
    let rate = opt
        .bitrate
        .unwrap_or(if opt.udp { udp::DEFAULT_RATE } else { 0 });
    let params = Params {
        tcp: !opt.udp,
        udp: opt.udp,
        bandwidth: rate,
        omit: 0,
        time: if opt.bytes.is_some() { 0 } else { opt.time },
        num: opt.bytes.unwrap_or(0),
        parallel: opt.parallel,
        reverse: opt.reverse,
        len: len as u64,
        pacing_timer: 1000,
        client_version: Some("3.12".to_owned()),
        ..Params::default()
    };
    let mut params = params;
    if opt.sendfile {
        // As iperf3's -Z: with -R the server sends by sendfile.
        params
            .other
            .insert("zerocopy".into(), serde_json::Value::Bool(true));
    }
    let mut sockets = Vec::new();
    let mut pairs = Vec::new();
    loop {
        match read_state(&mut ctrl)? {
            State::ParamExchange => proto::send_json(&mut ctrl, &params)?,
            State::CreateStreams => {
                for _ in 0..opt.parallel {
                    let (s, pair) = if opt.udp {
                        let s = udp_stream(opt, server).context("a UDP data stream")?;
                        let pair = (s.local_addr()?, s.peer_addr()?);
                        (Socket::Udp(s), pair)
                    } else {
                        let s = TcpStream::connect_timeout(&server, Duration::from_secs(10))
                            .context("a data stream")?;
                        std::io::Write::write_all(&mut &s, &cookie)?;
                        let pair = (s.local_addr()?, s.peer_addr()?);
                        (Socket::Tcp(s), pair)
                    };
                    if !opt.json {
                        output::connected(pairs.len(), pair.0, pair.1);
                    }
                    pairs.push(pair);
                    sockets.push(s);
                }
            }
            State::TestStart => {}
            State::TestRunning => break,
            other => bail!("the server sent {other:?} before the test started"),
        }
    }
    let shared = Shared::new(if opt.reverse { 0 } else { params.num });
    let cpu0 = super::streams::cpu_now();
    let started = Instant::now();
    let plan = Plan {
        sending: !opt.reverse,
        len,
        rate,
        send: opt.send(),
        receive: opt.receive(),
        past_budget: None,
    };
    let mut streams = super::streams::start(sockets, plan, &shared)?;
    let intervals = wait_for_the_end(opt, &streams, started, &mut ctrl)?;
    shared
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    if !opt.reverse {
        // A sender still blocked 5 s after the test's end (a server that reads nothing) is
        // ended by shutting its socket down.
        let by = Instant::now() + Duration::from_secs(5);
        for s in &mut streams {
            s.join_by(by)?;
        }
        if opt.udp {
            // Datagrams on their way: an iperf3 server counts what it read before TEST_END.
            std::thread::sleep(Duration::from_millis(50));
        } else {
            drained(&streams);
        }
    }
    proto::send_state(&mut ctrl, State::TestEnd)?;
    let cpu = cpu0
        .zip(super::streams::cpu_now())
        .map(|(a, b)| (b.0 - a.0, b.1 - a.1));
    let mut theirs = None;
    let mut ours = None;
    loop {
        match read_state(&mut ctrl)? {
            State::ExchangeResults => {
                if opt.reverse {
                    // What is still in flight arrives before our count is final.
                    for s in &mut streams {
                        let _ = s.join();
                    }
                }
                let r = super::streams::results(&streams, seconds, cpu.as_ref(), !opt.reverse);
                proto::send_json(&mut ctrl, &r)?;
                ours = Some(r);
                theirs =
                    Some(proto::read_json::<Results>(&mut ctrl).context("the server's results")?);
            }
            State::DisplayResults => {
                proto::send_state(&mut ctrl, State::IperfDone)?;
                break;
            }
            other => bail!("the server sent {other:?} at the test's end"),
        }
    }
    for s in &mut streams {
        let _ = s.end();
    }
    let tallies = streams.iter().map(Stream::tally).collect();
    Ok(Outcome {
        client: true,
        tallies,
        server,
        params,
        ours: ours.context("the server skipped the results exchange")?,
        theirs: theirs.context("the server skipped the results exchange")?,
        seconds,
        streams: pairs,
        intervals,
    })
}

/// Waits (at most 2 s) until the server's TCP acknowledged every byte of every stream, the
/// cookie's 37 included, then 50 ms: an iperf3 server closes its streams when it reads
/// TEST_END, and what it had not read by then is not counted (with `-n` its count fell short
/// under load). Acknowledged bytes are in its queue, and an iperf3 server reads them at once.
fn drained(streams: &[Stream]) {
    let end = Instant::now() + Duration::from_secs(2);
    for s in streams {
        let want = s.count() + proto::COOKIE_LEN as u64;
        while Instant::now() < end {
            let acked = s.acked();
            if acked.is_none_or(|a| a >= want) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// How long a receiving client waits for a byte before it gives the test up (iperf3's default
/// `--rcv-timeout`).
const IDLE: Duration = Duration::from_secs(120);

/// Until `-t` seconds passed, `-n` bytes went (or, `-R`, came), printing a line each `-i`.
fn wait_for_the_end(
    opt: &Opt,
    streams: &[Stream],
    started: Instant,
    ctrl: &mut TcpStream,
) -> anyhow::Result<Vec<Interval>> {
    let every = Duration::from_secs_f64(opt.interval);
    let limit = Duration::from_secs(u64::from(opt.time));
    let mut sampler = Sampler::new(streams.len(), every, !opt.json, opt.udp, !opt.reverse);
    // The server may end the test on its own (it was stopped): a byte on the control
    // connection. Waiting for it is the wait of this thread, woken at the next interval or the
    // end: a thread that woke every few milliseconds beside the senders, on their CPU, cost the
    // sending 5-10 % of its throughput (`zcnet bench iperf3`). Budgets (`-n`) are looked at
    // every 10 ms.
    let mut wait = Duration::from_millis(1);
    // The last change of the bytes received, to end a test whose sender went silent (iperf3's
    // --rcv-timeout, 120 s by default).
    let mut seen = (Duration::ZERO, 0u64);
    loop {
        ctrl.set_read_timeout(Some(wait))?;
        let mut b = [0u8; 1];
        match ctrl.read(&mut b) {
            Ok(0) => bail!("the server closed the control connection mid-test"),
            Ok(_) => match State::of(b[0]) {
                Some(State::ServerError) => bail!("the server reported an error mid-test"),
                s => bail!("the server sent {s:?} mid-test"),
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e).context("the control connection"),
        }
        let now = started.elapsed();
        let total: u64 = streams.iter().map(Stream::count).sum();
        let done = match opt.bytes {
            Some(n) if opt.reverse => total >= n,
            Some(_) => streams.iter().all(Stream::finished),
            None => now >= limit,
        };
        if total != seen.1 {
            seen = (now, total);
        } else if opt.reverse && now - seen.0 >= IDLE {
            bail!(
                "nothing arrived for {} s: the server or the path stopped",
                IDLE.as_secs()
            );
        }
        sampler.tick(now, done, streams);
        if done {
            break;
        }
        let next = match opt.bytes {
            Some(_) => sampler.next().min(now + Duration::from_millis(10)),
            None => sampler.next().min(limit),
        };
        wait = next.saturating_sub(now).max(Duration::from_millis(1));
    }
    ctrl.set_read_timeout(None)?;
    Ok(sampler.finish())
}

/// A state from the server; `ACCESS_DENIED` and `SERVER_ERROR` as iperf3 words them.
fn read_state(ctrl: &mut TcpStream) -> anyhow::Result<State> {
    let s = proto::read_state(ctrl).context("the server's next state")?;
    match s {
        State::AccessDenied => bail!("the server is busy running a test. try again later"),
        State::ServerError => {
            let mut nums = [0u8; 8];
            let _ = ctrl.read_exact(&mut nums);
            let i_errno = i32::from_be_bytes(nums[..4].try_into().unwrap_or_default());
            let errno = i32::from_be_bytes(nums[4..].try_into().unwrap_or_default());
            bail!(
                "the server refused the test (iperf3 error {i_errno}: {})",
                std::io::Error::from_raw_os_error(errno)
            )
        }
        s => Ok(s),
    }
}

/// The block length: `-l`, else iperf3's default: 128 KiB for TCP; for UDP the control
/// connection's MSS (as iperf3 guesses the path's), else 1460.
fn block_len(opt: &Opt, ctrl: &TcpStream) -> anyhow::Result<usize> {
    if !opt.udp {
        return Ok(opt.length.unwrap_or(proto::TCP_BLOCK));
    }
    let len = opt.length.unwrap_or_else(|| {
        socket2::SockRef::from(ctrl)
            .tcp_mss()
            .ok()
            .and_then(|m| usize::try_from(m).ok())
            .filter(|m| (udp::HEADER..=udp::MAX_DATAGRAM).contains(m))
            .unwrap_or(1460)
    });
    if !(udp::HEADER..=udp::MAX_DATAGRAM).contains(&len) {
        bail!(
            "-l {len}: a UDP block holds {} to {} bytes (its header and a datagram's payload)",
            udp::HEADER,
            udp::MAX_DATAGRAM
        );
    }
    Ok(len)
}

/// A UDP stream to `server`: its socket connected, the handshake done.
fn udp_stream(opt: &Opt, server: SocketAddr) -> anyhow::Result<UdpSocket> {
    let local = match (opt.bind, server) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
        (None, SocketAddr::V6(_)) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
    };
    let s = UdpSocket::bind(local).with_context(|| format!("cannot bind to {local}"))?;
    s.connect(server)?;
    udp::connect(&s)?;
    Ok(s)
}

/// HOST:PORT, of the family `-4`/`-6` asks for.
fn resolve(host: &str, opt: &Opt) -> anyhow::Result<SocketAddr> {
    let all: Vec<SocketAddr> = (host, opt.port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    all.iter()
        .copied()
        .find(|a| (!opt.ipv4 || a.is_ipv4()) && (!opt.ipv6 || a.is_ipv6()))
        .with_context(|| format!("{host} has no address of the family asked for"))
}
