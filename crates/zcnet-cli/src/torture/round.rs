//! What a round is: the mechanisms and faults it draws from, its [`Plan`] (who sends and who
//! receives, over which link, with which faults), and what its sender and receiver report. A
//! leaf: the sides of a round (`tx`, `rx`, and the async and C senders) and the driver that
//! plans and judges rounds all read it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use netlab::Family;

use super::net::Link;

/// What a round drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Mechanism {
    /// `msg_zerocopy::ZeroCopySender` (TCP, UDP).
    MsgZerocopy,
    /// `uring::UringSender` in `Mode::Copy` (TCP, UDP).
    UringCopy,
    /// `uring::UringSender` in `Mode::ZeroCopy` (TCP, UDP).
    UringZc,
    /// `uring::UringSender` in `Mode::ZeroCopyFixed` with a registered `Pool` (TCP, UDP).
    UringZcFixed,
    /// `file::FileSender`, `sendfile` (TCP).
    FileSendfile,
    /// `file::FileSender`, `splice` (TCP).
    FileSplice,
    /// `file::FileSender`, the mmap window with `MSG_ZEROCOPY` (TCP).
    FileMmapZc,
    /// `file::FileSender`, `pread` + `send` (TCP).
    FileCopy,
    /// `tcp_rx::TcpZeroCopyReceiver` as the receiver (TCP).
    TcpRx,
    /// `peek::PeekCursor` as the receiver, with rewinds and consumes (TCP).
    Peek,
    /// `zcnet::tokio::ZeroCopySender`, send futures cancelled mid-send (TCP, UDP).
    TokioMsgZerocopy,
    /// `zcnet::tokio::UringSender`, send futures cancelled mid-send (TCP, UDP).
    TokioUring,
    /// `zcnet::tokio::FileSender`, send futures cancelled mid-file (TCP).
    TokioFile,
    /// `zcnet::tokio::TcpZeroCopyReceiver` as the receiver, receives cancelled (TCP).
    TokioTcpRx,
    /// `zcnet::tokio::PeekCursor` as the receiver, peeks cancelled (TCP).
    TokioPeek,
    /// libzcnet's MSG_ZEROCOPY sender through its C functions (TCP, UDP).
    FfiZc,
    /// libzcnet's io_uring sender through its C functions (TCP, UDP).
    FfiUring,
    /// libzcnet's `zcnet_send_file` through its C function (TCP).
    FfiFile,
}

impl Mechanism {
    pub(super) const ALL: [Mechanism; 18] = [
        Mechanism::MsgZerocopy,
        Mechanism::UringCopy,
        Mechanism::UringZc,
        Mechanism::UringZcFixed,
        Mechanism::FileSendfile,
        Mechanism::FileSplice,
        Mechanism::FileMmapZc,
        Mechanism::FileCopy,
        Mechanism::TcpRx,
        Mechanism::Peek,
        Mechanism::TokioMsgZerocopy,
        Mechanism::TokioUring,
        Mechanism::TokioFile,
        Mechanism::TokioTcpRx,
        Mechanism::TokioPeek,
        Mechanism::FfiZc,
        Mechanism::FfiUring,
        Mechanism::FfiFile,
    ];

