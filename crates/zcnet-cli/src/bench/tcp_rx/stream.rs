//! One connection of `tcp-rx`: the `MSG_ZEROCOPY` sender of the pattern, and the receiver in
//! one mode (`recv`, or `TCP_ZEROCOPY_RECEIVE` with either page-release policy), measured
//! after a warm-up.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::pattern::{self, Verifier};
use serde::Serialize;
use zcnet::ZeroCopyCounters as _;
use zcnet::msg_zerocopy::{self, CopiedPolicy, Counters as SendCounters, ZeroCopySender};
use zcnet::tcp_rx::{self, Config, Counters as RxStats, Release, TcpZeroCopyReceiver};

use crate::measure::{Meter, Run, Work};

/// Bytes per send call and receive window, as `tcp_mmap` uses.
pub(super) const CHUNK: usize = 512 * 1024;

pub(super) const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Receiver mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `recv(2)` into a 512 KiB buffer (the window).
    Copy,
    /// `TCP_ZEROCOPY_RECEIVE`, pages released by `madvise(MADV_DONTNEED)` right after use and
    /// `TLB_CLEAN_HINT` on the next call (the library's default).
    Zc,
    /// `TCP_ZEROCOPY_RECEIVE`, pages left mapped until the next call zaps the range itself.
    ZcKernelZap,
}

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Zc => "zc",
            Mode::ZcKernelZap => "zc-kernel-zap",
        }
    }
}

/// Streams the pattern for `seconds` on `stream` with MSG_ZEROCOPY, then closes it. The
/// sender keeps zero-copy on although loopback copies: that deferred copy is what makes the
/// receiver's pages mappable.
pub(super) fn send_for(stream: TcpStream, seconds: f64) -> anyhow::Result<SendCounters> {
    let config = msg_zerocopy::Config {
        policy: CopiedPolicy::Keep,
        ..msg_zerocopy::Config::default()
    };
    let mut tx = ZeroCopySender::new(stream, config)
        .map_err(|e| e.error)
        .context("enabling SO_ZEROCOPY")?;
    let start = Instant::now();
    let mut off = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let chunk = pattern::chunk_at(off, CHUNK);
        tx.send(chunk).map_err(|e| e.error).context("send")?;
        off += chunk.len() as u64;
        tx.reap().context("reading the error queue")?;
        tx.returned().for_each(drop);
    }
    tx.drain(Duration::from_secs(2))
        .context("draining completions")?;
    Ok(tx.counters())
}

/// The share of each run spent warming up, unmeasured.
pub const WARM_UP: f64 = 0.25;

/// Receives one connection to its end, measuring the receiving thread after a warm-up.
pub(super) fn receive(conn: TcpStream, mode: Mode, s: &Settings) -> anyhow::Result<(Run, RxStats)> {
    let config = Config {
        window: s.window,
        rcvlowat: Some(s.window),
        mode: if mode == Mode::Copy {
            tcp_rx::Mode::Copy
        } else {
            tcp_rx::Mode::ZeroCopy
        },
        release: if mode == Mode::ZcKernelZap {
            Release::KernelZap
        } else {
            Release::Madvise
        },
        timeout: Some(IO_TIMEOUT),
    };
    let verify = s.verify;
    let mut rx = TcpZeroCopyReceiver::new(conn, config).context("setting up the receiver")?;
    if mode != Mode::Copy
        && let Some(why) = rx.fallback_reason()
    {
        bail!("zero-copy receive is not available: {why}");
    }
    let mut v = Verifier::new();
    // The first WARM_UP of the run, in this mode, is not measured: what the previous run left
    // behind (its freed pages, the caches) settles there rather than in the figures.
    let start = Instant::now();
    let warm_up = Duration::from_secs_f64(s.seconds * WARM_UP);
    let mut meter = None;
    let mut warm_bytes = 0;
    while let Some(r) = rx.recv().context("receiving")? {
        if verify {
            for part in r.parts() {
                v.check(part);
            }
        }
        if meter.is_none() && start.elapsed() >= warm_up {
            warm_bytes = rx.counters().bytes();
            meter = Some(Meter::start());
        }
    }
    let stats = rx.counters();
    let meter = meter.context("the connection ended within the warm-up")?;
    let run = meter.finish(Work {
        bytes: stats.bytes() - warm_bytes,
        requests: None,
        zero_copy_share: Some(stats.zero_copy_share().unwrap_or(0.0)),
        verified: verify.then(|| v.ok()),
    });
    if let Some(at) = v.first_bad() {
        eprintln!(
            "tcp-rx: {} mode: received bytes differ from the stream at offset {at}",
            mode.name()
        );
    }
    Ok((run, stats))
}

/// How the receiver runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Runs per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// Check every received byte.
    pub verify: bool,
    /// Receiver modes, alternated in this order; the first is the baseline of comparisons.
    pub modes: Vec<Mode>,
    /// Receive window in bytes.
    pub window: usize,
}

/// The settings as the report records them.
#[derive(Debug, Serialize)]
struct Recorded {
    runs: usize,
    seconds: f64,
    verify: bool,
    modes: Vec<&'static str>,
    window: usize,
    sender: &'static str,
    sender_cpu: usize,
    receiver_cpu: usize,
    order: &'static str,
    warm_up_share: f64,
}

impl Settings {
    /// The settings as the report records them.
    ///
    /// # Errors
    /// None in practice: plain fields always make JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        let recorded = Recorded {
            runs: self.runs,
            seconds: self.seconds,
            verify: self.verify,
            modes: self.modes.iter().map(|m| m.name()).collect(),
            window: self.window,
            sender: "separate process, MSG_ZEROCOPY, 512 KiB calls",
            sender_cpu: 0,
            receiver_cpu: 1,
            order: "one discarded warm-up run per mode, then mirrored rounds (A B B A ...), one \
                    connection per run",
            warm_up_share: WARM_UP,
        };
        Ok(serde_json::to_value(recorded)?)
    }
}
