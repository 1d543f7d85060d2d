//! `zcnet capture -i IFACE [-w FILE] [-c COUNT] [-s SNAPLEN] [--fanout N] [EXPR]`: capture
//! through `TPACKET_V3` rings ([`zcnet::packet`]) into a pcap file with nanosecond timestamps,
//! or one line per packet on stdout.
//!
//! With `--fanout N`, N rings in one `PACKET_FANOUT` hash group, one thread each, write to the
//! same file (records in arrival order per ring, so not globally sorted by time). The file is
//! flushed after every block, so a killed capture loses at most the block being written.
//!
//! SIGINT, SIGTERM and SIGHUP stop the capture as tcpdump stops: the file is complete, the
//! summary printed, exit 0 (a second signal ends it at once). An interface that goes down or
//! is deleted ends it with one line naming it, exit 1, after the pcap of what was captured.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use zcnet::packet::{self, FanoutMode, Filter, Frame, RxConfig, RxRing, Statistics, pcap::Writer};

use crate::interrupt;
use crate::output::{self, Output};

/// Options of `zcnet capture`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Interface to capture on (in this network namespace).
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interface: String,
    /// Write a pcap file (nanosecond timestamps) instead of printing packets; `-` for stdout.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<String>,
    /// Stop after this many packets.
    #[arg(short = 'c', value_name = "COUNT", value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=u64::MAX))]
    pub count: Option<u64>,
    /// Bytes of each packet to keep (cut in the kernel by the filter program).
    #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 262_144, value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=262144))]
    pub snaplen: u32,
    /// Spread the capture over N rings in a PACKET_FANOUT hash group, one thread each.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub fanout: usize,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S", value_parser = crate::args::seconds)]
    pub seconds: Option<f64>,
    /// Ring block size, KiB.
    #[arg(long, value_name = "KIB", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=65536))]
    pub block_kib: usize,
    /// Ring blocks.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub blocks: usize,
    /// Print the summary as JSON on stdout (with -w FILE).
    #[arg(long)]
    pub json: bool,
    /// Capture through AF_XDP sockets (zcnet::xdp) instead of the packet ring: zero copy where
    /// the driver has it. AF_XDP takes the frames it captures from the stack.
    #[arg(long, conflicts_with = "fanout")]
    pub xdp: bool,
    /// With --xdp: an interface queue to capture (repeatable: one socket per queue, all on one
    /// shared UMEM; default 0).
    #[arg(long = "queue", value_name = "N", requires = "xdp", value_parser = clap::value_parser!(u32).range(0..64))]
    pub queues: Vec<u32>,
    /// Filter expression (pcap-filter(7)), compiled by libpcap.
    #[arg(value_name = "EXPR", trailing_var_arg = true)]
    pub expr: Vec<String>,
}

/// What a capture did.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// Interface.
    pub interface: String,
    /// Packets written or printed.
    pub captured: u64,
    /// The kernel's counters, summed over the rings.
    pub kernel: Statistics,
    /// Blocks read.
    pub blocks: u64,
    /// Seconds captured.
    pub seconds: f64,
}

enum Sink {
    Pcap(Writer<Box<dyn Write + Send>>),
    Lines(io::Stdout),
}

