//! libzcnet's rounds: its C functions driven as a C caller drives them.
//!
//! `zcnet-ffi` builds only a `cdylib` and a `staticlib` (an `rlib` would be `libzcnet.rlib`, the
//! file name of the `zcnet` crate's own), so nothing can depend on it as a Rust crate. Its own
//! tests compile `crates/zcnet-ffi/src/lib.rs` into themselves; the torture harness does the
//! same in a helper program of this package, `zcnet-torture-ffi` (`src/bin/`), which calls the
//! `extern "C"` functions with raw pointers and C types, keeps each loaned buffer alive until
//! `zcnet_*_reap` hands its `user_data` back, and prints what happened to every buffer. The
//! helper is a separate program because this crate forbids `unsafe` code; it also gets the
//! socket the C way, as an inherited descriptor number. Rounds check its stream and datagrams
//! like any other sender's.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::ctx::{Ctx, Sock, TempFile};
use super::round::Mechanism;

/// The helper's name, beside the `zcnet` binary.
pub const HELPER: &str = "zcnet-torture-ffi";

/// Where the helper is, or why it is not there.
pub fn helper() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let path = exe.with_file_name(HELPER);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing (it is built with the zcnet binary: cargo build -p zcnet-cli)",
            path.display()
        ))
    }
}

/// A descriptor of the same file that a child inherits (no `FD_CLOEXEC`).
fn inheritable(fd: &impl AsFd) -> anyhow::Result<OwnedFd> {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    let dup = fd.as_fd().try_clone_to_owned()?;
    fcntl(&dup, F_SETFD(FdFlag::empty())).context("fcntl(F_SETFD)")?;
    Ok(dup)
}

/// What the helper prints: one JSON object.
#[derive(serde::Deserialize)]
struct Report {
    /// Each buffer in call order: length, bytes sent, and the errno it came back with (0
    /// none); `None` for one that never came back.
    buffers: Vec<(usize, Option<(usize, i32)>)>,
    /// Bytes `zcnet_send_file` sent (file rounds).
    file_sent: u64,
    errors: Vec<String>,
    problems: Vec<String>,
    effects: std::collections::BTreeMap<String, u64>,
}

/// Runs libzcnet's `m` in the helper on `sock`.
pub fn run(ctx: &mut Ctx<'_>, m: Mechanism, sock: Sock, helper: &Path) -> anyhow::Result<()> {
    let plan = ctx.plan;
    let api = match m {
        Mechanism::FfiZc => "zc",
        Mechanism::FfiUring => "uring",
        _ => "file",
    };
    let mode = match m {
        Mechanism::FfiFile => ctx
            .rng
            .pick(&["auto", "sendfile", "splice", "mmap-zc", "copy"]),
        _ => ctx.rng.pick(&["zc", "zc", "copy", "auto"]),
    };
    let tcp = matches!(sock, Sock::Tcp(_));
    let sock_fd = inheritable(&sock)?;
    // An mmap-zc file goes in one zcnet_send_file call (a second on the socket is refused),
    // which the round's time does not bound: 16 MiB to a slow receiver (peek behind an 8 KiB
    // SO_SNDBUF, 0.6 MB/s under CI's load) outlasted the round's drain (15 s then). Smaller there.
    let cap = if mode == "mmap-zc" { 2 << 20 } else { 16 << 20 };
    let tmp = match m {
        Mechanism::FfiFile => Some(TempFile::new(plan, plan.budget.min(cap))?),
        _ => None,
    };
    let file_fd = tmp.as_ref().map(|t| inheritable(&t.file)).transpose()?;
    let millis = plan
        .deadline
        .saturating_duration_since(Instant::now())
        .as_millis();
    let mut cmd = Command::new(helper);
    cmd.arg(api)
        .arg(format!("fd={}", sock_fd.as_raw_fd()))
        .arg(format!("mode={mode}"))
        .arg(format!("udp={}", u8::from(!tcp)))
        .arg(format!("seed={}", ctx.rng.fork()))
        .arg(format!("base={}", plan.base))
        .arg(format!("stream={}", plan.stream))
        .arg(format!("budget={}", plan.budget))
        .arg(format!("millis={millis}"))
        .arg(format!("window={}", ctx.rng.range(1, 256)));
    if let Some(limit) = plan.faults.memlock {
        cmd.arg(format!("memlock={limit}"));
    }
    if let (Some(f), Some(t)) = (&file_fd, &tmp) {
        cmd.arg(format!("file_fd={}", f.as_raw_fd()))
            .arg(format!("file_len={}", t.file.metadata()?.len()));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", helper.display()))?;
    drop((sock_fd, file_fd));
    // Its pipes are read while it runs: a report over the pipe's 64 KiB blocked the helper's
    // write while this waited for it to end (round 61 of seed 3281210276281194).
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            out
        })
    };
    let stdout_reader = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr_reader = drain(child.stderr.take().map(|p| Box::new(p) as _));
    // Our own child, ended by its id if it outlives the round. It gives up draining at the
    // same hard limit, and then still reaps and reports: some seconds more.
    let limit = ctx.hard_limit() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if Instant::now() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.wait();
    let out_stdout = stdout_reader.join().unwrap_or_default();
    let out_stderr = stderr_reader.join().unwrap_or_default();
    drop(sock);
    drop(tmp);
    let stderr = String::from_utf8_lossy(&out_stderr);
    let Some(status) = status else {
        anyhow::bail!("the libzcnet helper did not end by the round's end: {stderr}");
    };
    let stdout = String::from_utf8_lossy(&out_stdout);
    let report: Report = serde_json::from_str(stdout.trim()).with_context(|| {
        format!("the libzcnet helper ({status}) printed no report: {stdout} {stderr}")
    })?;
    for (len, fate) in report.buffers {
        let i = ctx.ledger.lend_untracked(len);
        if let Some((sent, errno)) = fate {
            let error = (errno != 0).then(|| std::io::Error::from_raw_os_error(errno).to_string());
            if let Some(e) = &error {
                ctx.error(e.clone());
            }
            ctx.ledger.back_index(i, sent, error);
        }
        ctx.took(len);
    }
    for e in report.errors {
        ctx.error(e);
    }
    for p in report.problems {
        ctx.problem(format!("libzcnet: {p}"));
    }
    for (k, v) in report.effects {
        let k: &'static str = match k.as_str() {
            "enobufs_fallbacks" => "enobufs_fallbacks",
            "memlock_fallbacks" => "memlock_fallbacks",
            "ipc_lock_dropped" => "ipc_lock_dropped",
            "memlock_ring_refused" => "memlock_ring_refused",
            "mmap_zc_busy" => "mmap_zc_busy",
            _ => "ffi_other",
        };
        ctx.report.effect(k, v);
    }
    if m == Mechanism::FfiFile {
        ctx.stream_len = Some(report.file_sent);
    }
    if !status.success() {
        anyhow::bail!("the libzcnet helper failed ({status}): {stderr}");
    }
    Ok(())
}
