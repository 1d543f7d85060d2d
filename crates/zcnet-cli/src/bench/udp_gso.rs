//! `zcnet bench udp-gso`: UDP GSO trains, the QUIC and media sender's path, against one send
//! per datagram.
//!
//! Per segment size and train length (segments per train), the modes alternate in mirrored
//! rounds: `sendmsg` (one `send(2)` per datagram), `sendmmsg` (a train's datagrams in one
//! call), and the train as one send with `UDP_SEGMENT`: `gso-copy`, `gso-zc` (`MSG_ZEROCOPY`),
//! `gso-zc-fixed` (io_uring `SEND_ZC` from registered buffers) and `gso-auto` (`Mode::Auto`).
//! The GSO modes are zcnet's senders with [`zcnet::udp_gso::Segment`] in their `Config`.
//!
//! Labs: `sink` (an `ifb` device with UDP segmentation offload drops each train whole: the
//! sending path alone), `sink-swgso` (the same with the offload off, `ethtool -K sink0
//! tx-udp-segmentation off`: the kernel cuts the train in software, where zero copy cannot
//! win) and `veth`, where a receiver with `UDP_GRO` reads trains whole, cuts them with
//! [`zcnet::udp_gso::datagrams`] and checks every datagram: its bytes, and its size (the
//! segment size, the train's last one shorter). Every datagram carries its own offset in the
//! send pool in its first 8 bytes, so a datagram cut at the wrong place, truncated, or holding
//! another's bytes is caught. Delivery over veth copies zero-copy sends, and the completions
//! say so.
//!
//! Requests are datagrams: `requests_per_s` is datagrams per second. `--reference PATH` runs
//! the kernel's `udpgso_bench_tx` beside each mode it has (`sendmsg` and `sendmmsg` at its
//! fixed 1472-byte datagrams, `gso-copy` and `gso-zc` at any segment size), in the sink labs.

use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::{Family, SinkLab};
use serde_json::json;
use zcnet::ZeroCopyCounters as _;
use zcnet::msg_zerocopy::{self, CopiedPolicy, ZeroCopySender};
use zcnet::udp_gso::{self, Segment};
use zcnet::uring::{self, Pool, PoolBuf, UringSender};

use super::common::Common;
use super::outcome::{Outcome, SummaryRow};
use super::reference::Reference;
use super::sweep::{Conn, Lab, Proto, SizeStep, compare, run_in_lab};
use super::verdict::{Goal, Verdict};
use crate::measure::{
    Comparison, Meter, Metric, Pinned, Progress, Report, ResultSet, Run, Work, pin, ratio_pairs,
};
use crate::remote::{Remote, proto::Check};

/// One way to send a train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `send(2)` per datagram.
    Sendmsg,
    /// The train's datagrams in one `sendmmsg(2)`.
    Sendmmsg,
    /// The train in one send with `UDP_SEGMENT`, by copy.
    GsoCopy,
    /// The train with `UDP_SEGMENT` and `MSG_ZEROCOPY`.
    GsoZc,
    /// The train with `UDP_SEGMENT` by io_uring `SEND_ZC` from registered buffers.
    GsoZcFixed,
    /// The train with `UDP_SEGMENT`, `Mode::Auto` choosing copy or `MSG_ZEROCOPY`.
    GsoAuto,
}

impl Mode {
    /// Every mode, in the default order (the first is the baseline).
    pub const ALL: [Mode; 6] = [
        Mode::Sendmsg,
        Mode::Sendmmsg,
        Mode::GsoCopy,
        Mode::GsoZc,
        Mode::GsoZcFixed,
        Mode::GsoAuto,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Sendmsg => "sendmsg",
            Mode::Sendmmsg => "sendmmsg",
            Mode::GsoCopy => "gso-copy",
            Mode::GsoZc => "gso-zc",
            Mode::GsoZcFixed => "gso-zc-fixed",
            Mode::GsoAuto => "gso-auto",
        }
    }
}

/// One arm of a step's alternation: a zcnet mode, or `udpgso_bench_tx` in that mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    Zcnet(Mode),
    Reference(Mode),
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Zcnet(m) => m.name(),
            Arm::Reference(Mode::Sendmsg) => "ref-sendmsg",
            Arm::Reference(Mode::Sendmmsg) => "ref-sendmmsg",
            Arm::Reference(Mode::GsoCopy) => "ref-gso-copy",
            Arm::Reference(Mode::GsoZc) => "ref-gso-zc",
            Arm::Reference(_) => "ref-none",
        }
    }
}

