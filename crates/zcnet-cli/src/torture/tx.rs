//! The sending side of a round: the synchronous senders (`msg_zerocopy`, `uring` in its three
//! modes, `file` in its four), a plain `write(2)` sender, and the dispatch to the async
//! ([`super::atx`]) and C ([`super::ffi`]) ones.

use std::io::Write as _;
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use zcnet::loan::{ExclusiveSocket, Returned};
use zcnet::{file, msg_zerocopy, uring};

use super::check::Rng;
use super::ctx::{Ctx, MAX_DATAGRAM, Sock, TempFile, drain_patiently, file_config, shut};
use super::round::{End, Mechanism, Patience, Plan, TxReport};

/// Runs the plan's sender on `sock`.
pub fn run(plan: &Plan, sock: Sock, ffi_helper: Option<&Path>) -> TxReport {
    let mut ctx = Ctx::new(plan);
    if plan.faults.memlock.is_some() {
        // Capabilities are per thread: only this thread (and the threads it starts) loses
        // CAP_IPC_LOCK, so the locked-memory limit binds the pages its sends pin.
        match super::net::drop_ipc_lock() {
            Ok(had) => ctx.report.effect("ipc_lock_dropped", u64::from(had)),
            Err(e) => ctx.problem(format!("dropping CAP_IPC_LOCK: {e:#}")),
        }
    }
    let m = match plan.sender {
        End::Plain => {
            plain(&mut ctx, sock);
            return ctx.finish("plain sender");
        }
        End::Mechanism(m) => m,
    };
    let result = match (m, sock) {
        (Mechanism::MsgZerocopy, Sock::Tcp(s)) => msg_zerocopy(&mut ctx, s, true),
        (Mechanism::MsgZerocopy, Sock::Udp(s)) => msg_zerocopy(&mut ctx, s, false),
        (Mechanism::UringCopy, s) => uring(&mut ctx, s, uring::Mode::Copy),
        (Mechanism::UringZc, s) => uring(&mut ctx, s, uring::Mode::ZeroCopy),
        (Mechanism::UringZcFixed, s) => uring_fixed(&mut ctx, s),
        (Mechanism::FileSendfile, Sock::Tcp(s)) => file(&mut ctx, &s, file::Mode::Sendfile),
        (Mechanism::FileSplice, Sock::Tcp(s)) => file(&mut ctx, &s, file::Mode::Splice),
        (Mechanism::FileMmapZc, Sock::Tcp(s)) => file(&mut ctx, &s, file::Mode::MmapZeroCopy),
        (Mechanism::FileCopy, Sock::Tcp(s)) => file(&mut ctx, &s, file::Mode::Copy),
        (Mechanism::TokioMsgZerocopy | Mechanism::TokioUring | Mechanism::TokioFile, s) => {
            super::atx::run(&mut ctx, m, s)
        }
        (Mechanism::FfiZc | Mechanism::FfiUring | Mechanism::FfiFile, s) => match ffi_helper {
            Some(h) => super::ffi::run(&mut ctx, m, s, h),
            None => Err(anyhow::anyhow!("the libzcnet helper is missing")),
        },
        (m, _) => Err(anyhow::anyhow!("{} cannot send this way", m.name())),
    };
    if let Err(e) = result {
        let refused_for_memlock = plan.faults.memlock.is_some()
            && e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<uring::UringError>(),
                    Some(uring::UringError::RingMemory { .. })
                )
            });
        if refused_for_memlock {
            // Without CAP_IPC_LOCK the ring's own memory counts against RLIMIT_MEMLOCK: the
            // set-up is refused (ENOMEM), an error, not a hang or a loss.
            ctx.report.effect("memlock_ring_refused", 1);
        } else {
            ctx.problem(format!("{}: {e:#}", m.name()));
        }
    }
    ctx.finish(&m.name())
}

