//! Registration with tokio's reactor: `AsyncFd::register_with_interest` is `unsafe` (tokio 1.54,
//! tokio-rs/tokio#8587: the fd must stay open and the same for the registration's life).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// The descriptor a value is watched through: its socket, or the fd it is. The registration
/// watches a duplicate of it that it owns itself, so nothing an implementation does (closing or
/// replacing its own fd) can leave the reactor holding a closed or reused number.
pub trait WatchedFd {
    /// The fd.
    fn fd(&self) -> BorrowedFd<'_>;
}

impl WatchedFd for OwnedFd {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
}

impl WatchedFd for super::event::Epoll {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
}

/// A registered value and the duplicate of its descriptor the reactor watches (the same open
/// file, so the same readiness).
#[derive(Debug)]
pub struct Registered<T>(pub T, OwnedFd);

impl<T> AsRawFd for Registered<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.1.as_raw_fd()
    }
}

/// Registers `inner` with the current runtime's reactor for `interest`, through a duplicate of
/// its descriptor (`fcntl(F_DUPFD_CLOEXEC)` once, at registration.)
///
/// # Panics
/// Outside a tokio runtime with I/O enabled.
pub fn register<T: WatchedFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<Registered<T>>> {
    let fd = inner.fd().try_clone_to_owned()?;
    // SAFETY: the fd registered is `Registered`'s own `OwnedFd`: it stays open and names the
    // same file until the `AsyncFd`, which owns the `Registered`, deregisters it and drops.
    unsafe { AsyncFd::register_with_interest(Registered(inner, fd), interest) }
        .map_err(io::Error::from)
}

/// A descriptor watched through a borrow: no duplicate, the borrow keeps it open.
#[derive(Debug)]
pub struct Borrowed<'a>(BorrowedFd<'a>);

impl AsRawFd for Borrowed<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Registers `fd` itself with the current runtime's reactor for `interest`, without a
/// duplicate: for a descriptor whose owner never replaces it (the relay's epoll set, one per
/// connection, where a duplicate was one descriptor a connection more).
///
/// # Panics
/// Outside a tokio runtime with I/O enabled.
pub fn register_borrowed(
    fd: BorrowedFd<'_>,
    interest: Interest,
) -> io::Result<AsyncFd<Borrowed<'_>>> {
    // SAFETY: the `AsyncFd` holds the borrow `fd` for its whole life, so the descriptor stays
    // open and names the same file until it deregisters and drops.
    unsafe { AsyncFd::register_with_interest(Borrowed(fd), interest) }.map_err(io::Error::from)
}