/// Options of `zcnet bench udp-gso`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub common: Common,
    /// Segment size in bytes (repeatable). Default: 1200 (QUIC's floor) and 1472 (an Ethernet
    /// MTU of IPv4 UDP).
    #[arg(long = "segment", value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8..=9000))]
    pub segments: Vec<usize>,
    /// Datagrams per train (repeatable), at most 64. Default: 1, 8 and 42.
    #[arg(long = "train", value_name = "SEGMENTS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub trains: Vec<usize>,
    /// Modes to alternate (repeatable; the first is the baseline of the comparisons). Default:
    /// all, sendmsg first.
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// Address family. Default: IPv4.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: super::common::FamilyArg,
    /// Size of the pool of trains the sends cycle through, in KiB (at least one train). 256
    /// (default) stays in L2, as the kernel's program sends one buffer; the report measures it.
    #[arg(long, value_name = "KIB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(64..=1048576))]
    pub pool_kib: usize,
    /// The kernel's `tools/testing/selftests/net/udpgso_bench_tx`, run beside each mode it has
    /// in the sink labs (build it with `gcc -O2 -I. -o udpgso_bench_tx udpgso_bench_tx.c`
    /// next to the selftests' `kselftest.h`).
    #[arg(long, value_name = "PATH")]
    pub reference: Option<std::path::PathBuf>,
}

/// Send calls between two reads of the error queue (as `udpgso_bench_tx` reads it every 16).
const REAP_EVERY: u64 = 16;

/// A pool of trains: pattern bytes, each datagram's first 8 bytes its offset in the pool.
#[derive(Clone, Copy, Debug)]
pub struct TrainPool {
    data: &'static [u8],
    train: usize,
    segment: usize,
}

impl TrainPool {
    /// Bytes of a datagram's header: its offset in the pool.
    const HEADER: usize = 8;

    /// A pool of about `kib` KiB (at least two trains) of `train`-byte trains cut in
    /// `segment`-byte datagrams, made once per shape and kept for the process (the kernel may
    /// read any of it while a zero-copy send is in flight).
    ///
    /// # Errors
    /// The memory cannot be had.
    pub fn new(train: usize, segment: usize, kib: usize) -> anyhow::Result<TrainPool> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        type Made = HashMap<(usize, usize, usize), &'static [u8]>;
        static MADE: Mutex<Option<Made>> = Mutex::new(None);
        let count = ((kib << 10) / train).max(2);
        let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
        let made = made.get_or_insert_with(HashMap::new);
        let data = match made.get(&(train, segment, count)) {
            Some(&d) => d,
            None => {
                let mut v = super::sweep::pattern_bytes(train * count)?;
                for t in 0..count {
                    for at in (0..train).step_by(segment) {
                        let off = t * train + at;
                        if train - at >= Self::HEADER {
                            v[off..off + Self::HEADER].copy_from_slice(&(off as u64).to_le_bytes());
                        }
                    }
                }
                let d: &'static [u8] = Box::leak(v.into_boxed_slice());
                made.insert((train, segment, count), d);
                d
            }
        };
        Ok(TrainPool {
            data,
            train,
            segment,
        })
    }

    /// Trains in the pool.
    pub fn count(&self) -> usize {
        self.data.len() / self.train
    }

    /// Train `i` (wrapping).
    pub fn train(&self, i: u64) -> &'static [u8] {
        let at = (i % self.count() as u64) as usize * self.train;
        &self.data[at..at + self.train]
    }

    /// Checks one received datagram: its offset names a datagram start of some train, it has
    /// that datagram's size and bytes. `Err` says what is wrong.
    pub fn check(&self, d: &[u8]) -> Result<(), String> {
        if self.train < Self::HEADER {
            return if self.data.windows(d.len().max(1)).any(|w| w == d) {
                Ok(())
            } else {
                Err(format!(
                    "a {}-byte datagram that is no part of the pool",
                    d.len()
                ))
            };
        }
        let Some(head) = d.get(..Self::HEADER) else {
            return Err(format!(
                "a {}-byte datagram, shorter than its header",
                d.len()
            ));
        };
        let off = u64::from_le_bytes(head.try_into().expect("8 bytes")) as usize;
        let in_train = off % self.train;
        if off >= self.data.len() || in_train % self.segment != 0 {
            return Err(format!(
                "a datagram claiming offset {off}, no datagram's start"
            ));
        }
        let want = self.segment.min(self.train - in_train);
        if d.len() != want {
            return Err(format!(
                "the datagram at offset {off} has {} bytes, not its {want} (segment {}, train {})",
                d.len(),
                self.segment,
                self.train
            ));
        }
        if d != &self.data[off..off + want] {
            return Err(format!("the datagram at offset {off} has wrong bytes"));
        }
        Ok(())
    }
}

