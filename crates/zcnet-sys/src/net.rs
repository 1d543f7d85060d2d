//! Socket calls other than options: `socket(2)`, addresses, sends and receives, the error
//! queue, `AF_PACKET` binding (`socket(7)`, `ip(7)`, `packet(7)`).

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{abi, cvt, cvt_size};

/// `socket(2)` with `SOCK_CLOEXEC`.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; a non-negative return is a new descriptor we own.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Storage for a `sockaddr_in`/`sockaddr_in6` built from a [`SocketAddr`].
pub fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `getpeername(2)`: the connected peer, `None` for an unconnected socket (`ENOTCONN`) or an
/// address family other than IPv4/IPv6.
pub fn peer_addr(fd: BorrowedFd<'_>) -> io::Result<Option<SocketAddr>> {
    match socket_addr(fd, libc::getpeername) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(None),
        r => r,
    }
}

/// `getsockname(2)`: the socket's own address, `None` for an address family other than
/// IPv4/IPv6.
pub fn local_addr(fd: BorrowedFd<'_>) -> io::Result<Option<SocketAddr>> {
    socket_addr(fd, libc::getsockname)
}

/// An address `call` (`getpeername` or `getsockname`) writes for `fd`.
fn socket_addr(
    fd: BorrowedFd<'_>,
    call: unsafe extern "C" fn(
        libc::c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
    ) -> libc::c_int,
) -> io::Result<Option<SocketAddr>> {
    // SAFETY: sockaddr_storage is plain data for which all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `call` is getpeername or getsockname; `storage` is writable for `len` bytes and
    // the kernel writes at most that many.
    cvt(unsafe {
        call(
            fd.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    Ok(from_storage(&storage, len))
}

/// `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC`: a new connection and its peer's address
/// (`None` for a family other than IPv4/IPv6). `WouldBlock` when none waits.
pub fn accept_nonblocking(fd: BorrowedFd<'_>) -> io::Result<(OwnedFd, Option<SocketAddr>)> {
    // SAFETY: sockaddr_storage is plain data for which all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: `storage` is writable for `len` bytes and the kernel writes at most that many.
    let new = cvt(unsafe {
        libc::accept4(
            fd.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            flags,
        )
    })?;
    // SAFETY: `new` was just returned by accept4() and is owned by nobody else.
    let new = unsafe { OwnedFd::from_raw_fd(new) };
    Ok((new, from_storage(&storage, len)))
}

/// A non-blocking TCP socket of `addr`'s family, connecting to it (`connect(2)`): with `true`
/// when connected at once, `false` while the handshake goes on (`EINPROGRESS`: writable once it
/// ended, its outcome in `SO_ERROR`).
pub fn connect_nonblocking(addr: &SocketAddr) -> io::Result<(OwnedFd, bool)> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let fd = socket(domain, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)?;
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid sockaddr of `len` bytes.
    let r = cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast(),
            len,
        )
    });
    match r {
        Ok(_) => Ok((fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok((fd, false)),
        Err(e) => Err(e),
    }
}

/// The address a `sockaddr_storage` of `len` bytes holds, if IPv4 or IPv6.
fn from_storage(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET, length checked);
            // sockaddr_storage is aligned for it.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                sin.sin_addr.s_addr.to_ne_bytes(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `sendto(2)` (or `send(2)` when `dest` is `None`) with `flags`. `EINVAL` for `flags` with
/// `MSG_ZEROCOPY`, whose buffer the kernel reads after the call: that is [`sendto_zerocopy`].
pub fn sendto(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: i32,
    dest: Option<&SocketAddr>,
) -> io::Result<usize> {
    if flags & abi::MSG_ZEROCOPY != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    send_raw(fd, buf, flags, dest)
}

/// [`sendto`] with `MSG_ZEROCOPY` added to `flags` (`socket(7)` `SO_ZEROCOPY`, Linux 4.14):
/// the kernel may keep reading `buf`'s pages after this returns, until it posts the send's
/// completion on the socket's error queue.
///
/// # Safety
/// `buf`'s memory stays allocated and unmodified until that completion is read, or the socket
/// is gone (a buffer whose completion never comes is leaked, never freed).
pub unsafe fn sendto_zerocopy(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: i32,
    dest: Option<&SocketAddr>,
) -> io::Result<usize> {
    send_raw(fd, buf, flags | abi::MSG_ZEROCOPY, dest)
}

fn send_raw(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: i32,
    dest: Option<&SocketAddr>,
) -> io::Result<usize> {
    let ret = match dest {
        None => {
            // SAFETY: `buf` is valid for reads of buf.len() bytes during the call.
            unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) }
        }
        Some(addr) => {
            let (storage, len) = sockaddr(addr);
            // SAFETY: `buf` is readable for its length; `storage` holds a sockaddr of `len` bytes.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    flags,
                    (&storage as *const libc::sockaddr_storage).cast(),
                    len,
                )
            }
        }
    };
    cvt_size(ret)
}

