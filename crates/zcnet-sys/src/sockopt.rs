//! Socket options (`setsockopt(2)`, `getsockopt(2)`), one typed function per option the crate
//! uses. The generic calls are private to this file: an option's name decides how the kernel
//! reads the value (`TCP_ZEROCOPY_RECEIVE`, `XDP_UMEM_REG` and `SO_ATTACH_FILTER` read addresses
//! from it), so a `Pod` bound cannot make them safe for any name; rustix keeps its generic
//! private in the same way and offers one function per option. No caller above `sys` chooses a
//! level and a name.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::abi::{self, Pod};
use super::cvt;

/// `setsockopt(2)` of a value the kernel reads as plain data under `(level, name)`: the caller
/// (in this file) has checked that the option holds no address.
fn set<T: Pod>(fd: BorrowedFd<'_>, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to size_of::<T>() readable bytes for the duration of the call, and
    // the options this file passes through here hold no pointer for the kernel to follow.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt(2)` into a plain-old-data value; returns the `optlen` the kernel wrote back.
/// `len` may be smaller than `size_of::<T>()` (to pass an older, shorter struct version).
fn get<T: Pod>(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    value: &mut T,
    len: usize,
) -> io::Result<usize> {
    let mut optlen = len.min(size_of::<T>()) as libc::socklen_t;
    // SAFETY: `value` is valid for writes of size_of::<T>() >= optlen bytes and T accepts any
    // bit pattern (Pod); `optlen` is a valid socklen_t for the kernel to update. The options
    // read through here hold no address the kernel writes through.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *mut T).cast(),
            &mut optlen,
        )
    })?;
    Ok(optlen as usize)
}

fn get_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut v = 0i32;
    get(fd, level, name, &mut v, size_of::<i32>())?;
    Ok(v)
}

// --- SOL_SOCKET (`socket(7)`) ---

/// `SO_TYPE`: `SOCK_STREAM`, `SOCK_DGRAM`, ...
pub fn socket_type(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)
}

/// `SO_DOMAIN` (Linux 2.6.32): `AF_INET`, `AF_INET6`, `AF_UNIX`, ...
pub fn domain(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)
}

/// A `struct timeval` option of `SOL_SOCKET` (`SO_SNDTIMEO`, `SO_RCVTIMEO`).
fn get_timeval(fd: BorrowedFd<'_>, name: i32) -> io::Result<libc::timeval> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    get(
        fd,
        libc::SOL_SOCKET,
        name,
        &mut tv,
        size_of::<libc::timeval>(),
    )?;
    Ok(tv)
}

/// `SO_SNDTIMEO`: how long a blocking send waits for room (zero: for ever).
pub fn send_timeout(fd: BorrowedFd<'_>) -> io::Result<libc::timeval> {
    get_timeval(fd, libc::SO_SNDTIMEO)
}

/// `SO_RCVTIMEO`: how long a blocking receive waits; `None` for ever.
pub fn recv_timeout(fd: BorrowedFd<'_>) -> io::Result<Option<std::time::Duration>> {
    let tv = get_timeval(fd, libc::SO_RCVTIMEO)?;
    let d = std::time::Duration::new(
        u64::try_from(tv.tv_sec).unwrap_or(0),
        u32::try_from(tv.tv_usec).unwrap_or(0).saturating_mul(1000),
    );
    Ok((!d.is_zero()).then_some(d))
}

/// Sets `SO_SNDTIMEO`.
pub fn set_send_timeout(fd: BorrowedFd<'_>, tv: &libc::timeval) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, tv)
}

/// `SO_LINGER` on with a time of 0: the socket's last close resets the connection (an RST,
/// what is unsent dropped) instead of ending it with a FIN.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    set(fd, libc::SOL_SOCKET, libc::SO_LINGER, &l)
}

/// `SO_ACCEPTCONN`: whether the socket is listening.
pub fn accepts_connections(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).map(|v| v != 0)
}

/// `SO_PROTOCOL` (Linux 2.6.32): `IPPROTO_TCP`, `IPPROTO_UDP`, ...
pub fn protocol(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)
}

