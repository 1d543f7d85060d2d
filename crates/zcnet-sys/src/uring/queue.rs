//! The submission and completion queues, read and written in place: a send's SQE is filled where
//! the kernel reads it, as liburing's `io_uring_prep_send_zc(3)` fills the entry
//! `io_uring_get_sqe(3)` hands out, and a CQE is read where the kernel wrote it, as
//! `io_uring_for_each_cqe` reads it.
//!
//! The io-uring crate's `SubmissionQueue::push` copies a 64-byte entry made on the stack into
//! the queue. The copy reads the entry back with wide loads while its narrow field stores are
//! still on their way to the cache: a store-forwarding stall on every request, the largest
//! single cost of the sender's user time (issue 34); its completion queue hands each CQE out
//! through a call to the entry's `clone`, which is not inlined across the crate boundary. The
//! crate still sets the ring up, registers and enters; this is a second mapping of the same
//! queues (`mmap(2)` of the ring fd at `IORING_OFF_SQ_RING`, `IORING_OFF_SQES` and
//! `IORING_OFF_CQ_RING`, as `io_uring_setup(2)` describes), through which this ring's requests
//! are queued and completions read. Both sides read the indexes from the shared ring, so either
//! may be used between the other's calls.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::IoUring;

use super::super::abi;
use super::super::mm::Mmap;

/// `IORING_SETUP_SQE128` (5.19), `IORING_SETUP_CQE32` (5.19), `IORING_SETUP_NO_SQARRAY` (6.6):
/// set-ups whose queues are laid out otherwise than these mappings read them.
const OTHER_LAYOUT: u32 = 1 << 10 | 1 << 11 | 1 << 16;

/// The ring's parameters, checked to describe the layout read here.
fn params(ring: &IoUring) -> io::Result<&Params> {
    // SAFETY: `Parameters` is `repr(transparent)` over `io_uring_params`, whose layout `Params`
    // repeats (sizes asserted below, beside `Params`); the reference lives as long as `ring`.
    let p = unsafe { &*(ring.params() as *const io_uring::Parameters).cast::<Params>() };
    if p.flags & OTHER_LAYOUT != 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a ring with 128-byte SQEs, 32-byte CQEs or no SQ index array",
        ));
    }
    Ok(p)
}

/// `mmap(2)` of `len` bytes of `ring`'s queue memory at `offset` (one of the `IORING_OFF_*`),
/// read and write; with the start of the mapping.
fn map_queue(ring: &IoUring, len: usize, offset: u64) -> io::Result<(Mmap, *mut u8)> {
    // SAFETY: the ring fd is open for as long as `ring`, which outlives this call.
    let fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
    let map = Mmap::shared_at(fd, len, libc::PROT_READ | libc::PROT_WRITE, offset)?;
    let base = map.addr() as *mut u8;
    Ok((map, base))
}

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
const _: () = assert!(size_of::<Params>() == size_of::<io_uring::Parameters>());
const _: () = assert!(size_of::<Params>() == 120);

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

const _: () = assert!(size_of::<Sqe>() == 64);

