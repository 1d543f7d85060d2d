//! What `packet` alternates and where: the capture methods ([`Mode`]) and the conditions of
//! the receive processing ([`Condition`]).

use crate::bench::engine::{FRAME_SIZE_HELP, Flags};

/// Where the receive processing runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Condition {
    /// In the generator's softirq (CPU 1): the capture CPU is the capture's alone.
    RxOnGenerator,
    /// Steered (RPS) to the capture's CPU 0.
    RxOnCapture,
    /// The capture device's steering left as it is (the only condition with `--remote`, whose
    /// device is another host's to configure).
    AsConfigured,
}

impl Condition {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Condition::RxOnGenerator => "rx-on-generator",
            Condition::RxOnCapture => "rx-on-capture",
            Condition::AsConfigured => "as-configured",
        }
    }

    /// The `rps_cpus` mask of veth-b: none, or CPU 0; `None`: left as it is.
    pub(super) fn rps_mask(self) -> Option<u64> {
        match self {
            Condition::RxOnGenerator => Some(0),
            Condition::RxOnCapture => Some(1),
            Condition::AsConfigured => None,
        }
    }
}

/// Both conditions.
pub const CONDITIONS: [Condition; 2] = [Condition::RxOnGenerator, Condition::RxOnCapture];

/// A capture method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `recvfrom(2)` per frame on a packet socket.
    Recvfrom,
    /// The `TPACKET_V3` RX ring.
    Ring,
    /// `tcpdump -w -` into /dev/null (Debian package tcpdump).
    Tcpdump,
    /// An `AF_XDP` socket ([`zcnet::xdp`]): zero copy where the driver has it, else copy mode
    /// (veth), the redirect program native where it can be. It takes the frames from the stack.
    Xdp,
}

impl Mode {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Recvfrom => "recvfrom",
            Mode::Ring => "ring",
            Mode::Tcpdump => "tcpdump",
            Mode::Xdp => "xdp",
        }
    }
}

impl Flags for Mode {
    const SIZE_HELP: &'static str = FRAME_SIZE_HELP;
    const SIZES: std::ops::RangeInclusive<u64> = 42..=1514;
    const MODE_HELP: &'static str =
        "Capture method (repeatable; default all three, tcpdump when installed)";
}