/// Checks that `fd` is a TCP socket (`SO_PROTOCOL`, Linux 2.6.32): one call, as the discard
/// path makes it for every consume. `IPPROTO_TCP` is only ever a stream socket's protocol
/// (MPTCP reports `IPPROTO_MPTCP`, Unix sockets 0).
pub fn check_tcp(fd: BorrowedFd<'_>) -> io::Result<()> {
    check_protocol(fd, libc::IPPROTO_TCP, "not a TCP socket")
}

/// That `fd` is a socket of `protocol` (`SO_PROTOCOL`): `ENOTSOCK` from the kernel for a
/// descriptor that is not a socket, `InvalidInput` with `what` for another protocol.
pub fn check_protocol(fd: BorrowedFd<'_>, protocol: i32, what: &'static str) -> io::Result<()> {
    if self::protocol(fd)? != protocol {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    Ok(())
}

/// `SO_ERROR`: the pending error (a positive errno, 0 for none), which reading clears.
pub fn take_error(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)
}

/// `SO_ZEROCOPY` (Linux 4.14): whether `MSG_ZEROCOPY` sends loan their pages.
pub fn set_zerocopy(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, abi::SO_ZEROCOPY, &i32::from(on))
}

/// `SO_ZEROCOPY` as it is now.
pub fn zerocopy(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::SOL_SOCKET, abi::SO_ZEROCOPY).map(|v| v != 0)
}

/// `SO_PEEK_OFF`: where the next `MSG_PEEK` reads from (-1: off, peeking from the head).
pub fn set_peek_offset(fd: BorrowedFd<'_>, offset: i32) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, abi::SO_PEEK_OFF, &offset)
}

/// `SO_RCVLOWAT`: the bytes a receive (and readiness) waits for.
pub fn set_receive_low_water(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, &bytes)
}

/// `SO_TIMESTAMPING` with `flags` (`SOF_TIMESTAMPING_*`).
pub fn set_timestamping(fd: BorrowedFd<'_>, flags: u32) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
}

/// `SO_SNDBUFFORCE` (beyond `net.core.wmem_max`, with `CAP_NET_ADMIN`), else `SO_SNDBUF`.
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &bytes)
        .or_else(|_| set(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &bytes))
}

/// `SO_RCVBUF`: the receive buffer's size now, in bytes (twice what was set: the kernel's
/// bookkeeping share included, `socket(7)`).
pub fn receive_buffer(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
}

/// `SO_RCVBUFFORCE` (beyond `net.core.rmem_max`, with `CAP_NET_ADMIN`), else `SO_RCVBUF`.
pub fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    set(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &bytes)
        .or_else(|_| set(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes))
}

/// `SO_BINDTOIFINDEX` (Linux 5.0): the device the socket is bound to, 0 for none.
pub fn bound_device_index(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, abi::SO_BINDTOIFINDEX)
}

/// `SO_MARK`: the socket's mark, which routing rules may match.
pub fn mark(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, libc::SOL_SOCKET, abi::SO_MARK)
}

/// `SO_NETNS_COOKIE` (Linux 5.14): the cookie of the network namespace `fd` lives in, the same
/// for every socket of it.
pub fn netns_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = 0u64;
    get(
        fd,
        libc::SOL_SOCKET,
        abi::SO_NETNS_COOKIE,
        &mut v,
        size_of::<u64>(),
    )?;
    Ok(v)
}

/// `SO_ATTACH_FILTER` with a classic BPF program (`socket(7)`, `filter.rst`); the kernel copies
/// it.
pub fn attach_filter(fd: BorrowedFd<'_>, program: &[abi::SockFilter]) -> io::Result<()> {
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const abi::SockFilter,
    }
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let prog = SockFprog {
        len,
        filter: program.as_ptr(),
    };
    // SAFETY: `prog` points at `len` instructions that live across the call; the kernel copies
    // them and reads nothing else.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const SockFprog).cast(),
            size_of::<SockFprog>() as libc::socklen_t,
        )
    })
    .map(drop)
}

// --- IPPROTO_TCP (`tcp(7)`) ---

/// `TCP_INFO`: the struct, and how many bytes of it the kernel filled.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<(abi::TcpInfo, usize)> {
    // SAFETY: TcpInfo is Pod: all-zero is valid.
    let mut info: abi::TcpInfo = unsafe { zeroed() };
    let len = get(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        &mut info,
        size_of::<abi::TcpInfo>(),
    )?;
    Ok((info, len))
}

