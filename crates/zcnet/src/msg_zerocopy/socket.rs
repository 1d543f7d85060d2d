//! Setting a sender's socket up: `SO_ZEROCOPY` (`setsockopt(2)`, `socket(7)`), its GSO segment
//! (`UDP_SEGMENT`), and the claim that makes it one sender's alone.

use std::os::fd::{AsFd, BorrowedFd};

use super::ZeroCopyError;
use super::error::{gso_error, io_err};
use crate::loan::Claim;
use crate::sys;

/// `setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1)`: without it `MSG_ZEROCOPY` is silently ignored.
///
/// For sockets whose completions the caller reads itself. A
/// [`ZeroCopySender`](super::ZeroCopySender) enables it on its own socket, and refuses a socket on
/// which it is on already ([`ZeroCopyError::SocketInUse`]): the kernel's completion ids there may
/// have started before the sender's first send.
///
/// # Errors
/// [`ZeroCopyError::Unsupported`] on `ENOPROTOOPT`/`EOPNOTSUPP` (kernel or socket type without
/// zero-copy send), [`ZeroCopyError::Io`] otherwise.
#[doc(alias = "SO_ZEROCOPY")]
pub fn enable(socket: &impl AsFd) -> Result<(), ZeroCopyError> {
    match sys::sockopt::set_zerocopy(socket.as_fd(), true) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP)) => {
            Err(ZeroCopyError::Unsupported {
                feature: "SO_ZEROCOPY",
                reason: e.to_string(),
            })
        }
        Err(e) => Err(io_err("setsockopt(SO_ZEROCOPY)")(e)),
    }
}

/// `setsockopt(SO_ZEROCOPY, 0)`: puts back what [`enable`] changed on a sender refused after it.
pub(super) fn disable(socket: &impl AsFd) -> Result<(), ZeroCopyError> {
    sys::sockopt::set_zerocopy(socket.as_fd(), false).map_err(io_err("setsockopt(SO_ZEROCOPY, 0)"))
}

/// Sets [`Config::segment`](super::Config::segment) on a sender's socket (nothing when there is
/// none).
///
/// # Errors
/// [`ZeroCopyError::Unsupported`] for a socket that is not UDP or a kernel without
/// `UDP_SEGMENT`; the `setsockopt` error.
pub(super) fn set_segment(
    socket: &impl AsFd,
    segment: Option<crate::udp_gso::Segment>,
) -> Result<(), ZeroCopyError> {
    let Some(segment) = segment else {
        return Ok(());
    };
    crate::udp_gso::set_segment(socket, Some(segment)).map_err(gso_error)
}

/// Holds the socket of `fd` for one sender ([`crate::loan::Claim`]).
///
/// # Errors
/// [`ZeroCopyError::SocketInUse`] when another sender holds it; the `fstat` error.
pub(super) fn claim(fd: BorrowedFd<'_>) -> Result<Claim, ZeroCopyError> {
    Claim::take(fd).map_err(|e| match e {
        None => ZeroCopyError::SocketInUse {
            reason: crate::loan::IN_USE,
        },
        Some(source) => io_err("fstat")(source),
    })
}
