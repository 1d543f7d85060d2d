//! What a destination's TCP acknowledged and still owes, read from `TCP_INFO` (tcp(7):
//! `tcpi_bytes_acked`, `tcpi_unacked`, `tcpi_probes`) and its acknowledgement notifications
//! (`SO_TIMESTAMPING` `TX_ACK`), and whether an end read from a connection is its FIN.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

use super::RelayError;
use crate::peek::PeekCursor;
use crate::sys;
use crate::tcp_info::{TcpInfo, TcpState, tcp_info};

/// The current destination connection.
pub(super) struct Dest {
    pub(super) stream: TcpStream,
    pub(super) target: usize,
    /// Stream offset of the first byte sent on it.
    pub(super) base: u64,
    /// Which writes the kernel reports the acknowledgement of, on the error queue
    /// ([`ask_ack_notifications`]).
    pub(super) marks: Marks,
}

/// Which of a destination's writes bring a notification when the destination acknowledges
/// their last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Marks {
    /// Those that ask, with a control message (Linux 4.7): a relay of small exchanges asks
    /// for none and drops what was acknowledged in batches.
    Asked,
    /// Every one (`SO_TIMESTAMPING` with `TX_ACK` on the socket): a kernel before 4.7, whose
    /// TCP ignores a write's control messages without an error, or one that refused it.
    Every,
    /// None: the kernel gives no notifications; the relay polls `TCP_INFO` every millisecond.
    None,
}

/// The reporting flags of the acknowledgement notifications: software timestamps, no payload
/// looped back, a counter for each.
const REPORTING: u32 = libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

impl Dest {
    /// Writes `buf` without blocking; asks for a notification of its acknowledgement when
    /// `mark` (every write gets one under [`Marks::Every`]). A kernel that refuses the control
    /// message moves the destination to [`Marks::Every`] (or [`Marks::None`]) and the write is
    /// made without it.
    pub(super) fn send(&mut self, buf: &[u8], mark: bool) -> io::Result<usize> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        let fd = self.stream.as_fd();
        if mark && self.marks == Marks::Asked {
            match sys::net::send_timestamped(fd, buf, flags, libc::SOF_TIMESTAMPING_TX_ACK) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let every = REPORTING | libc::SOF_TIMESTAMPING_TX_ACK;
                    self.marks = match sys::sockopt::set_timestamping(fd, every) {
                        Ok(()) => Marks::Every,
                        Err(_) => Marks::None,
                    };
                }
                r => return r,
            }
        }
        sys::net::sendto(fd, buf, flags, None)
    }
}

impl Dest {
    /// Drops from the source's queue what this destination acknowledged by `info`; whether it
    /// dropped any.
    pub(super) fn consume_acked(
        &self,
        info: &TcpInfo,
        cur: &mut PeekCursor<TcpStream>,
    ) -> Result<bool, RelayError> {
        let acked = info.acked_data_bytes().ok_or_else(|| RelayError::Io {
            call: "getsockopt(TCP_INFO) of the destination",
            source: no_bytes_acked(),
        })?;
        let upto = (self.base + acked).min(cur.peeked());
        if upto > cur.consumed() {
            cur.consume(upto - cur.consumed())?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Empties the error queue of acknowledgement notifications; then, when there were none
    /// (the wake-up was no acknowledgement), whether the connection failed: its pending error,
    /// or a reset whose error another call took (closed although the relay sent no FIN: `shut`
    /// says whether it did). After notifications a failure shows at the next read or write
    /// (and a reset's `EPOLLHUP` makes a read of the reply due): two calls a notification saved.
    pub(super) fn failure(&self, shut: bool) -> io::Result<Option<String>> {
        let mut control = [0u8; 256];
        let mut notified = false;
        while sys::net::recv_errqueue(self.stream.as_fd(), &mut control)?.is_some() {
            notified = true;
        }
        if notified {
            return Ok(None);
        }
        if let Some(e) = self.stream.take_error()? {
            return Ok(Some(e.to_string()));
        }
        Ok((!shut && closed(&self.stream)).then(|| "connection reset".to_owned()))
    }
}

/// Whether `stream`'s connection is closed (`TCP_CLOSE`): after a reset, or after both FINs.
fn closed(stream: &TcpStream) -> bool {
    tcp_info(stream).is_ok_and(|i| i.state == TcpState::Close)
}

/// Whether the end a read of `stream` just returned (0 bytes) is the peer's FIN, to pass on.
/// Not when the connection is closed although the relay sent no FIN (`shut` false): that end
/// is a reset whose error another call took (`SO_ERROR`, a write), after which a read returns
/// 0; passed on, it would close the other side as if the peer had finished. After the relay's
/// own FIN, closed is the clean end of both.
pub(super) fn end_is_fin(stream: &TcpStream, shut: bool) -> bool {
    shut || !closed(stream)
}

fn no_bytes_acked() -> io::Error {
    io::Error::other("TCP_INFO without tcpi_bytes_acked (needs Linux 4.2)")
}

/// What a destination's TCP has left unanswered, by its `TCP_INFO`: the acknowledgement timeout
/// runs only while it owes an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unanswered {
    /// Nothing: it acknowledged all it was sent. An idle connection, or a receiver whose window
    /// is closed while its TCP answers the kernel's window probes.
    Nothing,
    /// One window probe. A live receiver leaves one unanswered now and then: it rate-limits the
    /// ACKs it sends for out-of-window segments (`tcp_invalid_ratelimit`, 500 ms by default),
    /// so a probe that comes sooner after the last one it answered gets none (seen here: 0.86 s
    /// without an answer, then the next probe answered). The clock runs; this alone never ends it.
    OneProbe,
    /// Segments in flight (`tcpi_unacked`), or window probes two in a row (`tcpi_probes`):
    /// a live TCP answers these. `silent` is how long it has sent nothing at all.
    Owed {
        segments: u32,
        probes: u8,
        silent: Duration,
    },
}

impl Unanswered {
    pub(super) fn of(info: &TcpInfo) -> Unanswered {
        match (info.unacked, info.probes) {
            (0, 0) => Unanswered::Nothing,
            (0, 1) => Unanswered::OneProbe,
            (segments, probes) => Unanswered::Owed {
                segments,
                probes,
                silent: Duration::from_millis(info.last_ack_recv_ms.into()),
            },
        }
    }