impl Sqe {
    /// Every member, named, for comparing two entries (the engine's tests).
    pub fn fields(&self) -> [(&'static str, u64); 14] {
        [
            ("opcode", u64::from(self.opcode)),
            ("flags", u64::from(self.flags)),
            ("ioprio", u64::from(self.ioprio)),
            ("fd", self.fd as u64),
            ("off", self.off),
            ("addr", self.addr),
            ("len", u64::from(self.len)),
            ("op_flags", u64::from(self.op_flags)),
            ("user_data", self.user_data),
            ("buf_index", u64::from(self.buf_index)),
            ("personality", u64::from(self.personality)),
            ("file_index", self.file_index as u64),
            ("addr3", self.addr3),
            ("pad", self.pad),
        ]
    }
}

/// What [`Sq::push`] writes into an entry, every member of it.
///
/// A closure does, and so does a value of a type of its own, whose `write` is inlined where it
/// is pushed: a closure's body is a call of its own wherever the function that pushes it is too
/// large for the compiler to inline it into (the sender's loop of completions, which sends each
/// buffer again from it: a call, with the request spilled to the stack and read back; inlined,
/// 15 of the 337 instructions of a zc-fixed request fewer, issue 51).
pub trait Entry {
    /// Writes every member of `sqe`.
    fn write(self, sqe: &mut Sqe);
}

impl<F: FnOnce(&mut Sqe)> Entry for F {
    #[inline(always)]
    fn write(self, sqe: &mut Sqe) {
        self(sqe);
    }
}

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
    /// Maps the submission queue of `ring` and makes its index array the identity (entry `i`
    /// of the array names SQE `i`), which [`Sq::push`] relies on. The crate sets it up so too;
    /// this does not depend on it.
    pub fn map(ring: &IoUring) -> io::Result<Sq> {
        let p = params(ring)?;
        let entries = p.sq_entries as usize;
        let (map, base) = map_queue(
            ring,
            p.sq_off.array as usize + entries * 4,
            abi::IORING_OFF_SQ_RING,
        )?;
        let (sqes, sqes_at) = map_queue(ring, entries * size_of::<Sqe>(), abi::IORING_OFF_SQES)?;
        // SAFETY: the kernel's offsets lie inside the SQ ring mapping, whose length covers up to
        // the end of the index array (it comes after the other fields). Nothing is queued yet:
        // the kernel reads no index before a tail store publishes it.
        let (head, tail, mask) = unsafe {
            let array = base.add(p.sq_off.array as usize).cast::<u32>();
            for i in 0..p.sq_entries {
                array.add(i as usize).write_volatile(i);
            }
            (
                base.add(p.sq_off.head as usize) as *const AtomicU32,
                base.add(p.sq_off.tail as usize) as *const AtomicU32,
                *base.add(p.sq_off.ring_mask as usize).cast::<u32>(),
            )
        };
        Ok(Sq {
            head,
            tail,
            mask,
            entries: p.sq_entries,
            sqes: sqes_at.cast::<Sqe>(),
            _ring: map,
            _sqes: sqes,
        })
    }

    /// The queue's head (the kernel's) and tail (this side's).
    #[inline]
    fn indexes(&self) -> (u32, u32) {
        // SAFETY: `head` and `tail` point at the ring's u32 head and tail (see `map`); only
        // this ring's one user writes the tail, the kernel writes the head.
        unsafe {
            (
                (*self.head).load(Ordering::Acquire),
                (*self.tail).load(Ordering::Relaxed),
            )
        }
    }

    /// Has `entry` write the next free entry in place, and hands it to the kernel's next
    /// `io_uring_enter`; `false` (and nothing queued, `entry` not written) when the queue is
    /// full. `entry` must set every member: the entry holds what an earlier request left in it.
    ///
    /// # Safety
    /// Everything the entry points at must stay valid until the request's last CQE.
    #[inline(always)]
    pub unsafe fn push(&mut self, entry: impl Entry) -> bool {
        let (head, tail) = self.indexes();
        if tail.wrapping_sub(head) >= self.entries {
            return false;
        }
        // SAFETY: `tail & mask` indexes one of the `entries` SQEs of the mapping, which the
        // kernel consumed already (fewer than `entries` are queued) and reads again only once
        // the release store of the tail below has published it.
        unsafe {
            entry.write(&mut *self.sqes.add((tail & self.mask) as usize));
            (*self.tail).store(tail.wrapping_add(1), Ordering::Release);
        }
        true
    }

