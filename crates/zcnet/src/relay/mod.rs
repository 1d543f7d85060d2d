//! A TCP relay that keeps the bytes it forwards in the source connection's kernel receive queue
//! until the destination's TCP has acknowledged them, reading them with a peek cursor
//! ([`crate::peek`], `SO_PEEK_OFF`). `zcnet relay` is this module behind a command line.
//!
//! What is guaranteed, source to destination: a byte is dropped from the source's queue only
//! once the destination's TCP acknowledged it (`tcpi_bytes_acked` of `TCP_INFO`). When the
//! destination fails (reset, refused, silent while it owes an answer: [`Config::ack_timeout`]),
//! the relay resets it and connects to the next of [`Config::targets`] it has not given up on,
//! and sends from the first unacknowledged byte, straight from the kernel queue: no user-space
//! retransmit buffer. A destination that failed is not used again for that connection (it would
//! take a second piece of one stream for a new one); with none left the relay ends in
//! [`RelayError::DestinationFailed`] and resets the source. A destination that is idle, or that
//! stops reading while its TCP answers the window probes, has not failed. Bytes a destination's
//! TCP acknowledged but its application never read are outside what a relay can know.
//!
//! Ends are passed on as they came, so that a cut stream never looks whole: the source's FIN
//! as a FIN once the destination acknowledged every byte; a source's reset (any end without its
//! FIN) as a reset after those bytes ([`RelayError::SourceReset`]). Any other error, and the
//! async relay's future dropped, reset both connections. The reply (destination to source) is
//! copied as it comes, without the guarantee, by the same session: a connection ends when both
//! directions have ended, the destination's FIN passed to the source after the source's passed
//! to the destination, or when either side resets. A destination's reset before the source's
//! stream is acknowledged is a failure of that destination (failed over); after it, while only
//! its reply was left, it ends the connection ([`RelayError::ReplyCut`], the source reset).
//!
//! Memory per connection: none for bytes while it is idle. A session reads into its thread's
//! 64 KiB buffer and writes at once; only what a write did not take is kept (at most one read's
//! worth each way) until written. The discard-buffer method adds up to [`Config::max_unacked`]
//! bytes of discard buffer; unacknowledged bytes stay in the kernel and hold back the source
//! through its receive window. Descriptors per connection: two under [`serve`] (source and
//! destination; a failover closes the destination that failed before it connects the next),
//! three under [`relay`] and the async relay (their epoll set).
//!
//! The unacknowledged bytes occupy the source socket's receive buffer, which autotuning sizes by
//! what the application takes per round trip: a relay holding back more than a few hundred KiB
//! needs a larger one (`net.ipv4.tcp_rmem`'s default, or the bound is never reached and the
//! source's window, not [`Config::max_unacked`], limits the bytes in flight downstream).
//!
//! [`serve`] runs event loops: a thread per CPU (`Serve::threads`), each with one epoll set for
//! the listener (`EPOLLEXCLUSIVE`) and all its connections, and non-blocking connects. [`relay`]
//! is one connection on the calling thread, the async relay one task. Events wake a session:
//! new source bytes (edge-triggered `EPOLLIN`), destination acknowledgements (`SO_TIMESTAMPING`
//! `TX_ACK` notifications on its error queue, `EPOLLERR`), room in either send buffer
//! (`EPOLLOUT`), reply bytes (the destination's `EPOLLIN`). Only writes made with a quarter of
//! the source's receive buffer outstanding (at most 64 KiB, at most half
//! [`Config::max_unacked`]) or the source's end behind them ask for a notification (the flag goes
//! with the write, as a control message); below that, what the destination acknowledged leaves
//! the source's queue in batches, at that mark, at the source's end or after a quiet second, so
//! that small exchanges cost the calls a copying relay makes. The clocks left: a backstop while
//! segments are in flight (the kernel marks no byte of a write sent out whole at once), from
//! 2 ms doubling to half [`Config::ack_timeout`] while nothing is acknowledged; a look at the
//! window probes of a stalled destination every half [`Config::ack_timeout`]; the quiet second;
//! the acknowledgement and connect timeouts themselves. A loop waits on a `timerfd` armed for
//! its earliest deadline, its `epoll_wait` without a timeout. It never spins.

mod ack;
mod config;
mod connect;
mod error;
mod event_loop;
mod serve;
mod session;

use std::net::TcpStream;
use std::time::Duration;

pub use config::{Config, Failover, Report};
#[cfg(feature = "tokio")]
pub(crate) use connect::Attempts;
use connect::connect;
pub use error::RelayError;
use error::io_err;
pub use event_loop::serve;
#[cfg(feature = "tokio")]
pub(crate) use serve::{
    Backoff, check_max_connections, descriptor_room, lost_newcomer, out_of_resources,
};
pub use serve::{DESCRIPTORS_PER_CONNECTION, Event, Serve, Served, Stop};
pub(crate) use session::{Next, Session};

use crate::sys::event::Epoll;

/// Relays one accepted connection until both directions have ended: the source's stream
/// acknowledged end to end and its FIN passed to the destination, the destination's reply
/// copied back and its FIN passed to the source.
///
/// One thread, one epoll: edge-triggered `EPOLLIN` on the source says bytes arrived (past the
/// peek offset, as the queue only grows at its tail), `EPOLLERR` on the destination says an
/// acknowledgement notification or an error arrived, `EPOLLOUT` on either that its send buffer
/// has room again, `EPOLLIN` on the destination that its reply has bytes. After any wake the
/// relay does all it can without blocking and waits again: with a backstop timer while bytes
/// are outstanding, without one while none are (nothing can time out then).
///
/// # Errors
/// [`RelayError::NoDestination`] when no destination accepts within the connect timeout (at
/// the start or after a failure), [`RelayError::DestinationFailed`] when the last destination
/// left failed, [`RelayError::SourceReset`] when the source's connection ended without its FIN,
/// [`RelayError::ReplyCut`] when the destination's reply did, [`RelayError::Io`] when a call
/// fails. Bytes the last destination acknowledged are in [`Report`] only on success; on an error
/// they were consumed from the source as far as acknowledged, and both connections are reset.
pub fn relay(src: TcpStream, config: Config) -> Result<Report, RelayError> {
    let s = &config;
    let epoll = Epoll::new().map_err(io_err("epoll_create1"))?;
    let mut session = Session::new(src, s, &epoll, 0)?;
    let mut next = session.start();
    loop {
        match next {
            Next::Done => return Ok(session.finish()),
            Next::Connect(targets) => {
                let (stream, target) = connect(s, &targets)?;
                session.adopt(stream, target)?;
            }
            Next::Wait(wait) => {
                // Epoll caps an endless wait at i32::MAX ms, 24 days: a step then finds nothing.
                session.woke(wait.unwrap_or(Duration::MAX))?;
            }
        }
        next = session.step()?;
    }
}