/// What a GRO receiver saw.
#[derive(Debug, Default)]
struct Seen {
    datagrams: u64,
    bytes: u64,
    trains: u64,
    wrong: u64,
    first_bad: Option<String>,
}

/// A receiver on CPU 1 with `UDP_GRO`: reads trains whole, cuts them, checks every datagram;
/// ends when `done` is set and nothing came for 300 ms.
fn gro_receiver(
    sock: UdpSocket,
    pool: TrainPool,
    done: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<Seen>> {
    udp_gso::enable_gro(&sock).context("setsockopt(UDP_GRO) on the receiver")?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    Ok(std::thread::spawn(move || {
        pin(1);
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = Seen::default();
        let mut quiet = Instant::now();
        loop {
            match udp_gso::recv_train(&sock, &mut buf, 0) {
                Ok(t) => {
                    quiet = Instant::now();
                    seen.trains += 1;
                    if t.truncated {
                        seen.wrong += 1;
                        seen.first_bad
                            .get_or_insert("a train longer than 64 KiB".into());
                    }
                    // A train's segment size is its first datagram's: the kernel coalesces
                    // only datagrams of that size, the last one shorter.
                    for d in t.datagrams(&buf) {
                        seen.datagrams += 1;
                        seen.bytes += d.len() as u64;
                        if let Err(why) = pool.check(d) {
                            seen.wrong += 1;
                            seen.first_bad.get_or_insert(why);
                        }
                    }
                }
                Err(_) => {
                    if done.load(Ordering::SeqCst) && quiet.elapsed() > Duration::from_millis(300) {
                        return seen;
                    }
                }
            }
        }
    }))
}

/// What one run sends.
#[derive(Clone, Copy, Debug)]
struct Shape {
    pool: TrainPool,
    segment: Segment,
    seconds: f64,
}

/// Sends trains in `mode` on `sock` for the shape's seconds, measuring the sending thread.
fn send_for(sock: UdpSocket, mode: Mode, shape: Shape) -> anyhow::Result<Run> {
    let Shape {
        pool,
        segment,
        seconds,
    } = shape;
    if mode == Mode::GsoZcFixed {
        return send_fixed(sock, pool, segment, seconds);
    }
    let seg = segment.get();
    let per_train = segment.segments(pool.train) as u64;
    let meter = Meter::start();
    let start = Instant::now();
    let mut trains = 0u64;
    let mut zero_copy_share = None;
    let mut auto = None;
    match mode {
        Mode::Sendmsg => {
            while start.elapsed().as_secs_f64() < seconds {
                for d in pool.train(trains).chunks(seg) {
                    sock.send(d).context("send")?;
                }
                trains += 1;
            }
        }
        Mode::Sendmmsg => {
            use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, sendmmsg};
            let n = per_train as usize;
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(n, None);
            // Connected: no address per message (nix pairs each slice with an entry here).
            let none: Vec<Option<SockaddrStorage>> = vec![None; n];
            // One vector of slices for the run: no allocation in the measured loop.
            let mut slices: Vec<[IoSlice<'static>; 1]> = Vec::with_capacity(n);
            while start.elapsed().as_secs_f64() < seconds {
                slices.clear();
                slices.extend(pool.train(trains).chunks(seg).map(|d| [IoSlice::new(d)]));
                let mut sent = 0;
                while sent < n {
                    let r = sendmmsg(
                        sock.as_raw_fd(),
                        &mut headers,
                        &slices[sent..],
                        &none[sent..],
                        [],
                        MsgFlags::empty(),
                    );
                    match r {
                        Ok(results) => match results.count() {
                            0 => bail!("sendmmsg sent none of {} datagrams", n - sent),
                            k => sent += k,
                        },
                        Err(nix::errno::Errno::EINTR) => {}
                        Err(e) => return Err(e).context("sendmmsg"),
                    }
                }
                trains += 1;
            }
        }
        Mode::GsoCopy | Mode::GsoZc | Mode::GsoAuto => {
            let config = msg_zerocopy::Config {
                mode: match mode {
                    Mode::GsoCopy => msg_zerocopy::Mode::Copy,
                    Mode::GsoZc => msg_zerocopy::Mode::ZeroCopy,
                    _ => msg_zerocopy::Mode::Auto,
                },
                threshold: 0,
                policy: CopiedPolicy::Keep,
                segment: Some(segment),
            };
            let mut tx: ZeroCopySender<_, &'static [u8]> = ZeroCopySender::new(sock, config)
                .map_err(|e| e.error)
                .context("a GSO sender")?;
            while start.elapsed().as_secs_f64() < seconds {
                tx.send(pool.train(trains))
                    .map_err(|e| e.error)
                    .context("send")?;
                trains += 1;
                if trains % REAP_EVERY == 0 {
                    tx.reap().context("reading the error queue")?;
                    tx.returned().for_each(drop);
                }
            }
            tx.drain(Duration::from_secs(5))
                .context("waiting for completions")?;
            let c = tx.counters();
            zero_copy_share = Some(c.zero_copy_share().unwrap_or(0.0));
            if mode == Mode::GsoAuto {
                auto = Some((tx.auto_choice(), c.auto));
            }
        }
        Mode::GsoZcFixed => unreachable!("sent above"),
    }
    let mut run = meter.finish(Work {
        bytes: trains * pool.train as u64,
        requests: Some(trains * per_train),
        zero_copy_share,
        verified: None,
    });
    if let Some((choice, counters)) = auto {
        run = run.with_auto(choice, counters, pool.train);
    }
    Ok(run)
}

/// `gso-zc-fixed`: the pool's trains copied once into a registered io_uring pool, each sent
/// again as it comes back.
fn send_fixed(
    sock: UdpSocket,
    pool: TrainPool,
    segment: Segment,
    seconds: f64,
) -> anyhow::Result<Run> {
    let count = pool.count();
    let ring_pool = Pool::new(count, pool.train).context("allocating the registered pool")?;
    let all: Vec<PoolBuf> = std::iter::from_fn(|| ring_pool.acquire()).collect();
    let mut spare = std::collections::VecDeque::new();
    for mut b in all {
        let i = b.index() as u64;
        b.copy_from_slice(pool.train(i));
        spare.push_back(b);
    }
    let config = uring::Config {
        mode: uring::Mode::ZeroCopyFixed,
        window: super::uring_tx::CONFIG
            .window
            .min(count.saturating_sub(1).max(1)),
        segment: Some(segment),
        ..super::uring_tx::CONFIG
    };
    let mut tx = UringSender::with_pool(sock, config, &ring_pool)
        .map_err(|e| e.error)
        .context("an io_uring sender")?;
    if let Some(why) = tx.fallback_reason() {
        bail!("gso-zc-fixed asked for, but {why}");
    }
    let per_train = segment.segments(pool.train) as u64;
    let meter = Meter::start();
    let (trains, failed) = super::uring_tx::cycle_pool(&mut tx, spare, seconds)?;
    if let Some(e) = failed {
        bail!("a train failed: {e}");
    }
    let c = tx.counters();
    Ok(meter.finish(Work {
        bytes: trains * pool.train as u64,
        requests: Some(trains * per_train),
        zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
        verified: None,
    }))
}

/// One run in `lab`: into the sink (nothing receives), to a checking GRO receiver (veth), or
/// to a `zcnet serve` (which counts the datagrams).
fn one_run(lab: &Lab, family: Family, mode: Mode, shape: Shape) -> anyhow::Result<Run> {
    let Some((send_ns, recv_ns, ip)) = lab.ends(family) else {
        return run_in_lab(
            lab,
            Proto::Udp,
            family,
            (shape.seconds, Check::Count),
            move |conn| match conn {
                Conn::Udp(s) => send_for(s, mode, shape),
                Conn::Tcp(_) => bail!("udp-gso sends UDP"),
            },
        );
    };
    let done = Arc::new(AtomicBool::new(false));
    // However the sender ends (an error included), the receiver stops once it is quiet.
    struct Done(Arc<AtomicBool>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let finished = Done(done.clone());
    let (dest, receiver) = match recv_ns {
        Some(ns) => {
            let sock = ns.run(move || UdpSocket::bind(SocketAddr::new(ip, 0)))??;
            let addr = sock.local_addr()?;
            (addr, Some(gro_receiver(sock, shape.pool, done.clone())?))
        }
        None => (SocketAddr::new(ip, 9), None),
    };
    let sent = send_ns.run(move || -> anyhow::Result<Run> {
        pin(0);
        let s = UdpSocket::bind(match family {
            Family::V4 => SocketAddr::from(([0, 0, 0, 0], 0)),
            Family::V6 => SocketAddr::from(([0u16; 8], 0)),
        })?;
        s.connect(dest)?;
        send_for(s, mode, shape)
    });
    drop(finished);
    let sent = sent?;
    let seen = receiver
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("the receiver panicked"))
        })
        .transpose()?;
    let mut run = sent?;
    if let Some(seen) = seen {
        if let Some(why) = seen.first_bad {
            bail!(
                "{} of {} datagrams received were wrong, the first: {why}",
                seen.wrong,
                seen.datagrams
            );
        }
        if seen.datagrams == 0 {
            bail!("the receiver got no datagram");
        }
        // What arrived was checked, every datagram of it; UDP may lose some on the way (a full
        // socket buffer), and the share received says how many.
        run.verified = Some(true);
        let sent = run.requests_per_s.map_or(0.0, |r| r * run.seconds);
        if sent > 0.0 {
            run.received_share = Some((seen.datagrams as f64 / sent.round()).min(1.0));
        }
    }
    Ok(run)
}

