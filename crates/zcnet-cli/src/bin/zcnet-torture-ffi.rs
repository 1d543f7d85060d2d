//! `zcnet-torture-ffi`: the C caller of `zcnet torture`'s libzcnet rounds (not meant to be run by
//! hand). libzcnet (`crates/zcnet-ffi`) builds no Rust library, so its source is compiled in here,
//! as its own tests do, and its `extern "C"` functions are called as a C program calls them:
//! raw pointers, `user_data` cookies, an inherited descriptor number, buffers kept alive until
//! `zcnet_*_reap` hands their cookie back. It prints one JSON object: each buffer's length and
//! fate, the errors met, and any broken promise (a cookie back twice, a buffer never back).
//!
//! Arguments: `zc|uring|file key=value...` (see `Args`).

// The library's source calls the zcnet crate `zc`.
extern crate zcnet as zc;

#[allow(dead_code)]
#[path = "../../../zcnet-ffi/src/lib.rs"]
mod libzcnet;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, c_int};
use std::time::{Duration, Instant};

use libzcnet::*;
use zcnet_cli::torture::check::{HEADER, Rng, datagram, pattern};
use zcnet_cli::torture::round::{DRAIN, Patience, SLICE};

/// The helper's arguments, as `key=value` after the API's name.
#[derive(Debug, Default)]
struct Args {
    api: String,
    fd: c_int,
    mode: String,
    udp: bool,
    seed: u64,
    base: u64,
    stream: u32,
    budget: u64,
    millis: u64,
    window: usize,
    memlock: Option<u64>,
    file_fd: c_int,
    file_len: u64,
}

