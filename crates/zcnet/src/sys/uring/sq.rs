//! The submission queue written in place: a send's SQE is filled where the kernel reads it, as
//! liburing's `io_uring_prep_send_zc(3)` fills the entry `io_uring_get_sqe(3)` hands out.
//!
//! The io-uring crate's `SubmissionQueue::push` copies a 64-byte entry made on the stack into
//! the queue. The copy reads the entry back with wide loads while its narrow field stores are
//! still on their way to the cache: a store-forwarding stall on every request, the largest
//! single cost of the sender's user time (issue 34). The crate still sets the ring up, registers
//! and enters; this is a second mapping of the same submission queue (`mmap(2)` of the ring fd
//! at `IORING_OFF_SQ_RING` and `IORING_OFF_SQES`, as `io_uring_setup(2)` describes), through
//! which this ring's requests are queued. Both read the tail from the shared ring, so pushes
//! through either stay in order.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::IoUring;

use super::super::Mmap;

/// `IORING_OFF_SQ_RING`: the mmap offset of the submission queue ring.
const IORING_OFF_SQ_RING: u64 = 0;
/// `IORING_OFF_SQES`: the mmap offset of the submission queue entries.
const IORING_OFF_SQES: u64 = 0x1000_0000;

/// `struct io_sqring_offsets`.
#[repr(C)]
struct SqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_cqring_offsets`.
#[repr(C)]
struct CqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_uring_params`, as `io_uring_setup(2)` filled it in.
#[repr(C)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqringOffsets,
    cq_off: CqringOffsets,
}

// The crate documents `Parameters` as a transparent wrapper over `io_uring_params`.
const _: () = assert!(std::mem::size_of::<Params>() == std::mem::size_of::<io_uring::Parameters>());
const _: () = assert!(std::mem::size_of::<Params>() == 120);

/// `struct io_uring_sqe`, with the members a send names (its unions by the names the send ops
/// give them).
#[repr(C)]
pub struct Sqe {
    pub opcode: u8,
    pub flags: u8,
    /// `IORING_OP_SEND_ZC` and `SENDMSG_ZC` take their zero-copy flags here.
    pub ioprio: u16,
    pub fd: i32,
    /// `off`, or `addr2` (a `SEND_ZC` destination).
    pub off: u64,
    /// The buffer, or for the `SENDMSG` ops the `msghdr`.
    pub addr: u64,
    pub len: u32,
    /// `msg_flags`.
    pub op_flags: u32,
    pub user_data: u64,
    pub buf_index: u16,
    pub personality: u16,
    /// `splice_fd_in` / `file_index` / `addr_len`.
    pub file_index: i32,
    pub addr3: u64,
    pub pad: u64,
}

const _: () = assert!(std::mem::size_of::<Sqe>() == 64);

/// The submission queue, mapped a second time for in-place writes.
pub struct Sq {
    /// The ring's head, tail and index array (the first part of the SQ ring mapping).
    _ring: Mmap,
    /// The entries.
    _sqes: Mmap,
    head: *const AtomicU32,
    tail: *const AtomicU32,
    mask: u32,
    entries: u32,
    sqes: *mut Sqe,
}

// SAFETY: the pointers point into the two mappings this value owns; the ring is used by one
// thread at a time (`&mut self` to push), as the crate's own queue is.
unsafe impl Send for Sq {}

impl Sq {
    /// Maps the submission queue of `ring` (its index array is the identity, as the crate set
    /// it up: entry `i` of the array names SQE `i`).
    pub fn map(ring: &IoUring) -> io::Result<Sq> {
        // SAFETY: `Parameters` is `repr(transparent)` over `io_uring_params`, whose layout
        // `Params` repeats (sizes asserted above); the reference lives as long as `ring`.
        let p = unsafe { &*(ring.params() as *const io_uring::Parameters).cast::<Params>() };
        // SAFETY: the ring fd is open for as long as `ring`, which outlives this call.
        let fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let ring_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let map = Mmap::shared_at(fd, ring_len, rw, IORING_OFF_SQ_RING)?;
        let sqes = Mmap::shared_at(
            fd,
            p.sq_entries as usize * std::mem::size_of::<Sqe>(),
            rw,
            IORING_OFF_SQES,
        )?;
        let base = map.addr() as *mut u8;
        // SAFETY: the kernel's offsets lie inside the SQ ring mapping (`ring_len` covers up to
        // the end of the index array, which comes after the other fields).
        let (head, tail, mask, entries) = unsafe {
            (
                base.add(p.sq_off.head as usize) as *const AtomicU32,
                base.add(p.sq_off.tail as usize) as *const AtomicU32,
                *(base.add(p.sq_off.ring_mask as usize) as *const u32),
                *(base.add(p.sq_off.ring_entries as usize) as *const u32),
            )
        };
        Ok(Sq {
            head,
            tail,
            mask,
            entries,
            sqes: sqes.addr() as *mut Sqe,
            _ring: map,
            _sqes: sqes,
        })
    }

    /// Has `fill` write the next free entry in place, and hands it to the kernel's next
    /// `io_uring_enter`; `false` (and nothing queued, `fill` not called) when the queue is full.
    /// `fill` must set every member: the entry holds what an earlier request left in it.
    ///
    /// # Safety
    /// Everything the entry points at must stay valid until the request's last CQE.
    #[inline]
    pub unsafe fn push(&mut self, fill: impl FnOnce(&mut Sqe)) -> bool {
        // SAFETY: `head` and `tail` point at the ring's u32 head and tail (see `map`); only
        // this ring's one user writes the tail, the kernel writes the head.
        let (head, tail) = unsafe {
            (
                (*self.head).load(Ordering::Acquire),
                (*self.tail).load(Ordering::Relaxed),
            )
        };
        if tail.wrapping_sub(head) >= self.entries {
            return false;
        }
        // SAFETY: `tail & mask` indexes one of the `entries` SQEs of the mapping, which the
        // kernel consumed already (fewer than `entries` are queued) and reads again only once
        // the release store of the tail below has published it.
        unsafe {
            fill(&mut *self.sqes.add((tail & self.mask) as usize));
            (*self.tail).store(tail.wrapping_add(1), Ordering::Release);
        }
        true
    }

    /// Entries queued and not yet consumed by the kernel.
    pub fn len(&self) -> usize {
        // SAFETY: as in `push`.
        let (head, tail) = unsafe {
            (
                (*self.head).load(Ordering::Acquire),
                (*self.tail).load(Ordering::Relaxed),
            )
        };
        tail.wrapping_sub(head) as usize
    }

    /// Entries the queue holds.
    pub fn capacity(&self) -> usize {
        self.entries as usize
    }
}
