//! One run of `uring-tx`: a sender that cycles through the pool's buffers ([`cycle_pool`],
//! which `udp-gso`'s registered trains share), or sends the hot condition's one shared buffer
//! over and over, in a lab of [`crate::bench::sweep`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netlab::Family;
use zcnet::ZeroCopyCounters as _;
use zcnet::uring::{Config, Mode, PoolBuf, UringSender};

use super::pool::SendPool;
use super::ring::CONFIG;
use crate::bench::sweep::{self, Lab, Proto};
use crate::measure::{Meter, Run, Work};

/// Sends `size`-byte requests for `seconds` in `mode`, measuring the sending thread.
fn send_for<S: zcnet::uring::ExclusiveSocket>(
    socket: S,
    mode: Mode,
    seconds: f64,
    sp: &SendPool,
) -> anyhow::Result<Run> {
    let (pool, window) = (&sp.pool, sp.window);
    let config = Config {
        mode,
        window,
        ..CONFIG
    };
    if let Some(one) = sp.shares(mode) {
        return send_shared(socket, config, seconds, one);
    }
    let mut tx = UringSender::with_pool(socket, config, pool).map_err(|e| e.error)?;
    if let Some(why) = tx.fallback_reason() {
        bail!("{} asked for, but {why}", mode.name());
    }
    let size = pool.buf_size();
    // Every buffer of the pool, in its order; each goes out again as it comes back, in the order
    // it came back (as an application resends the buffers it gets back), so the sends cycle
    // through the whole pool without a trip through the pool's free list per request.
    let spare: VecDeque<PoolBuf> = std::iter::from_fn(|| pool.acquire()).collect();
    let meter = Meter::start();
    let in_place = spare.len() <= window + 1;
    let (requests, failed) = cycle_pool(&mut tx, in_place, spare, seconds)?;
    let c = tx.counters();
    let run = meter
        .finish(Work {
            bytes: requests * size as u64,
            requests: Some(requests),
            zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
            verified: None,
        })
        .with_auto(tx.auto_choice(), c.auto, size);
    if let Some(e) = failed {
        bail!(
            "{} of {requests} sends failed, the first with: {e}",
            c.errors
        );
    }
    Ok(run)
}

/// Sends the buffers of `spare` for `seconds`, each again as it comes back, in the order it
/// came back (as an application resends the buffers it gets back), so the sends cycle through
/// the whole pool; then waits for every notification. Returns the requests sent and the first
/// error a returned buffer carried.
///
/// `in_place` (for a pool whose buffers fit in the window but one, the hot pool): each goes
/// again from where the sender holds it ([`UringSender::resend_returned`], a batch a call and
/// an `io_uring_enter`), without a trip through the queue of returned buffers and `send`
/// (issue 51); the one beyond the window waits in the returned queue. Otherwise (a cold pool,
/// larger than the window) the pool goes round in the order its buffers came back, each taken
/// and sent, so that every buffer of it is sent in turn. The clock is read once a batch, as the
/// kernel's io_uring_zerocopy_tx.c reads it once per batch it submits: a read per request was a
/// fifth of the sender's user time.
pub(crate) fn cycle_pool<S: zcnet::uring::ExclusiveSocket>(
    tx: &mut UringSender<S, PoolBuf>,
    in_place: bool,
    mut spare: VecDeque<PoolBuf>,
    seconds: f64,
) -> anyhow::Result<(u64, Option<std::io::Error>)> {
    let start = Instant::now();
    let mut requests = 0u64;
    let mut failed = None;
    let check_every = CONFIG.batch.max(1) as u64;
    while requests % check_every != 0 || start.elapsed().as_secs_f64() < seconds {
        // The pool's buffers not sent yet, then each as it came back, taken one by one.
        let buf = match spare.pop_front() {
            Some(b) => b,
            None if in_place => break,
            None => loop {
                if let Some(r) = tx.pop_returned() {
                    failed = failed.or(r.error);
                    break r.buf;
                }
                // The window is smaller than the pool: with none in hand, some came back
                // already (the sender collected them while it waited for room). Reaping is for
                // safety only.
                tx.reap().context("io_uring_enter")?;
            },
        };
        tx.send(buf)
            .map_err(|e| e.error)
            .context("queueing a send")?;
        requests += 1;
    }
    if in_place {
        requests = resend_for(tx, start, seconds)?;
    }
    tx.drain(Duration::from_secs(5))
        .context("waiting for notifications")?;
    for r in tx.returned() {
        failed = failed.or(r.error);
    }
    Ok((requests, failed))
}

