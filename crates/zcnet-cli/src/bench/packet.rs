//! `zcnet bench packet`: capture by the `TPACKET_V3` RX ring against one `recvfrom(2)` per
//! packet and against tcpdump, the experiment of the 2005 netdev discussion on zero-copy
//! sniffing (a ring shared with user space beat per-packet copies and calls).
//!
//! In the `veth` lab a generator in namespace A, pinned to CPU 1, floods UDP frames of one size
//! from a TX ring with `PACKET_QDISC_BYPASS` for the run's seconds. The frames are addressed to
//! a MAC that is not veth-b's, as frames seen on a mirror port are: namespace B's stack drops
//! them on arrival (`PACKET_OTHERHOST`), so the capture is the only consumer. IPv6 is off on
//! both ends, so every frame on the link is the generator's. The capture thread (or process)
//! is pinned to CPU 0. Two conditions place the receive processing (the kernel half of each
//! capture: the copy into the ring, or the clone queued on the socket):
//! - `rx-on-generator`: veth delivers in the sender's softirq, on CPU 1, slowing the generator
//!   alike for every method; the capture CPU measured is the capture's alone. The CPU per
//!   packet of the acceptance comes from here.
//! - `rx-on-capture`: Receive Packet Steering moves it to CPU 0, which the capture shares with
//!   it, as on a capture box whose NIC interrupts the capture's CPU. The softirq comes first;
//!   a capture too slow for the rest drops. This kernel has no `IRQ_TIME_ACCOUNTING`, so
//!   softirq time that interrupts the capture is charged to it: read this condition's captured
//!   share and drops, not its CPU per packet.
//!
//! Each capture writes every frame as a pcap record to `/dev/null`, the job of
//! `tcpdump -w -` into /dev/null:
//! - `recvfrom`: [`zcnet::packet::Socket`], one `recvfrom(2)` per frame into a buffer, the time
//!   from the vDSO clock, the queue (`SO_RCVBUF`) as large as the ring;
//! - `ring`: [`zcnet::packet::RxRing`], 32 blocks of 1 MiB, retire timeout 10 ms;
//! - `tcpdump`: `tcpdump -i veth-b -p -n -B <ring KiB> -w -` (stdout /dev/null), libpcap's own V3 ring of
//!   the same size. Its CPU is the process's run time (`/proc/PID/schedstat`) split into user
//!   and system by its ticks (`/proc/PID/stat`), as getrusage does; its counts are the lines it
//!   prints when interrupted.

use std::io::BufWriter;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use netlab::{Family, Netns, Side, VethLab};
use serde::Serialize;
use serde_json::json;
use zcnet::packet::{RxConfig, RxRing, Socket, TxConfig, TxRing, pcap};

use super::engine::{FRAME_SIZE_HELP, Flags, Rounds, Sweep, sets_of};
use super::labs::spawn_in;
use super::outcome::{Outcome, SummaryRow};
use super::tcpdump::Tcpdump;
use super::verdict::{Goal, Verdict};
use crate::measure::{
    self, Comparison, Far, MachineCpu, Metric, ResultSet, Run, ThreadCpu, Work, pin, ratio_pairs,
};
use crate::remote::Remote;
use crate::remote::proto::Role;

/// Frame sizes of the issue: Ethernet header through payload, as a packet socket sees them.
pub const SIZES: [usize; 3] = [64, 512, 1500];

/// The destination of the generated frames: a locally administered address nobody has.
const MIRROR_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0, 0, 0x01];

/// How long a capture waits for a frame before it looks whether the generator has stopped.
const IDLE: Duration = Duration::from_millis(50);

/// Where the receive processing runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Condition {
    /// In the generator's softirq (CPU 1): the capture CPU is the capture's alone.
    RxOnGenerator,
    /// Steered (RPS) to the capture's CPU 0.
    RxOnCapture,
    /// The capture device's steering left as it is (the only condition with `--remote`, whose
    /// device is another host's to configure).
    AsConfigured,
}

impl Condition {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Condition::RxOnGenerator => "rx-on-generator",
            Condition::RxOnCapture => "rx-on-capture",
            Condition::AsConfigured => "as-configured",
        }
    }

    /// The `rps_cpus` mask of veth-b: none, or CPU 0; `None`: left as it is.
    fn rps_mask(self) -> Option<u64> {
        match self {
            Condition::RxOnGenerator => Some(0),
            Condition::RxOnCapture => Some(1),
            Condition::AsConfigured => None,
        }
    }
}

