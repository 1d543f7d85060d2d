//! The receiving side of a round: a plain `read(2)`/`recv(2)` receiver, `tcp_rx` and `peek`
//! (synchronous and on tokio). Every byte goes through the round's checker at its stream
//! offset; the receiver stalls and resets as the plan says.

use std::io::Read as _;
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zcnet::{peek, tcp_rx};

use super::check::{DgramCheck, Rng, StreamCheck};
use super::net::{linger_zero, set_rcvbuf};
use super::round::{End, GRACE, Mechanism, Plan, RxReport};

/// The receiver's socket.
pub enum Sock {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// How long a read may wait for the next byte before the receiver gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the receiver does after a chunk.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Go,
    Reset,
}

/// A receiver's state: the checker, the stall points and the reset point.
struct Rx<'a> {
    plan: &'a Plan,
    rng: Rng,
    check: StreamCheck,
    report: RxReport,
    /// Stream offsets (TCP) or datagram counts (UDP) at which to stop reading for a while,
    /// latest first.
    stalls: Vec<u64>,
}

impl<'a> Rx<'a> {
    fn new(plan: &'a Plan) -> Rx<'a> {
        let mut rng = Rng::new(plan.seed ^ 0x7258);
        let mut stalls = Vec::new();
        if plan.faults.stall {
            let span = if plan.udp { 400 } else { plan.budget / 2 };
            for _ in 0..rng.range(1, 3) {
                stalls.push(rng.range(0, span));
            }
            stalls.sort_unstable_by(|a, b| b.cmp(a));
        }
        Rx {
            plan,
            check: StreamCheck::new(plan.base, plan.corrupt),
            rng,
            report: RxReport::default(),
            stalls,
        }
    }

    /// A stall due at `pos`: how long.
    fn stall_due(&mut self, pos: u64) -> Option<Duration> {
        if self.stalls.last().is_some_and(|&s| pos >= s) {
            self.stalls.pop();
            self.report.stalls += 1;
            Some(Duration::from_millis(self.rng.range(50, 400)))
        } else {
            None
        }
    }

    /// Whether the reset is due at `pos`.
    fn reset_due(&self, pos: u64) -> bool {
        self.plan.faults.reset_after.is_some_and(|r| pos >= r)
    }

    /// Checks the next bytes of the stream; says whether to reset now. Stalls are returned
    /// for the caller to sleep (a thread) or await (a task).
    fn feed(&mut self, data: &[u8]) -> (Step, Option<Duration>) {
        self.check.check(data);
        let pos = self.check.off;
        if self.reset_due(pos) {
            return (Step::Reset, None);
        }
        (Step::Go, self.stall_due(pos))
    }

    /// Re-read bytes (after a peek rewind) at stream offset `at`: they must be the same again.
    fn recheck(&mut self, at: u64, data: &[u8]) {
        let expect = super::check::pattern(self.plan.base, at, data.len());
        if data != expect.as_slice() {
            let n = data.iter().zip(&expect).filter(|(a, b)| a != b).count() as u64;
            self.check.wrong += n;
            self.check.first_bad.get_or_insert(at);
        }
    }

    fn problem(&mut self, p: String) {
        self.report.problems.push(p);
    }

    fn finish(mut self) -> RxReport {
        self.report.bytes = self.check.off;
        self.report.wrong = self.check.wrong;
        self.report.first_bad = self
            .check
            .first_bad
            .map(|o| format!("the first at stream offset {o}"));
        self.report
    }
}

/// Runs the plan's receiver on `sock`; `done` says the sender has finished (UDP ends on it).
pub fn run(plan: &Plan, sock: Sock, done: &AtomicBool) -> RxReport {
    let tcp = match sock {
        Sock::Udp(s) => return udp(plan, s, done),
        Sock::Tcp(s) => s,
    };
    let mut rx = Rx::new(plan);
    if plan.faults.reset_after == Some(0) {
        linger_zero(&tcp);
        rx.report.reset = true;
        return rx.finish();
    }
    let r = match plan.receiver {
        End::Plain => plain(&mut rx, tcp),
        End::Mechanism(Mechanism::TcpRx) => tcp_rx(&mut rx, tcp),
        End::Mechanism(Mechanism::Peek) => peek(&mut rx, tcp),
        End::Mechanism(Mechanism::TokioTcpRx) => {
            tokio_rt(&mut rx).and_then(|rt| rt.block_on(tokio_tcp_rx(&mut rx, tcp)))
        }
        End::Mechanism(Mechanism::TokioPeek) => {
            tokio_rt(&mut rx).and_then(|rt| rt.block_on(tokio_peek(&mut rx, tcp)))
        }
        End::Mechanism(m) => Err(anyhow::anyhow!("{} does not receive", m.name())),
    };
    if let Err(e) = r {
        rx.problem(format!("receiver {}: {e:#}", plan.receiver.name()));
    }
    rx.finish()
}

/// A runtime for an async receiver: current-thread or multi-threaded, drawn.
fn tokio_rt(rx: &mut Rx<'_>) -> anyhow::Result<tokio::runtime::Runtime> {
    let rt = if rx.rng.chance(0.5) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    };
    Ok(rt)
}

