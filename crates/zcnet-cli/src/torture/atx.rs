//! The async senders of `zcnet::tokio`, with send futures dropped mid-send by a short timer.
//!
//! What a cancelled send leaves is what the API documents (docs/async.md), and the round checks
//! it: `ZeroCopySender::send` and `UringSender::send` send a buffer whole or not at all (the
//! sender keeps it once it took it, else the future drops it unsent), which the ledger tells
//! from who still holds the buffer; `FileSender::send_file` leaves the bytes already sent sent
//! and counted, so the next send starts where the counters say. The receiver then checks that
//! the stream is exactly the bytes of the sends that went, in order, with no gap.

use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use zcnet::loan::{ExclusiveSocket, OwnedBuf};
use zcnet::mechanism::AsyncLoaningSender;
use zcnet::tokio::IntoStdSocket;
use zcnet::{msg_zerocopy, uring};

use super::check::Rng;
use super::ctx::{Ctx, Sock, TempFile, file_config, shut};
use super::round::{Mechanism, Patience, SLICE};

/// Runs async sender `m` on a runtime of its own (current-thread or multi-threaded, drawn).
pub fn run(ctx: &mut Ctx<'_>, m: Mechanism, sock: Sock) -> anyhow::Result<()> {
    let rt = if ctx.rng.chance(0.5) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    };
    match (m, sock) {
        (Mechanism::TokioMsgZerocopy, Sock::Tcp(s)) => rt.block_on(zerocopy(ctx, s, true)),
        (Mechanism::TokioMsgZerocopy, Sock::Udp(s)) => rt.block_on(zerocopy(ctx, s, false)),
        (Mechanism::TokioUring, s) => rt.block_on(uring(ctx, s)),
        (Mechanism::TokioFile, Sock::Tcp(s)) => rt.block_on(file(ctx, s)),
        (m, _) => anyhow::bail!("{} cannot send this way", m.name()),
    }
}

/// The timer that cancels this send, when one is drawn.
fn cancel_after(ctx: &mut Ctx<'_>) -> Option<Duration> {
    (ctx.plan.faults.cancel && ctx.rng.chance(0.3))
        .then(|| Duration::from_micros(ctx.rng.range(1, 3000)))
}

/// Drains an async sender with [`Patience`]: the drain's own result, or why the patience ran
/// out. A drain future dropped at the end of a slice leaves every loan where it was.
async fn drain_patiently<B: OwnedBuf, T: AsyncLoaningSender<B>>(
    ctx: &Ctx<'_>,
    tx: &mut T,
) -> Result<std::io::Result<()>, String> {
    let mut patience = Patience::new(ctx.hard_limit());
    loop {
        if let Ok(r) = tokio::time::timeout(SLICE, tx.drain()).await {
            return Ok(r);
        }
        if !patience.wait_on(tx.in_flight())? {
            return Err("the drain did not end with nothing in flight".into());
        }
    }
}

fn zc_config(rng: &mut Rng) -> msg_zerocopy::Config {
    use msg_zerocopy::{Config, CopiedPolicy, Mode};
    Config {
        mode: rng.pick(&[Mode::ZeroCopy, Mode::ZeroCopy, Mode::Copy, Mode::Auto]),
        threshold: rng.pick(&[0, 1, 4096, 16_384]),
        policy: {
            let retry = CopiedPolicy::RetryAfter(rng.range(1, 64));
            rng.pick(&[CopiedPolicy::Keep, CopiedPolicy::Disable, retry])
        },
        segment: None,
        ..Default::default()
    }
}

