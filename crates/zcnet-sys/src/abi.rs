//! Kernel UAPI constants and structures, spelled as the kernel headers spell them: the one
//! place the crate names a kernel number.
//!
//! Constants come from `linux-raw-sys` (generated from the kernel's UAPI headers, what rustix
//! uses) wherever it has them, cast here once to the type the C call takes. The rest, which it
//! lacks (`linux/udp.h`, `linux/errqueue.h`, `linux/ethtool.h`, `linux/sockios.h`, the
//! `io_uring` opcodes and SQE flags it has only as enums, and offsets of structures), are
//! written out below; the test `local_constants_match_the_kernel_headers` compares each with
//! the installed headers (`linux-libc-dev`). The table names the kernel's values of a field
//! whether or not zcnet reads every one.
#![allow(dead_code)]

use linux_raw_sys as lrs;

/// `SOL_UDP` (`IPPROTO_UDP`): the level of the UDP socket options.
pub const SOL_UDP: i32 = lrs::net::SOL_UDP as i32;
/// `UDP_SEGMENT` (`linux/udp.h`, Linux 4.18): the GSO segment size, as a socket option or a
/// `u16` control message.
pub const UDP_SEGMENT: i32 = 103;
/// `UDP_GRO` (`linux/udp.h`, Linux 5.0): receive coalesced trains, their segment size in an
/// `int` control message.
pub const UDP_GRO: i32 = 104;
/// `SO_ZEROCOPY` (`asm-generic/socket.h`, Linux 4.14).
pub const SO_ZEROCOPY: i32 = lrs::net::SO_ZEROCOPY as i32;
/// `cachestat(2)` (Linux 6.5): one number on every architecture but alpha.
pub const SYS_CACHESTAT: libc::c_long = lrs::general::__NR_cachestat as libc::c_long;
/// `SO_PEEK_OFF` (`asm-generic/socket.h`; TCP since Linux 6.9).
pub const SO_PEEK_OFF: i32 = lrs::net::SO_PEEK_OFF as i32;
/// `MSG_ZEROCOPY` (the kernel's `linux/socket.h`, not a UAPI header: from libc).
pub const MSG_ZEROCOPY: i32 = libc::MSG_ZEROCOPY;
/// `TCP_ZEROCOPY_RECEIVE` (`linux/tcp.h`, Linux 4.18).
pub const TCP_ZEROCOPY_RECEIVE: i32 = lrs::net::TCP_ZEROCOPY_RECEIVE as i32;

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
pub const SO_NETNS_COOKIE: i32 = lrs::net::SO_NETNS_COOKIE as i32;
/// `SO_BINDTOIFINDEX` (`asm-generic/socket.h`, Linux 5.0): the device a socket is bound to,
/// by index (0: none).
pub const SO_BINDTOIFINDEX: i32 = lrs::net::SO_BINDTOIFINDEX as i32;
/// `SO_MARK` (`asm-generic/socket.h`): the firewall mark routing may select on.
pub const SO_MARK: i32 = lrs::net::SO_MARK as i32;
/// `NETLINK_ROUTE` (`linux/netlink.h`).
pub const NETLINK_ROUTE: i32 = lrs::netlink::NETLINK_ROUTE as i32;

/// `struct nlmsghdr` (`linux/netlink.h`): 16 bytes.
pub const NLMSG_HDRLEN: usize = size_of::<lrs::netlink::nlmsghdr>();
/// `struct rtmsg` (`linux/rtnetlink.h`): 12 bytes.
pub const RTMSG_LEN: usize = size_of::<lrs::netlink::rtmsg>();
/// `NLM_F_REQUEST` (`linux/netlink.h`).
pub const NLM_F_REQUEST: u16 = lrs::netlink::NLM_F_REQUEST as u16;
/// `NLMSG_ERROR` (`linux/netlink.h`).
pub const NLMSG_ERROR: u16 = lrs::netlink::NLMSG_ERROR as u16;
/// `RTM_NEWROUTE` (`linux/rtnetlink.h`): the answer to a route lookup.
pub const RTM_NEWROUTE: u16 = lrs::netlink::RTM_NEWROUTE as u16;
/// `RTM_GETROUTE` (`linux/rtnetlink.h`): a route lookup, as `ip route get` asks.
pub const RTM_GETROUTE: u16 = lrs::netlink::RTM_GETROUTE as u16;
/// `RTA_DST` (`linux/rtnetlink.h`).
pub const RTA_DST: u16 = lrs::netlink::rtattr_type_t::RTA_DST as u16;
/// `RTA_SRC` (`linux/rtnetlink.h`).
pub const RTA_SRC: u16 = lrs::netlink::rtattr_type_t::RTA_SRC as u16;
/// `RTA_OIF` (`linux/rtnetlink.h`): the output device's index.
pub const RTA_OIF: u16 = lrs::netlink::rtattr_type_t::RTA_OIF as u16;
/// `RTA_MARK` (`linux/rtnetlink.h`).
pub const RTA_MARK: u16 = lrs::netlink::rtattr_type_t::RTA_MARK as u16;

