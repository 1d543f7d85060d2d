//! One run of `udp-gso`: a sender of trains in one mode ([`send_for`]; `gso-zc-fixed` from a
//! registered io_uring pool), into the sink, to the checking GRO receiver of `veth`, or to a
//! `zcnet serve`.

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use netlab::{Family, SinkLab};
use zcnet::ZeroCopyCounters as _;
use zcnet::msg_zerocopy::{self, CopiedPolicy, ZeroCopySender};
use zcnet::udp_gso::Segment;
use zcnet::uring::{self, Pool, PoolBuf, UringSender};

use super::mode::Mode;
use super::receiver::gro_receiver;
use super::train::TrainPool;
use crate::bench::sweep::{Conn, Lab, Proto, run_in_lab};
use crate::bench::tx::send_reaping;
use crate::measure::{Meter, Run, Work, pin};
use crate::remote::proto::Check;

/// Send calls between two reads of the error queue (as `udpgso_bench_tx` reads it every 16).
pub(super) const REAP_EVERY: u64 = 16;

/// What one run sends.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    /// The trains.
    pub pool: TrainPool,
    /// Their segment size.
    pub segment: Segment,
    /// Seconds of the run.
    pub seconds: f64,
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
    let per_train = segment.segments(pool.train_bytes()) as u64;
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
                ..Default::default()
            };
            let mut tx: ZeroCopySender<_, &'static [u8]> = ZeroCopySender::new(sock, config)
                .map_err(|e| e.error)
                .context("a GSO sender")?;
            trains = send_reaping(&mut tx, start, seconds, REAP_EVERY, |i| pool.train(i))?;
            let c = tx.counters();
            zero_copy_share = Some(c.zero_copy_share().unwrap_or(0.0));
            if mode == Mode::GsoAuto {
                auto = Some((tx.auto_choice(), c.auto));
            }
        }
        Mode::GsoZcFixed => unreachable!("sent above"),
    }
    let mut run = meter.finish(Work {
        bytes: trains * pool.train_bytes() as u64,
        requests: Some(trains * per_train),
        zero_copy_share,
        verified: None,
    });
    if let Some((choice, counters)) = auto {
        run = run.with_auto(choice, counters, pool.train_bytes());
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
    let ring_pool =
        Pool::new(count, pool.train_bytes()).context("allocating the registered pool")?;
    let all: Vec<PoolBuf> = std::iter::from_fn(|| ring_pool.acquire()).collect();
    let mut spare = std::collections::VecDeque::new();
    for mut b in all {
        let i = b.index() as u64;
        b.copy_from_slice(pool.train(i));
        spare.push_back(b);
    }
    let config = uring::Config {
        mode: uring::Mode::ZeroCopyFixed,
        window: crate::bench::uring_tx::CONFIG
            .window
            .min(count.saturating_sub(1).max(1)),
        segment: Some(segment),
        ..crate::bench::uring_tx::CONFIG
    };
    let mut tx = UringSender::with_pool(sock, config, &ring_pool)
        .map_err(|e| e.error)
        .context("an io_uring sender")?;
    if let Some(why) = tx.fallback_reason() {
        bail!("gso-zc-fixed asked for, but {why}");
    }
    let per_train = segment.segments(pool.train_bytes()) as u64;
    let meter = Meter::start();
    // Each train goes through `send` (its check) whatever the loop: the pool goes round in the
    // order its trains came back.
    let (trains, failed) = crate::bench::uring_tx::cycle_pool(&mut tx, false, spare, seconds)?;
    if let Some(e) = failed {
        bail!("a train failed: {e}");
    }
    let c = tx.counters();
    Ok(meter.finish(Work {
        bytes: trains * pool.train_bytes() as u64,
        requests: Some(trains * per_train),
        zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
        verified: None,
    }))
}

/// One run in `lab`: into the sink (nothing receives), to a checking GRO receiver (veth), or
/// to a `zcnet serve` (which counts the datagrams).
pub(super) fn one_run(lab: &Lab, family: Family, mode: Mode, shape: Shape) -> anyhow::Result<Run> {
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
pub(super) fn build_lab(name: &str) -> anyhow::Result<Lab> {
    Ok(match name {
        "sink-swgso" => Lab::Sink(SinkLab::software_gso()?),
        "sink" | "veth" => Lab::build(name, Proto::Udp)?,
        other => bail!("no lab {other:?} for udp-gso (sink, sink-swgso, veth)"),
    })
}
