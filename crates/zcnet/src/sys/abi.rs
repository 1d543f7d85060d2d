//! Kernel UAPI constants and structures, spelled as the kernel headers spell them.
//!
//! Values come from `include/uapi/linux/*.h`; they are part of the stable ABI, so they are
//! defined here once instead of depending on which of them a given `libc` release exports.
//! The table names the kernel's values of a field whether or not zcnet reads every one.
#![allow(dead_code)]

/// `SOL_UDP` (`IPPROTO_UDP`): the level of the UDP socket options.
pub const SOL_UDP: i32 = 17;
/// `UDP_SEGMENT` (`linux/udp.h`, Linux 4.18): the GSO segment size, as a socket option or a
/// `u16` control message.
pub const UDP_SEGMENT: i32 = 103;
/// `UDP_GRO` (`linux/udp.h`, Linux 5.0): receive coalesced trains, their segment size in an
/// `int` control message.
pub const UDP_GRO: i32 = 104;
/// `SO_ZEROCOPY` (`asm-generic/socket.h`, Linux 4.14).
pub const SO_ZEROCOPY: i32 = 60;
/// `cachestat(2)` (Linux 6.5): one number on every architecture but alpha.
pub const SYS_CACHESTAT: libc::c_long = 451;
/// `SO_PEEK_OFF` (`asm-generic/socket.h`; TCP since Linux 6.9).
pub const SO_PEEK_OFF: i32 = 42;
/// `MSG_ZEROCOPY` (`linux/socket.h`).
pub const MSG_ZEROCOPY: i32 = 0x0400_0000;
/// `TCP_ZEROCOPY_RECEIVE` (`linux/tcp.h`, Linux 4.18).
pub const TCP_ZEROCOPY_RECEIVE: i32 = 35;

/// `SO_EE_ORIGIN_ICMP` (`linux/errqueue.h`).
pub const SO_EE_ORIGIN_ICMP: u8 = 2;
/// `SO_EE_ORIGIN_ICMP6` (`linux/errqueue.h`).
pub const SO_EE_ORIGIN_ICMP6: u8 = 3;
/// `SO_EE_ORIGIN_ZEROCOPY` (`linux/errqueue.h`).
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (`linux/errqueue.h`).
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `SO_NETNS_COOKIE` (`asm-generic/socket.h`, Linux 5.14): the `u64` cookie of the socket's
/// network namespace.
pub const SO_NETNS_COOKIE: i32 = 71;
/// `SO_BINDTOIFINDEX` (`asm-generic/socket.h`, Linux 5.0): the device a socket is bound to,
/// by index (0: none).
pub const SO_BINDTOIFINDEX: i32 = 62;
/// `SO_MARK` (`asm-generic/socket.h`): the firewall mark routing may select on.
pub const SO_MARK: i32 = 36;
/// `NETLINK_ROUTE` (`linux/netlink.h`).
pub const NETLINK_ROUTE: i32 = 0;

/// `SOL_IP`.
pub const SOL_IP: i32 = 0;
/// `SOL_IPV6`.
pub const SOL_IPV6: i32 = 41;
/// `IP_RECVERR`.
pub const IP_RECVERR: i32 = 11;
/// `IPV6_RECVERR`.
pub const IPV6_RECVERR: i32 = 25;

