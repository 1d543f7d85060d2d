//! What a relay is told ([`Config`]) and what it reports of each connection ([`Report`],
//! [`Failover`]).

use std::net::SocketAddr;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::Serialize;

use crate::peek;

/// How each connection is relayed.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the source is peeked: [`peek::Mode::ZeroCopy`] (`SO_PEEK_OFF` where the kernel has it),
    /// or one method.
    pub mode: peek::Mode,
    /// Destinations, tried in turn (at least one).
    pub targets: Vec<SocketAddr>,
    /// Bytes unacknowledged at most.
    pub max_unacked: u64,
    /// How long a destination may stay silent while it owes an answer before it is given up:
    /// bytes in flight and unacknowledged, or two window probes in a row unanswered, with
    /// nothing acknowledged and nothing at all received from its TCP for this long. An idle
    /// destination owes nothing, and one that stops reading (its receive window closed) is
    /// healthy for as long as its TCP answers the kernel's window probes (RFC 1122 4.2.2.17
    /// keeps such a connection open): neither is ever failed over, however long it lasts. One
    /// that dies while its window is closed is noticed once two probes went unanswered (the
    /// kernel backs them off from the retransmission timeout up to 2 minutes), then this long.
    pub ack_timeout: Duration,
    /// No destination for this long: give up. Each try of a target gets its share (this over
    /// the number of targets), so that one that does not answer leaves time for the next.
    pub connect_timeout: Duration,
    /// `SO_SNDBUF` of destination sockets (the kernel doubles it): bounds the bytes written and
    /// not yet acknowledged, and a full buffer makes the relay's write wait for acknowledgements.
    pub dest_sndbuf: Option<usize>,
    /// Record the unacknowledged bytes at every peek (benchmarks; memory grows with the stream).
    pub sample_unacked: bool,
}

impl Config {
    /// A relay to `targets` with the defaults of `zcnet relay`: auto mode, 16 MiB unacknowledged
    /// at most, 5 s acknowledgement and connect timeouts, autotuned send buffers.
    pub fn new(targets: Vec<SocketAddr>) -> Config {
        Config {
            mode: peek::Mode::ZeroCopy,
            targets,
            max_unacked: 16 << 20,
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            dest_sndbuf: None,
            sample_unacked: false,
        }
    }
}

/// What one relayed connection did.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Report {
    /// Source address.
    pub peer: String,
    /// `peek-offset` or `discard-buffer`.
    pub method: String,
    /// Bytes of the source stream relayed and acknowledged.
    pub bytes: u64,
    /// Bytes written to destinations, resent ones included.
    pub written: u64,
    /// Bytes sent again after a failover.
    pub resent: u64,
    /// Each failover: which destination failed, why, and the bytes it had acknowledged (the
    /// stream offset the next destination resumed at).
    pub failovers: Vec<Failover>,
    /// Why the cursor does not use `SO_PEEK_OFF`, if it does not.
    pub fallback_reason: Option<String>,
    /// True when the kernel gave no acknowledgement notifications (`SO_TIMESTAMPING`
    /// `TX_ACK`, Linux 4.6) and `TCP_INFO` was polled every millisecond instead.
    pub ack_polling: bool,
    /// Samples of the bytes unacknowledged, one per peek, when [`Config::sample_unacked`].
    #[cfg_attr(feature = "serde", serde(skip))]
    pub unacked_samples: Vec<u64>,
    /// The cursor's counters.
    pub peek: peek::Counters,
}

/// One failover of a relayed connection.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(Serialize))]
pub struct Failover {
    /// The destination that failed.
    pub from: SocketAddr,
    /// The destination the stream resumed on.
    pub to: SocketAddr,
    /// Why it was given up (its error, or no acknowledgement in time).
    pub why: String,
    /// Stream bytes acknowledged by TCP when it failed, all destinations before it included:
    /// the offset the next one resumed at.
    pub acknowledged: u64,
}