/// A plain sender: `write(2)` of random sizes (TCP), one `send(2)` per datagram (UDP).
fn plain(ctx: &mut Ctx<'_>, sock: Sock) {
    match sock {
        Sock::Tcp(mut s) => {
            // `write` by hand, not `write_all`: after an error the bytes written before it
            // are part of the stream and must be counted.
            let mut written = 0u64;
            'calls: while ctx.more() {
                let len = ctx.next_len(usize::MAX);
                let data = ctx.make(len);
                let mut done = 0;
                while done < len {
                    match s.write(&data[done..]) {
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            written += done as u64;
                            ctx.error(format!("write: {e}"));
                            break 'calls;
                        }
                    }
                }
                ctx.took(len);
                written += len as u64;
            }
            shut(&s);
            ctx.stream_len = Some(written);
        }
        Sock::Udp(s) => {
            while ctx.more() {
                let (buf, _) = ctx.lend(usize::MAX);
                let r = s.send(&buf);
                let len = buf.len();
                match r {
                    Ok(n) => ctx.ledger.back(buf, n, None),
                    Err(e) => {
                        ctx.error(format!("send: {e}"));
                        ctx.ledger.back(buf, 0, Some(e.to_string()));
                    }
                }
                ctx.took(len);
            }
        }
    }
}

/// Takes what a sender gave back.
fn take(ctx: &mut Ctx<'_>, back: impl Iterator<Item = Returned<Arc<[u8]>>>) {
    for r in back {
        ctx.back(r);
    }
}

/// `msg_zerocopy::ZeroCopySender` with a random configuration and window.
fn msg_zerocopy<S: ExclusiveSocket>(ctx: &mut Ctx<'_>, sock: S, tcp: bool) -> anyhow::Result<()> {
    use msg_zerocopy::{Config, CopiedPolicy, Mode, SendFlags, ZeroCopySender};
    let segment = ctx.segment();
    let rng = &mut ctx.rng;
    let config = Config {
        mode: rng.pick(&[
            Mode::ZeroCopy,
            Mode::ZeroCopy,
            Mode::ZeroCopy,
            Mode::Copy,
            Mode::Auto,
        ]),
        threshold: rng.pick(&[0, 1, 4096, 16_384, 65_536]),
        policy: {
            let retry = CopiedPolicy::RetryAfter(rng.range(1, 64));
            rng.pick(&[CopiedPolicy::Keep, CopiedPolicy::Disable, retry])
        },
        segment,
        ..Default::default()
    };
    let window = rng.range(1, 256) as usize;
    let mut tx: ZeroCopySender<S, Arc<[u8]>> =
        ZeroCopySender::new(sock, config).map_err(|e| e.error)?;
    while ctx.more() && !(tcp && ctx.failed()) {
        let (buf, _) = ctx.lend(usize::MAX);
        let len = buf.len();
        let flags = if ctx.rng.chance(0.1) {
            SendFlags::EOR
        } else {
            SendFlags::empty()
        };
        match tx.send_with(buf, flags) {
            Ok(()) => ctx.took(len),
            Err(e) => ctx.refused(e),
        }
        if tx.in_flight() > window || ctx.rng.chance(0.2) {
            tx.reap()?;
            take(ctx, tx.returned());
        }
        // A full window waits while loans come back; a stalled one goes on to the drain,
        // which says what is out.
        let mut patience = Patience::new(ctx.hard_limit());
        while tx.in_flight() > window && patience.wait_on(tx.in_flight()).is_ok() {
            // A short drain is a wait for the next completions.
            match tx.drain(Duration::from_millis(2)) {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                r => r?,
            }
            take(ctx, tx.returned());
        }
    }
    if tcp {
        shut(tx.get_ref());
    }
    if let Err(e) = drain_patiently(ctx, &mut tx) {
        ctx.problem(format!("draining the MSG_ZEROCOPY sender: {e}"));
    }
    take(ctx, tx.returned());
    let c = tx.counters();
    ctx.report.effect("enobufs_fallbacks", c.enobufs_fallbacks);
    ctx.report.effect("deferred_kicks", c.deferred_kicks);
    ctx.report.effect("loaned_calls", c.loaned_calls);
    ctx.report.effect("copied_completions", c.copied_calls);
    Ok(())
}