/// `TCP_ZEROCOPY_RECEIVE` (Linux 4.18; `Documentation/networking/tcp_mmap`): maps received
/// pages into `zc.address`, copies what cannot be mapped into `zc.copybuf_address`, and writes
/// `zc` back; passes `optlen` bytes of it (how much of the struct the kernel knows) and returns
/// what the kernel wrote back.
///
/// # Safety
/// `[zc.address, zc.address + zc.length)` lies in a mapping of this socket (`mmap` of `fd`)
/// that the caller owns and of which no Rust reference is alive during the call (the kernel
/// replaces its pages); `zc.copybuf_address` is 0 or valid for writes of `zc.copybuf_len`
/// bytes; `zc.msg_control` is 0.
pub unsafe fn tcp_zerocopy_receive(
    fd: BorrowedFd<'_>,
    zc: &mut abi::TcpZerocopyReceive,
    optlen: usize,
) -> io::Result<usize> {
    let mut len = optlen.min(size_of::<abi::TcpZerocopyReceive>()) as libc::socklen_t;
    // SAFETY: `zc` is valid for writes of `len` bytes; the addresses in it are the caller's to
    // vouch for (this function's contract).
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            abi::TCP_ZEROCOPY_RECEIVE,
            (zc as *mut abi::TcpZerocopyReceive).cast(),
            &mut len,
        )
    })?;
    Ok(len as usize)
}

// --- SOL_UDP (`udp(7)`) ---

/// `UDP_SEGMENT` (Linux 4.18): later sends of more than `size` bytes are trains of `size`-byte
/// datagrams (0: single datagrams).
pub fn set_udp_segment(fd: BorrowedFd<'_>, size: i32) -> io::Result<()> {
    set(fd, abi::SOL_UDP, abi::UDP_SEGMENT, &size)
}

/// `UDP_SEGMENT` as it is now (an error `ENOPROTOOPT` where the kernel lacks it).
pub fn udp_segment(fd: BorrowedFd<'_>) -> io::Result<i32> {
    get_int(fd, abi::SOL_UDP, abi::UDP_SEGMENT)
}

/// `UDP_GRO` (Linux 5.0): receive coalesced trains, their segment size in a cmsg.
pub fn set_udp_gro(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set(fd, abi::SOL_UDP, abi::UDP_GRO, &i32::from(on))
}

// --- SOL_PACKET (`packet(7)`) ---

/// `PACKET_VERSION`: the ring layout (`TPACKET_V3`).
pub fn set_packet_version(fd: BorrowedFd<'_>, version: i32) -> io::Result<()> {
    set(fd, abi::SOL_PACKET, abi::PACKET_VERSION, &version)
}

/// `PACKET_RX_RING` (`tx` false) or `PACKET_TX_RING`: the ring's geometry; the kernel allocates
/// it, to be mapped with `mmap` of the socket.
pub fn set_packet_ring(fd: BorrowedFd<'_>, tx: bool, req: &abi::TpacketReq3) -> io::Result<()> {
    let name = if tx {
        abi::PACKET_TX_RING
    } else {
        abi::PACKET_RX_RING
    };
    set(fd, abi::SOL_PACKET, name, req)
}

/// `PACKET_FANOUT` with `arg` (group id, and mode and flags in the high half).
pub fn set_packet_fanout(fd: BorrowedFd<'_>, arg: u32) -> io::Result<()> {
    set(fd, abi::SOL_PACKET, abi::PACKET_FANOUT, &arg)
}

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): no copies of this host's own outgoing packets.
pub fn set_packet_ignore_outgoing(fd: BorrowedFd<'_>) -> io::Result<()> {
    set(fd, abi::SOL_PACKET, abi::PACKET_IGNORE_OUTGOING, &1i32)
}

/// `PACKET_QDISC_BYPASS` (Linux 3.14): sends skip the device's queueing discipline.
pub fn set_packet_qdisc_bypass(fd: BorrowedFd<'_>) -> io::Result<()> {
    set(fd, abi::SOL_PACKET, abi::PACKET_QDISC_BYPASS, &1i32)
}

/// `PACKET_VNET_HDR`: each frame starts with a `struct virtio_net_hdr`.
pub fn set_packet_vnet_hdr(fd: BorrowedFd<'_>) -> io::Result<()> {
    set(fd, abi::SOL_PACKET, abi::PACKET_VNET_HDR, &1i32)
}