/// The lab `name`: `sink`, `sink-swgso` or `veth` (built), or the remote.
fn build_lab(name: &str) -> anyhow::Result<Lab> {
    Ok(match name {
        "sink-swgso" => Lab::Sink(SinkLab::software_gso()?),
        "sink" | "veth" => Lab::build(name, Proto::Udp)?,
        other => bail!("no lab {other:?} for udp-gso (sink, sink-swgso, veth)"),
    })
}

/// The reference's figures for one run of `mode` (`None`: it has no such mode or size).
fn reference_run(
    reference: &Reference,
    dest: IpAddr,
    family: Family,
    mode: Mode,
    shape: Shape,
) -> anyhow::Result<Run> {
    let seg = shape.segment.get();
    reference.run_udpgso_tx(super::reference::UdpGso {
        dest,
        family,
        len: shape.pool.train,
        segment: matches!(mode, Mode::GsoCopy | Mode::GsoZc).then_some(seg),
        sendmmsg: mode == Mode::Sendmmsg,
        zerocopy: mode == Mode::GsoZc,
        seconds: shape.seconds,
    })
}

/// The mode the reference can run beside `mode` at this segment size.
fn reference_twin(mode: Mode, family: Family, segment: usize) -> Option<Mode> {
    // Its plain and sendmmsg modes cut datagrams at 1500 less the headers.
    let mss = match family {
        Family::V4 => 1472,
        Family::V6 => 1452,
    };
    match mode {
        Mode::Sendmsg | Mode::Sendmmsg if segment == mss => Some(mode),
        Mode::GsoCopy | Mode::GsoZc => Some(mode),
        _ => None,
    }
}