/// Both conditions.
pub const CONDITIONS: [Condition; 2] = [Condition::RxOnGenerator, Condition::RxOnCapture];

/// A capture method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `recvfrom(2)` per frame on a packet socket.
    Recvfrom,
    /// The `TPACKET_V3` RX ring.
    Ring,
    /// `tcpdump -w -` into /dev/null (Debian package tcpdump).
    Tcpdump,
    /// An `AF_XDP` socket ([`zcnet::xdp`]): zero copy where the driver has it, else copy mode
    /// (veth), the redirect program native where it can be. It takes the frames from the stack.
    Xdp,
}

impl Mode {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Recvfrom => "recvfrom",
            Mode::Ring => "ring",
            Mode::Tcpdump => "tcpdump",
            Mode::Xdp => "xdp",
        }
    }
}

impl Flags for Mode {
    const SIZE_HELP: &'static str = FRAME_SIZE_HELP;
    const SIZES: std::ops::RangeInclusive<u64> = 42..=1514;
    const MODE_HELP: &'static str =
        "Capture method (repeatable; default all three, tcpdump when installed)";
}

/// Options of `zcnet bench packet`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    #[command(flatten)]
    pub sweep: Sweep<Mode>,
    /// Where receive processing runs (repeatable; default both).
    #[arg(long = "condition", value_enum)]
    pub conditions: Vec<Condition>,
}

/// What one capture saw.
#[derive(Debug, Default)]
struct Captured {
    packets: u64,
    bytes: u64,
    dropped: u64,
    cpu: ThreadCpu,
    machine: Option<(f64, f64, f64)>,
}

/// Where the frames come from and are captured: the veth lab (a TX ring in A, the capture on
/// veth-b), or a `zcnet serve` sending UDP to this host (the capture on the interface that has
/// this host's address toward it).
enum Place {
    Veth { veth: VethLab, src_mac: [u8; 6] },
    Remote { remote: Mutex<Remote>, dev: String },
}

/// The lab's geometry, shared by every run.
struct Lab {
    place: Place,
    ring: RxConfig,
}

/// What a generator did: frames sent, its time, and a remote generator's figures.
struct Generated {
    sent: u64,
    took: f64,
    far: Option<Far>,
}

impl Lab {
    fn new(ring: RxConfig) -> anyhow::Result<Lab> {
        let veth = VethLab::quiet(None)?;
        let src_mac = veth.ns(Side::A).mac(VethLab::DEV_A)?;
        Ok(Lab {
            place: Place::Veth { veth, src_mac },
            ring,
        })
    }

    fn remote(remote: Remote, ring: RxConfig) -> anyhow::Result<Lab> {
        let ip = remote.local_ip()?;
        if ip.is_loopback() {
            // A packet socket on lo sees each frame twice, going out and coming in.
            bail!(
                "packet --remote captures on the link to another host, and {} is reached over \
                 loopback: run zcnet serve on the other host (or in another namespace)",
                remote.addr()
            );
        }
        let dev = interface_of(ip)?;
        Ok(Lab {
            place: Place::Remote {
                remote: Mutex::new(remote),
                dev,
            },
            ring,
        })
    }

    /// The capture's namespace (`None`: this one) and device.
    fn capture_point(&self) -> (Option<&Netns>, &str) {
        match &self.place {
            Place::Veth { veth, .. } => (Some(veth.ns(Side::B)), VethLab::DEV_B),
            Place::Remote { dev, .. } => (None, dev),
        }
    }

    fn ring_bytes(&self) -> usize {
        self.ring.block_size * self.ring.block_count
    }

