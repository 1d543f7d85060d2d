//! Capture: the one-shape entry over the ring and its copying twin.

use std::os::fd::AsFd;
use std::time::Duration;

use super::{Frame, PacketError, RxConfig, RxRing, Socket, Statistics};

/// How a [`Capture`] takes frames from the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// A `TPACKET_V3` RX ring ([`RxRing`]): frames are read in place in memory shared with the
    /// kernel, a block at a time, with no copy to user space and no call per frame (the
    /// kernel's one copy, into the ring, remains: `Counters` call these bytes zero-copy, read
    /// in place).
    #[default]
    #[doc(alias = "Ring")]
    ZeroCopy,
    /// One `recvfrom(2)` per frame ([`Socket`]): the copying twin.
    Copy,
}

/// How a [`Capture`] is set up.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Ring (default) or copy.
    pub mode: Mode,
    /// The ring's geometry and filter ([`Mode::ZeroCopy`]; the filter applies to both modes).
    pub ring: RxConfig,
    /// The copying socket's receive queue in bytes ([`Mode::Copy`]; `None`: the default).
    pub rcvbuf: Option<usize>,
}

/// What a [`Capture`] delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Frames handed to the caller.
    pub frames: u64,
    /// Their captured bytes read in place from the ring.
    pub ring_bytes: u64,
    /// Their captured bytes copied out by `recvfrom`.
    pub copied_bytes: u64,
    /// Calls that took frames: blocks (ring) or `recvfrom` (copy).
    pub calls: u64,
}

impl crate::ZeroCopyCounters for Counters {
    fn zero_copy_bytes(&self) -> u64 {
        self.ring_bytes
    }
    fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }
    /// A capture never changes its mode.
    fn fallbacks(&self) -> u64 {
        0
    }
}

#[derive(Debug)]
enum Source {
    Ring(RxRing),
    Copy { socket: Socket, buf: Vec<u8> },
}

/// Frames of one interface, by a ring or by copy, through one API.
///
/// ```no_run
/// use zcnet::packet::{Capture, Config};
/// let mut cap = Capture::new("lo", Config::default())?;
/// let mut seen = 0;
/// while seen < 10 {
///     seen += cap.recv_frames(None, |f| println!("{} bytes", f.len))?;
/// }
/// # Ok::<(), zcnet::packet::PacketError>(())
/// ```
#[derive(Debug)]
pub struct Capture {
    source: Source,
    counters: Counters,
}

impl Capture {
    /// Opens a capture on `iface` (every protocol) in `config.mode`.
    ///
    /// # Errors
    /// [`PacketError::NoPrivilege`] without `CAP_NET_RAW`, [`PacketError::NoInterface`], a
    /// ring the kernel refuses, or a failed call.
    pub fn new(iface: &str, config: Config) -> Result<Capture, PacketError> {
        let source = match config.mode {
            Mode::ZeroCopy => Source::Ring(RxRing::new(iface, config.ring)?),
            Mode::Copy => {
                let socket = Socket::new(iface, config.rcvbuf)?;
                if let Some(f) = &config.ring.filter {
                    f.attach(socket.as_fd())?;
                }
                Source::Copy {
                    socket,
                    buf: vec![0; config.ring.frame_size.max(65536)],
                }
            }
        };
        Ok(Capture {
            source,
            counters: Counters::default(),
        })
    }

    /// The mode in use.
    pub fn mode(&self) -> Mode {
        match self.source {
            Source::Ring(_) => Mode::ZeroCopy,
            Source::Copy { .. } => Mode::Copy,
        }
    }

    /// A capture never falls back: `None`.
    pub fn fallback_reason(&self) -> Option<&str> {
        None
    }

    /// Waits up to `timeout` (`None`: forever) for frames and lends each to `f`: one block's
    /// frames (ring), or every frame queued (copy; timestamps, status and hash are 0 there, as
    /// `recvfrom` does not give them). Returns how many; 0 when the time ran out.
    ///
    /// # Errors
    /// As [`RxRing::next_block`] and [`Socket::recv`].
    pub fn recv_frames(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(&Frame<'_>),
    ) -> Result<usize, PacketError> {
        let c = &mut self.counters;
        match &mut self.source {
            Source::Ring(r) => {
                let Some(block) = r.next_block(timeout)? else {
                    return Ok(0);
                };
                c.calls += 1;
                let mut n = 0;
                for frame in block.frames() {
                    c.frames += 1;
                    c.ring_bytes += frame.data.len() as u64;
                    n += 1;
                    f(&frame);
                }
                Ok(n)
            }
            Source::Copy { socket, buf } => {
                let mut n = 0;
                let mut wait = timeout;
                while let Some(got) = socket.recv(buf, wait)? {
                    c.calls += 1;
                    c.frames += 1;
                    c.copied_bytes += got.len as u64;
                    n += 1;
                    f(&Frame {
                        data: &buf[..got.len],
                        len: u32::try_from(got.original).unwrap_or(u32::MAX),
                        sec: 0,
                        nsec: 0,
                        status: 0,
                        rxhash: 0,
                        vlan: None,
                    });
                    // Take what is queued without waiting again.
                    wait = Some(Duration::ZERO);
                }
                Ok(n)
            }
        }
    }

    /// What was delivered so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The kernel's counters (`PACKET_STATISTICS`: packets, drops, freezes).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn statistics(&mut self) -> Result<Statistics, PacketError> {
        match &mut self.source {
            Source::Ring(r) => r.statistics(),
            Source::Copy { socket, .. } => socket.statistics(),
        }
    }
}
