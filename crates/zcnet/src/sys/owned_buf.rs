//! The contract for buffers loaned to the kernel by zero-copy sends: an `unsafe` trait, so it
//! lives here with the crate's other unsafe code.

/// Owned bytes that may be loaned to the kernel.
///
/// # Safety
/// The slice returned by [`OwnedBuf::bytes`] must stay at the same address, with the same
/// contents, for as long as the value lives, even when the value is moved, and nothing may write
/// to it while the value is alive (no interior mutability reaching those bytes). Heap buffers
/// owned or shared immutably satisfy this; an inline array does not (it moves with the value).
pub unsafe trait OwnedBuf: Send + 'static {
    /// The bytes to send.
    fn bytes(&self) -> &[u8];
}

// SAFETY: the heap allocation does not move with the Vec, and only its owner (us) could write.
unsafe impl OwnedBuf for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: as for Vec.
unsafe impl OwnedBuf for Box<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: Arc<[u8]> is immutable shared heap memory; it lives while any clone does.
unsafe impl OwnedBuf for std::sync::Arc<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: Bytes is an immutable, reference-counted (or static) heap buffer.
unsafe impl OwnedBuf for bytes::Bytes {
    fn bytes(&self) -> &[u8] {
        self
    }
}
// SAFETY: 'static immutable data is never freed and never written.
unsafe impl OwnedBuf for &'static [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
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
    map: std::sync::Arc<super::Mmap>,
    start: usize,
    len: usize,
}

impl FileRegion {
    /// `len` bytes at `start` of `map`; `None` if that is not inside the mapping.
    pub(crate) fn new(
        map: std::sync::Arc<super::Mmap>,
        start: usize,
        len: usize,
    ) -> Option<FileRegion> {
        (start.checked_add(len)? <= map.len()).then_some(FileRegion { map, start, len })
    }

    /// Its length, without making a slice of pages that may be gone (a file truncated under
    /// its mapping).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the mapping lives as long as any region of it (Arc); it is read-only for this
// process and never moves; the crate only passes its address to the kernel (see the type doc).
unsafe impl OwnedBuf for FileRegion {
    fn bytes(&self) -> &[u8] {
        // SAFETY: [start, start + len) lies inside the live mapping (checked in `new`).
        unsafe { std::slice::from_raw_parts((self.map.addr() + self.start) as *const u8, self.len) }
    }
}
