//! The receive ring: `PACKET_RX_RING` blocks handed over by the kernel and back on drop.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::{
    BlockFrames, BlockInfo, Filter, PacketError, Statistics, add_statistics, check_ring_memory,
    sys_err, to_u32, v3_socket,
};
use crate::sys::{self, abi, packet as ring};

/// Geometry and behaviour of an RX ring.
#[derive(Clone, Debug)]
pub struct RxConfig {
    /// Bytes per block; a multiple of the page size. Default 1 MiB.
    pub block_size: usize,
    /// Blocks in the ring. Default 32 (32 MiB).
    pub block_count: usize,
    /// Frame size the kernel uses to count frames (`tp_frame_size`); frames are variable in
    /// V3. Default 2048.
    pub frame_size: usize,
    /// A block with at least one frame is handed over after this long (`tp_retire_blk_tov`),
    /// so a quiet link still delivers. Default 10 ms.
    pub retire_timeout: Duration,
    /// Optional filter, attached before binding.
    pub filter: Option<Filter>,
    /// Skip the frames this host sends (`PACKET_IGNORE_OUTGOING`, Linux 4.20). On a loopback
    /// device every packet passes twice, once going out and once coming in; tcpdump (libpcap)
    /// skips the outgoing copy there, and so should a capture of `lo`.
    pub ignore_outgoing: bool,
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig {
            block_size: 1 << 20,
            block_count: 32,
            frame_size: 2048,
            retire_timeout: Duration::from_millis(10),
            filter: None,
            ignore_outgoing: false,
        }
    }
}

fn page_multiple(what: &str, n: usize) -> Result<(), PacketError> {
    let page = sys::mm::page_size();
    if n == 0 || n % page != 0 {
        return Err(PacketError::Config(format!(
            "{what} {n} is not a multiple of the page size ({page})"
        )));
    }
    Ok(())
}

/// A `TPACKET_V3` receive ring bound to one interface.
#[derive(Debug)]
#[doc(alias("TPACKET_V3", "PACKET_RX_RING"))]
pub struct RxRing {
    fd: OwnedFd,
    ring: ring::Ring,
    next: usize,
    totals: Statistics,
    interface: String,
    retire_timeout: Duration,
    /// Set once the interface went down or away: the blocks retired until then still come.
    ending: Option<Instant>,
}