    /// The generator: floods `size`-byte frames for `seconds`, from a TX ring in namespace A
    /// pinned to CPU 1, or from the remote's UDP socket.
    fn generate(&self, size: usize, seconds: f64) -> anyhow::Result<Generated> {
        let (veth, src_mac) = match &self.place {
            Place::Veth { veth, src_mac } => (veth, *src_mac),
            Place::Remote { remote, .. } => {
                let mut remote = remote.lock().unwrap_or_else(|e| e.into_inner());
                let role = Role::Generate {
                    frame: size,
                    port: DISCARD_PORT,
                };
                remote.start(role, seconds)?;
                let far = remote.finish()?;
                return Ok(Generated {
                    sent: far.messages,
                    took: far.seconds,
                    far: Some(far),
                });
            }
        };
        let (IpAddr::V4(a), IpAddr::V4(b)) = (
            VethLab::addr(Side::A, Family::V4),
            VethLab::addr(Side::B, Family::V4),
        ) else {
            unreachable!("the lab's IPv4 addresses")
        };
        let payload = vec![0x5a; size - netlab::frame::HEADERS];
        let frame = netlab::frame::udp_v4(
            MIRROR_MAC,
            src_mac,
            a.octets(),
            b.octets(),
            (40_000, DISCARD_PORT),
            &payload,
        );
        let generator = veth
            .ns(Side::A)
            .spawn(move || -> anyhow::Result<Generated> {
                pin(1);
                let config = TxConfig {
                    qdisc_bypass: true,
                    ..TxConfig::default()
                };
                let mut tx = TxRing::new(VethLab::DEV_A, config)?;
                let start = Instant::now();
                let mut sent = 0u64;
                while start.elapsed().as_secs_f64() < seconds {
                    while tx.push(&frame)? {}
                    sent += (tx.flush()? / frame.len()) as u64;
                }
                let took = start.elapsed().as_secs_f64();
                if tx.refused() > 0 {
                    bail!("the kernel refused {} generated frames", tx.refused());
                }
                Ok(Generated {
                    sent,
                    took,
                    far: None,
                })
            })?;
        generator
            .join()
            .map_err(|_| anyhow::anyhow!("generator panicked"))?
    }
}

/// The UDP port the frames go to (discard).
const DISCARD_PORT: u16 = 9;