/// What the bench runs: labs, shapes of train and modes, with the reference beside them.
pub struct Plan<'a> {
    /// Lab names: `sink`, `sink-swgso`, `veth`.
    pub labs: &'a [&'a str],
    /// Address family.
    pub family: Family,
    /// Segment sizes.
    pub segments: &'a [usize],
    /// Datagrams per train.
    pub trains: &'a [usize],
    /// Modes; the first is the baseline of the comparisons.
    pub modes: &'a [Mode],
    /// Alternations per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// KiB of trains the sends cycle through.
    pub pool_kib: usize,
    /// No per-run lines and tables.
    pub quiet: bool,
    /// The kernel's `udpgso_bench_tx`, run beside zcnet in the sink labs.
    pub reference: Option<&'a Reference>,
}

/// Every (segment, datagrams per train) the bench will send, checked: the kernel takes the
/// train in one send.
///
/// # Errors
/// A segment out of range, more than 64 datagrams, or a train over one UDP datagram's bytes.
fn check_shapes(segments: &[usize], trains: &[usize]) -> anyhow::Result<Vec<(Segment, usize)>> {
    let mut shapes = Vec::new();
    for &seg in segments {
        let segment = Segment::new(seg).with_context(|| format!("--segment {seg}"))?;
        for &n in trains {
            let train = seg * n;
            segment
                .check_train(train)
                .with_context(|| format!("--train {n}"))?;
            if train > udp_gso::MAX_SEGMENT {
                bail!(
                    "--segment {seg} --train {n}: a train of {train} bytes exceeds one UDP \
                     datagram's {} bytes",
                    udp_gso::MAX_SEGMENT
                );
            }
            shapes.push((segment, n));
        }
    }
    Ok(shapes)
}