/// A random io_uring configuration in `mode`.
fn uring_config(rng: &mut Rng, mode: uring::Mode) -> uring::Config {
    let entries = rng.pick(&[8u32, 16, 64, 256]);
    uring::Config {
        mode,
        entries,
        window: rng.range(1, u64::from(entries)) as usize,
        batch: rng.range(1, 32) as usize,
        stall_timeout: Duration::from_secs(10),
        setup: if rng.chance(0.5) {
            uring::RingSetup::ONE_THREAD
        } else {
            uring::RingSetup::default()
        },
        segment: None,
    }
}

fn uring_effects(ctx: &mut Ctx<'_>, c: uring::Counters) {
    ctx.report.effect("memlock_fallbacks", c.memlock_fallbacks);
    ctx.report.effect("deferred_kicks", c.deferred_kicks);
    ctx.report.effect("window_waits", c.window_waits);
    ctx.report
        .effect("zero_copy_requests", c.zero_copy_requests);
}

/// `uring::UringSender` with owned buffers, in copy or zero-copy mode.
fn uring(ctx: &mut Ctx<'_>, sock: Sock, mode: uring::Mode) -> anyhow::Result<()> {
    let config = uring::Config {
        segment: ctx.segment(),
        ..uring_config(&mut ctx.rng, mode)
    };
    let tcp = matches!(sock, Sock::Tcp(_));
    let mut tx: uring::UringSender<OwnedFd, Arc<[u8]>> =
        uring::UringSender::new(OwnedFd::from(sock), config).map_err(|e| e.error)?;
    while ctx.more() && !(tcp && ctx.failed()) {
        let (buf, _) = ctx.lend(usize::MAX);
        let len = buf.len();
        match tx.send(buf) {
            Ok(()) => ctx.took(len),
            Err(e) => ctx.refused(e),
        }
        if ctx.rng.chance(0.3) {
            tx.reap()?;
            take(ctx, tx.returned());
        }
    }
    if let Err(e) = drain_patiently(ctx, &mut tx) {
        ctx.problem(format!("draining the io_uring sender: {e}"));
    }
    take(ctx, tx.returned());
    if tcp {
        shut(tx.get_ref());
    }
    uring_effects(ctx, tx.counters());
    Ok(())
}

