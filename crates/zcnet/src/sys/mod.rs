//! Kernel ABI and raw system calls: the only module of the crate with `unsafe` code.
//!
//! Every function here is a thin, safe wrapper over one C call. They return
//! [`std::io::Result`] with the `errno` intact and leave `EINTR` and retry policy to the caller,
//! as socket2 and mio do. Every `unsafe` block says why it is sound.
#![allow(unsafe_code)]

pub mod abi;
pub mod defer;
pub mod netdev;
#[cfg(feature = "packet")]
pub mod packet;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod stable;
#[cfg(feature = "tcp_rx")]
pub mod tcp_zerocopy;
#[cfg(feature = "uring")]
pub mod uring;
#[cfg(feature = "xdp")]
pub mod xdp;

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use abi::Pod;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// `socket(2)` with `SOCK_CLOEXEC`.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; a non-negative return is a new descriptor we own.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(2)` with a plain-old-data value.
pub fn setsockopt<T: Pod>(fd: BorrowedFd<'_>, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to size_of::<T>() readable bytes for the duration of the call.
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
///
/// `len` may be smaller than `size_of::<T>()` (to pass an older, shorter struct version).
pub fn getsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    value: &mut T,
    len: usize,
) -> io::Result<usize> {
    let mut optlen = len.min(size_of::<T>()) as libc::socklen_t;
    // SAFETY: `value` is valid for writes of size_of::<T>() >= optlen bytes and T accepts any
    // bit pattern (Pod); `optlen` is a valid socklen_t for the kernel to update.
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

/// `getsockopt(2)` of an `int` option.
pub fn getsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut v = 0i32;
    getsockopt(fd, level, name, &mut v, size_of::<i32>())?;
    Ok(v)
}

/// `fstat(2)`: the device and inode numbers of what `fd` refers to, the same through every
/// descriptor of it (a socket's inode on sockfs names the socket).
pub fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain data for which all-zero is a valid value.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `st` is writable for size_of::<stat>() bytes, all the kernel writes.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// `getsockopt(SO_NETNS_COOKIE)` (Linux 5.14): the cookie of the network namespace `fd` lives
/// in, the same for every socket of it.
pub fn netns_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = 0u64;
    getsockopt(
        fd,
        libc::SOL_SOCKET,
        abi::SO_NETNS_COOKIE,
        &mut v,
        size_of::<u64>(),
    )?;
    Ok(v)
}

/// One request to rtnetlink (`netlink(7)`, `rtnetlink(7)`) from a new socket of the calling
/// thread's network namespace: sends `request` and reads the reply into `reply`, which the
/// kernel queues before `send` returns (it answers a `RTM_GET*` request in the sender's
/// context), so nothing waits. Returns the reply's length and the namespace's cookie
/// (`None` before Linux 5.14).
pub fn rtnetlink_ask(request: &[u8], reply: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let fd = socket(libc::AF_NETLINK, libc::SOCK_RAW, abi::NETLINK_ROUTE)?;
    let cookie = netns_cookie(fd.as_fd()).ok();
    let sent = sendto(fd.as_fd(), request, 0, None)?;
    if sent != request.len() {
        return Err(io::Error::other("rtnetlink took part of the request"));
    }
    let n = recv(fd.as_fd(), reply, libc::MSG_DONTWAIT | libc::MSG_TRUNC)?;
    if n > reply.len() {
        return Err(io::Error::other(format!(
            "rtnetlink's reply of {n} bytes is larger than {}",
            reply.len()
        )));
    }
    Ok((n, cookie))
}

/// Storage for a `sockaddr_in`/`sockaddr_in6` built from a [`SocketAddr`].
pub(crate) fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
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
    Ok(match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET, length checked);
            // sockaddr_storage is aligned for it.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                sin.sin_addr.s_addr.to_ne_bytes(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    })
}

