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
//! | [`LoaningSender`] | `send` (loan a buffer), `flush` (submit), `reap`, `returned`, `in_flight`, `drain(timeout)` (wait for every loan), `wait_returned(timeout)` (wait for one), `close(timeout)` (end, saying what the kernel kept) | `msg_zerocopy::ZeroCopySender`, `uring::UringSender` |
//! | [`LendingReceiver`] | `recv` (lend the next bytes until the next call) | `tcp_rx::TcpZeroCopyReceiver`, `peek::PeekCursor` |
//! | [`FrameSource`] | `recv_frames` (lend each frame to a closure) | `packet::Capture`, `xdp::XdpSocket` |
//! | [`FrameSink`] | `push` (queue a copy of a frame), `flush` (submit) | `packet::TxRing`, `xdp::XdpSocket` |
//!
//! Under the feature `tokio`, `AsyncLoaningSender` and `AsyncLendingReceiver` are the same
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
    /// The oldest buffer that came back and was not taken yet, alone, without waiting.
    fn pop_returned(&mut self) -> Option<Returned<B>>;
    /// Buffers loaned and not yet back.
    fn in_flight(&self) -> usize;
    /// Submits and waits up to `timeout` for every loan to come back.
    ///
    /// # Errors
    /// `TimedOut` with buffers still loaned, or the kernel's error.
    fn drain(&mut self, timeout: Duration) -> io::Result<()>;
    /// Submits and waits up to `timeout` for one loan to come back; the oldest buffer back
    /// (`None`: none came in time, or nothing is loaned).
    ///
    /// # Errors
    /// The kernel's.
    fn wait_returned(&mut self, timeout: Duration) -> io::Result<Option<Returned<B>>>;
    /// Ends the sender after waiting up to `timeout` for its loans: the buffers back, and how
    /// many the kernel still held (left to it: [`crate::loan::leaked_buffers`]).
    fn close(self, timeout: Duration) -> crate::loan::Closed<B>
    where
        Self: Sized;
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
    fn wait_returned(&mut self) -> impl Future<Output = io::Result<Option<Returned<B>>>>;
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
// One module per mechanism, built with its feature.

/// `Mechanism` for a type whose inherent `mode`, `counters` and `fallback_reason` answer it.
#[allow(unused_macros)] // a build without any mechanism
macro_rules! mechanism {
    (impl[$($g:tt)*] $ty:ty => $m:ident) => {
        impl<$($g)*> $crate::mechanism::Mechanism for $ty {
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
    };
}

/// `LoaningSender` for a sender whose inherent methods of those names answer it.
#[allow(unused_macros)]
macro_rules! loaning_sender {
    (impl[$($g:tt)*] $ty:ty, flush: $flush:expr) => {
        impl<$($g)*> $crate::mechanism::LoaningSender<B> for $ty {
            fn send(&mut self, buf: B) -> Result<(), $crate::loan::SendError<B>> {
                <$ty>::send(self, buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                $flush(self)
            }
            fn reap(&mut self) -> std::io::Result<usize> {
                <$ty>::reap(self)
            }
            fn returned(&mut self) -> impl Iterator<Item = $crate::loan::Returned<B>> + '_ {
                <$ty>::returned(self)
            }
            fn pop_returned(&mut self) -> Option<$crate::loan::Returned<B>> {
                <$ty>::pop_returned(self)
            }
            fn in_flight(&self) -> usize {
                <$ty>::in_flight(self)
            }
            fn drain(&mut self, timeout: std::time::Duration) -> std::io::Result<()> {
                <$ty>::drain(self, timeout)
            }
            fn wait_returned(
                &mut self,
                timeout: std::time::Duration,
            ) -> std::io::Result<Option<$crate::loan::Returned<B>>> {
                <$ty>::wait_returned(self, timeout)
            }
            fn close(self, timeout: std::time::Duration) -> $crate::loan::Closed<B> {
                <$ty>::close(self, timeout)
            }
        }
    };
}

/// `AsyncLoaningSender` for an async sender whose inherent methods of those names answer it.
#[cfg(feature = "tokio")]
#[allow(unused_macros)]
macro_rules! async_loaning_sender {
    (impl[$($g:tt)*] $ty:ty) => {
        impl<$($g)*> $crate::mechanism::AsyncLoaningSender<B> for $ty {
            async fn send(&mut self, buf: B) -> Result<(), $crate::loan::SendError<B>> {
                <$ty>::send(self, buf).await
            }
            fn returned(&mut self) -> impl Iterator<Item = $crate::loan::Returned<B>> + '_ {
                <$ty>::returned(self)
            }
            async fn wait_returned(&mut self) -> std::io::Result<Option<$crate::loan::Returned<B>>> {
                <$ty>::wait_returned(self).await
            }
            fn in_flight(&self) -> usize {
                <$ty>::in_flight(self)
            }
            async fn drain(&mut self) -> std::io::Result<()> {
                <$ty>::drain(self).await
            }
        }
    };
}

