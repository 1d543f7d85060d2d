//! One send request: what it asks ([`SendRequest`]), what comes back ([`Finished`]), the slot
//! that holds its buffer while the kernel may read it ([`Held`]), and the SQE written for it
//! ([`fill`], checked field by field against the io-uring crate's encoder in `ring`'s tests).

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::state::State;
use crate::loan::OwnedBuf;
use crate::sys::abi;
use crate::sys::uring::queue::{Entry, Sqe};

/// The request a buffer is sent with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IORING_OP_SEND` (Linux 5.6): the kernel copies; one CQE.
    Send,
    /// `IORING_OP_SEND_ZC` (6.0): result CQE, then a notification CQE when `F_MORE` says so.
    SendZc,
    /// `IORING_OP_SENDMSG` (5.3) with a destination address.
    SendMsg,
    /// `IORING_OP_SENDMSG_ZC` (6.1) with a destination address.
    SendMsgZc,
}

impl SendOp {
    /// A zero-copy op (`SEND_ZC`, `SENDMSG_ZC`).
    pub fn zero_copy(self) -> bool {
        matches!(self, SendOp::SendZc | SendOp::SendMsgZc)
    }

    /// The same op (with or without a destination), by zero copy or by copy.
    pub fn by(self, zero_copy: bool) -> SendOp {
        match (self, zero_copy) {
            (SendOp::Send | SendOp::SendZc, true) => SendOp::SendZc,
            (SendOp::Send | SendOp::SendZc, false) => SendOp::Send,
            (SendOp::SendMsg | SendOp::SendMsgZc, true) => SendOp::SendMsgZc,
            (SendOp::SendMsg | SendOp::SendMsgZc, false) => SendOp::SendMsg,
        }
    }
}

/// How to send one buffer.
#[derive(Clone, Copy, Debug)]
pub struct SendRequest {
    /// The opcode.
    pub op: SendOp,
    /// `IORING_RECVSEND_FIXED_BUF`: the buffer lies in the registered pool (`SendZc` only).
    pub fixed: bool,
    /// Destination, for the `SendMsg` ops on unconnected sockets.
    pub dest: Option<SocketAddr>,
    /// `send(2)` flags (`MSG_WAITALL` makes a stream send complete in full or fail).
    pub flags: i32,
    /// `IORING_SEND_ZC_REPORT_USAGE`: the notification says whether the kernel copied.
    pub report_usage: bool,
}

/// A buffer the kernel is done with.
#[derive(Debug)]
pub struct Finished<B> {
    /// The buffer.
    pub buf: B,
    /// Bytes the kernel accepted.
    pub sent: usize,
    /// The first error of its request(s), from the result CQE's `-errno`.
    pub error: Option<io::Error>,
    /// Sent with a zero-copy opcode (and not sent again by copy).
    pub zero_copy: bool,
    /// Sent again by copy because the kernel could not pin its pages (`RLIMIT_MEMLOCK`).
    pub memlock_fallback: bool,
    /// From the notification with `REPORT_USAGE`: `Some(true)` if the kernel copied; `None`
    /// without a notification or without usage reports.
    pub copied: Option<bool>,
}

/// Where [`SendRing::complete`] hands the buffers the kernel is done with, one by one, in the
/// order they finished.
///
/// A trait rather than a closure so that its one implementation on the sending path can be
/// inlined where a buffer finishes, with `#[inline(always)]`: moved through a call instead, a
/// finished buffer is written to the stack field by field and read back whole while those
/// stores are still in flight (a store-forwarding stall per buffer, issue 34).
pub trait Finish<B> {
    /// Takes one finished buffer.
    fn finish(&mut self, f: Finished<B>);

    /// Whether `self` takes no more buffers this time: the CQEs not yet read wait for the next
    /// [`SendRing::complete`](super::ring::SendRing::complete).
    #[inline(always)]
    fn full(&self) -> bool {
        false
    }