/// `SOL_IP`.
pub const SOL_IP: i32 = lrs::net::SOL_IP as i32;
/// `SOL_IPV6`.
pub const SOL_IPV6: i32 = lrs::net::SOL_IPV6 as i32;
/// `IP_RECVERR`.
pub const IP_RECVERR: i32 = lrs::net::IP_RECVERR as i32;
/// `IPV6_RECVERR`.
pub const IPV6_RECVERR: i32 = lrs::net::IPV6_RECVERR as i32;

/// `SOL_PACKET`.
pub const SOL_PACKET: i32 = lrs::net::SOL_PACKET as i32;
/// `PACKET_RX_RING` (`linux/if_packet.h`).
pub const PACKET_RX_RING: i32 = lrs::if_packet::PACKET_RX_RING as i32;
/// `PACKET_VERSION`.
pub const PACKET_VERSION: i32 = lrs::if_packet::PACKET_VERSION as i32;
/// `PACKET_TX_RING`.
pub const PACKET_TX_RING: i32 = lrs::if_packet::PACKET_TX_RING as i32;
/// `PACKET_FANOUT`.
pub const PACKET_FANOUT: i32 = lrs::if_packet::PACKET_FANOUT as i32;
/// `TPACKET_V3` (`enum tpacket_versions`).
pub const TPACKET_V3: i32 = lrs::if_packet::tpacket_versions::TPACKET_V3 as i32;
/// `PACKET_FANOUT_HASH`.
pub const PACKET_FANOUT_HASH: u32 = lrs::if_packet::PACKET_FANOUT_HASH;
/// `PACKET_FANOUT_LB`: round robin.
pub const PACKET_FANOUT_LB: u32 = lrs::if_packet::PACKET_FANOUT_LB;
/// `PACKET_FANOUT_CPU`: by the CPU the packet arrived on.
pub const PACKET_FANOUT_CPU: u32 = lrs::if_packet::PACKET_FANOUT_CPU;
/// `PACKET_STATISTICS`: `struct tpacket_stats_v3`, reset on every read.
pub const PACKET_STATISTICS: i32 = lrs::if_packet::PACKET_STATISTICS as i32;
/// `PACKET_QDISC_BYPASS` (Linux 3.14): TX straight to the driver.
pub const PACKET_QDISC_BYPASS: i32 = lrs::if_packet::PACKET_QDISC_BYPASS as i32;
/// `PACKET_VNET_HDR` (Linux 3.10): each frame starts with a `struct virtio_net_hdr`.
pub const PACKET_VNET_HDR: i32 = lrs::if_packet::PACKET_VNET_HDR as i32;
/// `sizeof(struct virtio_net_hdr)`.
pub const VIRTIO_NET_HDR_LEN: usize = 10;
/// `PACKET_IGNORE_OUTGOING` (`linux/if_packet.h`, 4.20).
pub const PACKET_IGNORE_OUTGOING: i32 = lrs::if_packet::PACKET_IGNORE_OUTGOING as i32;
/// `TP_STATUS_KERNEL`: the kernel owns the block (RX) / `TP_STATUS_AVAILABLE`: free frame (TX).
pub const TP_STATUS_KERNEL: u32 = lrs::if_packet::TP_STATUS_KERNEL;
/// `TP_STATUS_USER`: the block is the application's (RX).
pub const TP_STATUS_USER: u32 = lrs::if_packet::TP_STATUS_USER;
/// `TP_STATUS_SEND_REQUEST`: frame filled, to send (TX).
pub const TP_STATUS_SEND_REQUEST: u32 = lrs::if_packet::TP_STATUS_SEND_REQUEST;
/// `TP_STATUS_SENDING`: the kernel is sending the frame (TX).
pub const TP_STATUS_SENDING: u32 = lrs::if_packet::TP_STATUS_SENDING;
/// `TP_STATUS_WRONG_FORMAT`: the kernel refused the frame (TX).
pub const TP_STATUS_WRONG_FORMAT: u32 = lrs::if_packet::TP_STATUS_WRONG_FORMAT;
/// `TP_STATUS_LOSING`: packets were dropped since the last statistics read (RX).
pub const TP_STATUS_LOSING: u32 = lrs::if_packet::TP_STATUS_LOSING;
/// `TP_STATUS_VLAN_VALID`: `tp_vlan_tci` holds a tag (RX).
pub const TP_STATUS_VLAN_VALID: u32 = lrs::if_packet::TP_STATUS_VLAN_VALID;
/// `TP_STATUS_BLK_TMO`: the block was retired by its timeout (RX).
pub const TP_STATUS_BLK_TMO: u32 = lrs::if_packet::TP_STATUS_BLK_TMO;
/// `TP_STATUS_VLAN_TPID_VALID`: `tp_vlan_tpid` is set (RX).
pub const TP_STATUS_VLAN_TPID_VALID: u32 = lrs::if_packet::TP_STATUS_VLAN_TPID_VALID;
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
pub const ETH_P_ALL: u16 = lrs::if_ether::ETH_P_ALL as u16;
/// `AF_XDP` (`linux/socket.h`, Linux 4.18).
pub const AF_XDP: i32 = lrs::net::AF_XDP as i32;

