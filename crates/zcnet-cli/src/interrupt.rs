//! SIGINT, SIGTERM and SIGHUP for the commands that write files and start no other program
//! (`recv`, `capture`, `report`; issue 35 item 14), and for `torture`, which ends its run after
//! the round in progress and removes its labs.
//!
//! Killed by one of them with the default action, a command left its temporary output behind
//! (`recv -o new` stopped while waiting for its peer) or a capture without its pcap header. So
//! [`watch`] blocks these signals and a thread of its own waits for them with `sigwait(2)`; the
//! cleanup runs in that thread, not in a signal handler, so it may take locks and call anything.
//! What a signal then does:
//! - by default, the temporaries of [`crate::output`] are removed and the process dies of the
//!   same signal (a shell shows 128 + N), as curl, nc and cp end: a caller's script sees the
//!   interruption, and an existing output is as the signal found it;
//! - inside a [`graceful`] section (a capture), the first signal only asks the work to stop: it
//!   ends normally, its output whole, exit 0, as tcpdump ends on SIGINT and SIGTERM. A second
//!   signal ends the process as by default.
//!
//! The signal mask is inherited by the threads a thread starts, so [`watch`] must run before the
//! command starts any; and by the programs it starts (`std::process::Command` passes it on),
//! which would then not stop on SIGINT: a command that starts programs it stops by a signal must
//! not call it (a bench's tcpdump, stopped by SIGINT, hung; again in issue 48, when the bench
//! took the signals over to remove its labs: netlab's reaper does that now, from outside).
//! `torture` starts only programs that end by themselves or are ended by their id with SIGKILL.
//! A signal the process started with ignored (`nohup`, `&` in a non-interactive shell) stays
//! ignored: a blocked signal is kept pending even when ignored, so it is left out.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, Once};

use nix::sys::signal::{SigSet, Signal};

/// The signals that end a command.
const WATCHED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Whether a [`graceful`] section is running.
static GRACEFUL: AtomicBool = AtomicBool::new(false);
/// What a graceful section says when the first signal asks it to stop.
static NOTICE: Mutex<Option<&'static str>> = Mutex::new(None);
/// What runs before a signal ends the process (besides removing the temporaries).
static ON_DEATH: Mutex<Vec<fn()>> = Mutex::new(Vec::new());
/// What runs when the first signal asks a graceful section to stop (`zcnet relay`'s loops are
/// woken by it instead of looking at [`stop_requested`] on a clock).
#[allow(clippy::type_complexity)]
static ON_STOP: Mutex<Vec<Box<dyn Fn() + Send>>> = Mutex::new(Vec::new());
/// The signal that asked a graceful section to stop, 0 while none did.
static STOP: AtomicI32 = AtomicI32::new(0);

/// Takes SIGINT, SIGTERM and SIGHUP over for the rest of the process (see the module docs); only
/// the first call does anything. Call it before the command starts a thread.
///
/// # Errors
/// `pthread_sigmask` or the thread could not be set up: the signals keep their default action.
pub fn watch() -> std::io::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = start());
    result
}

fn start() -> std::io::Result<()> {
    let ignored = ignored_at_start();
    let mut set = SigSet::empty();
    for sig in WATCHED {
        if !ignored.contains(&sig) {
            set.add(sig);
        }
    }
    set.thread_block()?;
    let waiter = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || wait_for(set));
    if let Err(e) = waiter {
        // Without the thread nobody would take them: back to the default action.
        let _ = set.thread_unblock();
        return Err(e);
    }
    Ok(())
}

fn wait_for(set: SigSet) {
    loop {
        // sigwait fails only for a set naming no valid signal, which this one is not.
        let Ok(sig) = set.wait() else {
            continue;
        };
        if GRACEFUL.load(Ordering::SeqCst)
            && STOP
                .compare_exchange(0, sig as i32, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            if let Some(notice) = *NOTICE.lock().unwrap_or_else(|p| p.into_inner()) {
                eprintln!("{}: {notice}", sig.as_str());
            }
            for f in ON_STOP.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                f();
            }
            continue;
        }
        crate::output::remove_temporaries();
        for f in ON_DEATH.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            f();
        }
        die_of(sig);
    }
}

/// Ends the process by `sig` itself, so that its parent sees what ended it.
fn die_of(sig: Signal) -> ! {
    // Raised at this thread, where it is blocked, it waits; unblocked, its default action ends
    // the whole process. The exit below only runs if something changed that action.
    let _ = nix::sys::signal::raise(sig);
    let mut only = SigSet::empty();
    only.add(sig);
    let _ = only.thread_unblock();
    std::process::exit(128 + sig as i32)
}

/// The watched signals this process was started with ignored.
fn ignored_at_start() -> Vec<Signal> {
    let ignored = ignored();
    WATCHED
        .into_iter()
        .filter(|s| ignored.contains(s))
        .collect()
}

/// The signals this process ignores, which a program it starts inherits ignored: `SigIgn` of
/// /proc/self/status (reading a disposition any other way takes `sigaction`, an unsafe call).
/// Nothing where /proc cannot be read.
pub fn ignored() -> Vec<Signal> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0);
    Signal::iterator()
        .filter(|&s| mask & (1 << (s as u32 - 1)) != 0)
        .collect()
}

/// A section in which the first signal asks the work to stop ([`stop_requested`]) instead of
/// ending the process; see the module docs. Ends when dropped.
#[derive(Debug)]
pub struct Graceful(());

/// Starts a [`Graceful`] section (after [`watch`]; without it signals keep their default action).
pub fn graceful() -> Graceful {
    GRACEFUL.store(true, Ordering::SeqCst);
    Graceful(())
}

/// A [`graceful`] section that says `notice` on stderr when the first signal asks it to stop
/// (the work may take a while to reach a point where it can stop).
pub fn graceful_saying(notice: &'static str) -> Graceful {
    *NOTICE.lock().unwrap_or_else(|p| p.into_inner()) = Some(notice);
    graceful()
}

/// Runs `f` before a signal ends the process, after the temporaries are removed: a command's
/// own cleanup of what a signal would leave (`torture`'s lab namespaces).
pub fn on_death(f: fn()) {
    ON_DEATH.lock().unwrap_or_else(|p| p.into_inner()).push(f);
}

/// Runs `f` (in the signal thread) when the first signal asks a [`Graceful`] section to stop.
pub fn on_stop(f: impl Fn() + Send + 'static) {
    ON_STOP
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Box::new(f));
}

/// The signal that asked a [`Graceful`] section to stop, if one did.
pub fn stop_requested() -> Option<Signal> {
    Signal::try_from(STOP.load(Ordering::SeqCst)).ok()
}

impl Drop for Graceful {
    fn drop(&mut self) {
        GRACEFUL.store(false, Ordering::SeqCst);
        *NOTICE.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The status a command ends with when its reader went away (`zcnet probe | head -1`): what a
/// death by `SIGPIPE` gives (128 + 13), as C tools end.
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Whether a panic payload is `println!`'s "failed printing to stdout: Broken pipe" (Rust
/// ignores `SIGPIPE`, so a closed pipe panics the printing thread).
pub fn is_broken_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    msg.contains("failed printing to stdout") && msg.contains("Broken pipe")
}
