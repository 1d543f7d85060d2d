//! One run of `packet`: a capture (by the RX ring, `recvfrom`, AF_XDP or tcpdump) while the
//! generator floods frames, and what it counted.

use std::io::BufWriter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime};

use anyhow::bail;
use zcnet::packet::{RxRing, Socket, pcap};

use super::lab::{DISCARD_PORT, Generated, Lab};
use super::mode::Mode;
use crate::bench::labs::spawn_in;
use crate::bench::tcpdump::Tcpdump;
use crate::measure::{self, MachineCpu, Run, ThreadCpu, Work, pin};

/// How long a capture waits for a frame before it looks whether the generator has stopped.
pub(super) const IDLE: Duration = Duration::from_millis(50);

/// What one capture saw.
#[derive(Debug, Default)]
pub(super) struct Captured {
    packets: u64,
    bytes: u64,
    dropped: u64,
    cpu: ThreadCpu,
    machine: Option<(f64, f64, f64)>,
}

/// Captures by `mode` (recvfrom or ring) on a thread at the capture point pinned to CPU 0,
/// until `stop` is set and the link has been quiet for [`IDLE`]. Every frame is written; the
/// generator's (`frame` bytes long) are counted.
pub(super) fn capture_in_process(
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
pub(super) fn one_run(lab: &Lab, mode: Mode, size: usize, seconds: f64) -> anyhow::Result<Run> {
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