    /// Whether the buffer of a request that finished whole (no error), still in its slot, goes
    /// again from there instead of being handed to [`Finish::finish`]. Asked only of datagram
    /// rings (a stream's requests go in its order); the ring may still hand the buffer to
    /// `finish` after a yes (see [`SendRing::complete`]).
    ///
    /// [`SendRing::complete`]: super::ring::SendRing::complete
    #[inline(always)]
    fn again(&mut self, _buf: &mut B) -> bool {
        false
    }

    /// A buffer [`Finish::again`] kept went again, in its slot: `r` says what its request that
    /// finished did and how the new one goes.
    #[inline(always)]
    fn resent(&mut self, _r: Resent) {}

    /// How a buffer [`Finish::again`] kept, now `len` bytes, goes again from its slot: as it
    /// went ([`Way::AsBefore`], the default: a fixed mode), by zero copy or by copy (a mode that
    /// decides per buffer), or not from its slot ([`Way::Elsewhere`]: handed to
    /// [`Finish::finish`], kept, to be sent another way).
    #[inline(always)]
    fn way(&mut self, _len: usize) -> Way {
        Way::AsBefore
    }
}

/// How a buffer goes again from its slot ([`Finish::way`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// The op and buffer registration of the request that finished.
    AsBefore,
    /// By zero copy; from the registered pool where `fixed` and its bytes lie there.
    ZeroCopy {
        /// Use the registered pool if the bytes are in it.
        fixed: bool,
    },
    /// By copy.
    Copy,
    /// Not from the slot: handed to [`Finish::finish`], kept by [`Finish::again`] already.
    Elsewhere,
}

/// What [`Finish::resent`] is told of a buffer that went again from its slot: what its request
/// that finished did (whole, without an error: as in [`Finished`]) and how the next goes. Plain
/// values, without the error a [`Finished`] carries: nothing to make, move or drop for it where
/// nearly every buffer goes again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resent {
    /// Bytes the kernel accepted of the request that finished.
    pub sent: usize,
    /// The request that finished went by copy after the kernel refused to pin its pages.
    pub memlock_fallback: bool,
    /// Its notification's usage report (see [`Finished::copied`]).
    pub copied: Option<bool>,
    /// The op the buffer goes again as.
    pub op: SendOp,
    /// With `IORING_RECVSEND_FIXED_BUF`.
    pub fixed: bool,
}

impl<B> Finish<B> for Vec<Finished<B>> {
    #[inline(always)]
    fn finish(&mut self, f: Finished<B>) {
        self.push(f);
    }
}

/// `msghdr` with its one `iovec` and the address, boxed so the pointers inside stay valid until
/// the request's result CQE.
pub(super) struct MsgStorage {
    pub(super) hdr: libc::msghdr,
    pub(super) iov: libc::iovec,
    pub(super) addr: libc::sockaddr_storage,
}

// SAFETY: the raw pointers inside point only into this same box (and at the slot's buffer, owned
// alongside it); nothing is shared between threads through them.
unsafe impl Send for MsgStorage {}

/// One slot of the ring: the buffer of its request in flight and the rest of that request. It
/// stays in place from one request of the slot to the next (a request is written into it field
/// by field, not moved in and out), and so does the boxed `msghdr` of the `SENDMSG` ops, which
/// the next request of the slot reuses.
///
/// Everything a request needs lies here, together: between two batches the kernel's work on the
/// sends evicts the sender's memory from the nearest caches, and each place a request's state
/// is spread over costs a miss per request.
#[repr(C, align(64))]
pub(super) struct Held<B> {
    /// The buffer; `None` when the slot is free.
    pub(super) buf: Option<B>,
    /// Its length (at most `u32::MAX`, checked at push).
    pub(super) len: u32,
    pub(super) op: SendOp,
    pub(super) fixed: bool,
    pub(super) report_usage: bool,
    pub(super) flags: i32,
    pub(super) fd: RawFd,
    /// Which CQEs are still due (the pure state machine of `state`). With the fields above and
    /// a buffer of up to three words (a pool's, a `Vec`, a slice), everything a request of the
    /// common case writes at push and reads at its CQEs and its finish lies in the slot's
    /// first cache line (slots are line-aligned; only the state's list of older owed
    /// notifications and the `SENDMSG` header lie beyond): the kernel's work between two
    /// batches evicts the sender's lines, and each one a request touches costs a miss. The
    /// state's generation, kept after the finish, is the one the slot's next request follows
    /// (see [`State`]): a CQE names its submission as `key | generation << 32` in `user_data`,
    /// so that a late CQE of an earlier submission (or of the slot's previous buffer) is never
    /// taken for the current one's.
    pub(super) state: State,
    /// For the `SendMsg` ops: the header, its `iovec` and the destination, written at push.
    pub(super) msg: Option<Box<MsgStorage>>,
}