/// `uring::UringSender` in `Mode::ZeroCopyFixed` from a registered pool; under a memlock fault
/// the registration may be refused (with the clear error), and then the pool is sent from
/// without registration, pinning per send.
fn uring_fixed(ctx: &mut Ctx<'_>, sock: Sock) -> anyhow::Result<()> {
    use uring::{Mode, Pool, PoolBuf, UringError, UringSender};
    let tcp = matches!(sock, Sock::Tcp(_));
    let size = if tcp {
        ctx.rng.pick(&[4096usize, 65_536, 262_144, 1 << 20])
    } else {
        MAX_DATAGRAM
    };
    let count = ((16usize << 20) / size).clamp(4, 64);
    let pool = Pool::new(count, size)?;
    let config = uring::Config {
        segment: ctx.segment(),
        ..uring_config(&mut ctx.rng, Mode::ZeroCopyFixed)
    };
    // The sender owns a second descriptor of the socket: a refused registration takes that one
    // down with it, and the fallback sender gets the first.
    let sock = OwnedFd::from(sock);
    let dup = sock.try_clone()?;
    let mut tx: UringSender<OwnedFd, PoolBuf> =
        match UringSender::with_pool(dup, config, &pool).map_err(|e| e.error) {
            Ok(tx) => tx,
            Err(e @ UringError::Memlock { .. }) if ctx.plan.faults.memlock.is_some() => {
                // The documented refusal; go on unregistered.
                ctx.report.effect("memlock_registration_refused", 1);
                let msg = e.to_string();
                if !msg.contains("RLIMIT_MEMLOCK") {
                    ctx.problem(format!(
                        "the memlock refusal does not name the limit: {msg}"
                    ));
                }
                UringSender::with_pool(
                    sock,
                    uring::Config {
                        mode: Mode::ZeroCopy,
                        ..config
                    },
                    &pool,
                )
                .map_err(|e| e.error)?
            }
            Err(e) => return Err(e.into()),
        };
    // Which ledger entry each pool buffer out stands for.
    let mut holder: std::collections::HashMap<usize, usize> = Default::default();
    let back = |ctx: &mut Ctx<'_>,
                holder: &mut std::collections::HashMap<usize, usize>,
                index: usize,
                sent: usize,
                error: Option<String>| {
        match holder.remove(&index) {
            Some(i) => {
                if let Some(e) = &error {
                    ctx.error(e.clone());
                }
                ctx.ledger.back_index(i, sent, error);
            }
            None => ctx.problem(format!("pool buffer {index} came back but was not out")),
        }
    };
    while ctx.more() && !(tcp && ctx.failed()) {
        let mut patience = Patience::new(ctx.hard_limit());
        let buf = loop {
            if let Some(b) = pool.acquire() {
                break Some(b);
            }
            if let Err(why) = patience.wait_on(tx.in_flight()) {
                ctx.problem(format!("no pool buffer came back to acquire: {why}"));
                break None;
            }
            match tx.drain(Duration::from_millis(2)) {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                r => r?,
            }
            for r in tx.returned().collect::<Vec<_>>() {
                back(
                    ctx,
                    &mut holder,
                    r.buf.index(),
                    r.sent,
                    r.error.map(|e| e.to_string()),
                );
            }
        };
        let Some(mut buf) = buf else { break };
        let len = ctx.next_len(size);
        let data = ctx.make(len);
        buf.set_len(len);
        buf.copy_from_slice(&data);
        let i = ctx.ledger.lend_untracked(len);
        if holder.insert(buf.index(), i).is_some() {
            ctx.problem(format!("pool buffer {} handed out twice", buf.index()));
        }
        match tx.send(buf) {
            Ok(()) => ctx.took(len),
            Err(e) => {
                let msg = e.error.to_string();
                back(ctx, &mut holder, e.buf.index(), e.sent, Some(msg));
            }
        }
        if ctx.rng.chance(0.3) {
            tx.reap()?;
            for r in tx.returned().collect::<Vec<_>>() {
                back(
                    ctx,
                    &mut holder,
                    r.buf.index(),
                    r.sent,
                    r.error.map(|e| e.to_string()),
                );
            }
        }
    }
    if let Err(e) = drain_patiently(ctx, &mut tx) {
        ctx.problem(format!("draining the io_uring sender: {e}"));
    }
    for r in tx.returned().collect::<Vec<_>>() {
        back(
            ctx,
            &mut holder,
            r.buf.index(),
            r.sent,
            r.error.map(|e| e.to_string()),
        );
    }
    if tcp {
        shut(tx.get_ref());
    }
    uring_effects(ctx, tx.counters());
    drop(tx);
    if pool.available() != pool.count() && holder.is_empty() {
        ctx.problem(format!(
            "{} of {} pool buffers are not back in the pool",
            pool.count() - pool.available(),
            pool.count()
        ));
    }
    Ok(())
}

/// `file::FileSender`: consecutive ranges of a temporary file holding the stream.
fn file(ctx: &mut Ctx<'_>, sock: &TcpStream, mode: file::Mode) -> anyhow::Result<()> {
    let size = ctx.plan.budget.min(16 << 20);
    let tmp = TempFile::new(ctx.plan, size)?;
    let config = file_config(&mut ctx.rng, mode);
    let mut tx = file::FileSender::new(sock, config)?;
    let mut pos = 0u64;
    while pos < size && ctx.more() {
        let len = (ctx.next_len(usize::MAX) as u64).min(size - pos);
        ctx.count(len);
        match tx.send_file(&tmp.file, pos, len) {
            Ok(n) => pos += n,
            Err(e) => {
                pos += e.sent();
                ctx.error(format!(
                    "{e}: {}",
                    std::error::Error::source(&e).map_or(String::new(), ToString::to_string)
                ));
                break;
            }
        }
    }
    shut(sock);
    let c = tx.counters();
    if c.bytes != pos {
        ctx.problem(format!(
            "the file sender counts {} bytes, its calls returned {pos}",
            c.bytes
        ));
    }
    if let Some(z) = c.mmap_window {
        ctx.report.effect("enobufs_fallbacks", z.enobufs_fallbacks);
    }
    ctx.stream_len = Some(pos);
    Ok(())
}