fn parse() -> Result<Args, String> {
    let mut argv = std::env::args().skip(1);
    let mut a = Args {
        api: argv.next().ok_or("no API named (zc, uring, file)")?,
        file_fd: -1,
        ..Args::default()
    };
    for kv in argv {
        let (k, v) = kv.split_once('=').ok_or(format!("{kv}: not key=value"))?;
        let n = || v.parse::<u64>().map_err(|e| format!("{k}={v}: {e}"));
        match k {
            "fd" => a.fd = n()? as c_int,
            "mode" => a.mode = v.to_owned(),
            "udp" => a.udp = n()? != 0,
            "seed" => a.seed = n()?,
            "base" => a.base = n()?,
            "stream" => a.stream = n()? as u32,
            "budget" => a.budget = n()?,
            "millis" => a.millis = n()?,
            "window" => a.window = n()?.max(1) as usize,
            "memlock" => a.memlock = Some(n()?),
            "file_fd" => a.file_fd = n()? as c_int,
            "file_len" => a.file_len = n()?,
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    Ok(a)
}

/// What happened, printed as JSON at the end.
#[derive(Default, serde::Serialize)]
struct Report {
    buffers: Vec<(usize, Option<(usize, i32)>)>,
    file_sent: u64,
    errors: Vec<String>,
    problems: Vec<String>,
    effects: BTreeMap<String, u64>,
}

fn last_error() -> String {
    // SAFETY: zcnet_last_error returns a NUL-terminated string valid until this thread's next
    // failing call; it is copied at once.
    unsafe { CStr::from_ptr(zcnet_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn mode(name: &str) -> ZcnetMode {
    match name {
        "copy" => ZcnetMode::Copy,
        "auto" => ZcnetMode::Auto,
        _ => ZcnetMode::ZeroCopy,
    }
}

/// A sender's functions, MSG_ZEROCOPY's or io_uring's: the same contract (zcnet.h).
struct Api<S> {
    send: unsafe extern "C" fn(*mut S, *const u8, usize, u64) -> c_int,
    reap: unsafe extern "C" fn(*mut S, *mut ZcnetCompletion, usize, *mut usize) -> c_int,
    drain: unsafe extern "C" fn(*mut S, u32) -> c_int,
    free: unsafe extern "C" fn(*mut S),
    /// Puts the sender's fallback counters into the report.
    ///
    /// # Safety
    /// The sender is live.
    effects: unsafe fn(*mut S, &mut Report),
}

/// Takes every completion ready: each cookie must be one loaned and not back yet.
///
/// # Safety
/// `s` is a live sender of `api`.
unsafe fn reap<S>(s: *mut S, api: &Api<S>, loaned: &mut HashMap<u64, Vec<u8>>, r: &mut Report) {
    let mut done = [ZcnetCompletion::default(); 64];
    loop {
        let mut n = 0usize;
        // SAFETY: `s` is live (the caller's contract); `done` has room for 64 completions.
        let rc = unsafe { (api.reap)(s, done.as_mut_ptr(), done.len(), &mut n) };
        if rc < 0 {
            r.problems.push(format!("reap: {rc}: {}", last_error()));
            return;
        }
        for c in &done[..n] {
            match loaned.remove(&c.user_data) {
                Some(_) => {
                    if let Some(b) = r.buffers.get_mut(c.user_data as usize) {
                        b.1 = Some((c.sent, c.error));
                    }
                    if c.error != 0 && r.errors.len() < 8 {
                        r.errors
                            .push(std::io::Error::from_raw_os_error(c.error).to_string());
                    }
                }
                None => r.problems.push(format!(
                    "user_data {} came back but was not loaned (twice, or never)",
                    c.user_data
                )),
            }
        }
        if n < done.len() {
            return;
        }
    }
}

/// Loans buffers to a sender of `api` until the budget or the time is spent.
///
/// # Safety
/// `s` is a live sender of `api` on `a.fd`; it is freed here.
unsafe fn lend<S>(s: *mut S, api: Api<S>, a: &Args, r: &mut Report) {
    let mut rng = Rng::new(a.seed);
    let start = Instant::now();
    let deadline = start + Duration::from_millis(a.millis);
    let hard = deadline + DRAIN;
    // Each buffer lives here, at the same address, until its cookie comes back.
    let mut loaned: HashMap<u64, Vec<u8>> = HashMap::new();
    let (mut made, mut off) = (0u64, 0u64);
    while made < a.budget && Instant::now() < deadline {
        let len = if a.udp {
            rng.size(HEADER, 65_507)
        } else {
            rng.size(1, 1 << 20)
        };
        let id = r.buffers.len() as u64;
        let data = if a.udp {
            datagram(a.stream, a.base, id, len)
        } else {
            pattern(a.base, off, len)
        };
        r.buffers.push((len, None));
        made += len as u64;
        // SAFETY: `s` is live; `data` stays in `loaned`, unmodified, until reap returns `id`
        // (zcnet.h's loan contract); on an error nothing of it was loaned.
        let rc = unsafe { (api.send)(s, data.as_ptr(), data.len(), id) };
        if rc == 0 {
            loaned.insert(id, data);
            off += len as u64;
        } else {
            r.errors.push(format!("send: {rc}: {}", last_error()));
            // Over TCP part of it may have gone by copy before the error (the C call does
            // not say how much): counted whole, an upper bound for the stream.
            r.buffers[id as usize].1 = Some((if a.udp { 0 } else { len }, -rc));
            if !a.udp {
                break;
            }
        }
        if loaned.len() > a.window || rng.chance(0.2) {
            // SAFETY: `s` is live.
            unsafe { reap(s, &api, &mut loaned, r) };
        }
        // A full window waits while loans come back; a stalled one goes on to the drain,
        // which says what is out.
        let mut patience = Patience::new(hard);
        while loaned.len() > a.window && patience.wait_on(loaned.len()).is_ok() {
            // SAFETY: `s` is live.
            unsafe { (api.drain)(s, 2) };
            // SAFETY: `s` is live.
            unsafe { reap(s, &api, &mut loaned, r) };
        }
    }
    // Drained while the loans keep coming back: a slow link is not a hang.
    let mut patience = Patience::new(hard);
    loop {
        // SAFETY: `s` is live.
        let rc = unsafe { (api.drain)(s, SLICE.as_millis() as u32) };
        let why = (rc < 0).then(last_error);
        // SAFETY: `s` is live.
        unsafe { reap(s, &api, &mut loaned, r) };
        let Some(why) = why else { break };
        if rc != -libc::ETIMEDOUT {
            r.problems.push(format!("drain: {rc}: {why}"));
            break;
        }
        match patience.wait_on(loaned.len()) {
            Ok(true) => {}
            // Every cookie came back, yet the library says it still holds buffers.
            Ok(false) => {
                r.problems
                    .push(format!("drain: {rc}: {why}, though every buffer came back"));
                break;
            }
            Err(gave_up) => {
                r.problems.push(format!("drain: {rc}: {why}: {gave_up}"));
                break;
            }
        }
    }
    if !a.udp {
        // SAFETY: shutdown(2) on the inherited descriptor; no memory is passed.
        unsafe { libc::shutdown(a.fd, libc::SHUT_WR) };
    }
    // SAFETY: `s` is live.
    unsafe { (api.effects)(s, r) };
    // SAFETY: `s` is live and not used afterwards.
    unsafe { (api.free)(s) };
    if !loaned.is_empty() {
        r.problems
            .push(format!("{} buffers never came back", loaned.len()));
        // The kernel may still read them: never freed.
        std::mem::forget(loaned);
    }
}

fn zc(a: &Args, r: &mut Report) {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is writable; the descriptor stays open (inherited) until this process ends,
    // and nothing else sends on it, reads its error queue or changes SO_ZEROCOPY.
    let rc = unsafe { zcnet_zc_sender_new(a.fd, mode(&a.mode).into(), &mut s) };
    if rc < 0 {
        r.problems
            .push(format!("zcnet_zc_sender_new: {rc}: {}", last_error()));
        return;
    }
    let api = Api {
        send: zcnet_zc_send,
        reap: zcnet_zc_reap,
        drain: zcnet_zc_drain,
        free: zcnet_zc_sender_free,
        effects: zc_effects,
    };
    // SAFETY: `s` is a live sender of `api` on `a.fd`.
    unsafe { lend(s, api, a, r) };
}

/// # Safety
/// `s` is a live sender.
unsafe fn zc_effects(s: *mut ZcnetZcSender, r: &mut Report) {
    let mut c = ZcnetZcCounters::default();
    // SAFETY: `s` is live (the caller's contract); `c` is writable.
    if unsafe { zcnet_zc_counters(s, &mut c) } == 0 {
        r.effects
            .insert("enobufs_fallbacks".into(), c.enobufs_fallbacks);
    }
}

/// # Safety
/// `s` is a live sender.
unsafe fn uring_effects(s: *mut ZcnetUringSender, r: &mut Report) {
    let mut c = ZcnetUringCounters::default();
    // SAFETY: `s` is live (the caller's contract); `c` is writable.
    if unsafe { zcnet_uring_counters(s, &mut c) } == 0 {
        r.effects
            .insert("memlock_fallbacks".into(), c.memlock_fallbacks);
    }
}

fn uring(a: &Args, r: &mut Report) {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is writable; the descriptor stays open until this process ends.
    let rc = unsafe { zcnet_uring_sender_new(a.fd, mode(&a.mode).into(), &mut s) };
    let enomem = rc == -libc::ENOMEM;
    if enomem && a.memlock.is_some() {
        // The ring's memory counts against the lowered RLIMIT_MEMLOCK: refused, as expected.
        r.effects.insert("memlock_ring_refused".into(), 1);
        return;
    }
    if rc < 0 {
        r.problems
            .push(format!("zcnet_uring_sender_new: {rc}: {}", last_error()));
        return;
    }
    let api = Api {
        send: zcnet_uring_send,
        reap: zcnet_uring_reap,
        drain: zcnet_uring_drain,
        free: zcnet_uring_sender_free,
        effects: uring_effects,
    };
    // SAFETY: `s` is a live sender of `api` on `a.fd`.
    unsafe { lend(s, api, a, r) };
}

/// Consecutive ranges of the file with `zcnet_send_file`; the mmap window once per socket
/// (zcnet.h), then a second call that must either be refused (`-EBUSY`, nothing sent) or send.
fn file(a: &Args, r: &mut Report) {
    let mut rng = Rng::new(a.seed);
    let fm = match a.mode.as_str() {
        "sendfile" => ZcnetFileMode::Sendfile,
        "splice" => ZcnetFileMode::Splice,
        "mmap-zc" => ZcnetFileMode::MmapZerocopy,
        "copy" => ZcnetFileMode::Copy,
        _ => ZcnetFileMode::Auto,
    };
    let deadline = Instant::now() + Duration::from_millis(a.millis);
    let mut pos = 0u64;
    let mut calls = 0;
    while pos < a.file_len && Instant::now() < deadline {
        let len = if fm == ZcnetFileMode::MmapZerocopy && calls == 0 {
            a.file_len
        } else {
            (rng.size(1, 1 << 20) as u64).min(a.file_len - pos)
        };
        let mut res = ZcnetFileResult::default();
        // SAFETY: `res` is writable; both descriptors are open (inherited).
        let rc = unsafe { zcnet_send_file(a.fd, a.file_fd, pos, len, fm.into(), &mut res) };
        calls += 1;
        pos += res.sent;
        if rc == -libc::EBUSY && fm == ZcnetFileMode::MmapZerocopy && calls > 1 {
            // The documented refusal of a second mmap-zc send on one socket.
            if res.sent != 0 {
                r.problems
                    .push(format!("-EBUSY after {} bytes were sent", res.sent));
            }
            *r.effects.entry("mmap_zc_busy".into()).or_default() += 1;
            break;
        }
        if rc < 0 {
            r.errors
                .push(format!("zcnet_send_file: {rc}: {}", last_error()));
            break;
        }
        if res.sent != len {
            r.problems.push(format!(
                "zcnet_send_file returned 0 after {} of {len} bytes",
                res.sent
            ));
            break;
        }
    }
    r.file_sent = pos;
    // SAFETY: shutdown(2) on the inherited descriptor; no memory is passed.
    unsafe { libc::shutdown(a.fd, libc::SHUT_WR) };
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zcnet-torture-ffi: {e}");
            std::process::exit(2);
        }
    };
    let mut r = Report::default();
    if let Some(limit) = a.memlock {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        match getrlimit(Resource::RLIMIT_MEMLOCK)
            .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_MEMLOCK, limit.min(hard), hard))
        {
            Ok(()) => {}
            Err(e) => r.problems.push(format!("setrlimit(RLIMIT_MEMLOCK): {e}")),
        }
        // This process has one thread: its effective set is the process's.
        let had = caps::has_cap(
            None,
            caps::CapSet::Effective,
            caps::Capability::CAP_IPC_LOCK,
        )
        .unwrap_or(false);
        if had {
            match caps::drop(
                None,
                caps::CapSet::Effective,
                caps::Capability::CAP_IPC_LOCK,
            ) {
                Ok(()) => {
                    r.effects.insert("ipc_lock_dropped".into(), 1);
                }
                Err(e) => r.problems.push(format!("dropping CAP_IPC_LOCK: {e}")),
            }
        }
    }
    match a.api.as_str() {
        "zc" => zc(&a, &mut r),
        "uring" => uring(&a, &mut r),
        "file" => file(&a, &mut r),
        other => r.problems.push(format!("unknown API {other}")),
    }
    match serde_json::to_string(&r) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("report: {e}");
            std::process::exit(1);
        }
    }
}
