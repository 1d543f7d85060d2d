//! Equal-sized send buffers in one anonymous mapping, registrable with a ring: the raw part of
//! `uring::Slab` (handing out each slot to one owner at a time is what makes its slices sound).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use super::super::mm::Mmap;

/// Equal-sized buffers in one anonymous mapping, handed out first-in first-out; the mapping can
/// be registered with a ring as one region (`IORING_REGISTER_BUFFERS`, Linux 5.1) for
/// `IORING_RECVSEND_FIXED_BUF` sends.
///
/// Handing buffers out in FIFO order cycles through the whole pool, as a server sending distinct
/// data does; a LIFO pool would keep resending the same cache-hot buffer.
#[derive(Clone, Debug)]
pub struct Slab {
    inner: Arc<SlabInner>,
}

#[derive(Debug)]
struct SlabInner {
    map: Mmap,
    buf_size: usize,
    count: usize,
    free: Mutex<VecDeque<u32>>,
}

impl Slab {
    /// Start address and length of the pool's one mapping (what is registered).
    pub fn region(&self) -> (usize, usize) {
        (self.inner.map.addr(), self.inner.map.len())
    }

    /// `count` buffers of `buf_size` bytes (the mapping is rounded up to whole pages).
    ///
    /// # Errors
    /// `InvalidInput` for an empty pool or more than `u32::MAX` buffers, or `mmap`'s error.
    pub fn new(count: usize, buf_size: usize) -> io::Result<Slab> {
        let bytes = count
            .checked_mul(buf_size)
            .filter(|&b| b > 0 && count <= u32::MAX as usize)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "empty or oversized pool")
            })?;
        let page = super::super::mm::page_size();
        let map = Mmap::anonymous(bytes.div_ceil(page) * page)?;
        Ok(Slab {
            inner: Arc::new(SlabInner {
                map,
                buf_size,
                count,
                free: Mutex::new((0..count as u32).collect()),
            }),
        })
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Bytes of the whole mapping (what registration pins and counts against `RLIMIT_MEMLOCK`).
    pub fn region_len(&self) -> usize {
        self.inner.map.len()
    }

    /// Buffers not handed out now.
    pub fn available(&self) -> usize {
        self.inner.free().len()
    }

    /// The next free buffer, its length set to the full buffer size; `None` when all are out.
    pub fn acquire(&self) -> Option<Slot> {
        let index = self.inner.free().pop_front()?;
        Some(Slot {
            pool: self.inner.clone(),
            start: self.inner.map.addr() + index as usize * self.inner.buf_size,
            len: self.inner.buf_size,
        })
    }
}

impl SlabInner {
    fn free(&self) -> std::sync::MutexGuard<'_, VecDeque<u32>> {
        // A panic while holding the lock cannot leave the queue half-updated (push/pop only).
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One buffer of a [`Slab`], owned exclusively; back in the pool when dropped.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<SlabInner>,
    /// Where its bytes start, computed once: the bytes of a buffer are read at every send, and
    /// reaching them through the pool's shared record costs a cache miss a send once the
    /// kernel's work between two batches has evicted it.
    start: usize,
    len: usize,
}

impl Slot {
    /// Its index in the pool.
    pub fn index(&self) -> usize {
        (self.start - self.pool.map.addr()) / self.pool.buf_size
    }

    /// The buffer size of its pool.
    pub fn capacity(&self) -> usize {
        self.pool.buf_size
    }

    /// Sets how many bytes (from the start) are sent.
    ///
    /// # Panics
    /// If `len` exceeds [`Slot::capacity`].
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "PoolBuf::set_len beyond capacity");
        self.len = len;
    }

    fn start(&self) -> *mut u8 {
        self.start as *mut u8
    }
}

impl std::ops::Deref for Slot {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: [start, start + len) lies inside the live mapping (index < count, len <=
        // buf_size) and belongs to this Slot alone: an index is either in the free queue or in
        // exactly one Slot.
        unsafe { std::slice::from_raw_parts(self.start(), self.len) }
    }
}

impl std::ops::DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref; `&mut self` makes the access exclusive, and while the buffer is
        // loaned to the kernel the ring owns the Slot, so no `&mut` can exist then.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.len) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let index = self.index() as u32;
        self.pool.free().push_back(index);
    }
}
