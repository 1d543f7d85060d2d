//! Registered send buffers for io_uring's
//! [`Mode::ZeroCopyFixed`](crate::uring::Mode::ZeroCopyFixed): buffer types that keep the loan's
//! contract, beside the others ([`OwnedBuf`](super::OwnedBuf)).

use std::io;

use crate::sys::uring::{Slab, Slot};

/// Equal-sized buffers in one anonymous mapping, handed out first-in first-out; the mapping can
/// be registered with a ring as one region (`IORING_REGISTER_BUFFERS`, Linux 5.1) for
/// `IORING_RECVSEND_FIXED_BUF` sends.
///
/// Handing buffers out in FIFO order cycles through the whole pool, as a server sending distinct
/// data does; a LIFO pool would keep resending the same cache-hot buffer.
#[doc(alias = "IORING_REGISTER_BUFFERS")]
#[derive(Clone, Debug)]
pub struct Pool(pub(crate) Slab);

impl Pool {
    /// `count` buffers of `buf_size` bytes (the mapping is rounded up to whole pages).
    ///
    /// # Errors
    /// `InvalidInput` for an empty pool or more than `u32::MAX` buffers, or `mmap`'s error.
    pub fn new(count: usize, buf_size: usize) -> io::Result<Pool> {
        Slab::new(count, buf_size).map(Pool)
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.0.buf_size()
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.0.count()
    }

    /// Bytes of the whole mapping (what registration pins and counts against `RLIMIT_MEMLOCK`).
    pub fn region_len(&self) -> usize {
        self.0.region_len()
    }

    /// Buffers not handed out now.
    pub fn available(&self) -> usize {
        self.0.available()
    }

    /// The next free buffer, its length set to the full buffer size; `None` when all are out.
    pub fn acquire(&self) -> Option<PoolBuf> {
        self.0.acquire().map(PoolBuf)
    }
}

/// One buffer of a [`Pool`], owned exclusively; back in the pool when dropped.
#[derive(Debug)]
pub struct PoolBuf(pub(crate) Slot);

impl PoolBuf {
    /// Its index in the pool.
    pub fn index(&self) -> usize {
        self.0.index()
    }

    /// The buffer size of its pool.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Sets how many bytes (from the start) are sent.
    ///
    /// # Panics
    /// If `len` exceeds [`PoolBuf::capacity`].
    pub fn set_len(&mut self, len: usize) {
        self.0.set_len(len);
    }
}

impl std::ops::Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}