    /// Queued entry `i` (counted from the ring's start), as written.
    pub fn entry(&self, i: u32) -> &Sqe {
        assert!(i < self.entries, "an entry of the queue");
        // SAFETY: `i & mask` indexes one of the `entries` SQEs of the mapping. Only this process
        // writes SQEs (the kernel reads them), and only through `&mut self`, which the returned
        // borrow of `self` excludes while it lives.
        unsafe { &*self.sqes.add((i & self.mask) as usize) }
    }

    /// Entries queued and not yet consumed by the kernel.
    #[inline]
    pub fn len(&self) -> usize {
        let (head, tail) = self.indexes();
        tail.wrapping_sub(head) as usize
    }

    /// Whether no SQE waits for submission.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries the queue holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.entries as usize
    }
}

/// `struct io_uring_cqe` (without `IORING_SETUP_CQE32`): the request's `user_data`, its result
/// (`-errno` on failure) and flags.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Cqe {
    pub user_data: u64,
    pub res: i32,
    pub flags: u32,
}

const _: () = assert!(size_of::<Cqe>() == 16);

/// The completion queue, mapped a second time for reading in place.
pub struct Cq {
    _ring: Mmap,
    head: *const AtomicU32,
    tail: *const AtomicU32,
    mask: u32,
    cqes: *const Cqe,
    /// The head as this side last stored it (only this side writes it).
    taken: u32,
    /// The tail as last loaded: the entries before it are posted.
    seen: u32,
}

// SAFETY: as for `Sq`: the pointers point into the mapping this value owns, used by one thread
// at a time (`&mut self` to consume).
unsafe impl Send for Cq {}

impl Cq {
    /// Maps the completion queue of `ring` (set up without `IORING_SETUP_CQE32`).
    pub fn map(ring: &IoUring) -> io::Result<Cq> {
        let p = params(ring)?;
        let (map, base) = map_queue(
            ring,
            p.cq_off.cqes as usize + p.cq_entries as usize * size_of::<Cqe>(),
            abi::IORING_OFF_CQ_RING,
        )?;
        // SAFETY: the kernel's offsets lie inside the CQ ring mapping, whose length covers up to
        // the end of the entries (they come after the other fields).
        let (head, tail, mask, cqes) = unsafe {
            (
                base.add(p.cq_off.head as usize) as *const AtomicU32,
                base.add(p.cq_off.tail as usize) as *const AtomicU32,
                *base.add(p.cq_off.ring_mask as usize).cast::<u32>(),
                base.add(p.cq_off.cqes as usize) as *const Cqe,
            )
        };
        // SAFETY: as above; nothing is consumed yet.
        let taken = unsafe { (*head).load(Ordering::Relaxed) };
        Ok(Cq {
            head,
            tail,
            mask,
            cqes,
            taken,
            seen: taken,
            _ring: map,
        })
    }

    /// How many completions there are now (the kernel may post more meanwhile).
    #[inline]
    pub fn ready(&mut self) -> u32 {
        // SAFETY: `tail` points at the ring's u32 tail (see `map`), which the kernel writes (the
        // acquire load makes the entries before it visible).
        self.seen = unsafe { (*self.tail).load(Ordering::Acquire) };
        self.seen.wrapping_sub(self.taken)
    }

    /// The oldest completion, consumed (its entry given back to the kernel); `None` when there
    /// is none. The tail is loaded again only when the entries it showed last are all taken.
    #[inline]
    pub fn pop(&mut self) -> Option<Cqe> {
        if self.taken == self.seen && self.ready() == 0 {
            return None;
        }
        let head = self.taken;
        self.taken = head.wrapping_add(1);
        // SAFETY: `self.head` points at the ring's u32 head, which only this side writes
        // (`head` is its value). The entry at `head & mask` was posted (an acquire load of the
        // tail saw past it) and is the kernel's to overwrite only after the release store of
        // the new head.
        unsafe {
            let cqe = self.cqes.add((head & self.mask) as usize).read();
            (*self.head).store(self.taken, Ordering::Release);
            Some(cqe)
        }
    }
}
