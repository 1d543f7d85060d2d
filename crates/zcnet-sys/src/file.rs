//! Files and pipes: `sendfile(2)`, `splice(2)`, `cachestat(2)`, `readahead(2)`, `pipe2(2)`,
//! `memfd_create(2)`, `fstat(2)`.

use std::ffi::CString;

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_size};

/// `fstat(2)`: the device and inode numbers of what `fd` refers to, the same through every
/// descriptor of it (a socket's inode on sockfs names the socket).
pub fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain data for which all-zero is a valid value.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `st` is writable for size_of::<stat>() bytes, all the kernel writes.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
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
            super::abi::SYS_CACHESTAT,
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