#[cfg(feature = "msg_zerocopy")]
mod msg_zerocopy_shape {
    use crate::loan::{ExclusiveSocket, OwnedBuf};
    use crate::msg_zerocopy::{self, ZeroCopySender};

    mechanism!(impl[S: ExclusiveSocket, B: OwnedBuf] ZeroCopySender<S, B> => msg_zerocopy);
    // Every send is its own `sendmsg`: nothing waits to be submitted.
    loaning_sender!(impl[S: ExclusiveSocket, B: OwnedBuf] ZeroCopySender<S, B>, flush: |_| Ok(()));

    #[cfg(feature = "tokio")]
    mod tokio {
        use crate::loan::{ExclusiveSocket, OwnedBuf};
        use crate::msg_zerocopy;
        use crate::tokio::{IntoStdSocket, ZeroCopySender};

        mechanism!(impl[S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf] ZeroCopySender<S, B> => msg_zerocopy);
        async_loaning_sender!(impl[S: ExclusiveSocket + IntoStdSocket<Std = S>, B: OwnedBuf] ZeroCopySender<S, B>);
    }
}

#[cfg(feature = "uring")]
mod uring_shape {
    use crate::loan::{ExclusiveSocket, OwnedBuf};
    use crate::uring::{self, UringSender};

    mechanism!(impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B> => uring);
    loaning_sender!(impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B>, flush: UringSender::flush);

    #[cfg(feature = "tokio")]
    mod tokio {
        use crate::loan::{ExclusiveSocket, OwnedBuf};
        use crate::tokio::UringSender;
        use crate::uring;

        mechanism!(impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B> => uring);
        async_loaning_sender!(impl[S: ExclusiveSocket, B: OwnedBuf] UringSender<S, B>);
    }
}

#[cfg(feature = "tcp_rx")]
mod tcp_rx_shape {
    use std::os::fd::AsFd;

    use super::{LendingReceiver, Lent};
    use crate::tcp_rx::{self, RxError, TcpZeroCopyReceiver};

    mechanism!(impl[S: AsFd] TcpZeroCopyReceiver<S> => tcp_rx);

    impl<S: AsFd> LendingReceiver for TcpZeroCopyReceiver<S> {
        type Error = RxError;
        fn recv(&mut self) -> Result<Option<Lent<'_>>, RxError> {
            Ok(TcpZeroCopyReceiver::recv(self)?.map(|r| Lent::new(r.mapped, r.copied)))
        }
    }

    #[cfg(feature = "tokio")]
    mod tokio {
        use std::os::fd::AsFd;

        use crate::mechanism::{AsyncLendingReceiver, Lent};
        use crate::tcp_rx::{self, RxError};
        use crate::tokio::{IntoStdSocket, TcpZeroCopyReceiver};

        mechanism!(impl[S: AsFd + IntoStdSocket<Std = S>] TcpZeroCopyReceiver<S> => tcp_rx);

        impl<S: AsFd + IntoStdSocket<Std = S>> AsyncLendingReceiver for TcpZeroCopyReceiver<S> {
            type Error = RxError;
            async fn recv(&mut self) -> Result<Option<Lent<'_>>, RxError> {
                let got = TcpZeroCopyReceiver::recv(self).await?;
                Ok(got.map(|r| Lent::new(r.mapped, r.copied)))
            }
        }
    }
}