/// Runs the bench.
pub fn bench(plan: &Plan<'_>, remote: Option<Remote>) -> anyhow::Result<Outcome> {
    let mut report = Report::new("udp-gso");
    let shapes: Vec<(Segment, usize, TrainPool)> = check_shapes(plan.segments, plan.trains)?
        .into_iter()
        .map(|(segment, n)| {
            let train = segment.get() * n;
            let pool = TrainPool::new(train, segment.get(), plan.pool_kib)?;
            anyhow::Ok((segment, n, pool))
        })
        .collect::<anyhow::Result<_>>()?;
    let heat = {
        let (_, _, p) = shapes[0];
        let trains: Vec<&[u8]> = (0..p.count() as u64).map(|i| p.train(i)).collect();
        super::heat::PoolHeat::measure(plan.pool_kib.div_ceil(1024), &trains)
    };
    report.settings = json!({
        "runs": plan.runs, "seconds": plan.seconds,
        "modes": plan.modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "segments": plan.segments, "trains": plan.trains,
        "sender_cpu": 0, "receiver_cpu": 1, "pool_kib": plan.pool_kib, "pool": heat,
        "reap_every": REAP_EVERY,
        "requests": "datagrams: requests_per_s is datagrams per second",
        "auto_profile": zcnet::auto::active().origin(),
        "order": "mirrored rounds: A B C, then C B A, ...",
        "reference": plan.reference.map(|r| json!({
            "program": r.path(), "labs": ["sink", "sink-swgso"],
            "args": "-4|-6 -D <sink> -p 9 -l <s> -s <train> [-S <segment>] [-m] [-z] -a",
        })),
    });
    let mut summary = Vec::new();
    let arms_per = plan.modes.len() * (1 + usize::from(plan.reference.is_some()));
    let steps = plan.labs.len() * shapes.len() * plan.runs * arms_per;
    let progress = Progress::new(
        "udp-gso",
        steps as u64,
        Duration::from_secs_f64(plan.seconds * steps as f64),
    );
    let _pinned = Pinned::to(1);
    let (family, labs) =
        super::labs::remote_labs(&mut report, remote.as_ref(), plan.family, plan.labs);
    let mut remote = remote.map(std::sync::Mutex::new);
    for &lab_name in &labs {
        let lab = match remote.take() {
            Some(r) => Lab::Remote(r),
            None => build_lab(lab_name)?,
        };
        let beside = plan.reference.filter(|_| matches!(lab, Lab::Sink(_)));
        for &(segment, n, pool) in &shapes {
            let shape = Shape {
                pool,
                segment,
                seconds: plan.seconds,
            };
            // Registered buffers count against RLIMIT_MEMLOCK (8 MiB for an ordinary user):
            // where the pool does not fit, gso-zc-fixed is left out with the limit and the way
            // to raise it, and the other modes run (as uring-tx does).
            let page = zcnet::probe::features().host.page_size;
            let registered = ((pool.count() * pool.train).next_multiple_of(page)) as u64;
            let modes: Vec<Mode> = match zcnet::uring::memlock_check(registered) {
                Err(e) if plan.modes.contains(&Mode::GsoZcFixed) => {
                    eprintln!(
                        "udp-gso {lab_name} {} B x {n}: gso-zc-fixed left out: {}",
                        segment.get(),
                        crate::error_line::chain(&e)
                    );
                    let others = plan.modes.iter().copied();
                    others.filter(|&m| m != Mode::GsoZcFixed).collect()
                }
                _ => plan.modes.to_vec(),
            };
            let mut arms: Vec<Arm> = Vec::new();
            for &m in &modes {
                arms.push(Arm::Zcnet(m));
                if beside.is_some()
                    && let Some(t) = reference_twin(m, family, segment.get())
                {
                    arms.push(Arm::Reference(t));
                }
            }
            let step = SizeStep {
                lab: lab_name,
                family,
                proto: Proto::Udp,
                size: pool.train,
                runs: plan.runs,
                quiet: plan.quiet,
                mirrored: true,
            };
            let mut sets = step.measure_sets(&arms, Arm::name, &progress, |arm| match arm {
                Arm::Zcnet(m) => one_run(&lab, family, m, shape),
                Arm::Reference(m) => {
                    let r = beside.expect("reference arms only beside it").clone();
                    super::sweep::in_sink(&lab, family, move |dest| {
                        reference_run(&r, dest, family, m, shape)
                    })
                }
            })?;
            for s in &mut sets {
                s.params = json!({"proto": "udp", "segment": segment.get(), "segments": n,
                                  "train": pool.train});
            }
            let find = |name: &str| sets.iter().find(|s| s.mode == name);
            let base = &sets[0];
            for s in &sets[1..] {
                if !s.mode.starts_with("ref-") {
                    compare(&mut report, s, base);
                }
            }
            // zcnet's zero-copy modes over its GSO copy, and each mode over its reference twin.
            if let Some(copy) = find("gso-copy").filter(|_| base.mode != "gso-copy") {
                for m in ["gso-zc", "gso-zc-fixed", "gso-auto"] {
                    if let Some(s) = find(m) {
                        compare(&mut report, s, copy);
                    }
                }
            }
            for s in sets.iter().filter(|s| !s.mode.starts_with("ref-")) {
                if let Some(r) = find(&format!("ref-{}", s.mode)) {
                    report
                        .comparisons
                        .extend(Comparison::new(s, r, Metric::CpuUsPerMb));
                }
            }
            summary.extend(summary_rows(lab_name, segment.get(), n, &sets));
            report.results.extend(sets);
        }
    }
    Ok(Outcome::new(report, summary))
}