/// `IORING_SEND_ZC_REPORT_USAGE` (`linux/io_uring.h`, Linux 6.2): the notification's `res`
/// says whether the kernel copied.
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = lrs::io_uring::IORING_SEND_ZC_REPORT_USAGE as u16;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: set in a notification's `res` when data was copied.
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = lrs::io_uring::IORING_NOTIF_USAGE_ZC_COPIED;
/// `IORING_CQE_F_MORE`: another CQE (the notification) follows for this request.
pub const IORING_CQE_F_MORE: u32 = lrs::io_uring::IORING_CQE_F_MORE;
/// `IORING_CQE_F_NOTIF`: this CQE is a zero-copy notification.
pub const IORING_CQE_F_NOTIF: u32 = lrs::io_uring::IORING_CQE_F_NOTIF;
/// `IORING_OP_SENDMSG` (Linux 5.3).
pub const IORING_OP_SENDMSG: u8 = lrs::io_uring::io_uring_op::IORING_OP_SENDMSG as u8;
/// `IORING_OP_SEND` (5.6).
pub const IORING_OP_SEND: u8 = lrs::io_uring::io_uring_op::IORING_OP_SEND as u8;
/// `IORING_OP_SEND_ZC` (6.0).
pub const IORING_OP_SEND_ZC: u8 = lrs::io_uring::io_uring_op::IORING_OP_SEND_ZC as u8;
/// `IORING_OP_SENDMSG_ZC` (6.1).
pub const IORING_OP_SENDMSG_ZC: u8 = lrs::io_uring::io_uring_op::IORING_OP_SENDMSG_ZC as u8;
/// `IOSQE_FIXED_FILE`: `fd` is an index into the registered files.
pub const IOSQE_FIXED_FILE: u8 =
    1 << lrs::io_uring::io_uring_sqe_flags_bit::IOSQE_FIXED_FILE_BIT as u8;
