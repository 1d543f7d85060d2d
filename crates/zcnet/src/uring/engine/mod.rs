//! The io_uring send engine: a ring whose requests own their buffers, and the kernel's word on
//! when each buffer is free.
//!
//! `ring`: the [`SendRing`], which queues each request in a slot that holds its buffer, reads
//! the completions and hands a buffer back only when every CQE of its request was seen (the
//! result, and for a zero-copy send the notification), sends one again from its slot, and keeps
//! a stream's requests in order; `request`: a slot and its SQE; `state`: what a CQE means for
//! one request (the retry without `REPORT_USAGE` on `EINVAL`, the copy after `ENOMEM`), pure
//! logic tested on fabricated CQEs; `order`: the chain of linked requests that keeps a
//! stream's bytes in order; `register`: the ring's registrations and `io_uring_enter`.
//!
//! Besides the promises of `loan/contract.rs` and `msg_zerocopy/borrowed.rs` and the one mapping
//! of a packet ring, the one place above `sys` allowed `unsafe`: a request's SQE
//! points at its buffer, which the kernel reads after the submission, so the engine, and no
//! caller, decides when the buffer may go (the `unsafe fn push` of `sys::uring::queue` and the
//! buffer registration state that contract). Every block says why it is sound.
#![allow(unsafe_code)]

mod order;
mod register;
mod request;
mod ring;
mod state;

pub(crate) use ring::{Finish, Finished, Resent, SendOp, SendRequest, SendRing, Way};