// The state after the slot's other fields, with a three-word buffer: its first 24 bytes end the
// first cache line (see `State`).
const _: () = assert!(std::mem::offset_of!(Held<Vec<u8>>, state) == 40);

impl<B: OwnedBuf> Held<B> {
    /// The unsent rest of the buffer.
    ///
    /// # Panics
    /// If the slot holds no buffer: an SQE for it would point the kernel at memory freed or
    /// reused since (a bookkeeping bug, caught here in every build).
    pub(super) fn rest(&self) -> (*const u8, u32) {
        let buf = self
            .buf
            .as_ref()
            .expect("a request being queued has its buffer");
        // The same bytes as at push: they stay where they are while the buffer lives
        // ([`OwnedBuf`]), and `len` is their length.
        let at = buf.bytes().as_ptr();
        let sent = self.state.sent().min(self.len as usize);
        // `sent <= len`: the pointer stays inside the buffer's bytes. Rust never reads
        // through it; the kernel does, while the slot holds the buffer.
        (at.wrapping_add(sent), self.len - sent as u32)
    }
}

/// Writes the SQE of `held`'s request (slot `key`), for the unsent rest of its buffer, as
/// liburing's `io_uring_prep_send`, `_send_zc` (with `IORING_RECVSEND_FIXED_BUF` for a fixed
/// buffer), `_sendmsg` and `_sendmsg_zc` make it: every member, those an op does not use zero,
/// as the kernel asks. A socket registered as `file` is fixed file 0.
#[inline]
pub(super) fn fill<B: OwnedBuf>(
    sqe: &mut Sqe,
    held: &mut Held<B>,
    file: Option<RawFd>,
    usage_refused: bool,
    key: u32,
    link: bool,
) {
    let (ptr, len) = held.rest();
    let mut zc_flags = 0;
    if held.report_usage && !usage_refused && !held.state.usage_retry() {
        zc_flags |= abi::IORING_SEND_ZC_REPORT_USAGE;
    }
    // A zero-copy request the kernel refused to pin goes again by copy (see `State`).
    let op = match (held.op, held.state.copy_retry()) {
        (SendOp::SendZc, true) => SendOp::Send,
        (SendOp::SendMsgZc, true) => SendOp::SendMsg,
        (op, _) => op,
    };
    let user_data = user_data(key, held.state.generation());
    let (opcode, ioprio, addr, len) = match op {
        SendOp::Send | SendOp::SendZc => {
            let send = PlainSend {
                zero_copy: op == SendOp::SendZc,
                fixed_buf: held.fixed,
                zc_flags,
                fd: held.fd,
                ptr,
                len,
                msg_flags: held.flags,
                user_data,
            };
            return fill_send(sqe, send, file, link);
        }
        SendOp::SendMsg | SendOp::SendMsgZc => {
            let msg = held
                .msg
                .as_mut()
                .expect("push makes the header of a SENDMSG request");
            msg.iov = libc::iovec {
                iov_base: ptr as *mut libc::c_void,
                iov_len: len as usize,
            };
            msg.hdr.msg_iov = &mut msg.iov;
            msg.hdr.msg_iovlen = 1;
            let hdr: *const libc::msghdr = &msg.hdr;
            // SENDMSG_ZC takes the zero-copy flags in `ioprio`, as SEND_ZC does.
            match op {
                SendOp::SendMsg => (abi::IORING_OP_SENDMSG, 0, hdr as u64, 1),
                _ => (abi::IORING_OP_SENDMSG_ZC, zc_flags, hdr as u64, 1),
            }
        }
    };
    write(
        sqe, opcode, ioprio, held.fd, file, addr, len, held.flags, user_data, link,
    );
}

