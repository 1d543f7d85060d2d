//! The ways `udp-gso` sends a train ([`Mode`]), and the arms of a step's alternation: zcnet's
//! modes and the kernel's `udpgso_bench_tx` beside them ([`Arm`]).

/// One way to send a train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `send(2)` per datagram.
    Sendmsg,
    /// The train's datagrams in one `sendmmsg(2)`.
    Sendmmsg,
    /// The train in one send with `UDP_SEGMENT`, by copy.
    GsoCopy,
    /// The train with `UDP_SEGMENT` and `MSG_ZEROCOPY`.
    GsoZc,
    /// The train with `UDP_SEGMENT` by io_uring `SEND_ZC` from registered buffers.
    GsoZcFixed,
    /// The train with `UDP_SEGMENT`, `Mode::Auto` choosing copy or `MSG_ZEROCOPY`.
    GsoAuto,
}

impl Mode {
    /// Every mode, in the default order (the first is the baseline).
    pub const ALL: [Mode; 6] = [
        Mode::Sendmsg,
        Mode::Sendmmsg,
        Mode::GsoCopy,
        Mode::GsoZc,
        Mode::GsoZcFixed,
        Mode::GsoAuto,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sendmsg => "sendmsg",
            Mode::Sendmmsg => "sendmmsg",
            Mode::GsoCopy => "gso-copy",
            Mode::GsoZc => "gso-zc",
            Mode::GsoZcFixed => "gso-zc-fixed",
            Mode::GsoAuto => "gso-auto",
        }
    }
}

/// One arm of a step's alternation: a zcnet mode, or `udpgso_bench_tx` in that mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arm {
    /// zcnet's sender in this mode.
    Zcnet(Mode),
    /// `udpgso_bench_tx` in this mode.
    Reference(Mode),
}

impl Arm {
    /// The name in tables and JSON: the mode's, `ref-` before the reference's.
    pub(super) fn name(self) -> &'static str {
        match self {
            Arm::Zcnet(m) => m.name(),
            Arm::Reference(Mode::Sendmsg) => "ref-sendmsg",
            Arm::Reference(Mode::Sendmmsg) => "ref-sendmmsg",
            Arm::Reference(Mode::GsoCopy) => "ref-gso-copy",
            Arm::Reference(Mode::GsoZc) => "ref-gso-zc",
            Arm::Reference(_) => "ref-none",
        }
    }
}
