//! Memory a raw call lets the kernel read after the call returns, of the one kind that lives here
//! because reading it needs `unsafe`: a read-only file mapping. The contract such memory keeps
//! is `zcnet::loan::OwnedBuf`'s.

use std::sync::Arc;

use super::mm::Mmap;

/// A range of a file mapped read-only (`mmap(PROT_READ, MAP_SHARED)`), loaned to the kernel by
/// the mmap + `MSG_ZEROCOPY` file sender. The mapping is unmapped when the last region of it
/// has come back from the kernel (the `Arc` drops).
///
/// Constructed by zcnet's file sender, which never reads through it: if another process writes
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

    /// Whether the region holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes, for the kernel to read (never read by this crate: see the type doc).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [start, start + len) lies inside the live mapping (checked in `new`), which
        // the Arc keeps mapped while `self` lives; it is read-only for this process.
        unsafe { std::slice::from_raw_parts((self.map.addr() + self.start) as *const u8, self.len) }
    }
}