/// The `user_data` of slot `key`'s submission `generation` (see [`Held::state`]).
#[inline(always)]
pub(super) fn user_data(key: u32, generation: u32) -> u64 {
    u64::from(key) | u64::from(generation) << 32
}

/// The slot and the submission a CQE's `user_data` names ([`user_data`] read back).
#[inline(always)]
pub(super) fn key_generation(user_data: u64) -> (u32, u32) {
    (user_data as u32, (user_data >> 32) as u32)
}

/// A `SEND` or `SEND_ZC` of bytes at `ptr`, as [`fill`] writes it: what [`SendRing::push`]
/// writes straight from the request for its first submission, without reading it back from the
/// slot.
///
/// [`SendRing::push`]: super::ring::SendRing::push
#[derive(Clone, Copy)]
pub(super) struct PlainSend {
    pub(super) zero_copy: bool,
    /// `IORING_RECVSEND_FIXED_BUF` (zero copy only).
    pub(super) fixed_buf: bool,
    /// `IORING_SEND_ZC_REPORT_USAGE` or nothing (zero copy only).
    pub(super) zc_flags: u16,
    pub(super) fd: RawFd,
    pub(super) ptr: *const u8,
    pub(super) len: u32,
    pub(super) msg_flags: i32,
    pub(super) user_data: u64,
}

/// `send`'s SQE as an [`Entry`] of its own, written inline where it is pushed: not linked; the
/// socket registered as `file` is fixed file 0.
#[derive(Clone, Copy)]
pub(super) struct SendEntry {
    pub(super) send: PlainSend,
    pub(super) file: Option<RawFd>,
}

impl Entry for SendEntry {
    #[inline(always)]
    fn write(self, sqe: &mut Sqe) {
        fill_send(sqe, self.send, self.file, false);
    }
}

/// Writes `send`'s SQE (see [`PlainSend`]); the socket registered as `file` is fixed file 0.
#[inline(always)]
fn fill_send(sqe: &mut Sqe, send: PlainSend, file: Option<RawFd>, link: bool) {
    let (opcode, ioprio) = match send.zero_copy {
        false => (abi::IORING_OP_SEND, 0),
        true => {
            let fixed = if send.fixed_buf {
                abi::IORING_RECVSEND_FIXED_BUF
            } else {
                0
            };
            (abi::IORING_OP_SEND_ZC, send.zc_flags | fixed)
        }
    };
    let (addr, len) = (send.ptr as u64, send.len);
    write(
        sqe,
        opcode,
        ioprio,
        send.fd,
        file,
        addr,
        len,
        send.msg_flags,
        send.user_data,
        link,
    );
}

/// Every member of a send's SQE.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write(
    sqe: &mut Sqe,
    opcode: u8,
    ioprio: u16,
    fd: RawFd,
    file: Option<RawFd>,
    addr: u64,
    len: u32,
    msg_flags: i32,
    user_data: u64,
    link: bool,
) {
    let fixed_file = file == Some(fd);
    // Member by member, into the queue: a whole `Sqe` made first and then copied in would be
    // read back while its stores are still in flight (see `queue`).
    sqe.opcode = opcode;
    sqe.flags = if fixed_file { abi::IOSQE_FIXED_FILE } else { 0 }
        | if link { abi::IOSQE_IO_LINK } else { 0 };
    sqe.ioprio = ioprio;
    sqe.fd = if fixed_file { 0 } else { fd };
    sqe.off = 0;
    sqe.addr = addr;
    sqe.len = len;
    sqe.op_flags = msg_flags as u32;
    sqe.user_data = user_data;
    // Registered buffer 0 (the pool), read only with IORING_RECVSEND_FIXED_BUF.
    sqe.buf_index = 0;
    sqe.personality = 0;
    sqe.file_index = 0;
    sqe.addr3 = 0;
    sqe.pad = 0;
}