    /// The name `--mechanism` takes.
    pub fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }

    pub(super) fn receives(self) -> bool {
        matches!(
            self,
            Mechanism::TcpRx | Mechanism::Peek | Mechanism::TokioTcpRx | Mechanism::TokioPeek
        )
    }

    /// Whether it sends UDP GSO trains (`Config::segment`): every UDP sender but libzcnet's,
    /// whose C config has no segment size.
    pub(super) fn sends_trains(self) -> bool {
        self.udp() && !matches!(self, Mechanism::FfiZc | Mechanism::FfiUring)
    }

    pub(super) fn udp(self) -> bool {
        matches!(
            self,
            Mechanism::MsgZerocopy
                | Mechanism::UringCopy
                | Mechanism::UringZc
                | Mechanism::UringZcFixed
                | Mechanism::TokioMsgZerocopy
                | Mechanism::TokioUring
                | Mechanism::FfiZc
                | Mechanism::FfiUring
        )
    }

    pub(super) fn uring(self) -> bool {
        matches!(
            self,
            Mechanism::UringCopy
                | Mechanism::UringZc
                | Mechanism::UringZcFixed
                | Mechanism::TokioUring
                | Mechanism::FfiUring
        )
    }

    pub(super) fn tokio(self) -> bool {
        matches!(
            self,
            Mechanism::TokioMsgZerocopy
                | Mechanism::TokioUring
                | Mechanism::TokioFile
                | Mechanism::TokioTcpRx
                | Mechanism::TokioPeek
        )
    }

    /// Whether its sends can meet `ENOBUFS` for want of optmem (`MSG_ZEROCOPY`).
    pub(super) fn msg_zerocopy(self) -> bool {
        matches!(
            self,
            Mechanism::MsgZerocopy
                | Mechanism::FileMmapZc
                | Mechanism::TokioMsgZerocopy
                | Mechanism::FfiZc
        )
    }

    /// Whether it pins pages (`MSG_ZEROCOPY`, `SEND_ZC`), which the locked-memory limit bounds.
    pub(super) fn pins(self) -> bool {
        self.msg_zerocopy()
            || matches!(
                self,
                Mechanism::UringZc
                    | Mechanism::UringZcFixed
                    | Mechanism::TokioUring
                    | Mechanism::FfiUring
            )
    }
}

/// A fault family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Fault {
    /// A tiny `SO_SNDBUF` on the sender: short sends, `EAGAIN`.
    Sndbuf,
    /// `net.core.optmem_max` lowered in the sending lab namespace: `MSG_ZEROCOPY` `ENOBUFS`.
    Optmem,
    /// A low `RLIMIT_MEMLOCK` with `CAP_IPC_LOCK` dropped for the sending thread.
    Memlock,
    /// The receiver stops reading for a while, now and then.
    Stall,
    /// The receiver resets the connection (`SO_LINGER` 0 and close) mid-stream; over UDP it
    /// closes its socket.
    Reset,
    /// Async sends dropped mid-send by a short timer (tokio mechanisms).
    Cancel,
}

impl Fault {
    pub(super) const ALL: [Fault; 6] = [
        Fault::Sndbuf,
        Fault::Optmem,
        Fault::Memlock,
        Fault::Stall,
        Fault::Reset,
        Fault::Cancel,
    ];

    pub(super) fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }
}

/// Who sends or receives in a round: a mechanism, or a plain `write(2)`/`read(2)` end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Mechanism(Mechanism),
    Plain,
}

impl End {
    pub(super) fn name(self) -> String {
        match self {
            End::Mechanism(m) => m.name(),
            End::Plain => "plain".into(),
        }
    }
}

/// The faults of one round.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// `SO_SNDBUF` asked for on the sender.
    pub sndbuf: Option<usize>,
    /// `optmem_max` in the sending namespace.
    pub optmem: Option<u64>,
    /// `RLIMIT_MEMLOCK` for the sending thread (without `CAP_IPC_LOCK`).
    pub memlock: Option<u64>,
    /// The receiver stalls.
    pub stall: bool,
    /// The receiver resets after this many bytes (TCP) or datagrams (UDP).
    pub reset_after: Option<u64>,
    /// Async sends are cancelled now and then.
    pub cancel: bool,
}

impl Faults {
    pub(super) fn describe(&self) -> String {
        let mut v = Vec::new();
        if let Some(b) = self.sndbuf {
            v.push(format!("sndbuf={b}"));
        }
        if let Some(o) = self.optmem {
            v.push(format!("optmem={o}"));
        }
        if let Some(m) = self.memlock {
            v.push(format!("memlock={m}"));
        }
        if self.stall {
            v.push("stall".into());
        }
        if let Some(r) = self.reset_after {
            v.push(format!("reset@{r}"));
        }
        if self.cancel {
            v.push("cancel".into());
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(" ")
        }
    }
}

/// One round, as drawn.
#[derive(Clone, Debug)]
pub struct Plan {
    pub round: u64,
    pub seed: u64,
    pub focus: Mechanism,
    pub sender: End,
    pub receiver: End,
    pub udp: bool,
    /// UDP only: the sender sends GSO trains of datagrams of this size (`UDP_SEGMENT`).
    pub segment: Option<usize>,
    pub link: Link,
    pub family: Family,
    pub faults: Faults,
    /// Bytes the sender puts out at most.
    pub budget: u64,
    /// When the sender stops starting new sends.
    pub deadline: Instant,
    /// The pattern's key for this round's stream.
    pub base: u64,
    /// The stream id datagrams carry.
    pub stream: u32,
    /// Test only: the receiver flips one bit before checking.
    pub corrupt: bool,
}

