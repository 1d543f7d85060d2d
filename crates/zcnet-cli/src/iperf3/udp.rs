//! iperf3's UDP streams (its `iperf_udp.c`): the connect handshake that stands in for TCP's
//! (a 4-byte datagram from the client, the server's 4-byte answer from the socket it then
//! connects to the client), the 12-byte header of every datagram (seconds and microseconds of
//! the send time, the packet's number from 1, each big-endian), and the receiver's counts of
//! lost, out-of-order packets and jitter (RFC 1889's estimator, as iperf3 keeps it).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The client's datagram that opens a UDP stream (`UDP_CONNECT_MSG`, written in host order).
pub const CONNECT: u32 = 0x3637_3839;
/// The server's answer (`UDP_CONNECT_REPLY`).
pub const REPLY: u32 = 0x3938_3736;
/// The answer of iperf3 before 3.11 (`LEGACY_UDP_CONNECT_REPLY`), taken too.
pub const LEGACY_REPLY: u32 = 987_654_321;

/// Bytes of the header: seconds, microseconds, packet number (32-bit counters).
pub const HEADER: usize = 12;

/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// iperf3's default rate of a UDP stream: 1 Mibit/s (`UDP_RATE`).
pub const DEFAULT_RATE: u64 = 1024 * 1024;

/// How long a side waits for the other's handshake datagram.
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

/// Writes the header of packet `number`, sent now, into `buf` (at least [`HEADER`] bytes).
pub fn stamp(buf: &mut [u8], number: u32) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    buf[..4].copy_from_slice(&(now.as_secs() as u32).to_be_bytes());
    buf[4..8].copy_from_slice(&now.subsec_micros().to_be_bytes());
    buf[8..12].copy_from_slice(&number.to_be_bytes());
}

/// A header read back: (send time in seconds since the epoch, packet number).
pub fn read_header(buf: &[u8]) -> Option<(f64, u64)> {
    let word = |at: usize| u32::from_be_bytes(buf[at..at + 4].try_into().unwrap_or_default());
    (buf.len() >= HEADER).then(|| {
        (
            f64::from(word(0)) + f64::from(word(4)) * 1e-6,
            u64::from(word(8)),
        )
    })
}

/// What a UDP receiver counted, as iperf3's receiver does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    /// The highest packet number seen (iperf3's `packet_count`).
    pub packets: u64,
    /// Packets missing below it (less those that came late).
    pub lost: u64,
    /// Packets that came after a higher number.
    pub out_of_order: u64,
    /// Smoothed difference of transit times, in seconds.
    pub jitter: f64,
    /// The last transit time (the jitter's reference), in seconds.
    transit: Option<f64>,
}

impl Counts {
    /// A sender's counts: its datagrams.
    pub fn sent(packets: u64) -> Counts {
        Counts {
            packets,
            ..Counts::default()
        }
    }

    /// Counts a datagram numbered `number`, sent at `sent` and arrived at `arrived` (seconds
    /// since the epoch, on each side's clock: only their differences count).
    pub fn arrived(&mut self, number: u64, sent: f64, arrived: f64) {
        if number > self.packets {
            self.lost += number - 1 - self.packets;
            self.packets = number;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let transit = arrived - sent;
        let d = (transit - self.transit.unwrap_or(transit)).abs();
        self.transit = Some(transit);
        self.jitter += (d - self.jitter) / 16.0;
    }
}

/// The time now in seconds since the epoch.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// A UDP socket bound to `addr` with `SO_REUSEADDR`, as iperf3's server binds each of its UDP
/// listeners: the one that took a client is connected to it, and a new one takes the port for
/// the next stream.
pub fn bind_shared(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // Both families on the wildcard, as the TCP listener takes them.
        let _ = s.set_only_v6(false);
    }
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The server's side of a stream's handshake on `listener`: waits at most `wait` for a client's
/// datagram and connects `listener` to it (`true`; `false`: none came). The caller binds the
/// port's next listener, then [`reply`]s: the client makes its next stream only after the
/// answer, which finds that listener there.
pub fn accept(listener: &UdpSocket, wait: Duration) -> io::Result<bool> {
    listener.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
    let mut word = [0u8; 8];
    match listener.recv_from(&mut word) {
        // iperf3's word, in either byte order (a client writes it in its own); anything else
        // (a stranger's datagram) is not a stream.
        Ok((4, peer)) if is_connect(&word[..4]) => {
            listener.connect(peer)?;
            listener.set_read_timeout(None)?;
            Ok(true)
        }
        Ok(_) => Ok(false),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Whether `word` is iperf3's connect word, in either byte order.
fn is_connect(word: &[u8]) -> bool {
    word == CONNECT.to_be_bytes() || word == CONNECT.to_le_bytes()
}

/// The server's answer on a stream [`accept`] connected.
pub fn reply(stream: &UdpSocket) -> io::Result<()> {
    stream.send(&REPLY.to_ne_bytes()).map(drop)
}

/// The client's side: `socket` (connected to the server's port) says it is there and waits for
/// the answer.
pub fn connect(socket: &UdpSocket) -> io::Result<()> {
    socket.set_read_timeout(Some(HANDSHAKE_WAIT))?;
    socket.send(&CONNECT.to_ne_bytes())?;
    let mut word = [0u8; 4];
    let n = socket.recv(&mut word)?;
    let answer = u32::from_ne_bytes(word);
    if n != 4 || (answer != REPLY && answer != LEGACY_REPLY) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the server answered the UDP stream's handshake with {n} bytes ({answer:#x})"),
        ));
    }
    socket.set_read_timeout(None)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back() {
        let mut b = [0u8; 32];
        stamp(&mut b, 7);
        let (sent, n) = read_header(&b).unwrap();
        assert_eq!(n, 7);
        assert!((now() - sent).abs() < 5.0);
        assert!(read_header(&b[..11]).is_none());
    }

    #[test]
    fn losses_and_late_packets_count_as_iperf3s_do() {
        let mut c = Counts::default();
        for n in [1, 2, 5, 3, 6] {
            c.arrived(n, 0.0, 0.001);
        }
        // 3 and 4 missing when 5 came; 3 came late.
        assert_eq!((c.packets, c.lost, c.out_of_order), (6, 1, 1));
        assert_eq!(c.jitter, 0.0);
        let mut c = Counts::default();
        c.arrived(1, 0.0, 0.001);
        c.arrived(2, 0.0, 0.017);
        assert!((c.jitter - 0.001).abs() < 1e-9, "{}", c.jitter);
    }

    #[test]
    fn the_handshake_runs_between_two_sockets() {
        let listener = bind_shared("127.0.0.1:0".parse().unwrap()).unwrap();
        let at = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            while !accept(&listener, Duration::from_millis(100))? {}
            reply(&listener)?;
            Ok::<_, io::Error>(listener)
        });
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(at).unwrap();
        // A stranger's datagram first: not a stream.
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(b"hello", at).unwrap();
        stranger.send_to(&[1, 2, 3, 4], at).unwrap();
        connect(&client).unwrap();
        let server = server.join().unwrap().unwrap();
        assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
        assert!(is_connect(&0x3637_3839u32.to_be_bytes()));
        assert!(!is_connect(b"9877"));
    }
}
