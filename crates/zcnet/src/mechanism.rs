//! The shape every mechanism has, as traits the compiler checks (the repository's
//! `docs/api.md`).
//!
//! Each mechanism keeps its own inherent methods (the words of its kernel interface, and the
//! extras only it has); these traits name what they share, one meaning per verb, so that generic
//! code (a test, a bench, a C binding) drives any of them:
//!
//! | trait | verbs | implemented by |
//! |---|---|---|
//! | [`Mechanism`] | `mode`, `counters`, `fallback_reason` | every sender, receiver and capture |
//! | [`LoaningSender`] | `send` (loan a buffer), `flush` (submit), `reap`, `returned`, `in_flight`, `drain(timeout)` (wait for every loan) | `msg_zerocopy::ZeroCopySender`, `uring::UringSender` |
//! | [`LendingReceiver`] | `recv` (lend the next bytes until the next call) | `tcp_rx::TcpZeroCopyReceiver`, `peek::PeekCursor` |
//! | [`FrameSource`] | `recv_frames` (lend each frame to a closure) | `packet::Capture`, `xdp::XdpSocket` |
//! | [`FrameSink`] | `push` (queue a copy of a frame), `flush` (submit) | `packet::TxRing`, `xdp::XdpSocket` |
//!
//! Under the feature `tokio`, [`AsyncLoaningSender`] and [`AsyncLendingReceiver`] are the same
//! shapes with the waiting verbs `async` (`drain().await` waits for every loan).
//!
//! What is left out on purpose: `file::FileSender` is a [`Mechanism`] but no loaning sender (the
//! kernel reads the page cache, no buffer of the caller is loaned, so there is nothing to give
//! back); `relay` is a function over a [`PeekCursor`](crate::peek::PeekCursor), not a type.

use std::fmt::Debug;
use std::io;
use std::time::Duration;

use crate::ZeroCopyCounters;
use crate::loan::{OwnedBuf, Returned, SendError};

/// What every mechanism answers: the mode in effect, its counters, and why it copies.
pub trait Mechanism {
    /// The mechanism's `Mode`.
    type Mode: Copy + Debug + PartialEq;
    /// The mechanism's `Counters`.
    type Counters: ZeroCopyCounters + Copy + Debug;
    /// The mode in effect: the one asked for, or the copying twin after a fallback.
    fn mode(&self) -> Self::Mode;
    /// What it did so far.
    fn counters(&self) -> Self::Counters;
    /// Why it copies where zero copy was asked for, in one line; `None` where it does not.
    fn fallback_reason(&self) -> Option<&str>;
}

/// A sender that loans owned buffers to the kernel and gives each back with its completion.
pub trait LoaningSender<B: OwnedBuf>: Mechanism {
    /// Loans `buf` to the kernel; a send refused before anything was loaned hands it back.
    ///
    /// # Errors
    /// [`SendError`], holding the buffer.
    fn send(&mut self, buf: B) -> Result<(), SendError<B>>;
    /// Submits what is queued, without waiting (a sender whose every `send` is a system call
    /// has nothing queued).
    ///
    /// # Errors
    /// The kernel's.
    fn flush(&mut self) -> io::Result<()>;
    /// Takes the completions that arrived, without waiting; returns how many buffers came back.
    ///
    /// # Errors
    /// The kernel's.
    fn reap(&mut self) -> io::Result<usize>;
    /// The buffers that came back, each once.
    fn returned(&mut self) -> impl Iterator<Item = Returned<B>> + '_;
    /// Buffers loaned and not yet back.
    fn in_flight(&self) -> usize;
    /// Submits and waits up to `timeout` for every loan to come back.
    ///
    /// # Errors
    /// `TimedOut` with buffers still loaned, or the kernel's error.
    fn drain(&mut self, timeout: Duration) -> io::Result<()>;
}