/// `IOSQE_IO_LINK`: the next SQE starts only after this one completed.
pub const IOSQE_IO_LINK: u8 = 1 << lrs::io_uring::io_uring_sqe_flags_bit::IOSQE_IO_LINK_BIT as u8;
/// `IORING_RECVSEND_FIXED_BUF` (in `ioprio`): the buffer lies in registered buffer `buf_index`.
pub const IORING_RECVSEND_FIXED_BUF: u16 = lrs::io_uring::IORING_RECVSEND_FIXED_BUF as u16;

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
pub const SOL_XDP: i32 = lrs::net::SOL_XDP as i32;
/// `XDP_MMAP_OFFSETS` (`linux/if_xdp.h`): where each ring's producer, consumer and descriptors sit.
pub const XDP_MMAP_OFFSETS: i32 = lrs::xdp::XDP_MMAP_OFFSETS as i32;
/// `XDP_RX_RING`: entries of the RX ring.
pub const XDP_RX_RING: i32 = lrs::xdp::XDP_RX_RING as i32;
/// `XDP_TX_RING`: entries of the TX ring.
pub const XDP_TX_RING: i32 = lrs::xdp::XDP_TX_RING as i32;
/// `XDP_UMEM_REG`: registers the UMEM.
pub const XDP_UMEM_REG: i32 = lrs::xdp::XDP_UMEM_REG as i32;
/// `XDP_UMEM_FILL_RING`: entries of the fill ring.
pub const XDP_UMEM_FILL_RING: i32 = lrs::xdp::XDP_UMEM_FILL_RING as i32;
/// `XDP_UMEM_COMPLETION_RING`: entries of the completion ring.
pub const XDP_UMEM_COMPLETION_RING: i32 = lrs::xdp::XDP_UMEM_COMPLETION_RING as i32;
/// `XDP_STATISTICS`.
pub const XDP_STATISTICS: i32 = lrs::xdp::XDP_STATISTICS as i32;
/// `XDP_OPTIONS` (Linux 5.3): whether the bound socket is zero-copy.
pub const XDP_OPTIONS: i32 = lrs::xdp::XDP_OPTIONS as i32;
/// `XDP_OPTIONS_ZEROCOPY`.
pub const XDP_OPTIONS_ZEROCOPY: u32 = lrs::xdp::XDP_OPTIONS_ZEROCOPY;
/// `sxdp_flags`: force copy mode.
pub const XDP_COPY: u16 = lrs::xdp::XDP_COPY as u16;
/// `XDP_SHARED_UMEM`: bind sharing the UMEM of the socket `sxdp_shared_umem_fd`.
pub const XDP_SHARED_UMEM: u16 = lrs::xdp::XDP_SHARED_UMEM as u16;
/// `sxdp_flags`: force zero-copy mode.
pub const XDP_ZEROCOPY: u16 = lrs::xdp::XDP_ZEROCOPY as u16;
/// `sxdp_flags`: the kernel sets `XDP_RING_NEED_WAKEUP` instead of polling (Linux 5.4).
pub const XDP_USE_NEED_WAKEUP: u16 = lrs::xdp::XDP_USE_NEED_WAKEUP as u16;
/// A ring's `flags` word: the kernel needs a syscall to go on.
pub const XDP_RING_NEED_WAKEUP: u32 = lrs::xdp::XDP_RING_NEED_WAKEUP;
/// `mmap` offset of the RX ring.
pub const XDP_PGOFF_RX_RING: u64 = lrs::xdp::XDP_PGOFF_RX_RING as u64;
/// `mmap` offset of the TX ring.
pub const XDP_PGOFF_TX_RING: u64 = lrs::xdp::XDP_PGOFF_TX_RING as u64;
/// `mmap` offset of the fill ring.
pub const XDP_UMEM_PGOFF_FILL_RING: u64 = lrs::xdp::XDP_UMEM_PGOFF_FILL_RING;
/// `mmap` offset of the completion ring.
pub const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = lrs::xdp::XDP_UMEM_PGOFF_COMPLETION_RING;

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
// SAFETY: `struct timeval` is two C longs.
unsafe impl Pod for libc::timeval {}
// SAFETY: repr(C) struct of integers and byte arrays only.
unsafe impl Pod for TcpInfo {}
// SAFETY: repr(C) struct of integers only (offsets into a mapping, not addresses).
unsafe impl Pod for XdpMmapOffsets {}
// SAFETY: repr(C) struct of integers only.
unsafe impl Pod for XdpStatistics {}
// SAFETY: repr(C) struct of one integer.
unsafe impl Pod for XdpOptionsV1 {}

/// The start of `struct tcp_info` (`linux/tcp.h`) up to `tcpi_snd_wnd` (Linux 5.4), with
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
    /// `tcpi_dsack_dups` (5.1), `tcpi_reord_seen` (5.1), `tcpi_rcv_ooopack` (5.4).
    pub tail: [u8; 12],
    /// `tcpi_snd_wnd` (5.4): the peer's advertised receive window, in bytes.
    pub snd_wnd: u32,
}

// --- io_uring set-up and enter, ethtool and sockios, nsfs, capabilities ---

/// `IORING_REGISTER_RING_FDS` (Linux 5.18).
pub const IORING_REGISTER_RING_FDS: libc::c_uint =
    lrs::io_uring::io_uring_register_op::IORING_REGISTER_RING_FDS as libc::c_uint;