/// `PACKET_STATISTICS`, which resets the kernel's counters: the struct and the bytes the kernel
/// filled (a socket without a V3 ring fills the shorter `struct tpacket_stats`).
pub fn packet_statistics(fd: BorrowedFd<'_>) -> io::Result<(abi::TpacketStatsV3, usize)> {
    let mut s = abi::TpacketStatsV3::default();
    let len = get(
        fd,
        abi::SOL_PACKET,
        abi::PACKET_STATISTICS,
        &mut s,
        size_of::<abi::TpacketStatsV3>(),
    )?;
    Ok((s, len))
}

// --- SOL_XDP (`af_xdp.rst`) ---

/// `XDP_UMEM_REG`: registers `[addr, addr + len)` as the socket's UMEM of `frame_size`-byte
/// frames. The kernel pins those pages and writes received frames into them.
///
/// # Safety
/// The range is memory of this process that stays mapped, and is not used as anything but the
/// UMEM, until after `fd` and every socket sharing its UMEM are closed.
pub unsafe fn register_umem(
    fd: BorrowedFd<'_>,
    addr: usize,
    len: usize,
    frame_size: u32,
    headroom: u32,
) -> io::Result<()> {
    #[repr(C)]
    struct XdpUmemReg {
        addr: u64,
        len: u64,
        chunk_size: u32,
        headroom: u32,
        flags: u32,
        tx_metadata_len: u32,
    }
    let reg = XdpUmemReg {
        addr: addr as u64,
        len: len as u64,
        chunk_size: frame_size,
        headroom,
        flags: 0,
        tx_metadata_len: 0,
    };
    // SAFETY: `reg` is readable for its size during the call; the range it names is the
    // caller's to vouch for (this function's contract).
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            abi::SOL_XDP,
            abi::XDP_UMEM_REG,
            (&reg as *const XdpUmemReg).cast(),
            size_of::<XdpUmemReg>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// The four rings of an `AF_XDP` socket, as `XDP_*_RING` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpRing {
    /// `XDP_UMEM_FILL_RING`: frames given to the kernel to receive into.
    Fill,
    /// `XDP_UMEM_COMPLETION_RING`: frames the kernel has sent.
    Completion,
    /// `XDP_RX_RING`: received descriptors.
    Rx,
    /// `XDP_TX_RING`: descriptors to send.
    Tx,
}

/// `XDP_UMEM_FILL_RING`, `XDP_UMEM_COMPLETION_RING`, `XDP_RX_RING` or `XDP_TX_RING`: the ring's
/// size in entries (a power of two).
pub fn set_xdp_ring_size(fd: BorrowedFd<'_>, ring: XdpRing, entries: u32) -> io::Result<()> {
    let name = match ring {
        XdpRing::Fill => abi::XDP_UMEM_FILL_RING,
        XdpRing::Completion => abi::XDP_UMEM_COMPLETION_RING,
        XdpRing::Rx => abi::XDP_RX_RING,
        XdpRing::Tx => abi::XDP_TX_RING,
    };
    set(fd, abi::SOL_XDP, name, &entries)
}

/// `XDP_MMAP_OFFSETS`: where each ring's indices, flags and entries lie in its mapping.
pub fn xdp_mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<abi::XdpMmapOffsets> {
    let mut off = abi::XdpMmapOffsets::default();
    get(
        fd,
        abi::SOL_XDP,
        abi::XDP_MMAP_OFFSETS,
        &mut off,
        size_of::<abi::XdpMmapOffsets>(),
    )?;
    Ok(off)
}

/// `XDP_OPTIONS` (Linux 5.3): the bound socket's flags (`XDP_OPTIONS_ZEROCOPY`).
pub fn xdp_options(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut o = abi::XdpOptionsV1::default();
    get(fd, abi::SOL_XDP, abi::XDP_OPTIONS, &mut o, 4)?;
    Ok(o.flags)
}

/// `XDP_STATISTICS`.
pub fn xdp_statistics(fd: BorrowedFd<'_>) -> io::Result<abi::XdpStatistics> {
    let mut s = abi::XdpStatistics::default();
    get(
        fd,
        abi::SOL_XDP,
        abi::XDP_STATISTICS,
        &mut s,
        size_of::<abi::XdpStatistics>(),
    )?;
    Ok(s)
}
