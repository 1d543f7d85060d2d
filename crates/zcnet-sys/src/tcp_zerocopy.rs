//! The TCP zero-copy receive window: a read-only mapping reserved on a TCP socket, filled by
//! `getsockopt(TCP_ZEROCOPY_RECEIVE)` and emptied with `madvise(MADV_DONTNEED)`.
//!
//! The socket's VMA has no fault handler: touching a page the kernel did not map raises
//! `SIGBUS`. [`ZcWindow::mapped`] therefore lends exactly the bytes the last call reported as
//! mapped, and only until the next call or release, which need `&mut self`.

use std::io;
use std::os::fd::BorrowedFd;

use super::abi::{self, TcpZerocopyReceive};
use super::mm::Mmap;
use super::sockopt;

/// What one `TCP_ZEROCOPY_RECEIVE` call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZcOutcome {
    /// Bytes mapped into the window (whole pages).
    pub mapped: usize,
    /// Bytes copied into the copy buffer in the same call (`copybuf`, 5.11+).
    pub copied: usize,
    /// Bytes at the head still to be read by copy (`recv_skip_hint` after `copybuf`).
    pub skip_hint: usize,
    /// Bytes still queued after the call (`inq`, 5.7+), when the kernel reports it.
    pub inq: Option<u32>,
    /// A pending socket error (`err`, 5.7+), as a positive errno.
    pub err: Option<i32>,
    /// Bytes of the struct the kernel wrote back: how much of it this kernel knows (16 on 4.18,
    /// 24 on 5.7, 64 on 5.12).
    pub optlen: usize,
}

/// A receive window reserved on one TCP socket.
#[derive(Debug)]
pub struct ZcWindow {
    map: Mmap,
    /// Bytes of the window holding pages from the last call (not yet released).
    mapped: usize,
    /// Whether the range is known to hold no pages (released by madvise).
    clean: bool,
    /// `madvise(MADV_DONTNEED)` right after use (and `TLB_CLEAN_HINT` on the next call), or
    /// leave the pages for the next `TCP_ZEROCOPY_RECEIVE` to zap.
    madvise: bool,
}

impl ZcWindow {
    /// Reserves `len` bytes (a page multiple) on `fd` at an address aligned to `align` (a power
    /// of two; 2 MiB keeps page-table locks of different windows apart, as `tcp_mmap` does).
    pub fn new(
        fd: BorrowedFd<'_>,
        len: usize,
        align: usize,
        madvise: bool,
    ) -> io::Result<ZcWindow> {
        Ok(ZcWindow {
            map: Mmap::shared_aligned(fd, len, align, libc::PROT_READ)?,
            mapped: 0,
            clean: true,
            madvise,
        })
    }

    /// Releases the pages of the last call, by `madvise` where the window was made so.
    pub fn release(&mut self) {
        if self.mapped == 0 {
            return;
        }
        if self.madvise {
            // SAFETY: [addr, addr + mapped) lies inside our own mapping; no slice of it is
            // alive (lending one needs `&self`, this call `&mut self`).
            let r = unsafe {
                libc::madvise(
                    self.map.addr() as *mut libc::c_void,
                    self.mapped,
                    libc::MADV_DONTNEED,
                )
            };
            self.clean = r == 0;
        } else {
            self.clean = false;
        }
        self.mapped = 0;
    }

    /// One `getsockopt(TCP_ZEROCOPY_RECEIVE)` of up to the window's size, copying unmappable
    /// bytes into `copybuf` in the same call (5.11+; pass an empty slice where the kernel lacks
    /// the field).
    ///
    /// Releases the previous call's pages first. `optlen` says how much of the struct to pass
    /// (what the probe found the kernel to know).
    pub fn receive(
        &mut self,
        fd: BorrowedFd<'_>,
        copybuf: &mut [u8],
        optlen: usize,
    ) -> io::Result<ZcOutcome> {
        self.release();
        let mut zc = TcpZerocopyReceive {
            address: self.map.addr() as u64,
            length: u32::try_from(self.map.len()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        let use_copybuf = !copybuf.is_empty();
        if use_copybuf {
            zc.copybuf_address = copybuf.as_mut_ptr() as u64;
            zc.copybuf_len = copybuf.len().min(i32::MAX as usize) as i32;
            if self.clean {
                zc.flags = abi::TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT;
            }
        }
        // SAFETY: the address range is `self.map`, a read-only mapping of this socket owned by
        // this window, of which no slice is alive (lending one needs `&self`, this call `&mut
        // self`); `copybuf` is valid for writes of `copybuf_len` bytes during the call; no
        // control buffer is passed.
        let r = unsafe { sockopt::tcp_zerocopy_receive(fd, &mut zc, optlen) };
        let len = match r {
            Ok(len) => len,
            Err(e) => {
                // The kernel may have zapped the range before failing.
                self.clean = false;
                return Err(e);
            }
        };
        let covers = |end: usize| len >= end;
        let copied = if use_copybuf && covers(36) {
            if zc.copybuf_len < 0 {
                return Err(io::Error::from_raw_os_error(-zc.copybuf_len));
            }
            zc.copybuf_len as usize
        } else {
            0
        };
        let mapped = (zc.length as usize).min(self.map.len());
        self.mapped = mapped;
        if mapped > 0 {
            self.clean = false;
        }
        Ok(ZcOutcome {
            mapped,
            copied,
            skip_hint: zc.recv_skip_hint as usize,
            inq: covers(20).then_some(zc.inq),
            err: (covers(24) && zc.err != 0).then_some(-zc.err),
            optlen: len,
        })
    }

    /// The bytes the last [`ZcWindow::receive`] mapped, valid until the next call or release.
    pub fn mapped(&self) -> &[u8] {
        if self.mapped == 0 {
            return &[];
        }
        // SAFETY: the kernel reported `mapped` bytes (whole pages) mapped at `addr`, inside our
        // mapping, read-only and not changed while mapped; they stay until `release` or the next
        // `receive`, both of which take `&mut self` and so end this borrow first.
        unsafe { std::slice::from_raw_parts(self.map.addr() as *const u8, self.mapped) }
    }
}
