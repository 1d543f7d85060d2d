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
