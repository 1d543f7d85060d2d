//! The data streams of a test: each a thread that sends blocks or reads them, counting bytes;
//! ended by the test's stop (its socket shut down) or, sending, by the byte budget (`-n`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use super::proto;

/// How long a stopped test's receiver waits for bytes still on their way.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// One stream of a test.
pub struct Stream {
    pub socket: Arc<TcpStream>,
    /// Bytes sent or received on it so far.
    pub bytes: Arc<AtomicU64>,
    worker: Option<JoinHandle<io::Result<()>>>,
}

/// What the senders of a test share: the bytes left to send (`-n`: `None`, no budget) and the
/// stop.
pub struct Shared {
    pub left: Option<AtomicU64>,
    pub stop: AtomicBool,
}

impl Shared {
    pub fn new(budget: u64) -> Arc<Shared> {
        Arc::new(Shared {
            left: (budget > 0).then(|| AtomicU64::new(budget)),
            stop: AtomicBool::new(false),
        })
    }

    /// Takes up to `want` bytes of the budget: what may be sent now (0: none left, or stopped).
    fn take(&self, want: usize) -> usize {
        if self.stop.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(left) = &self.left else {
            return want;
        };
        let mut got = 0;
        let _ = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
            got = usize::try_from(l).unwrap_or(usize::MAX).min(want);
            (got > 0).then(|| l - got as u64)
        });
        got
    }
}

/// A test's streams started on `sockets`: senders or receivers of `len`-byte blocks.
pub fn start(
    sockets: Vec<TcpStream>,
    sending: bool,
    len: usize,
    shared: &Arc<Shared>,
) -> Vec<Stream> {
    sockets
        .into_iter()
        .map(|s| {
            if sending {
                Stream::sender(s, len, shared.clone())
            } else {
                Stream::receiver(s, len, shared.clone())
            }
        })
        .collect()
}

impl Stream {
    /// Sends blocks of `len` bytes on `socket` until the budget is spent or the test stops.
    pub fn sender(socket: TcpStream, len: usize, shared: Arc<Shared>) -> Stream {
        Stream::start(socket, move |s, bytes| {
            // iperf3's payload is whatever its buffer holds; ours a repeating pattern.
            let block: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut w = &*s;
            loop {
                let n = shared.take(len);
                if n == 0 {
                    return Ok(());
                }
                match w.write_all(&block[..n]) {
                    Ok(()) => {
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    // The test's end shut the socket down.
                    Err(_) if shared.stop.load(Ordering::Relaxed) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        })
    }

    /// Reads `socket` to its end, or, once the test stopped, to the first [`QUIET`] without a
    /// byte (what the peer sent before its end of the test is read; a peer that keeps its
    /// streams open until the results are exchanged, as iperf3 does, does not hold it).
    pub fn receiver(socket: TcpStream, len: usize, stop: Arc<Shared>) -> Stream {
        Stream::start(socket, move |s, bytes| {
            let mut buf = vec![0u8; len.max(4096)];
            // A read blocked without a timeout would not see the stop.
            s.set_read_timeout(Some(QUIET))?;
            let mut r = &*s;
            loop {
                match r.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => {
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        if stop.stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                    }
                    Err(_) if stop.stop.load(Ordering::Relaxed) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn start(
        socket: TcpStream,
        work: impl FnOnce(Arc<TcpStream>, Arc<AtomicU64>) -> io::Result<()> + Send + 'static,
    ) -> Stream {
        let socket = Arc::new(socket);
        let bytes = Arc::new(AtomicU64::new(0));
        let (s, b) = (socket.clone(), bytes.clone());
        let worker = std::thread::spawn(move || work(s, b));
        Stream {
            socket,
            bytes,
            worker: Some(worker),
        }
    }

    /// Whether its thread ended (budget spent, end of stream, error).
    pub fn finished(&self) -> bool {
        self.worker.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Ends it: shut down (a blocked read or write returns), then waits for its thread.
    pub fn end(&mut self) -> io::Result<()> {
        let _ = self.socket.shutdown(Shutdown::Both);
        self.join()
    }

    /// Waits for its thread.
    pub fn join(&mut self) -> io::Result<()> {
        match self.worker.take() {
            Some(w) => w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a stream's thread panicked"))),
            None => Ok(()),
        }
    }

    pub fn count(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// This process's CPU time so far, all its threads: (user, system) seconds, from
/// `/proc/self/stat` (what iperf3's `cpu_util` reports, from `getrusage(RUSAGE_SELF)`).
pub fn cpu_now() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (utime, stime) = crate::measure::cpu::parse_pid_stat(&stat)?;
    let hz = crate::measure::cpu::ticks_per_second();
    Some((utime as f64 / hz, stime as f64 / hz))
}

/// This side's results: each stream's bytes, the CPU it took.
pub fn results(
    streams: &[Stream],
    seconds: f64,
    cpu: Option<&(f64, f64)>,
    sender: bool,
) -> proto::Results {
    let pct = |s: f64| {
        if seconds > 0.0 {
            100.0 * s / seconds
        } else {
            0.0
        }
    };
    let (user, sys) = cpu.map_or((0.0, 0.0), |c| (pct(c.0), pct(c.1)));
    proto::Results {
        cpu_util_total: user + sys,
        cpu_util_user: user,
        cpu_util_system: sys,
        sender_has_retransmits: 0,
        congestion_used: None,
        streams: streams
            .iter()
            .enumerate()
            .map(|(k, s)| proto::StreamResult {
                id: proto::stream_id(k),
                bytes: i64::try_from(s.count()).unwrap_or(i64::MAX),
                retransmits: if sender { 0 } else { -1 },
                jitter: 0.0,
                errors: 0,
                packets: 0,
                start_time: 0.0,
                end_time: seconds,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_spent_exactly_across_takers() {
        let s = Shared::new(1000);
        let mut total = 0;
        while let n @ 1.. = s.take(300) {
            total += n;
        }
        assert_eq!(total, 1000);
        assert_eq!(Shared::new(0).take(300), 300);
        let s = Shared::new(10);
        s.stop.store(true, Ordering::Relaxed);
        assert_eq!(s.take(300), 0);
    }
}
