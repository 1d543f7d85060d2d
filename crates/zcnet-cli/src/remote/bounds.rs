//! What frames a far run: its bounds (the run's time plus [`GRACE`], the server's byte limit,
//! the session's [`Signals`]) and the figures it reports ([`Far`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use netlab::pattern::Verifier;

use crate::measure::{Far, Run, Work};

/// Time a run may take beyond its seconds (connection set-up, draining, a slow peer).
pub const GRACE: Duration = Duration::from_secs(10);

/// How the session tells a running role what happens on the control connection.
#[derive(Debug, Default)]
pub struct Signals {
    /// The client said `finish`: its side is over (datagram receivers stop once quiet).
    pub finish: AtomicBool,
    /// The control connection broke: stop now.
    pub abort: AtomicBool,
}

/// What bounds a run: its end, the byte limit, the session's signals.
pub(super) struct Bounds<'a> {
    /// The run's seconds.
    pub(super) seconds: f64,
    /// Its end, grace included.
    pub(super) deadline: Instant,
    /// The server's byte limit.
    pub(super) max_bytes: u64,
    /// The session's signals.
    pub(super) signals: &'a Signals,
}

impl Bounds<'_> {
    /// Fails once the run is past its time or bytes, or the session broke.
    pub(super) fn check(&self, bytes: u64) -> anyhow::Result<()> {
        if bytes > self.max_bytes {
            bail!(
                "the run passed this server's byte limit ({} bytes, its --max-bytes)",
                self.max_bytes
            );
        }
        if Instant::now() > self.deadline {
            bail!(
                "the run passed its time ({} s and {} s of grace)",
                self.seconds,
                GRACE.as_secs()
            );
        }
        if self.signals.abort.load(Ordering::Acquire) {
            bail!("the control connection closed");
        }
        Ok(())
    }
}

/// The figures of a measured run.
pub(super) fn far(run: &Run, messages: u64, verifier: Option<&Verifier>) -> Far {
    Far {
        bytes: run.bytes,
        messages,
        verified: verifier.map(Verifier::ok),
        first_bad: verifier.and_then(Verifier::first_bad),
        seconds: run.seconds,
        cpu_user_s: run.cpu_user_s,
        cpu_sys_s: run.cpu_sys_s,
        cpu_us_per_mb: run.cpu_us_per_mb,
        ctx_switches: run.ctx_switches,
        machine_cpu_us_per_mb: run.machine_cpu_us_per_mb,
    }
}

/// The work of a far run: its bytes.
pub(super) fn work(bytes: u64) -> Work {
    Work {
        bytes,
        ..Work::default()
    }
}