/// Bytes a receiver lends until its next call, in stream order, in at most two parts (a
/// zero-copy receive lends mapped pages, then the bytes after them that were copied).
#[derive(Clone, Copy, Debug)]
pub struct Lent<'a> {
    parts: [&'a [u8]; 2],
}

impl<'a> Lent<'a> {
    /// Bytes in `first`, then in `second`.
    pub fn new(first: &'a [u8], second: &'a [u8]) -> Lent<'a> {
        Lent {
            parts: [first, second],
        }
    }

    /// The parts in stream order.
    pub fn parts(&self) -> [&'a [u8]; 2] {
        self.parts
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.parts[0].len() + self.parts[1].len()
    }

    /// Whether nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stream receiver that lends what it received until its next call.
pub trait LendingReceiver: Mechanism {
    /// The mechanism's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Waits for the next bytes and lends them; `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// The mechanism's error.
    fn recv(&mut self) -> Result<Option<Lent<'_>>, Self::Error>;
}

/// A source of whole frames (a packet ring, an AF_XDP socket), lent one by one.
pub trait FrameSource: Mechanism {
    /// The mechanism's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Waits up to `timeout` (`None`: forever) for frames and lends each to `f`, from the
    /// link-layer header on; returns how many (0: none came in time).
    ///
    /// # Errors
    /// The mechanism's error.
    fn recv_frames(
        &mut self,
        timeout: Option<Duration>,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, Self::Error>;
}

/// A sink of whole frames: each is copied into the ring the kernel sends from.
pub trait FrameSink {
    /// The mechanism's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Queues a copy of `frame`; `Ok(false)` when the ring is full: [`flush`](Self::flush) and
    /// try again.
    ///
    /// # Errors
    /// A frame the ring cannot hold, or the mechanism's error.
    fn push(&mut self, frame: &[u8]) -> Result<bool, Self::Error>;
    /// Hands the queued frames to the kernel and waits until it took them all (a TX ring's
    /// `send` without `MSG_DONTWAIT`; AF_XDP's copy mode sends at most 32 frames a kick, the
    /// kernel's `TX_BATCH_SIZE`, so its sink kicks until every frame completed).
    ///
    /// # Errors
    /// The kernel's; for AF_XDP, frames still out after 10 s.
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// [`LoaningSender`] on a tokio runtime: the verbs that wait are `async`.
#[cfg(feature = "tokio")]
pub trait AsyncLoaningSender<B: OwnedBuf>: Mechanism {
    /// Loans `buf`, waiting for room (socket buffer, ring window) without blocking the thread.
    fn send(&mut self, buf: B) -> impl Future<Output = Result<(), SendError<B>>>;
    /// The buffers that came back so far, each once, without waiting.
    fn returned(&mut self) -> impl Iterator<Item = Returned<B>> + '_;
    /// Waits for the next buffer to come back; `Ok(None)` when none is loaned.
    fn next_returned(&mut self) -> impl Future<Output = io::Result<Option<Returned<B>>>>;
    /// Buffers loaned and not yet back.
    fn in_flight(&self) -> usize;
    /// Waits for every loan to come back (bound it with `tokio::time::timeout`).
    fn drain(&mut self) -> impl Future<Output = io::Result<()>>;
}

/// [`LendingReceiver`] on a tokio runtime.
#[cfg(feature = "tokio")]
pub trait AsyncLendingReceiver: Mechanism {
    /// The mechanism's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Waits for the next bytes and lends them; `Ok(None)` at the end of the stream.
    fn recv(&mut self) -> impl Future<Output = Result<Option<Lent<'_>>, Self::Error>>;
}

// Every mechanism's inherent methods are its own words; these impls only name them. An inherent
// method of the same name wins in method calls, so each body calls the inherent one by path.

macro_rules! mechanism {
    ($(impl[$($g:tt)*] $ty:ty => $m:ident;)*) => {$(
        impl<$($g)*> Mechanism for $ty {
            type Mode = $m::Mode;
            type Counters = $m::Counters;
            fn mode(&self) -> $m::Mode {
                <$ty>::mode(self)
            }
            fn counters(&self) -> $m::Counters {
                <$ty>::counters(self)
            }
            fn fallback_reason(&self) -> Option<&str> {
                <$ty>::fallback_reason(self)
            }
        }
    )*};
}

mod impls {
    use std::io;
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::{FrameSink, FrameSource, LendingReceiver, Lent, LoaningSender, Mechanism};
    use crate::loan::{ExclusiveSocket, OwnedBuf, Returned, SendError};
    use crate::{file, msg_zerocopy, packet, peek, tcp_rx, uring, xdp};