/// Resets the connection: `SO_LINGER` 0, then the caller drops the socket.
fn reset(rx: &mut Rx<'_>, fd: &impl std::os::fd::AsFd) {
    linger_zero(fd);
    rx.report.reset = true;
}

/// `read(2)` of random sizes until the end of the stream.
fn plain(rx: &mut Rx<'_>, mut s: TcpStream) -> anyhow::Result<()> {
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let want = rx.rng.size(1, buf.len());
        let n = s.read(&mut buf[..want])?;
        if n == 0 {
            return Ok(());
        }
        let (step, stall) = rx.feed(&buf[..n]);
        if step == Step::Reset {
            reset(rx, &s);
            return Ok(());
        }
        if let Some(d) = stall {
            std::thread::sleep(d);
        }
    }
}

fn rx_config(rng: &mut Rng) -> tcp_rx::Config {
    tcp_rx::Config {
        mode: rng.pick(&[
            tcp_rx::Mode::ZeroCopy,
            tcp_rx::Mode::ZeroCopy,
            tcp_rx::Mode::Copy,
        ]),
        window: rng.pick(&[4096usize, 65_536, 512 << 10, 2 << 20]),
        release: rng.pick(&[tcp_rx::Release::Madvise, tcp_rx::Release::KernelZap]),
        rcvlowat: rng.pick(&[None, Some(1), Some(16_384), Some(512 << 10)]),
        timeout: Some(READ_TIMEOUT),
    }
}

/// `tcp_rx::TcpZeroCopyReceiver` until the end of the stream.
fn tcp_rx(rx: &mut Rx<'_>, s: TcpStream) -> anyhow::Result<()> {
    let config = rx_config(&mut rx.rng);
    let mut r = tcp_rx::TcpZeroCopyReceiver::new(s, config)?;
    loop {
        let mut stall = None;
        let mut step = Step::Go;
        match r.recv()? {
            None => return Ok(()),
            Some(got) => {
                for part in got.parts() {
                    let (s, d) = rx.feed(part);
                    step = s;
                    stall = stall.or(d);
                    if step == Step::Reset {
                        break;
                    }
                }
            }
        }
        if step == Step::Reset {
            let s = r.into_inner();
            reset(rx, &s);
            return Ok(());
        }
        if let Some(d) = stall {
            std::thread::sleep(d);
        }
    }
}

/// The next peek's plan: consume some, maybe rewind, then peek this many bytes.
struct PeekMove {
    consume: u64,
    rewind: Option<u64>,
    want: usize,
}

/// Bytes a peek cursor keeps peeked and unconsumed at most. They stay in the receive queue, and
/// a queue full of them takes no new bytes (the window closes): the peek that waits for the
/// next byte would wait for ever. The relay bounds them the same way (`--max-unacked`).
const MAX_OUTSTANDING: u64 = 16 << 10;