impl Plan {
    pub(super) fn describe(&self) -> String {
        format!(
            "round {} (seed {}): {} -> {}, {}{} over {} {}, faults: {}",
            self.round,
            self.seed,
            self.sender.name(),
            self.receiver.name(),
            if self.udp { "udp" } else { "tcp" },
            self.segment
                .map_or(String::new(), |s| format!(" in {s}-byte GSO trains")),
            self.link.name(),
            self.family.name(),
            self.faults.describe()
        )
    }
}

/// How long a sender or receiver may run past the round's deadline before it counts as hung:
/// longer than a sender may drain ([`DRAIN`]), so that a sender says itself what it was waiting
/// for.
pub const GRACE: Duration = Duration::from_secs(DRAIN.as_secs() + 20);
const _: () = assert!(GRACE.as_secs() > DRAIN.as_secs() + STALL.as_secs());

/// The longest a sender may go on past the round's deadline (draining, waiting for room) while
/// its loans keep coming back. A round can queue all of its budget (24 MiB at most) in an
/// io_uring window before the deadline, and the slowest link here drains it at 0.6 MB/s: a peek
/// receiver, which delays its ACKs, behind an 8 KiB `SO_SNDBUF` sends 47 KiB per 44 ms round trip
/// on loopback (round 49 of seed 683213215444386 queued 10 MB and timed out after the 15 s this
/// was, still draining). A sender that is stuck is caught by [`STALL`] long before this.
pub const DRAIN: Duration = Duration::from_secs(60);

/// How long a sender may wait without a single loan coming back before it counts as hung.
pub const STALL: Duration = Duration::from_secs(10);

/// How long one wait of a [`Patience`] drain lasts before it looks at the progress made.
pub const SLICE: Duration = Duration::from_millis(250);

/// A wait's patience (a full window's, a drain's): it waits on while loans keep coming back,
/// and gives up when none came back for [`STALL`] (counted from its start) or at the hard limit
/// (the round's deadline + [`DRAIN`]). A slow link is not a hang; a link on which nothing moves
/// is.
pub struct Patience {
    until: Instant,
    stall: Duration,
    /// The fewest loans seen out, `None` before the first look.
    out: Option<usize>,
    /// When that fewest was first seen (the start, until a loan comes back).
    moved: Instant,
    /// Whether a loan came back during the wait.
    progressed: bool,
}

impl Patience {
    /// Gives up at `until`, or after [`STALL`] without progress.
    pub fn new(until: Instant) -> Patience {
        Patience::with_stall(until, STALL)
    }

    /// Gives up at `until`, or after `stall` without progress.
    pub fn with_stall(until: Instant, stall: Duration) -> Patience {
        Patience {
            until,
            stall,
            out: None,
            moved: Instant::now(),
            progressed: false,
        }
    }

    /// Given how many loans are still out: `Ok(true)` to wait on, `Ok(false)` when none is,
    /// `Err` saying why it gives up.
    pub fn wait_on(&mut self, out: usize) -> Result<bool, String> {
        self.wait_on_at(out, Instant::now())
    }

    fn wait_on_at(&mut self, out: usize, now: Instant) -> Result<bool, String> {
        if out == 0 {
            return Ok(false);
        }
        match self.out {
            None => self.out = Some(out),
            Some(fewest) if out < fewest => {
                self.out = Some(out);
                self.moved = now;
                self.progressed = true;
            }
            Some(_) => {}
        }
        if now.saturating_duration_since(self.moved) >= self.stall {
            return Err(format!(
                "{out} loans out, none came back for {:?}",
                self.stall
            ));
        }
        if now >= self.until {
            let moving = if self.progressed {
                ", though they were coming back"
            } else {
                ""
            };
            return Err(format!(
                "{out} loans still out at the round's hard limit{moving}"
            ));
        }
        Ok(true)
    }
}