/// `SOL_PACKET`.
pub const SOL_PACKET: i32 = 263;
/// `PACKET_RX_RING` (`linux/if_packet.h`).
pub const PACKET_RX_RING: i32 = 5;
/// `PACKET_VERSION`.
pub const PACKET_VERSION: i32 = 10;
/// `PACKET_TX_RING`.
pub const PACKET_TX_RING: i32 = 13;
/// `PACKET_FANOUT`.
pub const PACKET_FANOUT: i32 = 18;
/// `TPACKET_V3` (`enum tpacket_versions`).
pub const TPACKET_V3: i32 = 2;
/// `PACKET_FANOUT_HASH`.
pub const PACKET_FANOUT_HASH: u32 = 0;
/// `PACKET_FANOUT_LB`: round robin.
pub const PACKET_FANOUT_LB: u32 = 1;
/// `PACKET_FANOUT_CPU`: by the CPU the packet arrived on.
pub const PACKET_FANOUT_CPU: u32 = 2;
/// `PACKET_STATISTICS`: `struct tpacket_stats_v3`, reset on every read.
pub const PACKET_STATISTICS: i32 = 6;
/// `PACKET_QDISC_BYPASS` (Linux 3.14): TX straight to the driver.
pub const PACKET_QDISC_BYPASS: i32 = 20;
/// `PACKET_VNET_HDR` (Linux 3.10): each frame starts with a `struct virtio_net_hdr`.
pub const PACKET_VNET_HDR: i32 = 15;
/// `sizeof(struct virtio_net_hdr)`.
pub const VIRTIO_NET_HDR_LEN: usize = 10;
/// `PACKET_IGNORE_OUTGOING` (`linux/if_packet.h`, 4.20).
pub const PACKET_IGNORE_OUTGOING: i32 = 23;
/// `TP_STATUS_KERNEL`: the kernel owns the block (RX) / `TP_STATUS_AVAILABLE`: free frame (TX).
pub const TP_STATUS_KERNEL: u32 = 0;
/// `TP_STATUS_USER`: the block is the application's (RX).
pub const TP_STATUS_USER: u32 = 1;
/// `TP_STATUS_SEND_REQUEST`: frame filled, to send (TX).
pub const TP_STATUS_SEND_REQUEST: u32 = 1;
/// `TP_STATUS_SENDING`: the kernel is sending the frame (TX).
pub const TP_STATUS_SENDING: u32 = 2;
/// `TP_STATUS_WRONG_FORMAT`: the kernel refused the frame (TX).
pub const TP_STATUS_WRONG_FORMAT: u32 = 4;
/// `TP_STATUS_LOSING`: packets were dropped since the last statistics read (RX).
pub const TP_STATUS_LOSING: u32 = 4;
/// `TP_STATUS_VLAN_VALID`: `tp_vlan_tci` holds a tag (RX).
pub const TP_STATUS_VLAN_VALID: u32 = 0x10;
/// `TP_STATUS_BLK_TMO`: the block was retired by its timeout (RX).
pub const TP_STATUS_BLK_TMO: u32 = 0x20;
/// `TP_STATUS_VLAN_TPID_VALID`: `tp_vlan_tpid` is set (RX).
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;
/// Size of `struct tpacket_block_desc` up to the end of `tpacket_hdr_v1`.
pub const TPACKET_BLOCK_DESC_LEN: usize = 48;
/// Offset of `hdr.bh1.block_status` in `struct tpacket_block_desc`.
pub const TPACKET_BLOCK_STATUS_OFF: usize = 8;
/// `sizeof(struct tpacket3_hdr)`, `TPACKET_ALIGN`ed: where a TX frame's data starts.
pub const TPACKET3_HDR_LEN: usize = 48;
/// Offset of `tp_status` in `struct tpacket3_hdr`.
pub const TPACKET3_STATUS_OFF: usize = 20;
/// `DLT_EN10MB` / `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// `struct tpacket_stats_v3` (`linux/if_packet.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TpacketStatsV3 {
    /// Packets that reached the socket, dropped ones included.
    pub tp_packets: u32,
    /// Packets dropped: no room in the ring.
    pub tp_drops: u32,
    /// Times the queue froze because no block was free.
    pub tp_freeze_q_cnt: u32,
}

/// `struct sock_filter` (`linux/filter.h`): one classic BPF instruction, the layout of
/// libpcap's `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockFilter {
    /// Opcode.
    pub code: u16,
    /// Jump if true.
    pub jt: u8,
    /// Jump if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// `ETH_P_ALL` (`linux/if_ether.h`), host byte order.
pub const ETH_P_ALL: u16 = 0x0003;
/// `AF_XDP` (`linux/socket.h`, Linux 4.18).
pub const AF_XDP: i32 = 44;

/// `IORING_SEND_ZC_REPORT_USAGE` (`linux/io_uring.h`, Linux 6.2): the notification's `res`
/// says whether the kernel copied.
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: set in a notification's `res` when data was copied.
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
/// `IORING_CQE_F_MORE`: another CQE (the notification) follows for this request.
pub const IORING_CQE_F_MORE: u32 = 1 << 1;
/// `IORING_CQE_F_NOTIF`: this CQE is a zero-copy notification.
pub const IORING_CQE_F_NOTIF: u32 = 1 << 3;
/// `IORING_OP_SENDMSG` (Linux 5.3).
pub const IORING_OP_SENDMSG: u8 = 9;
/// `IORING_OP_SEND` (5.6).
pub const IORING_OP_SEND: u8 = 26;
/// `IORING_OP_SEND_ZC` (6.0).
pub const IORING_OP_SEND_ZC: u8 = 47;
/// `IORING_OP_SENDMSG_ZC` (6.1).
pub const IORING_OP_SENDMSG_ZC: u8 = 48;
/// `IOSQE_FIXED_FILE`: `fd` is an index into the registered files.
pub const IOSQE_FIXED_FILE: u8 = 1 << 0;
/// `IOSQE_IO_LINK`: the next SQE starts only after this one completed.
pub const IOSQE_IO_LINK: u8 = 1 << 2;
/// `IORING_RECVSEND_FIXED_BUF` (in `ioprio`): the buffer lies in registered buffer `buf_index`.
pub const IORING_RECVSEND_FIXED_BUF: u16 = 1 << 2;

