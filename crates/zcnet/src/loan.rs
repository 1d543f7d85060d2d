//! Buffers loaned to the kernel: one vocabulary for every zero-copy send.
//!
//! A zero-copy send ([`msg_zerocopy`](crate::msg_zerocopy), [`uring`](crate::uring)) lets the
//! kernel read the buffer after the call returns, until a completion says it is done. So the
//! safe senders take the buffer by value (any [`OwnedBuf`]) and give it back only with its
//! completion, as a [`Returned`]; a send refused before anything was loaned gives it back at
//! once inside a [`SendError`]. No safe call lets a buffer be written or freed while loaned.
//!
//! # References
//! - the kernel's `Documentation/networking/msg_zerocopy.rst` ("Notification")
//! - `io_uring_prep_send_zc(3)` (the notification CQE, `IORING_CQE_F_NOTIF`)

use std::io;

pub use crate::sys::owned_buf::OwnedBuf;

/// A buffer the kernel is done with, and what became of it.
#[derive(Debug)]
pub struct Returned<B> {
    /// The buffer, the caller's again.
    pub buf: B,
    /// Bytes of it that were sent (all of it unless `error` is set).
    pub sent: usize,
    /// The error that ended the send of this buffer part-way, if one did. The buffer still
    /// came back only after the kernel released every byte it had taken.
    pub error: Option<io::Error>,
    /// Whether a zero-copy send was asked for (`MSG_ZEROCOPY`, `SEND_ZC`); `false` when the
    /// buffer went by copy (copy mode, below the threshold, a fallback).
    pub zero_copy: bool,
    /// The kernel's word on whether it copied after all (`SO_EE_CODE_ZEROCOPY_COPIED`,
    /// `IORING_NOTIF_USAGE_ZC_COPIED`): `Some(false)` really zero-copy, `Some(true)` copied,
    /// `None` when no zero-copy was asked for or the kernel does not say.
    pub copied: Option<bool>,
}

impl<B> Returned<B> {
    /// True when the bytes really went without a copy (`copied == Some(false)`).
    pub fn really_zero_copy(&self) -> bool {
        self.copied == Some(false)
    }
}

/// A send refused before any byte of the buffer was loaned: the buffer comes back with it.
///
/// When part of a buffer was already loaned, the send is not refused: the buffer comes back
/// with its completion, as a [`Returned`] whose `error` is set, and the sender reports the
/// error again on its next call.
#[derive(Debug, thiserror::Error)]
#[error("send failed after {sent} bytes")]
pub struct SendError<B> {
    /// The kernel's error (or `InvalidInput` for a buffer the sender cannot take).
    #[source]
    pub error: io::Error,
    /// Bytes of the buffer sent by copy before the error (0 for a zero-copy send).
    pub sent: usize,
    /// The buffer, the caller's again.
    pub buf: B,
}