/// Sends every buffer again from where `tx` holds it as it comes back, until `seconds` from
/// `start` or a buffer comes back with an error (left in [`UringSender::returned`]); returns
/// the requests `tx` made in all.
fn resend_for<S: zcnet::uring::ExclusiveSocket, B: zcnet::uring::OwnedBuf>(
    tx: &mut UringSender<S, B>,
    start: Instant,
    seconds: f64,
) -> anyhow::Result<u64> {
    while start.elapsed().as_secs_f64() < seconds {
        tx.resend_returned(CONFIG.stall_timeout, |_| true)
            .context("io_uring_enter")?;
        if tx.counters().errors > 0 {
            break;
        }
    }
    Ok(tx.counters().requests)
}

/// [`send_for`] of one shared buffer: each request sends it again (`&'static [u8]` is an
/// [`zcnet::uring::OwnedBuf`]: several requests may read one buffer nobody writes).
fn send_shared<S: zcnet::uring::ExclusiveSocket>(
    socket: S,
    config: Config,
    seconds: f64,
    one: &'static [u8],
) -> anyhow::Result<Run> {
    let mut tx = UringSender::new(socket, config).map_err(|e| e.error)?;
    if let Some(why) = tx.fallback_reason() {
        bail!("{} asked for, but {why}", config.mode.name());
    }
    let meter = Meter::start();
    let start = Instant::now();
    let mut failed = None;
    // A window's worth of requests, then each again as it comes back (see `cycle_pool`).
    for _ in 0..config.window {
        tx.send(one)
            .map_err(|e| e.error)
            .context("queueing a send")?;
    }
    let requests = resend_for(&mut tx, start, seconds)?;
    tx.drain(Duration::from_secs(5))
        .context("waiting for notifications")?;
    for r in tx.returned() {
        failed = failed.or(r.error);
    }
    let c = tx.counters();
    let run = meter
        .finish(Work {
            bytes: requests * one.len() as u64,
            requests: Some(requests),
            zero_copy_share: Some(c.zero_copy_share().unwrap_or(0.0)),
            verified: None,
        })
        .with_auto(tx.auto_choice(), c.auto, one.len());
    if let Some(e) = failed {
        bail!(
            "{} of {requests} sends failed, the first with: {e}",
            c.errors
        );
    }
    Ok(run)
}

/// One run of `seconds` in `lab`: `mode`'s sends from `pool`, checked where they arrive.
pub(crate) fn one_run(
    lab: &Lab,
    proto: Proto,
    family: Family,
    mode: Mode,
    seconds: f64,
    pool: &SendPool,
) -> anyhow::Result<Run> {
    // Buffers come back in completion order and go out again in that order: the receiver
    // checks that every buffer's worth of the stream is one whole buffer of the pool.
    let check = crate::remote::proto::Check::Buffers {
        size: pool.pool.buf_size() as u64,
        // The shared buffer is the pool's first: one buffer, over and over.
        count: match pool.shares(mode) {
            Some(_) => 1,
            None => pool.pool.count() as u64,
        },
    };
    let pool = pool.clone();
    let far = (seconds, check);
    sweep::run_in_lab(lab, proto, family, far, move |conn| match conn {
        sweep::Conn::Udp(s) => send_for(s, mode, seconds, &pool),
        sweep::Conn::Tcp(s) => send_for(s, mode, seconds, &pool),
    })
}

/// The protocol each lab runs: UDP into the sink, TCP elsewhere.
pub(crate) fn proto_of(lab: &str) -> Proto {
    if lab == "sink" {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}
