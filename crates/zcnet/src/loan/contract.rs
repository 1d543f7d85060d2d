//! The loan's one `unsafe` contract, and the buffer types that keep it.
//!
//! Declaring a contract a caller must keep is `unsafe` in Rust, and the crate allows it only
//! here and on the two functions a caller vouches through (`AssumeExclusive::new`,
//! `ZeroCopySender::send_borrowed`): these declare promises, none of them runs an `unsafe`
//! operation. The operations live below, in `zcnet-sys`, and in the io_uring engine
//! (`uring/engine`), which keeps a loaned buffer until the kernel is done with it.
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::Arc;

use super::AssumeExclusive;
use crate::sys::stable::FileRegion;

/// Owned bytes that may be loaned to the kernel.
///
/// # Safety
/// The slice returned by [`OwnedBuf::bytes`] must stay at the same address, with the same
/// contents, for as long as the value lives, even when the value is moved, and nothing may write
/// to it while the value is alive (no interior mutability reaching those bytes). Heap buffers
/// owned or shared immutably satisfy this; an inline array does not (it moves with the value).
///
/// A borrowed slice is no `OwnedBuf`: pass an owned buffer (`Vec<u8>`, `Box<[u8]>`,
/// `Arc<[u8]>`, `bytes::Bytes`, a pool's `PoolBuf`), or a `&'static [u8]`. For a slice
/// borrowed from a local, the compiler's word is a lifetime one ("borrowed value does not live
/// long enough", "argument requires that `buf` is borrowed for `'static`"): it means the same,
/// since the kernel reads the bytes after `send` returns.
#[doc(alias = "MSG_ZEROCOPY")]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be loaned to the kernel: pass an owned buffer",
    label = "the kernel reads this after `send` returns, so the sender must own it",
    note = "owned buffers: Vec<u8>, Box<[u8]>, Arc<[u8]>, bytes::Bytes, uring::PoolBuf, or a \
            &'static [u8]; the sender gives each back with its completion (zcnet::loan)"
)]
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
unsafe impl OwnedBuf for Arc<[u8]> {
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
// SAFETY: the mapping lives as long as any region of it (Arc); it is read-only for this
// process and never moves; the crate only passes its address to the kernel.
unsafe impl OwnedBuf for FileRegion {
    fn bytes(&self) -> &[u8] {
        FileRegion::bytes(self)
    }
}
// SAFETY: the bytes live in the pool's mapping, which the buffer keeps alive and which never
// moves; a slot belongs to one `PoolBuf` at a time, only its owner can write it (`DerefMut`),
// and a loaned `PoolBuf` is owned by the sender until the kernel is done with it.
#[cfg(feature = "uring")]
unsafe impl OwnedBuf for super::pool::PoolBuf {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl<F: AsFd> AssumeExclusive<F> {
    /// Takes `fd` as an [`ExclusiveSocket`](crate::loan::ExclusiveSocket) without owning it:
    /// for a socket owned outside Rust, such as a descriptor a C caller passes to libzcnet.
    ///
    /// The checks of [`ZeroCopySender::new`](crate::msg_zerocopy::ZeroCopySender::new) still
    /// run (`SO_ZEROCOPY` already on, another sender of this process on the same socket); what
    /// they cannot see is promised here.
    ///
    /// # Safety
    /// For as long as the value lives (and the sender holding it, until that sender is dropped):
    /// - no other sender uses the socket `fd` refers to, and nothing else sends on it with
    ///   `MSG_ZEROCOPY` or reads its error queue (`recvmsg(MSG_ERRQUEUE)`), through `fd` or any
    ///   other descriptor of the same socket (a `dup(2)`, one inherited across `fork(2)` or
    ///   passed over a Unix socket), in this process or another;
    /// - nothing turns `SO_ZEROCOPY` off and on again on it;
    /// - `fd` stays open and keeps referring to the same socket.
    ///
    /// Otherwise the sender can take another sender's completions for its own and give a
    /// buffer back while the kernel still reads it.
    pub unsafe fn new(fd: F) -> AssumeExclusive<F> {
        AssumeExclusive(fd)
    }
}