/// `sendmsg(2)` of `buf` with `flags` and one `SO_TIMESTAMPING` control message: the timestamp
/// record flags (`SOF_TIMESTAMPING_TX_*`) of this write alone, on top of the reporting flags set
/// on the socket (`so_timestamping(7)`, the kernel's `Documentation/networking/timestamping.rst`
/// 1.3.4; Linux 4.7: an older TCP ignores the message without an error). `EINVAL` for flags
/// that are not record flags.
pub fn send_timestamped(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: i32,
    tsflags: u32,
) -> io::Result<usize> {
    if flags & abi::MSG_ZEROCOPY != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // Room for one cmsghdr and a u32, aligned as cmsghdr wants (u64 covers its size_t).
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
    let (space, len) = unsafe {
        (
            libc::CMSG_SPACE(size_of::<u32>() as u32) as usize,
            libc::CMSG_LEN(size_of::<u32>() as u32) as usize,
        )
    };
    debug_assert!(space <= size_of::<[u64; 4]>());
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg_control` points at `control`, aligned for cmsghdr and `space` bytes long, so
    // CMSG_FIRSTHDR returns its start and the header and its u32 of data lie inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SO_TIMESTAMPING;
        (*cmsg).cmsg_len = len as _;
        libc::CMSG_DATA(cmsg).cast::<u32>().write_unaligned(tsflags);
    }
    // SAFETY: `iov` describes `buf`, which the kernel only reads (no MSG_ZEROCOPY: checked
    // above), during the call; `iov` and `control` outlive it.
    cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) })
}

/// `recv(2)` with `flags`.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], flags: i32) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of buf.len() bytes during the call.
    cvt_size(unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// `recvmsg(2)` into several buffers, filled in order, with `flags`.
pub fn recv_vectored(
    fd: BorrowedFd<'_>,
    bufs: &mut [io::IoSliceMut<'_>],
    flags: i32,
) -> io::Result<usize> {
    // SAFETY: msghdr is plain data for which all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    // IoSliceMut is ABI-compatible with struct iovec (documented by std on Unix).
    msg.msg_iov = bufs.as_mut_ptr().cast();
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: the iovecs describe live, exclusively borrowed buffers for the whole call.
    cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) })
}

/// `recvmsg(2)` of one message into `buf`, its ancillary data into `control`: the payload
/// length, the control bytes written and the message flags (`MSG_TRUNC`, `MSG_CTRUNC`).
pub fn recv_with_control(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    control: &mut [u8],
    flags: i32,
) -> io::Result<(usize, usize, i32)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `iov` describes `buf` and `msg_control` `control`, both exclusively borrowed and
    // valid for writes of their lengths for the whole call; `iov` outlives it.
    let n = cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) })?;
    Ok((n, msg.msg_controllen as usize, msg.msg_flags))
}

/// `connect(2)` to an `AF_UNSPEC` address: on TCP, the kernel's `tcp_disconnect` aborts the
/// connection now (a reset to the peer where its state calls for one, both queues dropped,
/// waiting readers and writers woken with an error), whichever other descriptors of the socket
/// are still open. `SO_LINGER` 0 aborts too, but only at the last close.
pub fn disconnect(fd: BorrowedFd<'_>) -> io::Result<()> {
    let unspec = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: `unspec` is a whole `struct sockaddr`, readable for the call; the length is its size.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &unspec,
            size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `recv(fd, _, len, MSG_TRUNC)` on TCP: drops up to `len` queued bytes without copying them
/// (Linux 4.3 for TCP). Returns how many were dropped.
///
/// `fd` is checked to be TCP on every call, through the same borrowed descriptor the receive
/// uses: under I/O safety it cannot be closed and reused in between, so no proof of an earlier
/// check can outlive the socket it was made for.
pub fn tcp_discard(fd: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    super::sockopt::check_tcp(fd)?;
    let mut sink = [0u8; 1];
    // SAFETY: `fd` is a TCP stream socket (checked just above on this same borrowed descriptor,
    // which stays open and the same file for the borrow), and TCP with MSG_TRUNC advances the
    // queue without writing to the buffer, so `len` may exceed the one byte given.
    cvt_size(unsafe {
        libc::recv(
            fd.as_raw_fd(),
            sink.as_mut_ptr().cast(),
            len,
            libc::MSG_TRUNC,
        )
    })
}

/// `recvmsg(2)` with `MSG_ERRQUEUE | MSG_DONTWAIT`: reads one error-queue message's ancillary
/// data into `control`. Returns `Ok(None)` when the queue is empty (`EAGAIN`), else the number
/// of control bytes and whether they were truncated (`MSG_CTRUNC`).
pub fn recv_errqueue(fd: BorrowedFd<'_>, control: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
    // SAFETY: msghdr is plain data for which all-zero is valid (no name, no iovecs).
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `msg` points only at `control`, valid for writes of its length during the call.
    let ret = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    match cvt_size(ret) {
        Ok(_) => Ok(Some((
            msg.msg_controllen as usize,
            msg.msg_flags & libc::MSG_CTRUNC != 0,
        ))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// `bind(2)` of an `AF_PACKET` socket to an interface index and protocol (host byte order).
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data for which all-zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a complete sockaddr_ll of the length passed.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockname(2)` of a packet socket: the interface index it is bound to, which the kernel
/// sets to -1 when that interface is unregistered (deleted, or moved to another namespace).
pub fn packet_bound_index(fd: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: sockaddr_ll is plain data for which all-zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `sll` is writable for `len` bytes, and `len` is a valid socklen_t the kernel
    // updates; it writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut sll as *mut libc::sockaddr_ll).cast(),
            &mut len,
        )
    })?;
    Ok(sll.sll_ifindex)
}

/// `if_nametoindex(3)`.
pub fn if_nametoindex(name: &str) -> io::Result<u32> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// Bytes queued to read on `fd` (`ioctl(FIONREAD)`, `SIOCINQ` for TCP).
pub fn queued(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid for it.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Whether `fd` is in non-blocking mode (`fcntl(F_GETFL)` has `O_NONBLOCK`).
pub fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument and reads nothing of ours.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Clears `O_NONBLOCK` of `fd` (`fcntl(F_GETFL)`, `fcntl(F_SETFL)`): a file opened without
/// blocking (a FIFO without a writer would block `open` itself) read as any other.
pub fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL takes no argument and reads nothing of ours.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: F_SETFL takes an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })?;
    Ok(())
}

#[cfg(test)]
mod zerocopy_tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The safe call takes no loan: `MSG_ZEROCOPY` goes through the `unsafe` one only.
    #[test]
    fn sendto_refuses_msg_zerocopy() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let e = sendto(tx.as_fd(), b"x", abi::MSG_ZEROCOPY, None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(sendto(tx.as_fd(), b"x", 0, None).unwrap(), 1);
    }
}