impl RxRing {
    /// Opens a ring on `iface` capturing every protocol (`ETH_P_ALL`).
    ///
    /// # Errors
    /// No privilege, unknown interface, a geometry the kernel refuses, or a failed call.
    pub fn new(iface: &str, config: RxConfig) -> Result<RxRing, PacketError> {
        page_multiple("block size", config.block_size)?;
        if config.frame_size < abi::TPACKET3_HDR_LEN
            || config.frame_size % 16 != 0
            || config.block_size % config.frame_size != 0
        {
            return Err(PacketError::Config(format!(
                "frame size {} must be a multiple of 16, at least 48, dividing the block size",
                config.frame_size
            )));
        }
        if config.block_count == 0 {
            return Err(PacketError::Config(
                "a ring needs at least one block".into(),
            ));
        }
        check_ring_memory(1, config.block_size, config.block_count)?;
        let (index, fd) = v3_socket(iface)?;
        let req = abi::TpacketReq3 {
            tp_block_size: to_u32(config.block_size)?,
            tp_block_nr: to_u32(config.block_count)?,
            tp_frame_size: to_u32(config.frame_size)?,
            tp_frame_nr: to_u32(config.block_size / config.frame_size * config.block_count)?,
            tp_retire_blk_tov: u32::try_from(config.retire_timeout.as_millis().max(1))
                .unwrap_or(u32::MAX),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sys::sockopt::set_packet_ring(fd.as_fd(), false, &req)
            .map_err(sys_err("setsockopt(PACKET_RX_RING)"))?;
        // SAFETY: the one mapping of the ring of this packet socket, which this constructor
        // created above and keeps to itself.
        #[allow(unsafe_code)]
        let ring = unsafe { ring::Ring::map(fd.as_fd(), config.block_size, config.block_count) }
            .map_err(sys_err("mmap(ring)"))?;
        if let Some(f) = &config.filter {
            f.attach(fd.as_fd())?;
        }
        if config.ignore_outgoing {
            sys::sockopt::set_packet_ignore_outgoing(fd.as_fd())
                .map_err(sys_err("setsockopt(PACKET_IGNORE_OUTGOING) (Linux 4.20)"))?;
        }
        sys::net::bind_packet(fd.as_fd(), index, abi::ETH_P_ALL)
            .map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(RxRing {
            fd,
            ring,
            next: 0,
            totals: Statistics::default(),
            interface: iface.to_owned(),
            retire_timeout: config.retire_timeout,
            ending: None,
        })
    }

    /// The next block the kernel handed over, waiting up to `timeout` (`None`: forever).
    /// `Ok(None)` when the time ran out.
    ///
    /// # Errors
    /// [`PacketError::InterfaceDown`] once the blocks captured before the interface went are
    /// handed over, `poll(2)`'s error, an error the socket reports, or
    /// [`PacketError::Malformed`] (the block is handed back and skipped).
    pub fn next_block(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<Block<'_>>, PacketError> {
        let i = self.next;
        if !self.ring.is_user(i) {
            let mut wait = timeout;
            if let Some(until) = self.ending {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(self.gone());
                }
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            match sys::event::poll(self.fd.as_fd(), libc::POLLIN | libc::POLLERR, wait) {
                Ok(revents) if revents & libc::POLLERR != 0 => self.take_socket_error()?,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "poll",
                        source: e,
                    });
                }
            }
        }
        let count = self.ring.count();
        let Some(raw) = self.ring.user_block(i) else {
            return Ok(None);
        };
        self.next = (i + 1) % count;
        let info = BlockInfo::parse(raw.bytes())?;
        Ok(Some(Block { raw, info }))
    }

    /// Reads (and so clears) the error the socket reports with `POLLERR`. `ENETDOWN`, the
    /// interface gone down or away, ends the ring once the block being filled could have been
    /// retired (twice its timeout): frames captured before are not lost.
    fn take_socket_error(&mut self) -> Result<(), PacketError> {
        let code =
            sys::sockopt::take_error(self.fd.as_fd()).map_err(sys_err("getsockopt(SO_ERROR)"))?;
        match code {
            0 => Ok(()),
            libc::ENETDOWN => {
                if self.ending.is_none() {
                    self.ending =
                        Some(Instant::now() + 2 * self.retire_timeout + Duration::from_millis(10));
                }
                Ok(())
            }
            e => Err(PacketError::Io {
                call: "poll",
                source: io::Error::from_raw_os_error(e),
            }),
        }
    }

    /// [`PacketError::InterfaceDown`]: deleted where the socket lost its binding, which the
    /// kernel does when the interface is unregistered (whatever namespace asks).
    fn gone(&self) -> PacketError {
        PacketError::InterfaceDown {
            interface: self.interface.clone(),
            deleted: sys::net::packet_bound_index(self.fd.as_fd()).is_ok_and(|i| i <= 0),
            source: io::Error::from_raw_os_error(libc::ENETDOWN),
        }
    }

    /// Counters since the ring was opened (reads and sums `PACKET_STATISTICS`, which the
    /// kernel resets on each read).
    ///
    /// # Errors
    /// `getsockopt`'s error.
    pub fn statistics(&mut self) -> Result<Statistics, PacketError> {
        add_statistics(self.fd.as_fd(), &mut self.totals)
    }
}

impl AsFd for RxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A block of captured frames, owned by the application until dropped.
#[derive(Debug)]
pub struct Block<'a> {
    raw: ring::UserBlock<'a>,
    info: BlockInfo,
}

impl Block<'_> {
    /// The checked descriptor.
    pub fn info(&self) -> &BlockInfo {
        &self.info
    }

    /// The frames, in arrival order.
    pub fn frames(&self) -> BlockFrames<'_> {
        BlockFrames::new(self.raw.bytes(), &self.info)
    }

    /// Whether the retire timeout, not a full block, handed it over.
    pub fn timed_out(&self) -> bool {
        self.info.status & abi::TP_STATUS_BLK_TMO != 0
    }
}