/// `struct tcp_zerocopy_receive` (`linux/tcp.h`) in its largest known form (Linux 5.12+).
///
/// The struct grew over releases; [`TcpZerocopyReceive::FIELDS`] lists which fields a given
/// returned `optlen` covers. Always zero it before use: `reserved` must be 0 and the kernel
/// rejects a too-large struct whose tail is not zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpZerocopyReceive {
    /// In: address of the mapping to fill.
    pub address: u64,
    /// In: bytes requested; out: bytes mapped and consumed.
    pub length: u32,
    /// Out: bytes at the head that could not be mapped and must be read by copy.
    pub recv_skip_hint: u32,
    /// Out (5.7): bytes still queued after this call.
    pub inq: u32,
    /// Out (5.7): pending socket error, as a negative errno.
    pub err: i32,
    /// In (5.11): buffer for copying the unmappable head in the same call.
    pub copybuf_address: u64,
    /// In/out (5.11): size of that buffer; bytes copied into it (or -errno).
    pub copybuf_len: i32,
    /// In (5.11): `TCP_RECEIVE_ZEROCOPY_FLAG_*`.
    pub flags: u32,
    /// In (5.12): ancillary data buffer.
    pub msg_control: u64,
    /// In/out (5.12).
    pub msg_controllen: u64,
    /// Out (5.12).
    pub msg_flags: u32,
    /// Must be zero.
    pub reserved: u32,
}

impl TcpZerocopyReceive {
    /// Each field group with the kernel release that added it and the `optlen` that covers it.
    pub const FIELDS: [(&'static str, &'static str, u32); 11] = [
        ("address", "4.18", 8),
        ("length", "4.18", 12),
        ("recv_skip_hint", "4.18", 16),
        ("inq", "5.7", 20),
        ("err", "5.7", 24),
        ("copybuf_address", "5.11", 32),
        ("copybuf_len", "5.11", 36),
        ("flags", "5.11", 40),
        ("msg_control", "5.12", 48),
        ("msg_controllen", "5.12", 56),
        ("msg_flags", "5.12", 60),
    ];
}

/// `struct tpacket_req3` (`linux/if_packet.h`, Linux 3.2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TpacketReq3 {
    /// Minimal size of a contiguous block; a multiple of the page size.
    pub tp_block_size: u32,
    /// Number of blocks.
    pub tp_block_nr: u32,
    /// Size of a frame.
    pub tp_frame_size: u32,
    /// Total number of frames.
    pub tp_frame_nr: u32,
    /// Block retire timeout in ms (RX only).
    pub tp_retire_blk_tov: u32,
    /// Private area at the start of each block (RX only).
    pub tp_sizeof_priv: u32,
    /// Feature request bits (RX only).
    pub tp_feature_req_word: u32,
}

/// `SOL_XDP` (`linux/socket.h`).
pub const SOL_XDP: i32 = 283;
/// `XDP_MMAP_OFFSETS` (`linux/if_xdp.h`): where each ring's producer, consumer and descriptors sit.
pub const XDP_MMAP_OFFSETS: i32 = 1;
/// `XDP_RX_RING`: entries of the RX ring.
pub const XDP_RX_RING: i32 = 2;
/// `XDP_TX_RING`: entries of the TX ring.
pub const XDP_TX_RING: i32 = 3;
/// `XDP_UMEM_REG`: registers the UMEM.
pub const XDP_UMEM_REG: i32 = 4;
/// `XDP_UMEM_FILL_RING`: entries of the fill ring.
pub const XDP_UMEM_FILL_RING: i32 = 5;
/// `XDP_UMEM_COMPLETION_RING`: entries of the completion ring.
pub const XDP_UMEM_COMPLETION_RING: i32 = 6;
/// `XDP_STATISTICS`.
pub const XDP_STATISTICS: i32 = 7;
/// `XDP_OPTIONS` (Linux 5.3): whether the bound socket is zero-copy.
pub const XDP_OPTIONS: i32 = 8;
/// `XDP_OPTIONS_ZEROCOPY`.
pub const XDP_OPTIONS_ZEROCOPY: u32 = 1;
/// `sxdp_flags`: force copy mode.
pub const XDP_COPY: u16 = 1 << 1;
/// `XDP_SHARED_UMEM`: bind sharing the UMEM of the socket `sxdp_shared_umem_fd`.
pub const XDP_SHARED_UMEM: u16 = 1 << 0;
/// `sxdp_flags`: force zero-copy mode.
pub const XDP_ZEROCOPY: u16 = 1 << 2;
/// `sxdp_flags`: the kernel sets `XDP_RING_NEED_WAKEUP` instead of polling (Linux 5.4).
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// A ring's `flags` word: the kernel needs a syscall to go on.
pub const XDP_RING_NEED_WAKEUP: u32 = 1;
/// `mmap` offset of the RX ring.
pub const XDP_PGOFF_RX_RING: u64 = 0;
/// `mmap` offset of the TX ring.
pub const XDP_PGOFF_TX_RING: u64 = 0x8000_0000;
/// `mmap` offset of the fill ring.
pub const XDP_UMEM_PGOFF_FILL_RING: u64 = 0x1_0000_0000;
/// `mmap` offset of the completion ring.
pub const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = 0x1_8000_0000;

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpRingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets` (Linux 5.4 layout, with `flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpMmapOffsets {
    pub rx: XdpRingOffset,
    pub tx: XdpRingOffset,
    pub fr: XdpRingOffset,
    pub cr: XdpRingOffset,
}

