//! The kernel's `udpgso_bench_tx` beside zcnet ([`crate::bench::reference`]): the mode it has
//! beside each of zcnet's, and one run of it.

use std::net::IpAddr;

use netlab::Family;

use super::mode::Mode;
use super::send::Shape;
use crate::bench::reference::Reference;
use crate::measure::Run;

/// The reference's figures for one run of `mode` (a mode [`reference_twin`] gave).
pub(super) fn reference_run(
    reference: &Reference,
    dest: IpAddr,
    family: Family,
    mode: Mode,
    shape: Shape,
) -> anyhow::Result<Run> {
    let seg = shape.segment.get();
    reference.run_udpgso_tx(crate::bench::reference::UdpGso {
        dest,
        family,
        len: shape.pool.train_bytes(),
        segment: matches!(mode, Mode::GsoCopy | Mode::GsoZc).then_some(seg),
        sendmmsg: mode == Mode::Sendmmsg,
        zerocopy: mode == Mode::GsoZc,
        seconds: shape.seconds,
    })
}

/// The mode the reference can run beside `mode` at this segment size.
pub(super) fn reference_twin(mode: Mode, family: Family, segment: usize) -> Option<Mode> {
    // Its plain and sendmmsg modes cut datagrams at 1500 less the headers.
    let mss = match family {
        Family::V4 => 1472,
        Family::V6 => 1452,
    };
    match mode {
        Mode::Sendmsg | Mode::Sendmmsg if segment == mss => Some(mode),
        Mode::GsoCopy | Mode::GsoZc => Some(mode),
        _ => None,
    }
}