/// The error of a buffer not sent because an earlier send on its stream failed with `errno`.
pub(super) fn broken_stream(errno: i32) -> io::Error {
    let cause = io::Error::from_raw_os_error(errno);
    io::Error::new(
        cause.kind(),
        format!("not sent: an earlier send on this stream failed ({cause})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 50: the hot path writes its SQEs by hand (`fill`), the probe builds its `SEND_ZC`
    /// with the io-uring crate's encoder. Both must say the same to the kernel, field by field,
    /// or the probe could pass where the hot path is wrong: compared here for each way a send
    /// request is written (copy, zero copy, registered buffer, fixed file, stream flags).
    #[test]
    fn fill_writes_what_the_io_uring_crates_encoder_writes() {
        use io_uring::{opcode, types};

        let bytes: &'static [u8] = Box::leak(vec![7u8; 3000].into_boxed_slice());
        let held = |op: SendOp, fixed: bool, flags: i32, report_usage: bool| Held::<&[u8]> {
            buf: Some(bytes),
            len: 3000,
            op,
            fixed,
            flags,
            report_usage,
            fd: 5,
            msg: None,
            state: State::new(3),
        };
        let theirs = |e: io_uring::squeue::Entry| -> Sqe {
            // SAFETY: both are the kernel's 64-byte `struct io_uring_sqe` (`repr(C)`, sizes
            // asserted), and every bit pattern is a valid `Sqe` (integers only).
            unsafe { std::mem::transmute::<io_uring::squeue::Entry, Sqe>(e) }
        };
        let key = 9u32;
        let user_data = u64::from(key) | 3 << 32;
        let ptr = bytes.as_ptr();
        let usage = abi::IORING_SEND_ZC_REPORT_USAGE;
        type Case<'a> = (&'a str, Held<&'static [u8]>, Option<RawFd>, Sqe);
        let cases: Vec<Case> = vec![
            (
                "send (copy)",
                held(SendOp::Send, false, 0, true),
                None,
                theirs(
                    opcode::Send::new(types::Fd(5), ptr, 3000)
                        .build()
                        .user_data(user_data),
                ),
            ),
            (
                "send_zc, usage reported",
                held(SendOp::SendZc, false, 0, true),
                None,
                theirs(
                    opcode::SendZc::new(types::Fd(5), ptr, 3000)
                        .zc_flags(usage)
                        .build()
                        .user_data(user_data),
                ),
            ),
            (
                "send_zc from the registered pool, MSG_WAITALL",
                held(SendOp::SendZc, true, libc::MSG_WAITALL, true),
                None,
                theirs(
                    opcode::SendZc::new(types::Fd(5), ptr, 3000)
                        .zc_flags(usage)
                        .buf_index(Some(0))
                        .flags(libc::MSG_WAITALL)
                        .build()
                        .user_data(user_data),
                ),
            ),
            (
                "send_zc on the registered file, no usage report",
                held(SendOp::SendZc, false, 0, false),
                Some(5),
                theirs(
                    opcode::SendZc::new(types::Fixed(0), ptr, 3000)
                        .build()
                        .user_data(user_data),
                ),
            ),
        ];
        for (what, mut h, file, want) in cases {
            // SAFETY: all-zero is a valid `Sqe` (integers only).
            let mut got: Sqe = unsafe { std::mem::zeroed() };
            h.state.reset(3);
            fill(&mut got, &mut h, file, false, key, false);
            for ((name, a), (_, b)) in got.fields().into_iter().zip(want.fields()) {
                assert_eq!(
                    a, b,
                    "{what}: field {name}: fill wrote {a:#x}, the crate {b:#x}"
                );
            }
        }
    }
}
