//! Memory a raw call lets the kernel read after the call returns: the contract such memory
//! keeps, and the crate's one kind of it that lives here because reading it needs `unsafe`
//! (a read-only file mapping).
//!
//! The public face of the contract is `loan::OwnedBuf`, which every `OwnedBuf` meets.

use std::sync::Arc;

use super::mm::Mmap;

/// Bytes at a stable address: what the ring and the `MSG_ZEROCOPY` paths hold while the kernel
/// reads them.
///
/// # Safety
/// The slice returned by [`StableBytes::stable_bytes`] must stay at the same address, with the
/// same contents, for as long as the value lives, even when the value is moved, and nothing
/// may write to it while the value is alive.
pub unsafe trait StableBytes: Send + 'static {
    /// The bytes.
    fn stable_bytes(&self) -> &[u8];
}

/// A range of a file mapped read-only (`mmap(PROT_READ, MAP_SHARED)`), loaned to the kernel by
/// the mmap + `MSG_ZEROCOPY` file sender. The mapping is unmapped when the last region of it
/// has come back from the kernel (the `Arc` drops).
///
/// Constructed only inside this crate, which never reads through it: if another process writes
/// the file meanwhile, the bytes sent change (as with `sendfile`), and no Rust code observes the
/// race.
#[derive(Debug, Clone)]
pub struct FileRegion {
    map: Arc<Mmap>,
    start: usize,
    len: usize,
}

impl FileRegion {
    /// `len` bytes at `start` of `map`; `None` if that is not inside the mapping.
    pub fn new(map: Arc<Mmap>, start: usize, len: usize) -> Option<FileRegion> {
        (start.checked_add(len)? <= map.len()).then_some(FileRegion { map, start, len })
    }

    /// Its length, without making a slice of pages that may be gone (a file truncated under
    /// its mapping).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The mapped bytes, for the kernel to read (never read by this crate: see the type doc).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [start, start + len) lies inside the live mapping (checked in `new`), which
        // the Arc keeps mapped while `self` lives; it is read-only for this process.
        unsafe { std::slice::from_raw_parts((self.map.addr() + self.start) as *const u8, self.len) }
    }
}