/// `a` over `b` in bytes per CPU second: `b`'s CPU per MB over `a`'s, pair by pair.
fn per_cpu(a: &ResultSet, b: &ResultSet) -> Vec<f64> {
    ratio_pairs(&b.runs, &a.runs, Metric::CpuUsPerMb)
}

/// The suite's rows: the acceptance's ratios, at 1472-byte segments and 42-segment trains
/// into the sink; information elsewhere.
fn summary_rows(lab: &str, segment: usize, n: usize, sets: &[ResultSet]) -> Vec<SummaryRow> {
    let find = |name: &str| sets.iter().find(|s| s.mode == name);
    let bound = lab == "sink" && segment == 1472 && n == 42;
    let mut rows = Vec::new();
    let mut row = |a: &ResultSet, b: &ResultSet, verdict: Verdict| {
        if per_cpu(a, b).is_empty() {
            return;
        }
        let mbps = |s: &ResultSet| {
            s.median_of(Metric::CpuUsPerMb)
                .map_or(f64::NAN, |us| 1e6 / us)
        };
        rows.push(SummaryRow::new(
            format!(
                "udp-gso {lab} {segment} B x {n}: {} over {}",
                a.mode, b.mode
            ),
            "MB per CPU s",
            (mbps(b), mbps(a)),
            a.median_of(Metric::ZeroCopyShare),
            &verdict,
        ));
    };
    if let (Some(copy), Some(one)) = (find("gso-copy"), find("sendmsg")) {
        let goal = bound.then_some(Goal::AtLeast(10.0));
        row(copy, one, Verdict::judge(&per_cpu(copy, one), goal));
    }
    if let Some(copy) = find("gso-copy") {
        for m in ["gso-zc", "gso-zc-fixed"] {
            let Some(s) = find(m) else { continue };
            let share_ok = s
                .median_of(Metric::ZeroCopyShare)
                .is_some_and(|x| x >= 0.999);
            let pairs = per_cpu(s, copy);
            let v = if bound {
                // The acceptance's bound for both: 1.3x GSO by copy, nothing copied.
                Verdict::judge(&pairs, Some(Goal::AtLeast(1.3))).require(share_ok, "copied > 0 %")
            } else if lab == "veth" {
                Verdict::info(&pairs, "veth delivery copies")
            } else {
                Verdict::info(&pairs, "")
            };
            row(s, copy, v);
        }
        if let Some(s) = find("gso-auto") {
            // Auto chooses between the two ways of its own sender: judged against the better.
            let own: Vec<ResultSet> = sets
                .iter()
                .filter(|s| matches!(s.mode.as_str(), "gso-copy" | "gso-zc"))
                .cloned()
                .collect();
            let req = |s: &ResultSet| s.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
            let verdict = super::outcome::auto_verdict(s, &own);
            if verdict.interval.is_some() {
                rows.push(SummaryRow::new(
                    format!(
                        "udp-gso {lab} {segment} B x {n}: {} over its better way",
                        s.mode
                    ),
                    "trains/s",
                    (req(copy), req(s)),
                    s.median_of(Metric::ZeroCopyShare),
                    &verdict,
                ));
            }
        }
    }
    rows
}