/// Consumes at random, keeping at most [`MAX_OUTSTANDING`] bytes, and rewinds now and then.
fn peek_move(rng: &mut Rng, consumed: u64, peeked: u64) -> PeekMove {
    let outstanding = peeked - consumed;
    let consume = if outstanding > MAX_OUTSTANDING {
        outstanding - rng.range(0, MAX_OUTSTANDING / 2)
    } else if rng.chance(0.3) {
        rng.range(0, outstanding)
    } else {
        0
    };
    let consumed = consumed + consume;
    let rewind = (peeked > consumed && rng.chance(0.1)).then(|| rng.range(consumed, peeked));
    PeekMove {
        consume,
        rewind,
        want: rng.size(1, 32 << 10),
    }
}

/// How long a peek waits before the cursor consumes what it holds and waits again.
const PEEK_WAIT: Duration = Duration::from_millis(100);

/// Checks a peek of `data` at stream offset `at`: bytes before the checker's offset were read
/// before (a rewind) and must be the same again; the rest is new.
fn peeked(rx: &mut Rx<'_>, at: u64, data: &[u8]) -> (Step, Option<Duration>) {
    let again = (rx.check.off.saturating_sub(at) as usize).min(data.len());
    if again > 0 {
        rx.recheck(at, &data[..again]);
    }
    rx.feed(&data[again..])
}

/// `peek::PeekCursor` with consumes and rewinds until the end of the stream.
fn peek(rx: &mut Rx<'_>, s: TcpStream) -> anyhow::Result<()> {
    s.set_read_timeout(Some(PEEK_WAIT))?;
    let mode = rx.rng.pick(&[peek::Mode::ZeroCopy, peek::Mode::Copy]);
    let mut cur = peek::PeekCursor::new(s, peek::Config { mode })?;
    let mut buf = vec![0u8; 64 << 10];
    let mut waiting = Instant::now();
    loop {
        let m = peek_move(&mut rx.rng, cur.consumed(), cur.peeked());
        cur.consume(m.consume)?;
        if let Some(to) = m.rewind {
            cur.rewind(to)?;
        }
        let at = cur.peeked();
        let n = match cur.peek(&mut buf[..m.want]) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Nothing beyond what was peeked for a while: make room, wait again.
                if waiting.elapsed() > READ_TIMEOUT {
                    anyhow::bail!("no byte for {READ_TIMEOUT:?} ({e})");
                }
                cur.consume(cur.outstanding())?;
                continue;
            }
            r => r?,
        };
        waiting = Instant::now();
        if n == 0 {
            cur.consume(cur.outstanding())?;
            return Ok(());
        }
        let (step, stall) = peeked(rx, at, &buf[..n]);
        if step == Step::Reset {
            reset(rx, cur.get_ref());
            return Ok(());
        }
        if let Some(d) = stall {
            std::thread::sleep(d);
        }
    }
}

/// How long an async receive may take before it is cancelled (and begun again), when drawn.
fn cancel_after(rng: &mut Rng) -> Option<Duration> {
    rng.chance(0.2)
        .then(|| Duration::from_micros(rng.range(10, 3000)))
}

/// `zcnet::tokio::TcpZeroCopyReceiver`, with receives cancelled now and then (nothing may be
/// lost: bytes leave the socket only in the step that returns them).
async fn tokio_tcp_rx(rx: &mut Rx<'_>, s: TcpStream) -> anyhow::Result<()> {
    let config = rx_config(&mut rx.rng);
    let mut r = zcnet::tokio::TcpZeroCopyReceiver::new(s, config)?;
    let limit = rx.plan.deadline + GRACE;
    loop {
        if Instant::now() > limit {
            anyhow::bail!("no end of stream by the round's end");
        }
        let mut step = Step::Go;
        let mut stall = None;
        let got = match cancel_after(&mut rx.rng) {
            Some(t) => match tokio::time::timeout(t, r.recv()).await {
                Ok(got) => got?,
                Err(_) => {
                    rx.report.cancelled_receives += 1;
                    continue;
                }
            },
            None => tokio::time::timeout(READ_TIMEOUT, r.recv()).await??,
        };
        let Some(got) = got else { return Ok(()) };
        for part in got.parts() {
            let (s, d) = rx.feed(part);
            step = s;
            stall = stall.or(d);
            if step == Step::Reset {
                break;
            }
        }
        if step == Step::Reset {
            reset(rx, r.get_ref());
            return Ok(());
        }
        if let Some(d) = stall {
            tokio::time::sleep(d).await;
        }
    }
}