/// The interface that has `ip` (where a remote generator's frames arrive).
fn interface_of(ip: IpAddr) -> anyhow::Result<String> {
    let addrs = nix::ifaddrs::getifaddrs().context("getifaddrs")?;
    for a in addrs {
        let Some(addr) = a.address else { continue };
        let found = match ip {
            IpAddr::V4(v4) => addr.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => addr.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        if found {
            return Ok(a.interface_name);
        }
    }
    bail!("no interface here has {ip}, this host's address toward the server")
}

/// Captures by `mode` (recvfrom or ring) on a thread at the capture point pinned to CPU 0,
/// until `stop` is set and the link has been quiet for [`IDLE`]. Every frame is written; the
/// generator's (`frame` bytes long) are counted.
fn capture_in_process(
    lab: &Lab,
    mode: Mode,
    frame: usize,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<()>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<Captured>>> {
    let ring_config = lab.ring.clone();
    let rcvbuf = lab.ring_bytes();
    let (ns, dev) = lab.capture_point();
    let dev = dev.to_owned();
    let handle = spawn_in(ns, move || -> anyhow::Result<Captured> {
        pin(0);
        let out = BufWriter::with_capacity(1 << 16, std::fs::File::create("/dev/null")?);
        let mut w = pcap::Writer::new(out, 262_144)?;
        let mut c = Captured::default();
        let (cpu0, machine0);
        match mode {
            Mode::Ring => {
                let mut ring = RxRing::new(&dev, ring_config)?;
                let _ = ready.send(());
                (cpu0, machine0) = (ThreadCpu::now(), MachineCpu::now());
                loop {
                    match ring.next_block(Some(IDLE))? {
                        Some(block) => {
                            for f in block.frames() {
                                w.write(f.sec, f.nsec, f.data, f.len)?;
                                if f.len as usize == frame {
                                    c.packets += 1;
                                    c.bytes += u64::from(f.len);
                                }
                            }
                        }
                        None if stop.load(Ordering::Acquire) => break,
                        None => {}
                    }
                }
                c.dropped = ring.statistics()?.drops;
            }
            Mode::Recvfrom => {
                let mut sock = Socket::new(&dev, Some(rcvbuf))?;
                let mut buf = vec![0u8; 1 << 16];
                let _ = ready.send(());
                (cpu0, machine0) = (ThreadCpu::now(), MachineCpu::now());
                loop {
                    match sock.recv(&mut buf, Some(IDLE))? {
                        Some(r) => {
                            let t = SystemTime::now()
                                .duration_since(SystemTime::UNIX_EPOCH)
                                .unwrap_or_default();
                            w.write(
                                t.as_secs() as u32,
                                t.subsec_nanos(),
                                &buf[..r.len],
                                r.original as u32,
                            )?;
                            if r.original == frame {
                                c.packets += 1;
                                c.bytes += r.original as u64;
                            }
                        }
                        None if stop.load(Ordering::Acquire) => break,
                        None => {}
                    }
                }
                c.dropped = sock.statistics()?.drops;
            }
            Mode::Xdp => {
                let config = crate::capture::xdp_config(0);
                let mut xsk = zcnet::xdp::XdpSocket::new(&dev, config)?;
                let _ = ready.send(());
                (cpu0, machine0) = (ThreadCpu::now(), MachineCpu::now());
                loop {
                    match xsk.recv(Some(IDLE))? {
                        Some(frames) => {
                            // AF_XDP carries no timestamp: one clock read per batch.
                            let t = SystemTime::now()
                                .duration_since(SystemTime::UNIX_EPOCH)
                                .unwrap_or_default();
                            for f in frames.iter() {
                                let len = f.len() as u32;
                                w.write(t.as_secs() as u32, t.subsec_nanos(), f, len)?;
                                if f.len() == frame {
                                    c.packets += 1;
                                    c.bytes += f.len() as u64;
                                }
                            }
                        }
                        None if stop.load(Ordering::Acquire) => break,
                        None => {}
                    }
                }
                let s = xsk.statistics()?;
                c.dropped = s.rx_dropped + s.rx_ring_full;
            }
            Mode::Tcpdump => unreachable!("tcpdump runs as its own process"),
        }
        w.flush()?;
        c.cpu = ThreadCpu::now().since(&cpu0);
        c.machine = MachineCpu::elapsed(machine0);
        Ok(c)
    })?;
    Ok(handle)
}

/// One run: capture by `mode` while the generator floods `size`-byte frames for `seconds`.
fn one_run(lab: &Lab, mode: Mode, size: usize, seconds: f64) -> anyhow::Result<Run> {
    let (generated, c) = match mode {
        Mode::Tcpdump => {
            let (ns, dev) = lab.capture_point();
            // On another host's link only the generator's frames count: a filter on their port.
            let port = ns.is_none().then_some(DISCARD_PORT);
            let td = Tcpdump::start(ns, dev, lab.ring_bytes() >> 10, port)?;
            let (cpu0, machine0) = (td.cpu()?, MachineCpu::now());
            let generated = lab.generate(size, seconds)?;
            let cpu1 = td.drain()?;
            let machine = MachineCpu::elapsed(machine0);
            let counts = td.finish()?;
            let c = Captured {
                packets: counts.captured,
                // Every frame on the link is a generator frame of `size` bytes (IPv6 is off),
                // or tcpdump's filter keeps those only (a remote generator).
                bytes: counts.captured * size as u64,
                dropped: counts.dropped,
                cpu: cpu1.since(&cpu0),
                machine,
            };
            (generated, c)
        }
        _ => {
            let stop = Arc::new(AtomicBool::new(false));
            let (ready_tx, ready) = mpsc::channel();
            let cap = capture_in_process(lab, mode, size, Arc::clone(&stop), ready_tx)?;
            let generated = ready
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| anyhow::anyhow!("the capture did not start"))
                .and_then(|()| lab.generate(size, seconds));
            stop.store(true, Ordering::Release);
            let c = cap
                .join()
                .map_err(|_| anyhow::anyhow!("capture panicked"))??;
            (generated?, c)
        }
    };
    let Generated { sent, took, far } = generated;
    // Another host's frames may be lost on the way, before any capture: the captured share
    // says so. In the lab nothing else loses them.
    if far.is_none() && c.packets + c.dropped < sent {
        bail!(
            "{} of {sent} frames sent neither captured nor counted as dropped by the capture ({} captured, {} dropped): lost before it, in a full per-CPU backlog (net.core.netdev_max_backlog) or the device",
            sent - c.packets - c.dropped,
            c.packets,
            c.dropped
        );
    }
    let mut run = measure::record(
        Work {
            bytes: c.bytes,
            requests: Some(c.packets),
            zero_copy_share: None,
            verified: None,
        },
        took,
        c.cpu,
        c.machine,
    );
    run.packets_offered = Some(sent);
    run.packets_dropped = Some(c.dropped);
    run.capture_share = Some(c.packets as f64 / sent.max(1) as f64);
    Ok(match far {
        Some(far) => run.with_far(&far),
        None => run,
    })
}

/// The settings of `packet`.
#[derive(Debug, Serialize)]
struct Settings {
    runs: usize,
    seconds: f64,
    generator: &'static str,
    capture_cpu: usize,
    ring: RingSettings,
    recvfrom_rcvbuf: usize,
    tcpdump_buffer_kib: usize,
    output: &'static str,
    modes: Vec<&'static str>,
}

/// The RX ring's geometry.
#[derive(Debug, Serialize)]
struct RingSettings {
    block_size: usize,
    block_count: usize,
    retire_ms: u128,
}

/// Runs the bench: every condition and size, the modes alternating.
pub fn bench(
    conditions: &[Condition],
    sizes: &[usize],
    modes: &[Mode],
    rounds: Rounds,
    remote: Option<Remote>,
) -> anyhow::Result<Outcome> {
    let ring = RxConfig::default();
    let ring_bytes = ring.block_size * ring.block_count;
    let settings = Settings {
        runs: rounds.runs,
        seconds: rounds.seconds,
        generator: match remote {
            Some(_) => "zcnet serve: UDP sendto to port 9",
            None => "TX ring, qdisc bypass, CPU 1",
        },
        capture_cpu: 0,
        ring: RingSettings {
            block_size: ring.block_size,
            block_count: ring.block_count,
            retire_ms: ring.retire_timeout.as_millis(),
        },
        recvfrom_rcvbuf: ring_bytes,
        tcpdump_buffer_kib: ring_bytes >> 10,
        output: "pcap to /dev/null",
        modes: modes.iter().map(|m| m.name()).collect(),
    };
    let steps = conditions.len() * sizes.len() * rounds.runs * modes.len();
    let mut s = rounds.start("packet", &settings, steps, rounds.seconds + 1.0)?;
    let lab_name = super::labs::remote_lab(&mut s.report, remote.as_ref(), "veth");
    let lab = match remote {
        Some(r) => Lab::remote(r, ring)?,
        None => Lab::new(ring)?,
    };
    for (&cond, &size) in conditions
        .iter()
        .flat_map(|c| sizes.iter().map(move |s| (c, s)))
    {
        // Steering needs CAP_NET_ADMIN of the initial user namespace: a lab in a user namespace
        // (not root) cannot set it. Say so and measure the other conditions. Another host's
        // device is measured as it is configured.
        let steered = match (&lab.place, cond.rps_mask()) {
            (Place::Veth { veth, .. }, Some(mask)) => {
                veth.ns(Side::B).set_rps(VethLab::DEV_B, mask)
            }
            _ => Ok(()),
        };
        if let Err(e) = steered {
            eprintln!(
                "packet: skipping {} {size} B: {} (RPS needs real root)",
                cond.name(),
                crate::error_line::chain(&e)
            );
            continue;
        }
        let per = measure::alternate(modes, rounds.runs, s.progress(), |m, i| {
            let run = one_run(&lab, m, size, rounds.seconds)
                .with_context(|| format!("{} {size} B {} run {}", cond.name(), m.name(), i + 1))?;
            if !rounds.quiet {
                println!(
                    "[{lab_name} {} {size} B] {}",
                    cond.name(),
                    describe(m, &run)
                );
            }
            anyhow::Ok(run)
        })?;
        let params = json!({"condition": cond.name(), "size": size});
        let sets = sets_of(modes, Mode::name, per, (lab_name, "ipv4", None), &params);
        let set = |m: Mode| modes.iter().position(|&x| x == m).map(|i| &sets[i]);
        if let Some(ring) = set(Mode::Ring) {
            for other in [Mode::Recvfrom, Mode::Tcpdump, Mode::Xdp] {
                let Some(o) = set(other) else { continue };
                s.compare(ring, o, &CAPTURE_METRICS);
            }
            s.summary.extend(summary_rows(
                lab_name,
                cond,
                size,
                ring,
                set(Mode::Recvfrom),
                set(Mode::Tcpdump),
                set(Mode::Xdp),
            ));
        }
        s.keep(sets, Vec::new());
    }
    Ok(s.finish())
}

/// What the ring is compared with each other method by: CPU per packet, packets/s, and the
/// share of the offered packets captured.
const CAPTURE_METRICS: [Metric; 3] = [
    Metric::CpuNsPerRequest,
    Metric::RequestsPerS,
    Metric::CaptureShare,
];

/// One line per run.
fn describe(mode: Mode, run: &Run) -> String {
    let offered = run.packets_offered.unwrap_or(0) as f64 / run.seconds.max(1e-9);
    let captured = run.requests_per_s.unwrap_or(0.0);
    let ns = run.cpu_ns_per_request.unwrap_or(f64::NAN);
    format!(
        "{:<9} {:>6.3} Mpps captured of {:>6.3} offered ({:>5.1} %), {} dropped, capture CPU {:>6.1} ns/packet ({:.1} M packets per CPU-s), {} c-switches",
        mode.name(),
        captured / 1e6,
        offered / 1e6,
        100.0 * captured / offered.max(1e-9),
        run.packets_dropped.unwrap_or(0),
        ns,
        1e3 / ns,
        run.ctx_switches
    ) + &run.far_part()
}

fn median(set: &ResultSet, metric: Metric) -> f64 {
    set.median_of(metric).unwrap_or(f64::NAN)
}

/// The capture's CPU per packet, as a summary row shows it.
const CPU_PER_PACKET: (&str, Metric, f64) = ("CPU ns/packet", Metric::CpuNsPerRequest, 1.0);

/// The summary rows of one condition and size: ring against recvfrom (CPU per packet, judged
/// where the capture's CPU is its own) and ring against tcpdump (the share of the offered
/// packets captured, judged in both conditions: the offered rate moves from run to run with
/// the generator's CPU, so the share, not the raw rate, compares runs). Verdicts for the
/// issue's 64-byte frames only.
fn summary_rows(
    lab: &str,
    cond: Condition,
    size: usize,
    ring: &ResultSet,
    recvfrom: Option<&ResultSet>,
    tcpdump: Option<&ResultSet>,
    xdp: Option<&ResultSet>,
) -> Vec<SummaryRow> {
    let judged = size == 64;
    let name = cond.name();
    let mut rows = Vec::new();
    let pairs = |a: &ResultSet, b: &ResultSet, m: Metric| ratio_pairs(&a.runs, &b.runs, m);
    // The row of `a -> b`: their medians of `metric` (times `scale`), judged on the pairs `p`;
    // none without pairs.
    let mut row = |(a, b): (&ResultSet, &ResultSet),
                   (unit, metric, scale): (&str, Metric, f64),
                   p: &[f64],
                   verdict: &Verdict| {
        if !p.is_empty() {
            rows.push(SummaryRow::new(
                format!("packet {lab} {name} {size} B: {} -> {}", a.mode, b.mode),
                unit,
                (scale * median(a, metric), scale * median(b, metric)),
                None,
                verdict,
            ));
        }
    };
    if let Some(r) = recvfrom {
        let p = pairs(ring, r, Metric::CpuNsPerRequest);
        let judged = judged && cond == Condition::RxOnGenerator;
        // Packets per CPU second is the inverse of CPU per packet: at least 2x means <= 0.5.
        let verdict = Verdict::judge(&p, judged.then_some(Goal::AtMost(0.5)));
        let per_cpu_s = 1.0 / verdict.ratio();
        let verdict = verdict.note(format!("{per_cpu_s:.1}x packets per CPU-s"));
        row((r, ring), CPU_PER_PACKET, &p, &verdict);
    }
    if let Some(t) = tcpdump {
        let p = pairs(ring, t, Metric::CaptureShare);
        let drops = |s: &ResultSet| s.runs.iter().all(|r| r.packets_dropped.is_some());
        // The raw rates, shown beside the verdict: they follow the generator's rate.
        let rate =
            Comparison::new(ring, t, Metric::RequestsPerS).map_or(f64::NAN, |r| r.ratio_median);
        let verdict = Verdict::judge(&p, judged.then_some(Goal::AtLeast(1.0)))
            .require(drops(ring) && drops(t), "drops not reported")
            .note(format!(
                "drops {:.0} / {:.0}, pkt/s ratio {rate:.2}",
                median(t, Metric::PacketsDropped),
                median(ring, Metric::PacketsDropped),
            ));
        row(
            (t, ring),
            ("captured %", Metric::CaptureShare, 100.0),
            &p,
            &verdict,
        );
    }
    // Issue 18: AF_XDP's CPU per packet at most the ring's, its captured share at least the
    // ring's, in the same run (at 64 B, where per-packet costs show most).
    if let Some(x) = xdp {
        let p = pairs(x, ring, Metric::CpuNsPerRequest);
        let judged = judged && cond == Condition::RxOnGenerator;
        let share = Verdict::judge(
            &pairs(x, ring, Metric::CaptureShare),
            judged.then_some(Goal::AtLeast(1.0)),
        );
        let verdict =
            Verdict::judge(&p, judged.then_some(Goal::AtMost(1.0))).and("share ratio", share);
        row((ring, x), CPU_PER_PACKET, &p, &verdict);
    }
    rows
}

/// The modes asked for, tcpdump left out with a reason when it is not installed.
pub fn available_modes(asked: &[Mode]) -> Vec<Mode> {
    let asked = if asked.is_empty() {
        vec![Mode::Recvfrom, Mode::Ring, Mode::Xdp, Mode::Tcpdump]
    } else {
        asked.to_vec()
    };
    let asked = if asked.contains(&Mode::Xdp) && zcnet::probe::features().privileges.user_namespace
    {
        eprintln!(
            "zcnet bench packet: xdp mode skipped: attaching an XDP program needs CAP_BPF and \
             CAP_NET_ADMIN of the initial user namespace (run as root to compare with it)"
        );
        asked.into_iter().filter(|&m| m != Mode::Xdp).collect()
    } else {
        asked
    };
    if asked.contains(&Mode::Tcpdump) && zcnet::probe::features().privileges.user_namespace {
        eprintln!(
            "zcnet bench packet: tcpdump mode skipped: tcpdump switches to its own user, which a \
             user namespace cannot map (run as root to compare with it)"
        );
        return asked.into_iter().filter(|&m| m != Mode::Tcpdump).collect();
    }
    if asked.contains(&Mode::Tcpdump) && !netlab::skip::on_path("tcpdump") {
        eprintln!(
            "zcnet bench packet: tcpdump mode skipped: tcpdump is not installed (Debian package tcpdump)"
        );
        return asked.into_iter().filter(|&m| m != Mode::Tcpdump).collect();
    }
    asked
}

/// `zcnet bench packet`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let common = &opt.sweep.common;
    if common.labs.iter().any(|l| l != "veth") {
        bail!("packet runs in the veth lab only");
    }
    let sizes = opt.sweep.sizes_or(&SIZES);
    if let Some(bad) = sizes
        .iter()
        .find(|&&s| !(netlab::frame::HEADERS..=1514).contains(&s))
    {
        bail!(
            "frame size {bad} out of range: {}..=1514 bytes (Ethernet, IPv4 and UDP headers; MTU 1500)",
            netlab::frame::HEADERS
        );
    }
    let remote = common.remote()?;
    if remote.is_none() {
        netlab::check_privileges()
            .context("packet builds its veth lab in private network namespaces")?;
    }
    let conditions = match (&remote, opt.conditions.is_empty()) {
        (Some(_), _) if opt.conditions.iter().any(|&c| c != Condition::AsConfigured) => {
            bail!(
                "with --remote the capture device is this host's, measured as it is configured: \
                 --condition as-configured"
            )
        }
        (Some(_), _) => vec![Condition::AsConfigured],
        (None, true) => CONDITIONS.to_vec(),
        (None, false) => opt.conditions.clone(),
    };
    // Said once the command is known to run: which modes this machine leaves out.
    let modes = available_modes(&opt.sweep.modes);
    let out = bench(&conditions, &sizes, &modes, common.rounds(5, 2.0), remote)?;
    out.finish(common)
}
