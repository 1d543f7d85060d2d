//! `getsockopt(TCP_INFO)`: a connection's state and byte counters, typed.
//!
//! # References
//! - `tcp(7)` (`TCP_INFO`), `linux/tcp.h` (`struct tcp_info`)

use std::io;
use std::os::fd::AsFd;

use crate::sys;

/// A TCP connection's state (`tcpi_state`, the kernel's `enum tcp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    /// `TCP_ESTABLISHED`.
    Established,
    /// `TCP_SYN_SENT`.
    SynSent,
    /// `TCP_SYN_RECV`.
    SynRecv,
    /// `TCP_FIN_WAIT1`.
    FinWait1,
    /// `TCP_FIN_WAIT2`.
    FinWait2,
    /// `TCP_TIME_WAIT`.
    TimeWait,
    /// `TCP_CLOSE`: closed, also after a reset.
    Close,
    /// `TCP_CLOSE_WAIT`: the peer's FIN arrived.
    CloseWait,
    /// `TCP_LAST_ACK`.
    LastAck,
    /// `TCP_LISTEN`.
    Listen,
    /// `TCP_CLOSING`.
    Closing,
    /// `TCP_NEW_SYN_RECV`.
    NewSynRecv,
    /// A value this version does not know.
    Unknown(u8),
}

impl TcpState {
    /// The state of kernel value `v` (`include/net/tcp_states.h`).
    pub fn from_kernel(v: u8) -> TcpState {
        use TcpState::*;
        match v {
            1 => Established,
            2 => SynSent,
            3 => SynRecv,
            4 => FinWait1,
            5 => FinWait2,
            6 => TimeWait,
            7 => Close,
            8 => CloseWait,
            9 => LastAck,
            10 => Listen,
            11 => Closing,
            12 => NewSynRecv,
            v => Unknown(v),
        }
    }

    /// Whether the peer's FIN arrived or the connection is closed (`CLOSE_WAIT`, `LAST_ACK`,
    /// `CLOSING`, `CLOSE`): no more bytes will be queued.
    pub fn peer_closed(self) -> bool {
        matches!(
            self,
            TcpState::CloseWait | TcpState::LastAck | TcpState::Closing | TcpState::Close
        )
    }
}

/// The fields of `struct tcp_info` zcnet uses. A counter is `None` when the kernel's struct
/// ends before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TcpInfo {
    /// `tcpi_state`.
    pub state: TcpState,
    /// `tcpi_bytes_acked` (Linux 4.2): bytes the peer acknowledged, counting the SYN when this
    /// side opened the connection (see [`TcpInfo::acked_data_bytes`]).
    pub bytes_acked: Option<u64>,
    /// `tcpi_bytes_received` (4.2): data bytes received and acknowledged.
    pub bytes_received: Option<u64>,
    /// `tcpi_bytes_sent` (4.19): data bytes sent, retransmissions included.
    pub bytes_sent: Option<u64>,
    /// `tcpi_bytes_retrans` (4.19).
    pub bytes_retrans: Option<u64>,
    /// `tcpi_unacked`: segments sent and not yet acknowledged (in flight).
    pub unacked: u32,
    /// `tcpi_probes`: zero-window probes sent since the peer's last ACK (every ACK the kernel
    /// takes zeroes it).
    pub probes: u8,
    /// `tcpi_last_ack_recv`: milliseconds since the last ACK from the peer.
    pub last_ack_recv_ms: u32,
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life (what iperf3
    /// reports as a sender's `retransmits`).
    pub total_retrans: u32,
    /// `tcpi_snd_mss`: the bytes of a segment this side sends.
    pub snd_mss: u32,
    /// `tcpi_snd_cwnd`: the congestion window, in segments (iperf3's `Cwnd` is it times
    /// [`snd_mss`](Self::snd_mss)).
    pub snd_cwnd: u32,
    /// `tcpi_rtt`: the smoothed round-trip time, in microseconds.
    pub rtt_us: u32,
    /// `tcpi_rttvar`: its variation, in microseconds.
    pub rttvar_us: u32,
    /// `tcpi_pmtu`: the path MTU.
    pub pmtu: u32,
    /// `tcpi_snd_wnd` (Linux 5.4): the peer's advertised receive window, in bytes.
    pub snd_wnd: Option<u32>,
}

impl TcpInfo {
    /// Data bytes the peer acknowledged on an actively opened connection: `tcpi_bytes_acked`
    /// less the SYN's one. A FIN's acknowledgement adds one more at the end; cap at what was
    /// sent.
    pub fn acked_data_bytes(&self) -> Option<u64> {
        self.bytes_acked.map(|n| n.saturating_sub(1))
    }