/// `zcnet::tokio::PeekCursor`, peeks cancelled now and then (a peek consumes nothing).
async fn tokio_peek(rx: &mut Rx<'_>, s: TcpStream) -> anyhow::Result<()> {
    let mode = rx.rng.pick(&[peek::Mode::ZeroCopy, peek::Mode::Copy]);
    let mut cur = zcnet::tokio::PeekCursor::new(s, peek::Config { mode })?;
    let mut buf = vec![0u8; 64 << 10];
    let limit = rx.plan.deadline + GRACE;
    loop {
        if Instant::now() > limit {
            anyhow::bail!("no end of stream by the round's end");
        }
        let m = peek_move(&mut rx.rng, cur.consumed(), cur.peeked());
        cur.consume(m.consume)?;
        if let Some(to) = m.rewind {
            cur.rewind(to)?;
        }
        let at = cur.peeked();
        let cancel = cancel_after(&mut rx.rng);
        let n =
            match tokio::time::timeout(cancel.unwrap_or(PEEK_WAIT), cur.peek(&mut buf[..m.want]))
                .await
            {
                Ok(n) => n?,
                Err(_) => {
                    if cancel.is_some() {
                        rx.report.cancelled_receives += 1;
                    }
                    if cur.peeked() != at {
                        rx.problem(format!(
                            "a cancelled peek moved the cursor from {at} to {}",
                            cur.peeked()
                        ));
                    }
                    // Nothing beyond what was peeked for a while: make room, wait again.
                    cur.consume(cur.outstanding())?;
                    continue;
                }
            };
        if n == 0 {
            cur.consume(cur.outstanding())?;
            return Ok(());
        }
        let (step, stall) = peeked(rx, at, &buf[..n]);
        if step == Step::Reset {
            reset(rx, cur.get_ref());
            return Ok(());
        }
        if let Some(d) = stall {
            tokio::time::sleep(d).await;
        }
    }
}

/// Datagrams until the sender is done and nothing came for a while, checked one by one.
fn udp(plan: &Plan, s: UdpSocket, done: &AtomicBool) -> RxReport {
    let mut rx = Rx::new(plan);
    let mut check = DgramCheck::new(plan.stream, plan.base, plan.corrupt);
    set_rcvbuf(&s, rx.rng.pick(&[64usize << 10, 256 << 10, 4 << 20]));
    if let Err(e) = s.set_read_timeout(Some(Duration::from_millis(50))) {
        rx.problem(format!("SO_RCVTIMEO: {e}"));
    }
    // Half the time the kernel may coalesce: trains (and runs of equal datagrams) are read
    // whole and cut with the library's helper, each datagram checked on its own.
    let gro = rx.rng.chance(0.5) && zcnet::udp_gso::enable_gro(&s).is_ok();
    let mut buf = vec![0u8; 1 << 16];
    let mut idle = Instant::now();
    let limit = plan.deadline + GRACE;
    loop {
        let count = check.got.len() as u64;
        if rx.reset_due(count) {
            rx.report.reset = true;
            break;
        }
        if let Some(d) = rx.stall_due(count) {
            std::thread::sleep(d);
        }
        let read = if gro {
            zcnet::udp_gso::recv_train(&s, &mut buf, 0).map(|t| {
                if t.truncated {
                    rx.problem(format!("a coalesced read of more than {} bytes", buf.len()));
                }
                (t.len, t.segment)
            })
        } else {
            s.recv(&mut buf).map(|n| (n, None))
        };
        match read {
            Ok((n, segment)) => {
                for d in zcnet::udp_gso::datagrams(&buf[..n], segment) {
                    check.check(d);
                }
                idle = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if done.load(Ordering::SeqCst) && idle.elapsed() > Duration::from_millis(300) {
                    break;
                }
            }
            Err(e) => {
                rx.problem(format!("recv: {e}"));
                break;
            }
        }
        if Instant::now() > limit {
            rx.problem("the sender never finished".into());
            break;
        }
    }
    drop(s);
    let mut r = rx.finish();
    r.bytes = check.bytes;
    r.wrong = check.wrong;
    r.first_bad = check.first_bad;
    r.got = check.got;
    r.gro = gro;
    r
}