/// `struct xdp_statistics`; a kernel before 5.9 fills the first three.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpOptionsV1 {
    pub flags: u32,
}

/// `struct xdp_desc`: a frame of the RX or TX ring (`addr` is an offset into the UMEM).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SockaddrXdp {
    pub sxdp_family: u16,
    pub sxdp_flags: u16,
    pub sxdp_ifindex: u32,
    pub sxdp_queue_id: u32,
    pub sxdp_shared_umem_fd: u32,
}

/// Marker for plain-old-data structs that may be passed to the kernel by pointer and length.
///
/// # Safety
/// Implementors must be `repr(C)` (or primitive), valid for any bit pattern and hold no
/// addresses, not even as integers: the kernel dereferences some fields it reads as `u64`
/// (`struct tcp_zerocopy_receive`'s `address` and `copybuf_address` are why that struct is not
/// `Pod`: a generic `getsockopt` with it would let the caller choose where the kernel writes).
pub unsafe trait Pod: Copy {}
// SAFETY: primitive integers are valid for every bit pattern.
unsafe impl Pod for i32 {}
// SAFETY: primitive integers are valid for every bit pattern.
unsafe impl Pod for u32 {}
// SAFETY: primitive integers are valid for every bit pattern.
unsafe impl Pod for u64 {}
// SAFETY: repr(C) struct of integers only.
unsafe impl Pod for TpacketReq3 {}
// SAFETY: repr(C) struct of integers only.
unsafe impl Pod for TpacketStatsV3 {}
// SAFETY: `struct linger` is two C ints.
unsafe impl Pod for libc::linger {}
// SAFETY: repr(C) struct of integers and byte arrays only.
unsafe impl Pod for TcpInfo {}
// SAFETY: repr(C) struct of integers only (offsets into a mapping, not addresses).
unsafe impl Pod for XdpMmapOffsets {}
// SAFETY: repr(C) struct of integers only.
unsafe impl Pod for XdpStatistics {}
// SAFETY: repr(C) struct of one integer.
unsafe impl Pod for XdpOptionsV1 {}

/// The start of `struct tcp_info` (`linux/tcp.h`) up to `tcpi_bytes_retrans` (Linux 4.19), with
/// the fields zcnet reads named and the rest kept as bytes. A kernel that knows less writes a
/// shorter struct; `getsockopt` says how much.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TcpInfo {
    /// `tcpi_state` .. `tcpi_total_retrans`, `tcpi_pacing_rate`, `tcpi_max_pacing_rate`.
    pub head: [u8; 120],
    /// `tcpi_bytes_acked` (4.2): data bytes the peer acknowledged.
    pub bytes_acked: u64,
    /// `tcpi_bytes_received` (4.2).
    pub bytes_received: u64,
    /// `tcpi_segs_out` .. `tcpi_delivered_ce`.
    pub middle: [u8; 64],
    /// `tcpi_bytes_sent` (4.19): data bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// `tcpi_bytes_retrans` (4.19).
    pub bytes_retrans: u64,
}

#[cfg(test)]
mod tcp_info_layout {
    #[test]
    fn offsets_match_linux_tcp_h() {
        assert_eq!(std::mem::offset_of!(super::TcpInfo, bytes_acked), 120);
        assert_eq!(std::mem::offset_of!(super::TcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::size_of::<super::TcpInfo>(), 216);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_uapi() {
        assert_eq!(size_of::<TcpZerocopyReceive>(), 64);
        assert_eq!(size_of::<TpacketReq3>(), 28);
        assert_eq!(size_of::<TpacketStatsV3>(), 12);
        assert_eq!(size_of::<SockFilter>(), 8);
        // The FIELDS table ends where the 5.12 struct's last meaningful field ends.
        assert_eq!(TcpZerocopyReceive::FIELDS.last().unwrap().2, 60);
    }
}