/// `IORING_UNREGISTER_RING_FDS` (Linux 5.18).
pub const IORING_UNREGISTER_RING_FDS: libc::c_uint =
    lrs::io_uring::io_uring_register_op::IORING_UNREGISTER_RING_FDS as libc::c_uint;
/// `IORING_ENTER_GETEVENTS`.
pub const IORING_ENTER_GETEVENTS: libc::c_uint =
    lrs::io_uring::IORING_ENTER_GETEVENTS as libc::c_uint;
/// `IORING_ENTER_EXT_ARG` (5.11): the argument is a `struct io_uring_getevents_arg`.
pub const IORING_ENTER_EXT_ARG: libc::c_uint = lrs::io_uring::IORING_ENTER_EXT_ARG as libc::c_uint;
/// `IORING_ENTER_REGISTERED_RING` (5.18): the fd argument is a registered ring's index.
pub const IORING_ENTER_REGISTERED_RING: libc::c_uint =
    lrs::io_uring::IORING_ENTER_REGISTERED_RING as libc::c_uint;
/// `IORING_OFF_SQ_RING`: the mmap offset of the submission queue ring.
pub const IORING_OFF_SQ_RING: u64 = lrs::io_uring::IORING_OFF_SQ_RING as u64;
/// `IORING_OFF_CQ_RING`: the mmap offset of the completion queue ring (the same mapping as the
/// submission queue ring where the kernel has `IORING_FEAT_SINGLE_MMAP`, 5.4).
pub const IORING_OFF_CQ_RING: u64 = lrs::io_uring::IORING_OFF_CQ_RING as u64;
/// `IORING_OFF_SQES`: the mmap offset of the submission queue entries.
pub const IORING_OFF_SQES: u64 = lrs::io_uring::IORING_OFF_SQES as u64;
/// `SIOCETHTOOL` (`linux/sockios.h`): the ethtool ioctl.
pub const SIOCETHTOOL: libc::c_ulong = 0x8946;
pub const SIOCGIFNAME: libc::c_ulong = lrs::ioctl::SIOCGIFNAME as libc::c_ulong;
/// `ETHTOOL_GSTRINGS` (`linux/ethtool.h`): a string set's names.
pub const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSSET_INFO` (`linux/ethtool.h`): a string set's length.
pub const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETHTOOL_GFEATURES` (`linux/ethtool.h`): the device's feature words.
pub const ETHTOOL_GFEATURES: u32 = 0x3a;
/// `ETH_SS_FEATURES` (`enum ethtool_stringset`).
pub const ETH_SS_FEATURES: u32 = 4;
/// `ETH_GSTRING_LEN`: each feature name is NUL-padded to this many bytes.
pub const ETH_GSTRING_LEN: usize = 32;
/// `ETHTOOL_GCHANNELS` (`linux/ethtool.h`): the device's RX, TX and combined channels.
pub const ETHTOOL_GCHANNELS: u32 = 0x3c;
/// `TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT` (`linux/tcp.h`, 5.11): the caller promises the
/// target range holds no pages, so the kernel skips its own zap.
pub const TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT: u32 =
    lrs::net::TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT;
/// `NS_GET_USERNS` (`linux/nsfs.h`): the user namespace that owns a namespace.
pub const NS_GET_USERNS: libc::c_ulong = lrs::ioctl::NS_GET_USERNS as libc::c_ulong;
/// `CAP_IPC_LOCK` (`linux/capability.h`): locked memory beyond `RLIMIT_MEMLOCK`.
pub const CAP_IPC_LOCK: u32 = lrs::general::CAP_IPC_LOCK;

