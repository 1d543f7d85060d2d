//! Memory maps (`mmap(2)`, `munmap(2)`) and the page size.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;

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
    /// page size).
    pub fn anonymous_aligned(len: usize, align: usize) -> io::Result<Mmap> {
        Mmap::aligned(
            len,
            align,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
        )
    }

    /// [`Mmap::shared`] starting at a multiple of `align` (a power of two, a multiple of the page
    /// size): 2 MiB keeps the page-table locks of different TCP receive windows apart, as
    /// `tcp_mmap` aligns its own.
    pub fn shared_aligned(
        fd: BorrowedFd<'_>,
        len: usize,
        align: usize,
        prot: i32,
    ) -> io::Result<Mmap> {
        Mmap::aligned(len, align, prot, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// Maps `len + align` bytes, then unmaps what lies outside the aligned range: the one
    /// place the crate over-maps to align.
    fn aligned(len: usize, align: usize, prot: i32, flags: i32, fd: RawFd) -> io::Result<Mmap> {
        let over = len
            .checked_add(align)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: a fresh mapping chosen by the kernel aliases no Rust object.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), over, prot, flags, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as usize;
        let start = base.next_multiple_of(align);
        let (head, tail) = (start - base, over - (start - base) - len);
        // SAFETY: both ranges lie inside the mapping just made and outside the part kept, which
        // nothing refers to yet; munmap of a page-aligned sub-range is well defined.
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

    /// Whether the mapping is empty (never: `mmap` refuses a length of 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}