#[cfg(feature = "peek")]
mod peek_shape {
    use std::os::fd::AsFd;

    use super::{LendingReceiver, Lent};
    use crate::peek::{self, PeekCursor, PeekError};

    mechanism!(impl[S: AsFd] PeekCursor<S> => peek);

    impl<S: AsFd> LendingReceiver for PeekCursor<S> {
        type Error = PeekError;
        fn recv(&mut self) -> Result<Option<Lent<'_>>, PeekError> {
            Ok(PeekCursor::recv(self)?.map(|b| Lent::new(b, &[])))
        }
    }

    #[cfg(feature = "tokio")]
    mod tokio {
        use std::os::fd::AsFd;

        use crate::mechanism::{AsyncLendingReceiver, Lent};
        use crate::peek::{self, PeekError};
        use crate::tokio::{IntoStdSocket, PeekCursor};

        mechanism!(impl[S: AsFd + IntoStdSocket<Std = S>] PeekCursor<S> => peek);

        impl<S: AsFd + IntoStdSocket<Std = S>> AsyncLendingReceiver for PeekCursor<S> {
            type Error = PeekError;
            async fn recv(&mut self) -> Result<Option<Lent<'_>>, PeekError> {
                Ok(PeekCursor::recv(self).await?.map(|b| Lent::new(b, &[])))
            }
        }
    }
}

#[cfg(feature = "file")]
mod file_shape {
    use std::os::fd::AsFd;

    use crate::file::{self, FileSender};

    mechanism!(impl[S: AsFd] FileSender<S> => file);

    #[cfg(feature = "tokio")]
    mod tokio {
        use std::os::fd::AsFd;

        use crate::file;
        use crate::tokio::{FileSender, IntoStdSocket};

        mechanism!(impl[S: AsFd + IntoStdSocket<Std = S>] FileSender<S> => file);
    }
}

#[cfg(feature = "packet")]
mod packet_shape {
    use std::time::Duration;

    use super::{FrameSink, FrameSource};
    use crate::packet::{self, Capture, PacketError, TxRing};

    mechanism!(impl[] Capture => packet);

    impl FrameSource for Capture {
        type Error = PacketError;
        fn recv_frames(
            &mut self,
            timeout: Option<Duration>,
            f: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, PacketError> {
            Capture::recv_frames(self, timeout, |frame| f(frame.data))
        }
    }

    impl FrameSink for TxRing {
        type Error = PacketError;
        fn push(&mut self, frame: &[u8]) -> Result<bool, PacketError> {
            TxRing::push(self, frame)
        }
        fn flush(&mut self) -> Result<(), PacketError> {
            TxRing::flush(self).map(drop)
        }
    }
}

#[cfg(feature = "xdp")]
mod xdp_shape {
    use std::time::Duration;

    use super::{FrameSink, FrameSource};
    use crate::xdp::{self, XdpError, XdpSocket};

    mechanism!(impl[] XdpSocket => xdp);
    mechanism!(impl[] xdp::Queues => xdp);

    impl FrameSource for xdp::Queues {
        type Error = XdpError;
        fn recv_frames(
            &mut self,
            timeout: Option<Duration>,
            f: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, XdpError> {
            self.recv_with(timeout, &mut |_, frame| f(frame))
        }
    }

    impl FrameSource for XdpSocket {
        type Error = XdpError;
        fn recv_frames(
            &mut self,
            timeout: Option<Duration>,
            f: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, XdpError> {
            let Some(frames) = XdpSocket::recv(self, timeout)? else {
                return Ok(0);
            };
            frames.iter().for_each(&mut *f);
            Ok(frames.len())
        }
    }

    impl FrameSink for XdpSocket {
        type Error = XdpError;
        fn push(&mut self, frame: &[u8]) -> Result<bool, XdpError> {
            XdpSocket::push(self, frame)
        }
        fn flush(&mut self) -> Result<(), XdpError> {
            XdpSocket::drain(self, Duration::from_secs(10))
        }
    }
}