    /// The congestion window in bytes: `tcpi_snd_cwnd * tcpi_snd_mss`, as iperf3 reports it.
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }
}

/// `getsockopt(IPPROTO_TCP, TCP_INFO)` on `socket`.
///
/// # Errors
/// `getsockopt`'s error (`ENOPROTOOPT` when `socket` is not TCP).
#[doc(alias = "TCP_INFO")]
pub fn tcp_info(socket: &impl AsFd) -> io::Result<TcpInfo> {
    let (raw, len) = sys::sockopt::tcp_info(socket.as_fd())?;
    if len == 0 {
        return Err(io::Error::other("TCP_INFO returned nothing"));
    }
    Ok(TcpInfo::from_raw(&raw, len))
}

impl TcpInfo {
    /// The fields of the `len` bytes the kernel filled. The head (state to `tcpi_last_ack_recv`)
    /// is in every kernel zcnet runs on; the rest of `raw` was zeroed by the caller.
    fn from_raw(raw: &sys::abi::TcpInfo, len: usize) -> TcpInfo {
        let has = |end: usize| len >= end;
        let u32_at = |at: usize| u32::from_ne_bytes(raw.head[at..at + 4].try_into().unwrap());
        TcpInfo {
            state: TcpState::from_kernel(raw.head[0]),
            bytes_acked: has(128).then_some(raw.bytes_acked),
            bytes_received: has(136).then_some(raw.bytes_received),
            bytes_sent: has(208).then_some(raw.bytes_sent),
            bytes_retrans: has(216).then_some(raw.bytes_retrans),
            unacked: u32_at(24),
            probes: raw.head[3],
            last_ack_recv_ms: u32_at(56),
            total_retrans: u32_at(100),
            snd_mss: u32_at(16),
            snd_cwnd: u32_at(80),
            rtt_us: u32_at(68),
            rttvar_us: u32_at(72),
            pmtu: u32_at(60),
            snd_wnd: has(232).then_some(raw.snd_wnd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_at_their_offsets_in_linux_tcp_h() {
        let mut raw = sys::abi::TcpInfo {
            head: [0; 120],
            bytes_acked: 0,
            bytes_received: 0,
            middle: [0; 64],
            bytes_sent: 0,
            bytes_retrans: 0,
            tail: [0; 12],
            snd_wnd: 65535,
        };
        raw.head[0] = 1; // tcpi_state: ESTABLISHED
        raw.head[2] = 9; // tcpi_retransmits, not read
        raw.head[3] = 2; // tcpi_probes
        raw.head[24..28].copy_from_slice(&7u32.to_ne_bytes()); // tcpi_unacked
        raw.head[56..60].copy_from_slice(&1500u32.to_ne_bytes()); // tcpi_last_ack_recv
        raw.head[100..104].copy_from_slice(&136u32.to_ne_bytes()); // tcpi_total_retrans
        raw.head[16..20].copy_from_slice(&1448u32.to_ne_bytes()); // tcpi_snd_mss
        raw.head[60..64].copy_from_slice(&1500u32.to_ne_bytes()); // tcpi_pmtu
        raw.head[68..72].copy_from_slice(&250u32.to_ne_bytes()); // tcpi_rtt
        raw.head[72..76].copy_from_slice(&40u32.to_ne_bytes()); // tcpi_rttvar
        raw.head[80..84].copy_from_slice(&10u32.to_ne_bytes()); // tcpi_snd_cwnd
        raw.bytes_acked = 4097;
        let info = TcpInfo::from_raw(&raw, 120);
        assert_eq!(info.state, TcpState::Established);
        assert_eq!(
            (
                info.probes,
                info.unacked,
                info.last_ack_recv_ms,
                info.total_retrans
            ),
            (2, 7, 1500, 136)
        );
        assert_eq!(
            info.bytes_acked, None,
            "the kernel's struct ended before it"
        );
        assert_eq!(
            (info.snd_mss, info.pmtu, info.rtt_us, info.rttvar_us),
            (1448, 1500, 250, 40)
        );
        assert_eq!(info.cwnd_bytes(), 14_480);
        assert_eq!(info.snd_wnd, None, "the kernel's struct ended before it");
        let info = TcpInfo::from_raw(&raw, 216);
        assert_eq!(info.acked_data_bytes(), Some(4096));
        assert_eq!(info.snd_wnd, None);
        assert_eq!(TcpInfo::from_raw(&raw, 232).snd_wnd, Some(65535));
    }
}