/// `sendto(2)` (or `send(2)` when `dest` is `None`) with `flags`.
///
/// With `MSG_ZEROCOPY` in `flags` the kernel keeps reading `buf` after this returns; callers in
/// this crate only pass buffers whose ownership they hold until the completion arrives.
pub fn sendto(
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

/// Checks that `fd` is a TCP socket (`SO_PROTOCOL`, Linux 2.6.32): one call, as the discard
/// path makes it for every consume. `IPPROTO_TCP` is only ever a stream socket's protocol
/// (MPTCP reports `IPPROTO_MPTCP`, Unix sockets 0).
pub fn check_tcp(fd: BorrowedFd<'_>) -> io::Result<()> {
    check_protocol(fd, libc::IPPROTO_TCP, "not a TCP socket")
}

/// That `fd` is a socket of `protocol` (`SO_PROTOCOL`): `ENOTSOCK` from the kernel for a
/// descriptor that is not a socket, `InvalidInput` with `what` for another protocol.
pub fn check_protocol(fd: BorrowedFd<'_>, protocol: i32, what: &'static str) -> io::Result<()> {
    let proto = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
    if proto != protocol {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    Ok(())
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
    check_tcp(fd)?;
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

/// `getsockopt(IPPROTO_TCP, TCP_INFO)`: the struct, and how many bytes of it the kernel filled.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<(abi::TcpInfo, usize)> {
    // SAFETY: TcpInfo is Pod: all-zero is valid.
    let mut info: abi::TcpInfo = unsafe { zeroed() };
    let len = getsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        &mut info,
        size_of::<abi::TcpInfo>(),
    )?;
    Ok((info, len))
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

/// `poll(2)` on one descriptor, waiting up to `timeout` (`None`: forever; rounded up to whole
/// milliseconds, so a short wait never becomes a busy `poll(0)`); returns `revents` (0 on
/// timeout).
pub fn poll(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
) -> io::Result<i16> {
    let timeout_ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    });
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    cvt(unsafe { libc::poll(&mut pfd, 1, timeout_ms) })?;
    Ok(pfd.revents)
}

/// A shared mapping of a descriptor (`mmap(2)`), unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through &self/&mut self.
unsafe impl Send for Mmap {}
// SAFETY: shared access only reads through the pointer.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, 0)`.
    pub fn shared(fd: BorrowedFd<'_>, len: usize, prot: i32) -> io::Result<Mmap> {
        Mmap::shared_at(fd, len, prot, 0)
    }

    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)`; `offset` must be page-aligned.
    pub fn shared_at(fd: BorrowedFd<'_>, len: usize, prot: i32, offset: u64) -> io::Result<Mmap> {
        // SAFETY: a fresh mapping chosen by the kernel aliases no Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    /// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`: zeroed
    /// memory of this process, page-aligned.
    pub fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh anonymous mapping chosen by the kernel aliases no Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    /// [`Mmap::anonymous`] starting at a multiple of `align` (a power of two, a multiple of the
    /// page size): more is mapped, and what lies outside the aligned range is unmapped.
    pub fn anonymous_aligned(len: usize, align: usize) -> io::Result<Mmap> {
        let whole =
            Mmap::anonymous(len.checked_add(align).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "mapping too large")
            })?)?;
        let start = whole.addr().next_multiple_of(align);
        let (head, tail) = (
            start - whole.addr(),
            whole.len - (start - whole.addr()) - len,
        );
        let base = whole.addr();
        std::mem::forget(whole);
        // SAFETY: both ranges lie inside the mapping just made (whose ownership was given up
        // above) and outside the part kept; munmap of a page-aligned sub-range is well defined.
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        Ok(Mmap {
            ptr: NonNull::new(start as *mut u8).expect("inside a mapping"),
            len,
        })
    }

    /// Start address of the mapping.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `getsockopt(TCP_ZEROCOPY_RECEIVE)` into `window`, a mapping of this socket, with no copy
/// buffer: the kernel may only replace pages of `window`. `zc` is filled in here (address and
/// length from `window`, everything else zero); it comes back as the kernel wrote it.
///
/// Returns the `optlen` the kernel wrote back (how much of the struct it knows).
pub fn tcp_zerocopy_receive(
    fd: BorrowedFd<'_>,
    window: &Mmap,
    zc: &mut abi::TcpZerocopyReceive,
) -> io::Result<usize> {
    *zc = abi::TcpZerocopyReceive {
        address: window.addr() as u64,
        length: u32::try_from(window.len()).unwrap_or(u32::MAX),
        ..Default::default()
    };
    let mut optlen = size_of::<abi::TcpZerocopyReceive>() as libc::socklen_t;
    // SAFETY: `zc` is valid for writes of `optlen` bytes. The only addresses in it are
    // `window`'s, a read-only shared mapping of this socket that `window` owns and that no Rust
    // slice reads while borrowed here (the kernel replaces its pages, nothing else); copybuf
    // and msg_control are zero, so the kernel writes nowhere else.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            abi::TCP_ZEROCOPY_RECEIVE,
            (zc as *mut abi::TcpZerocopyReceive).cast(),
            &mut optlen,
        )
    })?;
    Ok(optlen as usize)
}