/// What a sender reports.
#[derive(Default)]
pub struct TxReport {
    /// Buffers handed to the sender, and back (or dropped unsent by a cancelled future).
    pub loans_out: u64,
    pub loans_back: u64,
    /// Bytes the sender says it put on the stream, in order (TCP).
    pub stream_len: u64,
    /// GSO trains the sender says it sent (UDP): (first sequence, datagrams).
    pub trains: Vec<(u64, u64)>,
    /// Datagrams the sender says it sent (UDP), by sequence, and how many it made.
    pub sent_seqs: Vec<u64>,
    pub made: u64,
    /// Errors the sends met (expected only with a reset).
    pub errors: Vec<String>,
    /// Broken promises: a buffer back twice or never, a wrong count, a hang.
    pub problems: Vec<String>,
    /// Fault effects the library reported (ENOBUFS fallbacks, memlock fallbacks, cancels).
    pub effects: BTreeMap<&'static str, u64>,
}

impl TxReport {
    pub(super) fn effect(&mut self, name: &'static str, n: u64) {
        if n > 0 {
            *self.effects.entry(name).or_default() += n;
        }
    }
}

/// What a receiver reports.
#[derive(Default)]
pub struct RxReport {
    /// Stream bytes (TCP) or intact datagram bytes (UDP) checked.
    pub bytes: u64,
    /// Wrong bytes (TCP) or wrong datagrams (UDP).
    pub wrong: u64,
    pub first_bad: Option<String>,
    /// Datagrams received intact (UDP).
    pub got: std::collections::BTreeSet<u64>,
    /// UDP: it read with `UDP_GRO` (a GSO train then reaches it as one skb).
    pub gro: bool,
    /// Whether it reset (or closed) as the plan said.
    pub reset: bool,
    pub stalls: u64,
    /// Async receives cancelled by a timer (nothing may be lost).
    pub cancelled_receives: u64,
    pub problems: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_drain_that_keeps_moving_is_waited_for_past_the_stall_time() {
        let mut p = Patience::with_stall(Instant::now() + Duration::from_secs(60), 30 * MS);
        let t = Instant::now();
        // One loan back every 20 ms, for longer than the stall time in all.
        for (i, out) in (1..=8).rev().enumerate() {
            let at = t + 20 * MS * i as u32;
            assert_eq!(p.wait_on_at(out, at), Ok(true), "{out} out, still moving");
        }
        assert_eq!(p.wait_on_at(0, t + 200 * MS), Ok(false));
    }

    #[test]
    fn a_drain_on_which_nothing_comes_back_gives_up_after_the_stall_time() {
        let mut p = Patience::with_stall(Instant::now() + Duration::from_secs(60), 30 * MS);
        let t = Instant::now();
        assert_eq!(p.wait_on_at(5, t), Ok(true));
        assert_eq!(p.wait_on_at(5, t + 29 * MS), Ok(true));
        let why = p.wait_on_at(5, t + 30 * MS).unwrap_err();
        assert!(why.contains("5 loans out, none came back"), "{why}");
        // More loans out is no progress either.
        let mut p = Patience::with_stall(Instant::now() + Duration::from_secs(60), 30 * MS);
        let t = Instant::now();
        assert_eq!(p.wait_on_at(5, t), Ok(true));
        assert_eq!(p.wait_on_at(6, t + 20 * MS), Ok(true));
        assert!(p.wait_on_at(6, t + 40 * MS).is_err());
    }

    #[test]
    fn the_first_look_is_not_progress() {
        // A wait that starts past the hard limit gives up at once, and does not claim that
        // loans were coming back.
        let t = Instant::now();
        let mut p = Patience::with_stall(t, Duration::from_secs(60));
        let why = p.wait_on_at(3, t + MS).unwrap_err();
        assert_eq!(why, "3 loans still out at the round's hard limit");
        // Nor does it restart the stall clock: a wait stalls counting from its start.
        let mut p = Patience::with_stall(Instant::now() + Duration::from_secs(60), 30 * MS);
        let t = Instant::now();
        assert!(p.wait_on_at(3, t + 31 * MS).is_err());
    }

    #[test]
    fn a_drain_still_moving_gives_up_at_the_hard_limit() {
        let t = Instant::now();
        let mut p = Patience::with_stall(t + 50 * MS, Duration::from_secs(60));
        assert_eq!(p.wait_on_at(9, t), Ok(true));
        assert_eq!(p.wait_on_at(8, t + 49 * MS), Ok(true));
        let why = p.wait_on_at(7, t + 50 * MS).unwrap_err();
        assert!(why.contains("hard limit"), "{why}");
    }
}