impl Sink {
    fn frame(&mut self, f: &Frame<'_>) -> io::Result<()> {
        match self {
            Sink::Pcap(w) => w.write(f.sec, f.nsec, f.data, f.len),
            Sink::Lines(out) => writeln!(out.lock(), "{}", describe(f)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Pcap(w) => w.flush(),
            Sink::Lines(out) => out.flush(),
        }
    }
}

/// The sink `-w` asks for: pcap to the file (begun now) or stdout, else one line per packet on
/// stdout. The pcap header goes out at once: a capture stopped before its first packet is a
/// valid, empty capture, not a 0-byte file.
fn open_sink(opt: &Opt, file: Option<Output>) -> anyhow::Result<Sink> {
    Ok(match opt.write.as_deref() {
        None => Sink::Lines(io::stdout()),
        Some(path) => {
            let out: Box<dyn Write + Send> = match file {
                Some(mut f) => {
                    f.begin()
                        .with_context(|| format!("cannot write {}", output::shown(path)))?;
                    Box::new(BufWriter::new(f))
                }
                None => Box::new(io::stdout()),
            };
            let pcap = Writer::new(out, opt.snaplen)
                .and_then(|mut w| w.flush().map(|()| w))
                .with_context(|| format!("writing {}", output::shown(path)))?;
            Sink::Pcap(pcap)
        }
    })
}

/// An AF_XDP capture of `queue` (`capture --xdp`, `bench packet --mode xdp`): zero copy where the
/// driver has it; 16384 frames, 16 ms at 1 Mpps; frames batched for up to 10 ms, a packet
/// ring's block retire timeout, so that a wakeup brings many frames.
pub fn xdp_config(queue: u32) -> zcnet::xdp::Config {
    zcnet::xdp::Config {
        queue,
        frame_count: 16384,
        ring_size: 16384,
        coalesce: Duration::from_millis(10),
        ..zcnet::xdp::Config::default()
    }
}

/// `--xdp`: one AF_XDP socket per `--queue`, all on one UMEM, read in turn on this thread.
fn capture_xdp(
    opt: &Opt,
    file: Option<Output>,
    graceful: interrupt::Graceful,
) -> anyhow::Result<()> {
    let queues = if opt.queues.is_empty() {
        vec![0]
    } else {
        opt.queues.clone()
    };
    // The library refuses it too; the flag's name is the CLI's to say.
    if let Some((_, q)) = queues
        .iter()
        .enumerate()
        .find(|(i, q)| queues[..*i].contains(q))
    {
        anyhow::bail!("--queue {q} is given twice: one socket per queue");
    }
    let mut xsks = zcnet::xdp::Queues::new(&opt.interface, &queues, xdp_config(queues[0]))?;
    let xsk = &xsks.sockets()[0];
    eprintln!(
        "zcnet capture: AF_XDP on {} queue {} ({}, {} XDP): the frames it captures do not reach \
         this host's stack while it runs{}",
        opt.interface,
        queues
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if xsk.counters().zero_copy {
            "zero copy"
        } else {
            "copy mode"
        },
        if xsk.native() == Some(true) {
            "native"
        } else {
            "generic"
        },
        xsks.fallback_reason()
            .map_or(String::new(), |why| format!("; {why}"))
    );
    let mut sink = open_sink(opt, file)?;
    let start = Instant::now();
    let deadline = opt.seconds.map(|s| start + Duration::from_secs_f64(s));
    // One round looks at every queue; a queue waits its share of it while the others may have
    // frames.
    let round = Duration::from_millis(if queues.len() == 1 {
        100
    } else {
        10 * queues.len() as u64
    });
    let mut captured = 0u64;
    let mut batches = 0u64;
    let mut read = || -> anyhow::Result<()> {
        while deadline.is_none_or(|d| Instant::now() < d) && interrupt::stop_requested().is_none() {
            // AF_XDP carries no timestamp: the round's start here.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let mut failed = None;
            let got = xsks.recv_with(Some(round), &mut |_, data| {
                if failed.is_some() || opt.count.is_some_and(|c| captured >= c) {
                    return;
                }
                let f = Frame {
                    data,
                    len: data.len() as u32,
                    sec: t.as_secs() as u32,
                    nsec: t.subsec_nanos(),
                    status: 0,
                    rxhash: 0,
                    vlan: None,
                };
                match sink.frame(&f) {
                    Ok(()) => captured += 1,
                    Err(e) => failed = Some(e),
                }
            })?;
            if let Some(e) = failed {
                return Err(anyhow::Error::new(e).context("writing the capture"));
            }
            if got == 0 {
                continue;
            }
            batches += 1;
            sink.flush().context("writing the capture")?;
            if opt.count.is_some_and(|c| captured >= c) {
                return Ok(());
            }
        }
        Ok(())
    };
    let ended = read();
    drop(graceful);
    // What was captured is written out whatever ended the capture.
    sink.flush().context("writing the capture")?;
    let st = xsks.statistics()?;
    let (ring_full, no_fill, invalid) = (st.rx_ring_full, st.rx_dropped, st.rx_invalid_descs);
    let summary = Summary {
        interface: opt.interface.clone(),
        captured,
        kernel: Statistics {
            packets: captured + no_fill + ring_full,
            drops: no_fill + ring_full,
            freezes: 0,
        },
        blocks: batches,
        seconds: start.elapsed().as_secs_f64(),
    };
    eprintln!(
        "{captured} packets captured, {} dropped by the kernel ({ring_full} with the RX ring \
         full, {no_fill} without a fill-ring frame), {invalid} invalid descriptors",
        summary.kernel.drops
    );
    ended?;
    if opt.json && opt.write.as_deref().is_some_and(|w| w != "-") {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// One line for a frame: time, length, and the addresses of IPv4/IPv6 with UDP/TCP ports.
fn describe(f: &Frame<'_>) -> String {
    let d = f.data;
    let ts = format!("{}.{:09}", f.sec, f.nsec);
    let ports = |off: usize| -> String {
        match (d.get(off..off + 2), d.get(off + 2..off + 4)) {
            (Some(s), Some(t)) => format!(
                ".{} > .{}",
                u16::from_be_bytes([s[0], s[1]]),
                u16::from_be_bytes([t[0], t[1]])
            ),
            _ => String::new(),
        }
    };
    let proto_name = |p: u8| match p {
        6 => "TCP",
        17 => "UDP",
        1 => "ICMP",
        58 => "ICMPv6",
        _ => "IP",
    };
    if d.len() >= 34 && d[12..14] == [0x08, 0x00] {
        let ihl = usize::from(d[14] & 0x0f) * 4;
        let (src, dst) = (&d[26..30], &d[30..34]);
        let p = d[23];
        let pp = if matches!(p, 6 | 17) {
            ports(14 + ihl)
        } else {
            String::new()
        };
        return format!(
            "{ts} {} {}.{}.{}.{} > {}.{}.{}.{} {pp} len {}",
            proto_name(p),
            src[0],
            src[1],
            src[2],
            src[3],
            dst[0],
            dst[1],
            dst[2],
            dst[3],
            f.len
        );
    }
    if d.len() >= 54 && d[12..14] == [0x86, 0xdd] {
        let ip = |b: &[u8]| -> String {
            let a: [u8; 16] = b.try_into().unwrap_or([0; 16]);
            std::net::Ipv6Addr::from(a).to_string()
        };
        let p = d[20];
        let pp = if matches!(p, 6 | 17) {
            ports(54)
        } else {
            String::new()
        };
        return format!(
            "{ts} {} {} > {} {pp} len {}",
            proto_name(p),
            ip(&d[22..38]),
            ip(&d[38..54]),
            f.len
        );
    }
    let ethertype = d
        .get(12..14)
        .map_or(0, |e| u16::from_be_bytes([e[0], e[1]]));
    format!("{ts} ethertype 0x{ethertype:04x} len {}", f.len)
}

/// `zcnet capture`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    // Before any thread: the signals are taken by a thread of their own (see `interrupt`).
    interrupt::watch().context("taking SIGINT and SIGTERM")?;
    let expr = opt.expr.join(" ");
    if opt.xdp && !expr.trim().is_empty() {
        anyhow::bail!(
            "--xdp captures every frame of its queue: a filter expression needs the packet ring \
             (drop --xdp)"
        );
    }
    // libpcap compiles filter expressions only: without one, nothing needs it (the snap length
    // is then applied when writing).
    let filter = if expr.trim().is_empty() {
        None
    } else {
        Some(Filter::compile(&expr, opt.snaplen)?)
    };
    let config = RxConfig {
        block_size: opt.block_kib << 10,
        block_count: opt.blocks,
        filter,
        // On a loopback device every packet passes twice (out, then in): keep one, as tcpdump
        // does (issue 15: `capture -i lo -c 1000` held 500 distinct packets).
        ignore_outgoing: is_loopback(&opt.interface),
        ..RxConfig::default()
    };
    // The file is opened first (a bad path fails now) and truncated or put in place only once
    // the rings are open: a missing interface or privilege leaves an existing file alone.
    let mut file = match opt.write.as_deref() {
        Some(path) if path != "-" => Some(
            Output::open(std::path::Path::new(path))
                .with_context(|| format!("cannot write {}", output::shown(path)))?,
        ),
        _ => None,
    };
    // From here a signal stops the capture with its file whole, even before it began: a
    // signal now would otherwise catch the file truncated or put in place, its header unwritten.
    let graceful = interrupt::graceful();
    if opt.xdp {
        return capture_xdp(&opt, file, graceful);
    }
    let rings = if opt.fanout > 1 {
        packet::fanout(&opt.interface, opt.fanout, FanoutMode::Hash, &config)?
    } else {
        vec![RxRing::new(&opt.interface, config)?]
    };
    let sink = Arc::new(Mutex::new(open_sink(&opt, file.take())?));
    let captured = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let deadline = opt.seconds.map(|s| start + Duration::from_secs_f64(s));
    let live = io::stderr().is_terminal();
    let mut handles = Vec::new();
    for mut ring in rings {
        let until = Until {
            sink: sink.clone(),
            captured: captured.clone(),
            stop: stop.clone(),
            count: opt.count,
            deadline,
        };
        handles.push(std::thread::spawn(move || {
            let mut blocks = 0u64;
            let read = until.read(&mut ring, &mut blocks);
            if read.is_err() {
                // The other rings stop too: the capture ends with this error.
                until.stop.store(true, Ordering::Relaxed);
            }
            (read, ring.statistics(), blocks)
        }));
    }
    let mut last = Instant::now();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        if live && last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            eprint!("\r{} packets captured ", captured.load(Ordering::Relaxed));
        }
    }
    if live {
        eprintln!();
    }
    drop(graceful);
    let mut summary = Summary {
        interface: opt.interface.clone(),
        captured: captured.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
        ..Summary::default()
    };
    let mut failed = None;
    for h in handles {
        let (read, stats, blocks) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a capture thread panicked"))?;
        match stats {
            Ok(st) => {
                summary.kernel.packets += st.packets;
                summary.kernel.drops += st.drops;
                summary.kernel.freezes += st.freezes;
            }
            Err(e) => failed = failed.or(Some(e.into())),
        }
        summary.blocks += blocks;
        if let Err(e) = read {
            failed = Some(e);
        }
    }
    // What was captured is written out whatever ended the capture.
    if let Ok(mut s) = sink.lock() {
        s.flush().context("writing the capture")?;
    }
    eprintln!(
        "{} packets captured, {} received by the filter, {} dropped by the kernel ({} ring freezes)",
        summary.captured, summary.kernel.packets, summary.kernel.drops, summary.kernel.freezes
    );
    if let Some(e) = failed {
        return Err(e);
    }
    if opt.json && opt.write.as_deref().is_some_and(|w| w != "-") {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// What the rings' threads share: the sink, and what ends the capture (the count, the
/// deadline, a failed ring, a signal).
struct Until {
    sink: Arc<Mutex<Sink>>,
    captured: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    count: Option<u64>,
    deadline: Option<Instant>,
}

impl Until {
    fn reached(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || interrupt::stop_requested().is_some()
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self
                .count
                .is_some_and(|c| self.captured.load(Ordering::Relaxed) >= c)
    }

    /// Writes the blocks of `ring` to the sink until the capture ends; `blocks` counts them.
    fn read(&self, ring: &mut RxRing, blocks: &mut u64) -> anyhow::Result<()> {
        while !self.reached() {
            let Some(block) = ring.next_block(Some(Duration::from_millis(100)))? else {
                continue;
            };
            *blocks += 1;
            let mut s = self
                .sink
                .lock()
                .map_err(|_| anyhow::anyhow!("a capture thread panicked"))?;
            for f in block.frames() {
                if self
                    .count
                    .is_some_and(|c| self.captured.load(Ordering::Relaxed) >= c)
                {
                    break;
                }
                s.frame(&f).context("writing the capture")?;
                self.captured.fetch_add(1, Ordering::Relaxed);
            }
            s.flush().context("writing the capture")?;
        }
        Ok(())
    }
}

/// Whether `iface` is a loopback device (`IFF_LOOPBACK` in `/sys/class/net/IFACE/flags`), where
/// every packet passes twice; see `RxConfig::ignore_outgoing`.
fn is_loopback(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & libc::IFF_LOOPBACK as u32 != 0)
}
