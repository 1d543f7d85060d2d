//! Registration with tokio's reactor: `AsyncFd::register_with_interest` is `unsafe` (tokio 1.54,
//! tokio-rs/tokio#8587: the fd must stay open and the same for the registration's life).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A value that holds one fd for its whole life and never replaces or closes it before it is
/// dropped: an `OwnedFd`, an `Epoll`, and the crate's socket-owning types (their socket is a
/// private field set at construction). Crate-private (this module is), so only the crate's own
/// types implement it, each beside its definition's async twin.
pub trait OwnsFd {
    /// The fd.
    fn fd(&self) -> BorrowedFd<'_>;
}

impl OwnsFd for OwnedFd {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
}

impl OwnsFd for super::Epoll {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
}

/// A registered value and the fd it was registered with.
#[derive(Debug)]
pub struct Registered<T>(pub T, RawFd);

impl<T> AsRawFd for Registered<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.1
    }
}

/// Registers `inner` with the current runtime's reactor for `interest`.
///
/// # Panics
/// Outside a tokio runtime with I/O enabled.
pub fn register<T: OwnsFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<Registered<T>>> {
    let fd = inner.fd().as_raw_fd();
    // SAFETY: `OwnsFd` values hold their fd open and unchanged until dropped, and the `AsyncFd`
    // owns `inner` for the registration's whole life, naming the fd read here.
    unsafe { AsyncFd::register_with_interest(Registered(inner, fd), interest) }
        .map_err(io::Error::from)
}
