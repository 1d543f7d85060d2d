//! Registration with tokio's reactor: `AsyncFd::register_with_interest` is `unsafe` (tokio 1.54,
//! tokio-rs/tokio#8587: the fd must stay open and the same for the registration's life).

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::tokio::IntoStdSocket;

/// A value that owns its fd and never replaces it: a zcnet type owning its std socket (the
/// sealed [`IntoStdSocket`] types), an `OwnedFd`, an `Epoll`.
///
/// # Safety
/// `fd` must return the same open fd from construction to drop.
pub unsafe trait OwnsFd {
    /// The fd.
    fn fd(&self) -> RawFd;
}

// SAFETY: an `OwnedFd` owns its fd and cannot be made to name another.
unsafe impl OwnsFd for std::os::fd::OwnedFd {
    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

// SAFETY: an `Epoll` owns its fd (an `OwnedFd`) and never replaces it.
unsafe impl OwnsFd for crate::sys::Epoll {
    fn fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// A registered zcnet type: its fd is its socket's.
#[derive(Debug)]
pub struct Registered<T>(pub T);

impl<T: OwnsFd> AsRawFd for Registered<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

/// Registers `inner` with the current runtime's reactor for `interest`.
///
/// # Panics
/// Outside a tokio runtime with I/O enabled.
pub fn register<T: OwnsFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<Registered<T>>> {
    // SAFETY: `OwnsFd` guarantees the fd stays open and the same while `inner` lives, and
    // the `AsyncFd` owns `inner` for the registration's whole life.
    unsafe { AsyncFd::register_with_interest(Registered(inner), interest) }.map_err(io::Error::from)
}

macro_rules! owns_socket {
    ($($ty:ty),* $(,)?) => {$(
        // SAFETY: as above: the type owns a std socket and never replaces it.
        unsafe impl<S: AsFd + IntoStdSocket<Std = S>> OwnsFd for $ty {
            fn fd(&self) -> RawFd {
                self.get_ref().as_fd().as_raw_fd()
            }
        }
    )*};
}

owns_socket!(
    crate::tcp_rx::TcpZerocopyReceiver<S>,
    crate::peek::PeekCursor<S>,
    crate::file::FileSender<S>,
);