/// `zcnet::tokio::ZeroCopySender`.
async fn zerocopy<S>(ctx: &mut Ctx<'_>, sock: S, tcp: bool) -> anyhow::Result<()>
where
    S: ExclusiveSocket + IntoStdSocket<Std = S>,
{
    let config = msg_zerocopy::Config {
        segment: ctx.segment(),
        ..zc_config(&mut ctx.rng)
    };
    let window = ctx.rng.range(1, 128) as usize;
    let mut tx: zcnet::tokio::ZeroCopySender<S, Arc<[u8]>> =
        zcnet::tokio::ZeroCopySender::new(sock, config)?;
    while ctx.more() && !(tcp && ctx.failed()) {
        let (buf, i) = ctx.lend(usize::MAX);
        let len = buf.len();
        match cancel_after(ctx) {
            Some(t) => match tokio::time::timeout(t, tx.send(buf)).await {
                Ok(Ok(())) => ctx.took(len),
                Ok(Err(e)) => ctx.refused(e),
                Err(_) => {
                    ctx.report.effect("cancelled", 1);
                    if ctx.ledger.kept_after_cancel(i) {
                        ctx.took(len);
                    } else {
                        ctx.report.effect("cancelled_unsent", 1);
                    }
                }
            },
            None => match tx.send(buf).await {
                Ok(()) => ctx.took(len),
                Err(e) => ctx.refused(e),
            },
        }
        if ctx.rng.chance(0.2) {
            tx.reap()?;
            for r in tx.returned().collect::<Vec<_>>() {
                ctx.back(r);
            }
        }
        // A full window waits while loans come back; a stalled one goes on to the drain,
        // which says what is out.
        let mut patience = Patience::new(ctx.hard_limit());
        while tx.in_flight() > window && patience.wait_on(tx.in_flight()).is_ok() {
            // Cancelled now and then too: nothing may be lost.
            let t = Duration::from_micros(ctx.rng.range(100, 20_000));
            if let Ok(r) = tokio::time::timeout(t, tx.wait_returned()).await
                && let Some(r) = r?
            {
                ctx.back(r);
            }
        }
    }
    match drain_patiently(ctx, &mut tx).await {
        Ok(Ok(())) => {}
        // The buffer a dropped send left part-way failed: it is back, with its error.
        Ok(Err(e)) => ctx.error(format!("flush: {e}")),
        Err(why) => ctx.problem(format!("flush did not end: {why}")),
    }
    for r in tx.returned().collect::<Vec<_>>() {
        ctx.back(r);
    }
    if tcp {
        shut(tx.get_ref());
    }
    let c = tx.counters();
    ctx.report.effect("enobufs_fallbacks", c.enobufs_fallbacks);
    ctx.report.effect("deferred_kicks", c.deferred_kicks);
    ctx.report.effect("loaned_calls", c.loaned_calls);
    Ok(())
}

/// `zcnet::tokio::UringSender` in copy or zero-copy mode.
async fn uring(ctx: &mut Ctx<'_>, sock: Sock) -> anyhow::Result<()> {
    let mode = ctx.rng.pick(&[
        uring::Mode::Copy,
        uring::Mode::ZeroCopy,
        uring::Mode::ZeroCopy,
    ]);
    let entries = ctx.rng.pick(&[8u32, 16, 64, 256]);
    let config = uring::Config {
        mode,
        entries,
        window: ctx.rng.range(1, u64::from(entries)) as usize,
        batch: ctx.rng.range(1, 32) as usize,
        stall_timeout: Duration::from_secs(10),
        setup: uring::RingSetup::default(),
        segment: ctx.segment(),
    };
    let tcp = matches!(sock, Sock::Tcp(_));
    let mut tx: zcnet::tokio::UringSender<OwnedFd, Arc<[u8]>> =
        zcnet::tokio::UringSender::new(OwnedFd::from(sock), config)?;
    while ctx.more() && !(tcp && ctx.failed()) {
        let (buf, i) = ctx.lend(usize::MAX);
        let len = buf.len();
        match cancel_after(ctx) {
            Some(t) => match tokio::time::timeout(t, tx.send(buf)).await {
                Ok(Ok(())) => ctx.took(len),
                Ok(Err(e)) => ctx.refused(e),
                Err(_) => {
                    ctx.report.effect("cancelled", 1);
                    if ctx.ledger.kept_after_cancel(i) {
                        ctx.took(len);
                    } else {
                        ctx.report.effect("cancelled_unsent", 1);
                    }
                }
            },
            None => match tx.send(buf).await {
                Ok(()) => ctx.took(len),
                Err(e) => ctx.refused(e),
            },
        }
        if ctx.rng.chance(0.3) {
            tx.reap()?;
            for r in tx.returned().collect::<Vec<_>>() {
                ctx.back(r);
            }
        }
    }
    match drain_patiently(ctx, &mut tx).await {
        Ok(r) => r?,
        Err(why) => ctx.problem(format!("flush did not end: {why}")),
    }
    for r in tx.returned().collect::<Vec<_>>() {
        ctx.back(r);
    }
    if tcp {
        shut(tx.get_ref());
    }
    let c = tx.counters();
    ctx.report.effect("memlock_fallbacks", c.memlock_fallbacks);
    ctx.report
        .effect("zero_copy_requests", c.zero_copy_requests);
    Ok(())
}

/// `zcnet::tokio::FileSender`: consecutive ranges of the stream's file, and now and then the
/// stream's next bytes from memory (`send_bytes`, with `MSG_MORE` or not); a cancelled send
/// is followed by the next one where the counters say the stream stopped.
async fn file(ctx: &mut Ctx<'_>, sock: TcpStream) -> anyhow::Result<()> {
    use zcnet::file::Mode;
    let size = ctx.plan.budget.min(16 << 20);
    let tmp = TempFile::new(ctx.plan, size)?;
    let mode = ctx
        .rng
        .pick(&[Mode::Auto, Mode::Sendfile, Mode::Splice, Mode::Copy]);
    let config = file_config(&mut ctx.rng, mode);
    let mut tx = zcnet::tokio::FileSender::new(sock, config)?;
    let mut pos = 0u64;
    while pos < size && ctx.more() {
        let len = (ctx.next_len(usize::MAX) as u64).min(size - pos);
        ctx.count(len);
        let before = tx.counters().bytes;
        let from_memory = ctx.rng.chance(0.2);
        let more = ctx.rng.chance(0.5);
        let data = from_memory.then(|| super::check::pattern(ctx.plan.base, pos, len as usize));
        let cancel = cancel_after(ctx);
        let send = async {
            match &data {
                Some(d) => tx.send_bytes(d, more).await.map(|()| len),
                None => tx.send_file(&tmp.file, pos, len).await,
            }
        };
        let outcome = match cancel {
            Some(t) => tokio::time::timeout(t, send).await.ok(),
            None => Some(send.await),
        };
        let counted = tx.counters().bytes - before;
        match outcome {
            Some(Ok(n)) => {
                if n != len || counted != len {
                    ctx.problem(format!(
                        "a {len}-byte send returned {n} and counted {counted} bytes"
                    ));
                }
                pos += counted;
            }
            Some(Err(e)) => {
                pos += counted;
                ctx.error(format!("{e}"));
                break;
            }
            None => {
                // The bytes already sent stay sent and counted: the stream goes on from there.
                ctx.report.effect("cancelled", 1);
                pos += counted;
            }
        }
    }
    shut(tx.get_ref());
    ctx.stream_len = Some(pos);
    Ok(())
}
