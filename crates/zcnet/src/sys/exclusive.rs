//! Vouching for a descriptor's exclusivity without proof: `unsafe`, so it lives here with the
//! crate's other unsafe code.

use std::os::fd::AsFd;

use crate::loan::AssumeExclusive;

impl<F: AsFd> AssumeExclusive<F> {
    /// Takes `fd` as an [`ExclusiveSocket`](crate::loan::ExclusiveSocket) without owning it:
    /// for a socket owned outside Rust, such as a descriptor a C caller passes to libzcnet.
    ///
    /// The checks of [`ZerocopySender::new`](crate::msg_zerocopy::ZerocopySender::new) still
    /// run (`SO_ZEROCOPY` already on, another sender of this process on the same socket); what
    /// they cannot see is promised here.
    ///
    /// # Safety
    /// For as long as the value lives (and the sender holding it, until that sender is dropped):
    /// - no other sender uses the socket `fd` refers to, and nothing else sends on it with
    ///   `MSG_ZEROCOPY` or reads its error queue (`recvmsg(MSG_ERRQUEUE)`), through `fd` or any
    ///   other descriptor of the same socket (a `dup(2)`, one inherited across `fork(2)` or
    ///   passed over a Unix socket), in this process or another;
    /// - nothing turns `SO_ZEROCOPY` off and on again on it;
    /// - `fd` stays open and keeps referring to the same socket.
    ///
    /// Otherwise the sender can take another sender's completions for its own and give a
    /// buffer back while the kernel still reads it.
    pub unsafe fn new(fd: F) -> AssumeExclusive<F> {
        AssumeExclusive(fd)
    }
}
