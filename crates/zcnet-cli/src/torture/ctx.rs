//! What every sender of a round shares, the synchronous ones ([`super::tx`]) and the async
//! ([`super::atx`]) and C ([`super::ffi`]) ones alike: its socket, its [`Ctx`] (the plan, the
//! random source, the ledger of loans, the stream so far), and the temporary file that file
//! senders send from.

use std::io::Write as _;
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use zcnet::file;
use zcnet::loan::{Returned, SendError};

use super::check::{self, Fate, HEADER, Ledger, Rng};
use super::round::{DRAIN, Patience, Plan, SLICE, TxReport};

/// The sender's socket.
pub enum Sock {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

impl AsFd for Sock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Udp(s) => s.as_fd(),
        }
    }
}

impl From<Sock> for OwnedFd {
    fn from(s: Sock) -> OwnedFd {
        match s {
            Sock::Tcp(s) => s.into(),
            Sock::Udp(s) => s.into(),
        }
    }
}

impl Sock {
    /// A second descriptor of the socket, for the watchdog.
    pub fn try_clone_fd(&self) -> std::io::Result<OwnedFd> {
        self.as_fd().try_clone_to_owned()
    }
}

/// The largest UDP datagram.
pub const MAX_DATAGRAM: usize = 65_507;

/// Drains a synchronous sender with [`Patience`]; `Err` is the library's last error or why
/// the patience ran out.
pub fn drain_patiently<B: zcnet::loan::OwnedBuf, T: zcnet::mechanism::LoaningSender<B>>(
    ctx: &Ctx<'_>,
    tx: &mut T,
) -> Result<(), String> {
    let mut patience = Patience::new(ctx.hard_limit());
    loop {
        match tx.drain(SLICE) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                let waiting = patience
                    .wait_on(tx.in_flight())
                    .map_err(|why| format!("{why} ({e})"))?;
                if !waiting {
                    return Err(format!("the drain timed out with nothing in flight ({e})"));
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// A sender's state: the plan, its random source, the ledger of loans and the stream so far.
pub struct Ctx<'a> {
    pub plan: &'a Plan,
    pub rng: Rng,
    pub ledger: Ledger,
    /// Stream offset of the next byte (TCP).
    pub off: u64,
    /// Bytes made so far (TCP and UDP), against the budget.
    made_bytes: u64,
    /// The stream length the sender reports, where no ledger says it (file senders).
    pub stream_len: Option<u64>,
    /// GSO trains: the next datagram's sequence, and the (first sequence, datagrams) of each
    /// buffer made, in the ledger's order.
    next_seq: u64,
    trains: Vec<(u64, u64)>,
    pub report: TxReport,
}

impl<'a> Ctx<'a> {
    pub fn new(plan: &'a Plan) -> Ctx<'a> {
        Ctx {
            plan,
            rng: Rng::new(plan.seed ^ 0x5e4d),
            ledger: Ledger::default(),
            off: 0,
            made_bytes: 0,
            stream_len: None,
            next_seq: 0,
            trains: Vec::new(),
            report: TxReport::default(),
        }
    }

    /// Whether to start another send.
    pub fn more(&self) -> bool {
        Instant::now() < self.plan.deadline && self.made_bytes < self.plan.budget
    }

    /// The last moment a wait may last until.
    pub fn hard_limit(&self) -> Instant {
        self.plan.deadline + DRAIN
    }

    /// The size of the next call: 1 B to 1 MiB (TCP), a header to the largest datagram (UDP),
    /// at most `cap`.
    pub fn next_len(&mut self, cap: usize) -> usize {
        if let Some(seg) = self.plan.segment.filter(|&s| s <= MAX_DATAGRAM.min(cap)) {
            // A train of 1 to 64 datagrams, the last one a header to a whole segment long.
            let most = (MAX_DATAGRAM.min(cap) / seg).clamp(1, zcnet::udp_gso::MAX_SEGMENTS);
            let k = self.rng.range(1, most as u64) as usize;
            return (k - 1) * seg + self.rng.size(HEADER, seg);
        }
        if self.plan.udp {
            self.rng.size(HEADER, MAX_DATAGRAM.min(cap))
        } else {
            self.rng.size(1, (1 << 20).min(cap))
        }
    }

    /// The bytes of the next call of `len` bytes: the stream from the current offset (TCP),
    /// or the next datagram (UDP: its sequence is the ledger's next index).
    pub fn make(&mut self, len: usize) -> Vec<u8> {
        self.made_bytes += len as u64;
        if let Some(seg) = self.plan.segment.filter(|_| self.plan.udp) {
            // Each datagram of the train is one the receiver checks on its own.
            let first = self.next_seq;
            let mut d = Vec::with_capacity(len);
            for at in (0..len).step_by(seg) {
                let piece = seg.min(len - at);
                d.extend(check::datagram(
                    self.plan.stream,
                    self.plan.base,
                    self.next_seq,
                    piece,
                ));
                self.next_seq += 1;
            }
            self.trains.push((first, self.next_seq - first));
            return d;
        }
        if self.plan.udp {
            let seq = self.ledger.fates().count() as u64;
            check::datagram(self.plan.stream, self.plan.base, seq, len)
        } else {
            check::pattern(self.plan.base, self.off, len)
        }
    }

    /// The round's GSO segment size, for a sender's `Config::segment`.
    pub fn segment(&self) -> Option<zcnet::udp_gso::Segment> {
        let seg = self.plan.segment.filter(|_| self.plan.udp)?;
        Some(zcnet::udp_gso::Segment::new(seg).expect("a segment size drawn in range"))
    }

    /// Counts `len` bytes against the budget without making them (file senders).
    pub fn count(&mut self, len: u64) {
        self.made_bytes += len;
    }

    /// Makes the next buffer and hands it out: (buffer, ledger index).
    pub fn lend(&mut self, cap: usize) -> (Arc<[u8]>, usize) {
        let len = self.next_len(cap);
        let data = self.make(len);
        self.ledger.lend(data)
    }

    /// The sender took a buffer of `len` bytes: the stream goes on after it.
    pub fn took(&mut self, len: usize) {
        if !self.plan.udp {
            self.off += len as u64;
        }
    }

    /// A buffer came back.
    pub fn back(&mut self, r: Returned<Arc<[u8]>>) {
        let error = r.error.map(|e| e.to_string());
        if let Some(e) = &error {
            self.error(e.clone());
        }
        self.ledger.back(r.buf, r.sent, error);
    }

    /// A send was refused with its buffer.
    pub fn refused(&mut self, e: SendError<Arc<[u8]>>) {
        let error = format!("{}: {}", e, e.error);
        self.error(error.clone());
        self.ledger.back(e.buf, e.sent, Some(error));
    }

    /// A send failed.
    pub fn error(&mut self, e: String) {
        if self.report.errors.len() < 8 {
            self.report.errors.push(e);
        }
    }

    /// Whether a send failed: a stream sender stops then.
    pub fn failed(&self) -> bool {
        !self.report.errors.is_empty()
    }

    /// A broken promise.
    pub fn problem(&mut self, p: String) {
        self.report.problems.push(p);
    }

    /// Ends the round's sending: buffers still out are problems; the report.
    pub fn finish(mut self, what: &str) -> TxReport {
        self.ledger.close(what);
        let mut r = self.report;
        r.problems.append(&mut self.ledger.problems);
        r.loans_out = self.ledger.out;
        r.loans_back = self.ledger.back;
        if self.plan.udp && self.plan.segment.is_some() {
            let trains = &self.trains;
            r.made = self.next_seq;
            r.trains = self
                .ledger
                .fates()
                .enumerate()
                .filter(|(_, (_, f))| matches!(f, Fate::Back { error: None, .. }))
                .filter_map(|(i, _)| trains.get(i).copied())
                .collect();
            r.sent_seqs = r
                .trains
                .iter()
                .flat_map(|&(first, n)| first..first + n)
                .collect();
        } else if self.plan.udp {
            r.made = self.ledger.fates().count() as u64;
            r.sent_seqs = self
                .ledger
                .fates()
                .enumerate()
                .filter(|(_, (_, f))| matches!(f, Fate::Back { error: None, .. }))
                .map(|(i, _)| i as u64)
                .collect();
        } else {
            r.stream_len = self
                .stream_len
                .unwrap_or_else(|| self.ledger.stream_len().0);
        }
        r
    }
}

/// Shuts the sending direction of a TCP socket: the receiver sees the end of the stream even
/// while another descriptor of the socket (a ring's, the watchdog's) stays open.
pub fn shut(fd: &impl AsFd) {
    let _ = socket2::SockRef::from(fd).shutdown(Shutdown::Write);
}

/// A temporary file holding the stream's first `len` bytes, removed on drop.
pub struct TempFile {
    pub path: std::path::PathBuf,
    pub file: std::fs::File,
}

impl TempFile {
    pub fn new(plan: &Plan, len: u64) -> anyhow::Result<TempFile> {
        let path = std::env::temp_dir().join(format!(
            "zcnet-torture-{}-{}",
            std::process::id(),
            plan.round
        ));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(1 << 20) as usize;
            file.write_all(&check::pattern(plan.base, off, n))?;
            off += n as u64;
        }
        Ok(TempFile { path, file })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A random file configuration in `mode`.
pub fn file_config(rng: &mut Rng, mode: file::Mode) -> file::Config {
    file::Config {
        mode,
        chunk: rng.pick(&[4096usize, 65_536, 262_144, 1 << 20]),
        pipe_size: rng.pick(&[4096usize, 65_536, 1 << 20]),
        window: rng.pick(&[65_536usize, 1 << 20, 4 << 20]),
    }
}
