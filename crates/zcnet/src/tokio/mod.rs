//! The zero-copy paths under tokio (feature `tokio`): the same types as the synchronous
//! mechanisms, with the same names, `Config`s, counters and fallback reasons, whose waits are
//! `.await`s on the runtime's reactor (`AsyncFd`) instead of `poll(2)`. Each twin is here with
//! its mechanism's feature.
//!
//! | here | synchronous twin | waits for |
//! |---|---|---|
//! | [`ZeroCopySender`] | [`crate::msg_zerocopy::ZeroCopySender`] | writable; completions on `Interest::ERROR` (tokio 1.32+), where `MSG_ZEROCOPY` completions arrive |
//! | [`TcpZeroCopyReceiver`] | [`crate::tcp_rx::TcpZeroCopyReceiver`] | readable |
//! | [`FileSender`] | [`crate::file::FileSender`] | writable; a page-cache miss is read on the blocking pool |
//! | [`UringSender`] | [`crate::uring::UringSender`] | an eventfd registered with the ring (`IORING_REGISTER_EVENTFD`) |
//! | [`PeekCursor`] | [`crate::peek::PeekCursor`] | readable |
//! | [`relay()`], [`relay::serve`] | [`crate::relay::relay`], [`crate::relay::serve`] | the relay's own epoll set, watched by the reactor |
//!
//! # Sockets
//! Each type takes a tokio socket (`tokio::net::TcpStream`, `UdpSocket`) or a std one, through
//! [`IntoStdSocket`]: the socket leaves tokio's own registration and is registered again,
//! non-blocking, with the interests the mechanism needs (a socket cannot be in the same epoll set
//! twice).
//!
//! # Cancellation
//! Dropping any future of this module loses nothing and never leaves the kernel reading memory
//! that was given back: a buffer is owned by the sender from the moment `send` is called until
//! it comes back as a [`Returned`](crate::loan::Returned) (or inside a
//! [`SendError`](crate::loan::SendError)). A send future dropped while its buffer is part-way
//! out leaves it with the sender, whose next `send` or `drain` finishes it first, so a stream
//! never has a gap. Each method says what its cancellation leaves.
//!
#![cfg_attr(
    feature = "msg_zerocopy",
    doc = r#"
# Example
```
# #[tokio::main(flavor = "current_thread")]
# async fn main() -> Result<(), Box<dyn std::error::Error>> {
use tokio::io::AsyncReadExt;
use zcnet::msg_zerocopy::Config;
use zcnet::tokio::ZeroCopySender;

let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
let stream = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
let (mut peer, _) = listener.accept().await?;
let mut tx = ZeroCopySender::new(stream, Config::default())?;
tx.send(vec![9u8; 1 << 20]).await.map_err(|e| e.error)?;
let reader = tokio::spawn(async move {
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.map(|_| got)
});
tx.drain().await?; // every buffer is back
let back = tx.returned().next().expect("the buffer");
assert_eq!(back.sent, 1 << 20);
drop(tx); // closes the connection
assert_eq!(reader.await??, vec![9u8; 1 << 20]);
# Ok(())
# }
```
"#
)]

use std::io;
#[cfg(any(feature = "tcp_rx", feature = "peek", feature = "file"))]
use std::os::fd::{AsFd, BorrowedFd};

#[cfg(feature = "file")]
mod file;
#[cfg(feature = "msg_zerocopy")]
mod msg_zerocopy;
#[cfg(feature = "peek")]
mod peek;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(feature = "tcp_rx")]
mod tcp_rx;
#[cfg(feature = "uring")]
mod uring;

#[cfg(feature = "file")]
pub use file::FileSender;
#[cfg(feature = "msg_zerocopy")]
pub use msg_zerocopy::ZeroCopySender;
#[cfg(feature = "peek")]
pub use peek::PeekCursor;
#[cfg(feature = "relay")]
pub use relay::relay;
#[cfg(feature = "tcp_rx")]
pub use tcp_rx::TcpZeroCopyReceiver;
#[cfg(feature = "uring")]
pub use uring::UringSender;

mod sealed {
    pub trait Sealed {}
}

/// A socket the async types can own: tokio's (taken out of its registration with
/// `into_std`) or std's (`TcpStream`, `UdpSocket`), made non-blocking. Sealed: the
/// registration relies on the socket owning its fd, and the std socket it becomes is an
/// [`ExclusiveSocket`](crate::loan::ExclusiveSocket), which the zero-copy senders require.
pub trait IntoStdSocket: sealed::Sealed + std::os::fd::AsFd {
    /// The std socket it becomes.
    type Std: crate::loan::ExclusiveSocket;
    /// The std socket, non-blocking.
    ///
    /// # Errors
    /// The `into_std` or `fcntl` error.
    fn into_std_socket(self) -> io::Result<Self::Std>;
}

macro_rules! into_std {
    ($tokio:ty, $std:ty) => {
        impl sealed::Sealed for $tokio {}
        impl sealed::Sealed for $std {}
        impl IntoStdSocket for $tokio {
            type Std = $std;
            fn into_std_socket(self) -> io::Result<$std> {
                let s = self.into_std()?;
                s.set_nonblocking(true)?;
                Ok(s)
            }
        }
        impl IntoStdSocket for $std {
            type Std = $std;
            fn into_std_socket(self) -> io::Result<$std> {
                self.set_nonblocking(true)?;
                Ok(self)
            }
        }
    };
}

/// The async twins register the sync types through their socket.
#[cfg(any(feature = "tcp_rx", feature = "peek", feature = "file"))]
macro_rules! owns_socket {
    ($($ty:ty),* $(,)?) => {$(
        impl<S: AsFd + IntoStdSocket<Std = S>> crate::sys::reactor::WatchedFd for $ty {
            fn fd(&self) -> BorrowedFd<'_> {
                self.get_ref().as_fd()
            }
        }
    )*};
}

#[cfg(feature = "tcp_rx")]
owns_socket!(crate::tcp_rx::TcpZeroCopyReceiver<S>);
#[cfg(feature = "peek")]
owns_socket!(crate::peek::PeekCursor<S>);
#[cfg(feature = "file")]
owns_socket!(crate::file::FileSender<S>);

into_std!(::tokio::net::TcpStream, std::net::TcpStream);
into_std!(::tokio::net::UdpSocket, std::net::UdpSocket);