/// `sendfile(2)` from `in_fd` at `*offset` to `out_fd`.
pub fn sendfile(
    out_fd: BorrowedFd<'_>,
    in_fd: BorrowedFd<'_>,
    offset: &mut i64,
    count: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: `off` is a valid off_t for the kernel to update; no other pointers.
    let n = cvt_size(unsafe {
        libc::sendfile(out_fd.as_raw_fd(), in_fd.as_raw_fd(), &mut off, count)
    })?;
    *offset = off as i64;
    Ok(n)
}

#[cfg(feature = "tokio")]
/// How many pages of `fd` in `[off, off + len)` are in the page cache: `cachestat(2)` (Linux
/// 6.5); `Ok(None)` where the kernel lacks it (`ENOSYS`) or the file has no page cache for it
/// (`EOPNOTSUPP`, e.g. hugetlbfs).
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Option<u64>> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = Range { off, len };
    let mut stat = Stat::default();
    // SAFETY: both pointers are to live, properly laid out structs (uapi `cachestat_range` and
    // `cachestat`); the kernel reads the first and writes the second only during the call.
    let r = unsafe {
        libc::syscall(
            abi::SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if r == 0 {
        return Ok(Some(stat.nr_cache));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS | libc::EOPNOTSUPP) => Ok(None),
        _ => Err(e),
    }
}

#[cfg(feature = "tokio")]
/// `readahead(2)`: reads `[off, off + len)` of `fd` into the page cache; blocks until it is
/// read.
pub fn readahead(fd: BorrowedFd<'_>, off: u64, len: usize) -> io::Result<()> {
    // SAFETY: no pointers; the fd is borrowed for the call.
    cvt_size(unsafe { libc::readahead(fd.as_raw_fd(), off as libc::off64_t, len) }).map(drop)
}

#[cfg(feature = "tokio")]
/// A non-blocking, close-on-exec `eventfd(2)` counter.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the returned fd is owned from here on.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(feature = "tokio")]
/// Reads (and so resets) an eventfd counter; `Ok(None)` when it is zero.
pub fn eventfd_read(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let mut v = 0u64;
    // SAFETY: `v` is 8 writable bytes, as an eventfd read needs.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    if r == 8 {
        return Ok(Some(v));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(e)
    }
}

/// `splice(2)`; `off_in` is used when the input is a file (not a pipe).
pub fn splice(
    fd_in: BorrowedFd<'_>,
    off_in: Option<&mut i64>,
    fd_out: BorrowedFd<'_>,
    len: usize,
    flags: u32,
) -> io::Result<usize> {
    let mut off: Option<libc::loff_t> = off_in.as_ref().map(|o| **o);
    let off_ptr = off
        .as_mut()
        .map_or(std::ptr::null_mut(), |o| o as *mut libc::loff_t);
    // SAFETY: `off_ptr` is null or points at a live loff_t for the duration of the call.
    let n = cvt_size(unsafe {
        libc::splice(
            fd_in.as_raw_fd(),
            off_ptr,
            fd_out.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    })?;
    if let (Some(o), Some(v)) = (off_in, off) {
        *o = v;
    }
    Ok(n)
}

/// `pipe2(O_CLOEXEC)`: returns (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fcntl(F_SETPIPE_SZ)`: returns the size the kernel actually set.
pub fn set_pipe_size(fd: BorrowedFd<'_>, size: usize) -> io::Result<usize> {
    // SAFETY: F_SETPIPE_SZ takes an int argument, no pointers.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) })
        .map(|n| n as usize)
}

/// `memfd_create(2)` with `MFD_CLOEXEC`.
pub fn memfd(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: freshly created descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

/// `uname(2)`: the kernel release string.
pub fn kernel_release() -> io::Result<String> {
    // SAFETY: utsname is plain data for which all-zero is valid.
    let mut u: libc::utsname = unsafe { zeroed() };
    // SAFETY: `u` is a valid utsname to fill.
    cvt(unsafe { libc::uname(&mut u) })?;
    Ok(c_string(&u.release))
}

/// The text of a NUL-terminated (or full) C character array.
pub(crate) fn c_string(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (clock_gettime(2)): CPU time of the calling thread,
/// ns. A system call (the vDSO does not serve CPU-time clocks); `None` if it fails, which
/// Linux does not do for the calling thread.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (r == 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}

/// `MemAvailable` of /proc/meminfo in bytes (Linux 3.14): what can be allocated without
/// swapping. `None` where the file or the line is missing.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
#[test]
fn mem_available_parses_meminfo() {
    let text = "MemTotal:       24683656 kB\nMemFree:        1 kB\nMemAvailable:   24191388 kB\n";
    assert_eq!(parse_mem_available(text), Some(24_191_388 * 1024));
    assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
}

/// `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
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

/// `getrlimit(RLIMIT_MEMLOCK)`: (soft, hard); `None` is `RLIM_INFINITY`.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    rlimit(libc::RLIMIT_MEMLOCK)
}

/// `getrlimit(RLIMIT_NOFILE)`: (soft, hard); `None` is `RLIM_INFINITY`.
pub fn nofile_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    rlimit(libc::RLIMIT_NOFILE)
}

/// `getrlimit(resource)`: (soft, hard); `None` is `RLIM_INFINITY`.
fn rlimit(resource: libc::__rlimit_resource_t) -> io::Result<(Option<u64>, Option<u64>)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit to fill.
    cvt(unsafe { libc::getrlimit(resource, &mut r) })?;
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((f(r.rlim_cur), f(r.rlim_max)))
}