    mechanism! {
        impl[S: ExclusiveSocket, B: OwnedBuf] msg_zerocopy::ZerocopySender<S, B> => msg_zerocopy;
        impl[S: ExclusiveSocket, B: OwnedBuf] uring::UringSender<S, B> => uring;
        impl[S: AsFd] tcp_rx::TcpZerocopyReceiver<S> => tcp_rx;
        impl[S: AsFd] peek::PeekCursor<S> => peek;
        impl[S: AsFd] file::FileSender<S> => file;
        impl[] packet::Capture => packet;
        impl[] xdp::XdpSocket => xdp;
    }

    impl<S: ExclusiveSocket, B: OwnedBuf> LoaningSender<B> for msg_zerocopy::ZerocopySender<S, B> {
        fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
            msg_zerocopy::ZerocopySender::send(self, buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            // Every send is its own `sendmsg`: nothing waits to be submitted.
            Ok(())
        }
        fn reap(&mut self) -> io::Result<usize> {
            msg_zerocopy::ZerocopySender::reap(self)
        }
        fn returned(&mut self) -> impl Iterator<Item = Returned<B>> + '_ {
            msg_zerocopy::ZerocopySender::returned(self)
        }
        fn in_flight(&self) -> usize {
            msg_zerocopy::ZerocopySender::in_flight(self)
        }
        fn drain(&mut self, timeout: Duration) -> io::Result<()> {
            msg_zerocopy::ZerocopySender::drain(self, timeout)
        }
    }

    impl<S: ExclusiveSocket, B: OwnedBuf> LoaningSender<B> for uring::UringSender<S, B> {
        fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
            uring::UringSender::send(self, buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            uring::UringSender::flush(self)
        }
        fn reap(&mut self) -> io::Result<usize> {
            uring::UringSender::reap(self)
        }
        fn returned(&mut self) -> impl Iterator<Item = Returned<B>> + '_ {
            uring::UringSender::returned(self)
        }
        fn in_flight(&self) -> usize {
            uring::UringSender::in_flight(self)
        }
        fn drain(&mut self, timeout: Duration) -> io::Result<()> {
            uring::UringSender::drain(self, timeout)
        }
    }