/// `zcnet bench udp-gso`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let segments = if opt.segments.is_empty() {
        vec![1200, 1472]
    } else {
        opt.segments.clone()
    };
    let trains = if opt.trains.is_empty() {
        vec![1, 8, 42]
    } else {
        opt.trains.clone()
    };
    let modes = if opt.modes.is_empty() {
        Mode::ALL.to_vec()
    } else {
        opt.modes.clone()
    };
    // What it would send is checked before anything is built or said about the machine.
    check_shapes(&segments, &trains)?;
    for lab in &opt.common.labs {
        if !["sink", "sink-swgso", "veth"].contains(&lab.as_str()) {
            bail!("no lab {lab:?} for udp-gso (sink, sink-swgso, veth)");
        }
    }
    let reference = opt.reference.as_deref().map(Reference::new).transpose()?;
    opt.common
        .needs_labs("udp-gso builds its labs in private network namespaces")?;
    let labs: Vec<&str> = if opt.common.labs.is_empty() {
        // The lab without segmentation offload needs ethtool: by default it is left out,
        // saying so, where there is none; asked for by name it is an error.
        if netlab::skip::on_path("ethtool") {
            vec!["sink", "sink-swgso", "veth"]
        } else {
            eprintln!(
                "udp-gso: lab sink-swgso left out: it needs ethtool (Debian package ethtool) to \
                 turn the sink's UDP segmentation offload off"
            );
            vec!["sink", "veth"]
        }
    } else {
        opt.common.labs.iter().map(String::as_str).collect()
    };
    let out = bench(
        &Plan {
            labs: &labs,
            family: opt.family.into(),
            segments: &segments,
            trains: &trains,
            modes: &modes,
            runs: opt.common.runs.unwrap_or(5),
            seconds: opt.common.seconds.unwrap_or(1.0),
            pool_kib: opt.pool_kib,
            quiet: opt.common.json,
            reference: reference.as_ref(),
        },
        opt.common.remote()?,
    )?;
    out.finish(&opt.common)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_checks_every_datagram_by_its_offset() {
        let pool = TrainPool::new(1000, 300, 64).unwrap();
        let t = pool.train(1);
        let parts: Vec<&[u8]> = udp_gso::datagrams(t, Some(300)).collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        for p in &parts {
            pool.check(p).unwrap();
        }
        // Cut at the wrong place, truncated, or another datagram's bytes.
        assert!(pool.check(&t[..299]).is_err());
        assert!(pool.check(&t[300..700]).is_err());
        let mut bad = parts[1].to_vec();
        bad[100] ^= 1;
        assert!(pool.check(&bad).is_err());
        let mut moved = parts[2].to_vec();
        moved[..8].copy_from_slice(&(1300u64).to_le_bytes());
        assert!(pool.check(&moved).unwrap_err().contains("wrong bytes"));
        assert!(pool.check(&[1, 2, 3]).is_err());
    }
}