/// Whether this process runs in the initial user namespace: its `/proc/self/uid_map` maps the
/// whole id range onto itself (`0 0 4294967295`). Capabilities held in another user namespace
/// act only on what that namespace owns.
pub fn in_initial_user_ns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
        let fields: Vec<&str> = m.split_whitespace().collect();
        fields == ["0", "0", "4294967295"]
    })
}

/// Whether the network namespace of this thread is owned by this thread's user namespace
/// (`ioctl(NS_GET_USERNS)` on `/proc/thread-self/ns/net`, Linux 4.9, compared by inode with
/// `/proc/thread-self/ns/user`): where it is, capabilities in the user namespace (`unshare
/// -rn`) work on its sockets and devices; where it is not (`unshare -r` alone), they do not.
pub fn user_ns_owns_net_ns() -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    let net = std::fs::File::open("/proc/thread-self/ns/net")?;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor we own.
    let fd = cvt(unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS as _) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let owner = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let owner = owner.metadata()?;
    let mine = std::fs::metadata("/proc/thread-self/ns/user")?;
    Ok(owner.ino() == mine.ino() && owner.dev() == mine.dev())
}

/// Whether this thread's effective capabilities include `CAP_IPC_LOCK` (bit 14 of `CapEff` in
/// `/proc/thread-self/status`) in the initial user namespace, the only place where it exempts
/// from `RLIMIT_MEMLOCK` (`capable()` in `mm/mlock.c`).
pub fn has_cap_ipc_lock() -> bool {
    if !in_initial_user_ns() {
        return false;
    }
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_owned();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// `geteuid(2)`.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and takes no pointers.
    unsafe { libc::geteuid() }
}

/// A one-shot timer as a descriptor (`timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK |
/// TFD_CLOEXEC)`, `timerfd_create(2)`): each expiry wakes its watchers once, so an epoll set
/// that watches it edge-triggered sees one event per expiry and never needs it read.
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct TimerFd(OwnedFd);

#[cfg(feature = "tokio")]
impl std::os::fd::AsFd for TimerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(feature = "tokio")]
impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<TimerFd> {
        let flags = libc::TFD_NONBLOCK | libc::TFD_CLOEXEC;
        // SAFETY: no pointers; a non-negative return is a new descriptor we own.
        let fd = cvt(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, flags) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Expires once, `after` from now (at least 1 ns: a zero value would disarm it); replaces
    /// an earlier arming (`timerfd_settime(2)`).
    pub fn arm(&self, after: std::time::Duration) -> io::Result<()> {
        let after = after.max(std::time::Duration::from_nanos(1));
        let new = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `new` is a valid itimerspec for the call; the old value is not asked for.
        cvt(unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &new, std::ptr::null_mut()) })
            .map(drop)
    }
}

/// An epoll instance (`epoll_create1(EPOLL_CLOEXEC)`, `epoll(7)`).
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl std::os::fd::AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Epoll {
    /// Events one [`Epoll::wait`] returns at most.
    pub const MAX_EVENTS: usize = 8;

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; a non-negative return is a new descriptor we own.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `epoll_ctl(EPOLL_CTL_ADD)` of `fd` for `events`, reported with `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })
        .map(drop)
    }

    /// `epoll_wait(2)` for up to `timeout`, at most [`Epoll::MAX_EVENTS`] events; returns
    /// `(events, token)` pairs into `out` (cleared first). `EINTR` is an empty wait.
    pub fn wait(&self, out: &mut Vec<(u32, u64)>, timeout: std::time::Duration) -> io::Result<()> {
        out.clear();
        // On the stack: a relay waits once per wake-up, and a heap buffer each time was waste.
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; Self::MAX_EVENTS];
        let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        // SAFETY: `evs` has room for `evs.len()` events, written by the kernel.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, ms) };
        match cvt(n) {
            Ok(n) => {
                out.extend(evs[..n as usize].iter().map(|e| ({ e.events }, { e.u64 })));
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }
}