    /// Why to give the destination up, if it has owed an answer, acknowledging nothing, for
    /// `stalled`, and both that and its silence exceed `limit` (the silence alone would count
    /// a long idle time before the first byte; the stall alone, a TCP answering with duplicate
    /// ACKs).
    pub(super) fn expired(self, stalled: Duration, limit: Duration) -> Option<String> {
        let Unanswered::Owed {
            segments,
            probes,
            silent,
        } = self
        else {
            return None;
        };
        if stalled <= limit || silent <= limit {
            return None;
        }
        Some(if segments > 0 {
            format!("nothing acknowledged for {limit:?}, {segments} segment(s) in flight")
        } else {
            format!("its window closed, {probes} window probes unanswered for {limit:?}")
        })
    }
}

/// Makes the writes that ask for it ([`Dest::send`]) bring an error-queue notification when
/// their last byte is acknowledged: `SO_TIMESTAMPING`'s reporting flags on the socket
/// (`OPT_TSONLY`: Linux 4.6), `SOF_TIMESTAMPING_TX_ACK` (3.17) a write, see the kernel's
/// `Documentation/networking/timestamping.rst`. Each one wakes the relay's epoll with
/// `EPOLLERR`, so it learns of acknowledgements when they happen instead of by polling.
pub(super) fn ask_ack_notifications(stream: &TcpStream) -> Marks {
    let (flags, marks) = if per_write_flags() {
        (REPORTING, Marks::Asked)
    } else {
        (REPORTING | libc::SOF_TIMESTAMPING_TX_ACK, Marks::Every)
    };
    match sys::sockopt::set_timestamping(stream.as_fd(), flags) {
        Ok(()) => marks,
        Err(_) => Marks::None,
    }
}

/// Whether TCP takes a write's `SO_TIMESTAMPING` control message: Linux 4.7 (the kernel's
/// commit c14ac9451c34, "sock: enable timestamping using control messages"). An older TCP
/// ignores it without an error, so the release decides, once a process.
fn per_write_flags() -> bool {
    static PER_WRITE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PER_WRITE.get_or_init(|| {
        sys::process::kernel_release()
            .ok()
            .and_then(|r| release_at_least(&r, (4, 7)))
            .unwrap_or(false)
    })
}

/// Whether kernel release `r` (`6.18.44-fc`) is at least `(major, minor)`; `None` when it does
/// not parse.
fn release_at_least(r: &str, want: (u32, u32)) -> Option<bool> {
    let mut parts = r.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some((major, minor) >= want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::{Shutdown, TcpListener};

    fn info(unacked: u32, probes: u8, last_ack_recv_ms: u32) -> TcpInfo {
        TcpInfo {
            state: TcpState::Established,
            bytes_acked: Some(1),
            bytes_received: Some(0),
            bytes_sent: Some(0),
            bytes_retrans: Some(0),
            unacked,
            probes,
            last_ack_recv_ms,
            total_retrans: 0,
            snd_mss: 1448,
            snd_cwnd: 10,
            rtt_us: 100,
            rttvar_us: 50,
            pmtu: 1500,
            snd_wnd: None,
        }
    }

    /// A connected pair on loopback: (ours, the peer's).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (ours, l.accept().unwrap().0)
    }

    /// Waits (at most 5 s) until `stream`'s connection is in `state`.
    fn wait_for(stream: &TcpStream, state: TcpState) {
        for _ in 0..500 {
            if tcp_info(stream).unwrap().state == state {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never {state:?}");
    }

    /// Waits (at most 5 s) until `stream`'s peer acknowledged everything it was sent.
    fn wait_acknowledged(stream: &TcpStream) {
        for _ in 0..500 {
            if tcp_info(stream).unwrap().unacked == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("never acknowledged");
    }

    /// Notifications waiting on `stream`'s error queue, read.
    fn notifications(stream: &TcpStream) -> usize {
        let mut control = [0u8; 256];
        std::iter::from_fn(|| sys::net::recv_errqueue(stream.as_fd(), &mut control).unwrap())
            .count()
    }

    /// Only the writes that ask bring a notification once acknowledged (the kernel queues it
    /// as it takes the acknowledgement, before `tcpi_unacked` drops): the relay's small
    /// exchanges cost none, its streams one a write.
    #[test]
    fn only_a_write_that_asks_is_notified() {
        let (ours, peer) = pair();
        let mut dest = Dest {
            marks: ask_ack_notifications(&ours),
            stream: ours,
            target: 0,
            base: 0,
        };
        assert_ne!(dest.marks, Marks::None, "SO_TIMESTAMPING refused");
        for (mark, expected) in [(false, 0), (true, 1), (false, 0), (true, 1)] {
            assert_eq!(dest.send(&[7; 100], mark).unwrap(), 100);
            wait_acknowledged(&dest.stream);
            let expected = if dest.marks == Marks::Every {
                1
            } else {
                expected
            };
            assert_eq!(
                notifications(&dest.stream),
                expected,
                "a write, asking: {mark}"
            );
        }
        let mut got = vec![0u8; 400];
        (&peer).read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == 7));
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert_eq!(release_at_least("6.18.44-fc-v669", (4, 7)), Some(true));
        assert_eq!(release_at_least("4.7.0", (4, 7)), Some(true));
        assert_eq!(release_at_least("4.6.7-generic", (4, 7)), Some(false));
        assert_eq!(release_at_least("3.18", (4, 7)), Some(false));
        assert_eq!(release_at_least("nonsense", (4, 7)), None);
    }

    #[test]
    fn an_end_read_after_a_reset_whose_error_was_taken_is_no_fin() {
        let (ours, peer) = pair();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        wait_for(&ours, TcpState::Close);
        // A write (or SO_ERROR) took the reset: a read now sees a plain end.
        assert!(ours.take_error().unwrap().is_some());
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        assert!(!end_is_fin(&ours, false), "a reset passed on as a FIN");
    }

    #[test]
    fn a_fin_is_passed_on_also_after_the_relays_own() {
        let (ours, peer) = pair();
        peer.shutdown(Shutdown::Write).unwrap();
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        assert!(end_is_fin(&ours, false));
        // The relay sent its FIN first (the source's end passed on), then the peer's came: the
        // connection is closed, cleanly.
        let (ours, peer) = pair();
        ours.shutdown(Shutdown::Write).unwrap();
        assert_eq!((&peer).read(&mut [0u8; 1]).unwrap(), 0);
        drop(peer);
        assert_eq!((&ours).read(&mut [0u8; 1]).unwrap(), 0);
        wait_for(&ours, TcpState::Close);
        assert!(end_is_fin(&ours, true));
    }

    const LIMIT: Duration = Duration::from_secs(1);
    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn a_destination_that_owes_nothing_never_expires() {
        // Idle for a minute, or its window closed with every probe answered.
        let idle = Unanswered::of(&info(0, 0, 60_000));
        assert_eq!(idle, Unanswered::Nothing);
        assert_eq!(idle.expired(LONG, LIMIT), None);
    }

    #[test]
    fn one_unanswered_window_probe_never_expires() {
        // A live receiver's rate limit on out-of-window ACKs can leave one unanswered.
        let one = Unanswered::of(&info(0, 1, 60_000));
        assert_eq!(one, Unanswered::OneProbe);
        assert_eq!(one.expired(LONG, LIMIT), None);
    }

    #[test]
    fn two_unanswered_probes_expire_after_the_limit_of_silence() {
        let two = Unanswered::of(&info(0, 2, 2_000));
        let why = two.expired(LONG, LIMIT).expect("expired");
        assert!(why.contains("2 window probes unanswered"), "{why}");
        assert_eq!(two.expired(LIMIT / 2, LIMIT), None, "stalled too briefly");
    }

    #[test]
    fn bytes_in_flight_expire_only_when_the_peer_is_silent_too() {
        let why = Unanswered::of(&info(5, 0, 1_500))
            .expired(LONG, LIMIT)
            .expect("expired");
        assert!(why.contains("5 segment(s) in flight"), "{why}");
        // Duplicate ACKs still coming: a live TCP, however long nothing is acknowledged.
        assert_eq!(Unanswered::of(&info(5, 0, 100)).expired(LONG, LIMIT), None);
        // The first bytes after a long idle time: silent for long, owing only just now.
        assert_eq!(
            Unanswered::of(&info(5, 0, 60_000)).expired(LIMIT / 10, LIMIT),
            None
        );
    }
}
