//! The transmit ring: `PACKET_TX_RING` frames filled in place, sent with one kick.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::{PacketError, check_ring_memory, sys_err, to_u32, v3_socket};
use crate::sys::{self, abi, packet as ring};

/// Geometry and behaviour of a TX ring.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// Bytes per frame, header included (the packet gets `frame_size - 48`). Default 2048.
    pub frame_size: usize,
    /// Frames in the ring. Default 1024.
    pub frame_count: usize,
    /// Hand frames straight to the driver, skipping the qdisc (`PACKET_QDISC_BYPASS`).
    #[doc(alias = "PACKET_QDISC_BYPASS")]
    pub qdisc_bypass: bool,
    /// Copy each frame whole into its socket buffer (`PACKET_VNET_HDR`, each frame led by a
    /// `virtio_net_hdr` whose `hdr_len` is the frame's length; zcnet writes it). Without it the
    /// kernel copies the Ethernet header and points the skb at the rest in the ring's page; a
    /// device that may not keep such fragments (veth: the peer's stack) then copies each frame
    /// into a freshly allocated page (`skb_copy_ubufs`), which costs more than the copy saved.
    pub linear: bool,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            frame_size: 2048,
            frame_count: 1024,
            qdisc_bypass: false,
            linear: false,
        }
    }
}

/// A `TPACKET_V3` transmit ring bound to one interface.
#[derive(Debug)]
#[doc(alias("TPACKET_V3", "PACKET_TX_RING"))]
pub struct TxRing {
    fd: OwnedFd,
    ring: ring::Ring,
    next: usize,
    filled: usize,
    linear: bool,
}

impl TxRing {
    /// Opens a transmit ring on `iface`; it receives nothing.
    ///
    /// # Errors
    /// No privilege, unknown interface, a geometry the kernel refuses, or a failed call.
    pub fn new(iface: &str, config: TxConfig) -> Result<TxRing, PacketError> {
        let page = sys::mm::page_size();
        if config.frame_size < abi::TPACKET3_HDR_LEN + 14
            || config.frame_size % 16 != 0
            || (page % config.frame_size != 0 && config.frame_size % page != 0)
        {
            return Err(PacketError::Config(format!(
                "frame size {} must be a multiple of 16 that divides or is a multiple of the page size",
                config.frame_size
            )));
        }
        let block_size = config.frame_size.max(page);
        let per_block = block_size / config.frame_size;
        let blocks = config.frame_count.div_ceil(per_block).max(1);
        check_ring_memory(1, block_size, blocks)?;
        let (index, fd) = v3_socket(iface)?;
        if config.qdisc_bypass {
            sys::sockopt::set_packet_qdisc_bypass(fd.as_fd())
                .map_err(sys_err("setsockopt(PACKET_QDISC_BYPASS)"))?;
        }
        if config.linear {
            // Before the ring: the kernel refuses it once a ring is set.
            sys::sockopt::set_packet_vnet_hdr(fd.as_fd())
                .map_err(sys_err("setsockopt(PACKET_VNET_HDR)"))?;
        }
        let req = abi::TpacketReq3 {
            tp_block_size: to_u32(block_size)?,
            tp_block_nr: to_u32(blocks)?,
            tp_frame_size: to_u32(config.frame_size)?,
            tp_frame_nr: to_u32(per_block * blocks)?,
            ..Default::default()
        };
        sys::sockopt::set_packet_ring(fd.as_fd(), true, &req)
            .map_err(sys_err("setsockopt(PACKET_TX_RING)"))?;
        // SAFETY: the one mapping of the ring of this packet socket, which this constructor
        // created above and keeps to itself.
        #[allow(unsafe_code)]
        let ring = unsafe { ring::Ring::map(fd.as_fd(), config.frame_size, per_block * blocks) }
            .map_err(sys_err("mmap(ring)"))?;
        // Protocol 0: no receive hook; frames carry their own Ethernet header.
        sys::net::bind_packet(fd.as_fd(), index, 0).map_err(sys_err("bind(AF_PACKET)"))?;
        Ok(TxRing {
            fd,
            ring,
            next: 0,
            filled: 0,
            linear: config.linear,
        })
    }

    /// Largest frame the ring takes.
    pub fn max_frame(&self) -> usize {
        let vnet = if self.linear {
            abi::VIRTIO_NET_HDR_LEN
        } else {
            0
        };
        self.ring.slot_size() - abi::TPACKET3_HDR_LEN - vnet
    }

    /// Copies one Ethernet frame into the next free slot; `false` when the ring is full (call
    /// [`TxRing::flush`]).
    ///
    /// # Errors
    /// [`PacketError::Config`] for a frame larger than [`TxRing::max_frame`].
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, PacketError> {
        if frame.len() > self.max_frame() {
            return Err(PacketError::Config(format!(
                "frame of {} bytes exceeds the ring's {}",
                frame.len(),
                self.max_frame()
            )));
        }
        let count = self.ring.count();
        let Some(mut slot) = self.ring.free_frame(self.next) else {
            return Ok(false);
        };
        if self.linear {
            // struct virtio_net_hdr: no flags, no GSO, hdr_len (little-endian) = the whole
            // frame, which the kernel then copies into the skb's linear part.
            let data = slot.data_mut();
            let mut h = [0u8; abi::VIRTIO_NET_HDR_LEN];
            h[2..4].copy_from_slice(&(frame.len() as u16).to_le_bytes());
            data[..h.len()].copy_from_slice(&h);
            data[h.len()..h.len() + frame.len()].copy_from_slice(frame);
            slot.submit(h.len() + frame.len());
        } else {
            slot.data_mut()[..frame.len()].copy_from_slice(frame);
            slot.submit(frame.len());
        }
        self.next = (self.next + 1) % count;
        self.filled += 1;
        Ok(true)
    }

    /// Kicks the kernel to send every submitted frame (`send(fd, NULL, 0, 0)`), waiting until
    /// it took them; returns the bytes it reported sending.
    ///
    /// # Errors
    /// `send`'s error; frames the kernel refused stay marked `TP_STATUS_WRONG_FORMAT`.
    pub fn flush(&mut self) -> Result<usize, PacketError> {
        self.filled = 0;
        loop {
            match sys::net::sendto(self.fd.as_fd(), &[], 0, None) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(PacketError::Io {
                        call: "send(TX ring)",
                        source: e,
                    });
                }
            }
        }
    }

    /// Frames pushed since the last [`TxRing::flush`].
    pub fn pending(&self) -> usize {
        self.filled
    }

    /// Frames the kernel refused (`TP_STATUS_WRONG_FORMAT`) still in the ring.
    pub fn refused(&self) -> usize {
        (0..self.ring.count())
            .filter(|&i| self.ring.frame_status(i) == abi::TP_STATUS_WRONG_FORMAT)
            .count()
    }
}