    impl<S: AsFd> LendingReceiver for tcp_rx::TcpZerocopyReceiver<S> {
        type Error = tcp_rx::RxError;
        fn recv(&mut self) -> Result<Option<Lent<'_>>, tcp_rx::RxError> {
            Ok(tcp_rx::TcpZerocopyReceiver::recv(self)?.map(|r| Lent::new(r.mapped, r.copied)))
        }
    }

    impl<S: AsFd> LendingReceiver for peek::PeekCursor<S> {
        type Error = peek::PeekError;
        fn recv(&mut self) -> Result<Option<Lent<'_>>, peek::PeekError> {
            Ok(peek::PeekCursor::recv(self)?.map(|b| Lent::new(b, &[])))
        }
    }

    impl FrameSource for packet::Capture {
        type Error = packet::PacketError;
        fn recv_frames(
            &mut self,
            timeout: Option<Duration>,
            f: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, packet::PacketError> {
            self.next_frames(timeout, |frame| f(frame.data))
        }
    }

    impl FrameSource for xdp::XdpSocket {
        type Error = xdp::XdpError;
        fn recv_frames(
            &mut self,
            timeout: Option<Duration>,
            f: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, xdp::XdpError> {
            let Some(frames) = xdp::XdpSocket::recv(self, timeout)? else {
                return Ok(0);
            };
            frames.iter().for_each(&mut *f);
            Ok(frames.len())
        }
    }

    impl FrameSink for packet::TxRing {
        type Error = packet::PacketError;
        fn push(&mut self, frame: &[u8]) -> Result<bool, packet::PacketError> {
            packet::TxRing::push(self, frame)
        }
        fn flush(&mut self) -> Result<(), packet::PacketError> {
            packet::TxRing::send(self).map(drop)
        }
    }

    impl FrameSink for xdp::XdpSocket {
        type Error = xdp::XdpError;
        fn push(&mut self, frame: &[u8]) -> Result<bool, xdp::XdpError> {
            xdp::XdpSocket::send(self, frame)
        }
        fn flush(&mut self) -> Result<(), xdp::XdpError> {
            xdp::XdpSocket::drain(self, Duration::from_secs(10))
        }
    }
}

#[cfg(feature = "tokio")]
mod async_impls {
    use std::io;
    use std::os::fd::AsFd;

    use super::{AsyncLendingReceiver, AsyncLoaningSender, Lent, Mechanism};
    use crate::loan::{ExclusiveSocket, OwnedBuf, Returned, SendError};
    use crate::tokio::{
        FileSender, IntoStdSocket, PeekCursor, TcpZerocopyReceiver, UringSender, ZerocopySender,
    };
    use crate::{file, msg_zerocopy, peek, tcp_rx, uring};

    mechanism! {
        impl[S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf] ZerocopySender<S, B> => msg_zerocopy;
        impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B> => uring;
        impl[S: AsFd + IntoStdSocket<Std = S>] TcpZerocopyReceiver<S> => tcp_rx;
        impl[S: AsFd + IntoStdSocket<Std = S>] PeekCursor<S> => peek;
        impl[S: AsFd + IntoStdSocket<Std = S>] FileSender<S> => file;
    }

    macro_rules! async_sender {
        ($(impl[$($g:tt)*] $ty:ty;)*) => {$(
            impl<$($g)*> AsyncLoaningSender<B> for $ty {
                async fn send(&mut self, buf: B) -> Result<(), SendError<B>> {
                    <$ty>::send(self, buf).await
                }
                fn returned(&mut self) -> impl Iterator<Item = Returned<B>> + '_ {
                    <$ty>::returned(self)
                }
                async fn next_returned(&mut self) -> io::Result<Option<Returned<B>>> {
                    <$ty>::next_returned(self).await
                }
                fn in_flight(&self) -> usize {
                    <$ty>::in_flight(self)
                }
                async fn drain(&mut self) -> io::Result<()> {
                    <$ty>::drain(self).await
                }
            }
        )*};
    }

    async_sender! {
        impl[S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf] ZerocopySender<S, B>;
        impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B>;
    }

    impl<S: AsFd + IntoStdSocket<Std = S>> AsyncLendingReceiver for TcpZerocopyReceiver<S> {
        type Error = tcp_rx::RxError;
        async fn recv(&mut self) -> Result<Option<Lent<'_>>, tcp_rx::RxError> {
            Ok(TcpZerocopyReceiver::recv(self)
                .await?
                .map(|r| Lent::new(r.mapped, r.copied)))
        }
    }

    impl<S: AsFd + IntoStdSocket<Std = S>> AsyncLendingReceiver for PeekCursor<S> {
        type Error = peek::PeekError;
        async fn recv(&mut self) -> Result<Option<Lent<'_>>, peek::PeekError> {
            Ok(PeekCursor::recv(self).await?.map(|b| Lent::new(b, &[])))
        }
    }
}
