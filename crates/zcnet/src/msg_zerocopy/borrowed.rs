//! The borrowed-pointer `MSG_ZEROCOPY` send: `unsafe`, because the kernel reads the caller's
//! memory after the call returns. It declares the caller's promise and runs no `unsafe`
//! operation (those are in `sys`); the crate allows `unsafe` here and in `loan`'s contracts only.
#![allow(unsafe_code)]

use std::io;

use super::{BorrowToken, ExclusiveSocket, OwnedBuf, SendFlags, ZeroCopySender};

impl<S: ExclusiveSocket, B: OwnedBuf> ZeroCopySender<S, B> {
    /// Sends `data` with `MSG_ZEROCOPY` without taking ownership of it (for memory this crate
    /// cannot own: a shared-memory ring, a foreign allocator), with extra `send(2)` `flags`.
    /// Returns the token that [`completed_borrowed`](Self::completed_borrowed) reports once the
    /// kernel no longer reads the memory. No threshold or copied policy applies: the call asks
    /// for zero copy wherever `SO_ZEROCOPY` is on (`ENOBUFS` still sends by copy); in
    /// [`Mode::Copy`](crate::msg_zerocopy::Mode::Copy), or where the kernel refused
    /// `SO_ZEROCOPY`, it copies and the token is reported at once.
    ///
    /// # Errors
    /// The kernel's error; bytes sent before it may still be loaned (their token is reported
    /// when they complete).
    ///
    /// # Safety
    /// The memory behind `data` must stay allocated and must not be written, by this thread or
    /// any other, until `completed_borrowed` has reported the returned token (also when this
    /// call fails after sending part of `data`). If the sender is dropped before that, the memory
    /// must stay valid for as long as the kernel may read it, which cannot be known here: drain
    /// first.
    pub unsafe fn send_borrowed(
        &mut self,
        data: &[u8],
        flags: SendFlags,
    ) -> io::Result<BorrowToken> {
        self.send_borrowed_inner(data, flags)
    }
}
