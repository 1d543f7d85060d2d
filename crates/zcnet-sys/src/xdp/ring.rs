//! One of an `AF_XDP` socket's four rings (`Documentation/networking/af_xdp.rst`, "Rings"):
//! a single-producer single-consumer ring mapped from the socket (`mmap(2)`), its indices read
//! with acquire and written with release ordering, as libxdp does.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::abi::{self, XdpRingOffset};
use crate::mm::Mmap;

/// One mapped ring: `size` entries of `T` (a power of two) and its producer, consumer and flags
/// words, with this side's cached copies of the indices.
#[derive(Debug)]
pub(super) struct Ring<T> {
    /// The mapping the pointers below point into, unmapped when the ring drops.
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

// SAFETY: the raw pointers point into `map`, owned by the ring; access goes through &mut self.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at `pgoff` with the kernel's offsets `off`.
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        off: &XdpRingOffset,
        size: u32,
        pgoff: u64,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * size_of::<T>();
        let map = Mmap::shared_at(fd, len, libc::PROT_READ | libc::PROT_WRITE, pgoff)?;
        let at = |o: u64| map.addr() + o as usize;
        let fits = |o: u64, n: usize| (o as usize).checked_add(n).is_some_and(|end| end <= len);
        if !(fits(off.producer, 4) && fits(off.consumer, 4) && fits(off.flags, 4))
            || off.producer % 4 != 0
            || off.consumer % 4 != 0
            || off.flags % 4 != 0
            || off.desc % align_of::<T>() as u64 != 0
        {
            return Err(io::Error::other(
                "XDP_MMAP_OFFSETS outside the ring's mapping",
            ));
        }
        let mut ring = Ring {
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            descs: at(off.desc) as *mut T,
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _map: map,
        };
        ring.cached_prod = ring.producer().load(Ordering::Relaxed);
        ring.cached_cons = ring.consumer().load(Ordering::Relaxed);
        Ok(ring)
    }

    pub(super) fn producer(&self) -> &AtomicU32 {
        // SAFETY: checked inside the mapping and 4-aligned in `map`; the kernel updates it
        // atomically, and an AtomicU32 has the layout of a u32.
        unsafe { &*self.producer }
    }

    pub(super) fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    /// Whether the kernel asks for a syscall (`XDP_RING_NEED_WAKEUP`).
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        let flags = unsafe { &*self.flags };
        flags.load(Ordering::Acquire) & abi::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side: room for entries, refreshed from the kernel's consumer when short.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free >= want {
            return free;
        }
        self.cached_cons = self.consumer().load(Ordering::Acquire);
        self.size - self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Producer side: writes `v` at the next slot (not yet published).
    pub(super) fn write(&mut self, at: u32, v: T) {
        let i = (self.cached_prod.wrapping_add(at) & self.mask) as usize;
        // SAFETY: `i` < size, inside the descriptor array of the mapping; the slot is ours
        // until published (`free` said the kernel has consumed it).
        unsafe { self.descs.add(i).write_volatile(v) };
    }

    /// Producer side: publishes `n` written entries.
    pub(super) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Consumer side: entries the kernel has published, refreshed when none are cached.
    pub(super) fn available(&mut self) -> u32 {
        let n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n > 0 {
            return n;
        }
        self.cached_prod = self.producer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Consumer side: the entry `at` past the consumer (`at` < `available`).
    pub(super) fn read(&self, at: u32) -> T {
        let i = (self.cached_cons.wrapping_add(at) & self.mask) as usize;
        // SAFETY: `i` < size, inside the mapping; the kernel published it (acquire in
        // `available`) and does not write it again until the consumer moves past it.
        unsafe { self.descs.add(i).read_volatile() }
    }

    /// Asks for the cache line of entry `at` past the consumer, to be read soon.
    pub(super) fn prefetch(&self, at: u32) {
        let i = (self.cached_cons.wrapping_add(at) & self.mask) as usize;
        prefetch(self.descs.wrapping_add(i) as usize);
    }

    /// Consumer side: hands `n` read entries back.
    pub(super) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.consumer().store(self.cached_cons, Ordering::Release);
    }
}

/// Puts `addrs` (frames of the application's) on `fill`, as many as it has room for; returns
/// how many.
pub(super) fn fill_with(fill: &mut Ring<u64>, addrs: &[u64]) -> usize {
    let n = fill.free(addrs.len() as u32).min(addrs.len() as u32);
    for (i, &a) in addrs[..n as usize].iter().enumerate() {
        fill.write(i as u32, a);
    }
    fill.submit(n);
    n as usize
}

/// Asks the CPU to bring the cache line at `addr` in; never faults, whatever `addr` is.
#[inline]
pub(super) fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it reads nothing architecturally and cannot fault, even
    // on an unmapped address; SSE is part of x86_64's baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