/// The constants written out above (those `linux-raw-sys` lacks), as the headers name them:
/// (header under `/usr/include`, name, value here).
#[cfg(test)]
const LOCAL: &[(&str, &str, i128)] = &[
    ("linux/udp.h", "UDP_SEGMENT", UDP_SEGMENT as i128),
    ("linux/udp.h", "UDP_GRO", UDP_GRO as i128),
    (
        "linux/errqueue.h",
        "SO_EE_ORIGIN_ICMP",
        SO_EE_ORIGIN_ICMP as i128,
    ),
    (
        "linux/errqueue.h",
        "SO_EE_ORIGIN_ICMP6",
        SO_EE_ORIGIN_ICMP6 as i128,
    ),
    (
        "linux/errqueue.h",
        "SO_EE_ORIGIN_ZEROCOPY",
        SO_EE_ORIGIN_ZEROCOPY as i128,
    ),
    (
        "linux/errqueue.h",
        "SO_EE_CODE_ZEROCOPY_COPIED",
        SO_EE_CODE_ZEROCOPY_COPIED as i128,
    ),
    ("linux/sockios.h", "SIOCETHTOOL", SIOCETHTOOL as i128),
    (
        "linux/ethtool.h",
        "ETHTOOL_GSTRINGS",
        ETHTOOL_GSTRINGS as i128,
    ),
    (
        "linux/ethtool.h",
        "ETHTOOL_GSSET_INFO",
        ETHTOOL_GSSET_INFO as i128,
    ),
    (
        "linux/ethtool.h",
        "ETHTOOL_GFEATURES",
        ETHTOOL_GFEATURES as i128,
    ),
    (
        "linux/ethtool.h",
        "ETHTOOL_GCHANNELS",
        ETHTOOL_GCHANNELS as i128,
    ),
    (
        "linux/ethtool.h",
        "ETH_SS_FEATURES",
        ETH_SS_FEATURES as i128,
    ),
    (
        "linux/ethtool.h",
        "ETH_GSTRING_LEN",
        ETH_GSTRING_LEN as i128,
    ),
];

#[cfg(test)]
mod headers {
    use super::LOCAL;

    /// The value of `name` in `text`: a `#define NAME value` or an enum member `NAME = value,`
    /// or, in an enum, the member's place counted from the last explicit value.
    fn value_in(text: &str, name: &str) -> Option<i128> {
        let number = |v: &str| {
            let v = v
                .trim()
                .trim_end_matches(',')
                .trim_matches(|c| c == '(' || c == ')');
            let v = v.trim_end_matches(['U', 'u', 'L', 'l']);
            match v.strip_prefix("0x") {
                Some(h) => i128::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            }
        };
        let mut next_enum: Option<i128> = None;
        for line in text.lines() {
            let line = line.split("/*").next().unwrap_or("").trim();
            if line.is_empty() || line.starts_with('*') || line.starts_with("//") {
                continue;
            }
            let mut words = line.split_whitespace();
            if line.starts_with("#define") {
                words.next();
                if words.next() == Some(name) {
                    return number(&words.collect::<String>());
                }
                continue;
            }
            if line.starts_with("enum") {
                next_enum = Some(0);
                continue;
            }
            if line.starts_with('}') {
                next_enum = None;
                continue;
            }
            if let Some(n) = next_enum.as_mut() {
                let (member, value) = match line.split_once('=') {
                    Some((m, v)) => (m.trim(), number(v)),
                    None => (line.trim_end_matches(','), Some(*n)),
                };
                let Some(value) = value else { continue };
                if member == name {
                    return Some(value);
                }
                *n = value + 1;
            }
        }
        None
    }

    /// Issue 50: every kernel number not taken from `linux-raw-sys` is compared with the
    /// installed UAPI headers; a machine without them (`linux-libc-dev`) skips, saying so.
    #[test]
    fn local_constants_match_the_kernel_headers() {
        let root = std::path::Path::new("/usr/include");
        if !root.join("linux/udp.h").exists() {
            eprintln!(
                "skipped: no kernel UAPI headers under /usr/include (apt-get install linux-libc-dev)"
            );
            return;
        }
        for (header, name, ours) in LOCAL {
            let text = std::fs::read_to_string(root.join(header))
                .unwrap_or_else(|e| panic!("{header}: {e}"));
            let theirs =
                value_in(&text, name).unwrap_or_else(|| panic!("{name} not found in {header}"));
            assert_eq!(*ours, theirs, "{name} ({header})");
        }
    }

    #[test]
    fn the_header_reader_reads_defines_and_enums() {
        let text = "#define A 0x10\n#define B (1U)\nenum e {\n\tX,\n\tY = 5, /* y */\n\tZ,\n};\n";
        assert_eq!(value_in(text, "A"), Some(16));
        assert_eq!(value_in(text, "B"), Some(1));
        assert_eq!(value_in(text, "X"), Some(0));
        assert_eq!(value_in(text, "Z"), Some(6));
        assert_eq!(value_in(text, "W"), None);
    }
}

#[cfg(test)]
mod tcp_info_layout {
    #[test]
    fn offsets_match_linux_tcp_h() {
        assert_eq!(std::mem::offset_of!(super::TcpInfo, bytes_acked), 120);
        assert_eq!(std::mem::offset_of!(super::TcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::offset_of!(super::TcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::size_of::<super::TcpInfo>(), 232);
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
