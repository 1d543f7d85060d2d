//! The memory of an `AF_XDP` socket (`Documentation/networking/af_xdp.rst`): the UMEM, an area
//! of this process the kernel writes received frames into and reads sent frames from, and four
//! single-producer single-consumer rings shared with the kernel (fill and completion of UMEM
//! frame addresses; RX and TX of `struct xdp_desc`).
//!
//! Ownership of a UMEM frame passes through the rings, and [`Xsk`] keeps the safe side of it: a
//! frame is the application's only between leaving a ring (RX or completion) and entering one
//! (fill or TX). Slices of frames exist only then: received frames are borrowed from an
//! [`RxBatch`] that gives them to the fill ring when dropped, and a frame to send is written
//! while it is in the free list, before its descriptor enters the TX ring. A ring's producer and
//! consumer indices are read with acquire and written with release ordering, as libxdp does.

use std::io;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::abi::{self, XdpDesc, XdpRingOffset};
use super::mm::Mmap;
use super::sockopt::{self, XdpRing};
use super::{cvt, net};

/// `XDP_UMEM_REG` with the UMEM `umem`.
fn register(fd: BorrowedFd<'_>, umem: &Mmap, frame_size: u32, headroom: u32) -> io::Result<()> {
    // SAFETY: `umem` is the memory of a `Umem` that every socket on it keeps alive (an `Arc`)
    // until after its fd is closed (in `Xsk`'s drop), used for nothing but frames; the kernel
    // keeps its own pin until then.
    unsafe { sockopt::register_umem(fd, umem.addr(), umem.len(), frame_size, headroom) }
}

/// The RX queues of `iface` in this thread's network namespace (`SIOCETHTOOL`
/// `abi::ETHTOOL_GCHANNELS`: RX plus combined channels), where the driver reports them.
pub fn rx_queues(iface: &str) -> io::Result<u32> {
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let mut ch = EthtoolChannels {
        cmd: abi::ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let fd = net::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    // SAFETY: for abi::ETHTOOL_GCHANNELS the kernel writes one `struct ethtool_channels`, which
    // `ch` is.
    unsafe { super::netdev::ethtool(fd.as_fd(), iface, &mut ch) }?;
    Ok(ch.rx_count + ch.combined_count)
}

/// One mapped ring: `size` entries of `T` (a power of two) and its producer, consumer and flags
/// words, with this side's cached copies of the indices.
#[derive(Debug)]
struct Ring<T> {
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
    fn map(fd: BorrowedFd<'_>, off: &XdpRingOffset, size: u32, pgoff: u64) -> io::Result<Ring<T>> {
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

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: checked inside the mapping and 4-aligned in `map`; the kernel updates it
        // atomically, and an AtomicU32 has the layout of a u32.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    /// Whether the kernel asks for a syscall (`XDP_RING_NEED_WAKEUP`).
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        let flags = unsafe { &*self.flags };
        flags.load(Ordering::Acquire) & abi::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side: room for entries, refreshed from the kernel's consumer when short.
    fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free >= want {
            return free;
        }
        self.cached_cons = self.consumer().load(Ordering::Acquire);
        self.size - self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Producer side: writes `v` at the next slot (not yet published).
    fn write(&mut self, at: u32, v: T) {
        let i = (self.cached_prod.wrapping_add(at) & self.mask) as usize;
        // SAFETY: `i` < size, inside the descriptor array of the mapping; the slot is ours
        // until published (`free` said the kernel has consumed it).
        unsafe { self.descs.add(i).write_volatile(v) };
    }

    /// Producer side: publishes `n` written entries.
    fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Consumer side: entries the kernel has published, refreshed when none are cached.
    fn available(&mut self) -> u32 {
        let n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n > 0 {
            return n;
        }
        self.cached_prod = self.producer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Consumer side: the entry `at` past the consumer (`at` < `available`).
    fn read(&self, at: u32) -> T {
        let i = (self.cached_cons.wrapping_add(at) & self.mask) as usize;
        // SAFETY: `i` < size, inside the mapping; the kernel published it (acquire in
        // `available`) and does not write it again until the consumer moves past it.
        unsafe { self.descs.add(i).read_volatile() }
    }

    /// Asks for the cache line of entry `at` past the consumer, to be read soon.
    fn prefetch(&self, at: u32) {
        let i = (self.cached_cons.wrapping_add(at) & self.mask) as usize;
        prefetch(self.descs.wrapping_add(i) as usize);
    }

    /// Consumer side: hands `n` read entries back.
    fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.consumer().store(self.cached_cons, Ordering::Release);
    }
}

/// Sizes of an [`Xsk`].
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// UMEM frames the socket takes for itself.
    pub frame_count: u32,
    /// Entries of every ring (a power of two).
    pub ring_size: u32,
    /// Open an RX ring.
    pub rx: bool,
    /// Open a TX ring.
    pub tx: bool,
}

/// A UMEM: memory the kernel writes received frames into and reads sent frames from, cut into
/// frames of one size, shared by the sockets on it (`XDP_SHARED_UMEM`). Each socket holds a
/// range of frames of its own, so that no frame is on two sockets' rings; the first socket
/// registers the memory (`XDP_UMEM_REG`), the others bind to share that registration while a
/// socket holding it is open. Sockets are made, bound and closed under the UMEM's lock, so a
/// socket shared from is never closed meanwhile.
#[derive(Debug)]
pub struct Umem {
    map: Mmap,
    frame_size: u32,
    frame_count: u32,
    state: Mutex<UmemState>,
}

#[derive(Debug)]
struct UmemState {
    /// Frame ranges (indices) no socket holds, in order.
    free: Vec<Range<u32>>,
    /// Open, bound sockets on this memory.
    bound: Vec<BoundSocket>,
    next_id: u64,
}

impl UmemState {
    fn free_count(&self) -> u32 {
        self.free.iter().map(|r| r.end - r.start).sum()
    }
}

#[derive(Debug)]
struct BoundSocket {
    id: u64,
    fd: RawFd,
    ifindex: u32,
    queue: u32,
}

/// What [`Umem::socket`] did.
#[derive(Debug)]
pub enum Bound {
    /// Registered the memory and bound; the errors of the bind flags tried before those that
    /// bound (a refused zero-copy bind).
    Registered(Vec<io::Error>),
    /// Shares the registration of a socket already bound (its mode, its need-wakeup).
    Shared,
}

/// Why [`Umem::socket`] failed.
#[derive(Debug)]
pub enum SocketError {
    /// Fewer free frames than asked.
    NoFrames { asked: u32, free: u32 },
    /// A socket on this memory is bound to that queue already.
    QueueTaken,
    /// `socket`, `XDP_UMEM_REG`, the rings or their mappings.
    Setup(io::Error),
    /// `bind`: the last attempt's error.
    Bind(io::Error),
}

impl Umem {
    /// Maps `frame_count` frames of `frame_size` bytes (2 MiB-aligned, `MADV_HUGEPAGE`).
    pub fn new(frame_count: u32, frame_size: u32) -> io::Result<Umem> {
        if !frame_size.is_power_of_two() || frame_count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame size a power of two, at least one frame",
            ));
        }
        let len = (frame_count as usize)
            .checked_mul(frame_size as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "UMEM too large"))?;
        let map = Mmap::anonymous_aligned(len, 2 << 20)?;
        // Transparent huge pages where the machine allows them (`madvise` mode): a small frame
        // every 2 KiB touches a new 4 KiB page every other frame, a TLB miss each.
        // SAFETY: advice on a mapping this function just made; no memory is read or written.
        unsafe { libc::madvise(map.addr() as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        Ok(Umem {
            map,
            frame_size,
            frame_count,
            state: Mutex::new(UmemState {
                free: std::iter::once(0..frame_count).collect(),
                bound: Vec::new(),
                next_id: 0,
            }),
        })
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Frames in all.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// Frames no socket holds.
    pub fn free_frames(&self) -> u32 {
        self.lock().free_count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UmemState> {
        // A panic while the lock was held left plain data (ranges, fds) consistent: each
        // change is one push, retain or assignment.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes a socket holding `g.frame_count` frames of this memory, with its rings, and binds
    /// it to `queue` of `ifindex`: with the memory registered on it, trying `flags` in order
    /// (zero copy, then copy) while `retry` says an error is worth waiting out, when no open
    /// socket holds the registration; else sharing it (`XDP_SHARED_UMEM`, the registering
    /// socket's mode; Linux 5.10 for another queue or device). The lock is held throughout,
    /// retries included: other sockets on this memory wait to be made or closed meanwhile.
    pub fn socket(
        self: &Arc<Umem>,
        g: &Geometry,
        ifindex: u32,
        queue: u32,
        flags: &[u16],
        retry: &dyn Fn(&io::Error) -> bool,
    ) -> Result<(Xsk, Bound), SocketError> {
        let mut st = self.lock();
        if st
            .bound
            .iter()
            .any(|b| b.ifindex == ifindex && b.queue == queue)
        {
            return Err(SocketError::QueueTaken);
        }
        let free = st.free_count();
        let Some(at) = st
            .free
            .iter()
            .position(|r| r.end - r.start >= g.frame_count)
        else {
            return Err(SocketError::NoFrames {
                asked: g.frame_count,
                free,
            });
        };
        let frames = st.free[at].start..st.free[at].start + g.frame_count;
        let share_from = st.bound.first().map(|b| b.fd);
        let id = st.next_id;
        let bind = |xsk: &Xsk, flags: u16, shared: RawFd| loop {
            match xsk.bind(ifindex, queue, flags, shared) {
                Err(e) if retry(&e) => std::thread::sleep(std::time::Duration::from_millis(10)),
                r => return r,
            }
        };
        let (mut xsk, bound) = match share_from {
            Some(fd) => {
                let xsk =
                    Xsk::new(self, frames.clone(), g, false, id).map_err(SocketError::Setup)?;
                bind(&xsk, abi::XDP_SHARED_UMEM, fd).map_err(SocketError::Bind)?;
                (xsk, Bound::Shared)
            }
            None => {
                let mut refused = Vec::new();
                let mut made = None;
                for &f in flags {
                    // A refused bind leaves the socket unusable for another: a fresh one each.
                    let xsk =
                        Xsk::new(self, frames.clone(), g, true, id).map_err(SocketError::Setup)?;
                    match bind(&xsk, f, 0) {
                        Ok(()) => {
                            made = Some(xsk);
                            break;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                            return Err(SocketError::Bind(e));
                        }
                        Err(e) => refused.push(e),
                    }
                }
                let Some(xsk) = made else {
                    let e = refused.pop().unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidInput, "no bind flags")
                    });
                    return Err(SocketError::Bind(e));
                };
                (xsk, Bound::Registered(refused))
            }
        };
        // The frames are the socket's now; its Drop gives them back.
        let r = &mut st.free[at];
        r.start += g.frame_count;
        if r.start == r.end {
            st.free.remove(at);
        }
        st.bound.push(BoundSocket {
            id,
            fd: xsk.fd.as_raw_fd(),
            ifindex,
            queue,
        });
        st.next_id += 1;
        xsk.held = true;
        Ok((xsk, bound))
    }
}

/// An `AF_XDP` socket with its rings and its frames of a [`Umem`].
#[derive(Debug)]
pub struct Xsk {
    // Closed in `Drop`, under the UMEM's lock, before the rings unmap and the frames go back.
    fd: ManuallyDrop<OwnedFd>,
    id: u64,
    /// Whether the UMEM's state lists this socket and counts its frames as held (a socket that
    /// failed to bind never was).
    held: bool,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Option<Ring<XdpDesc>>,
    tx: Option<Ring<XdpDesc>>,
    umem: Arc<Umem>,
    /// The socket's frames, by index.
    frames: Range<u32>,
    /// Frames that are the application's and hold nothing: for TX.
    free: Vec<u64>,
    /// TX frames in the kernel's hands, by index within `frames` (a completion must name one).
    sending: Vec<bool>,
    /// Completions naming a frame not sent: a broken ring, counted, never trusted.
    pub bad_completions: u64,
    /// RX descriptors outside the socket's frames or across a frame's end: dropped, counted.
    pub bad_descs: u64,
    /// The descriptors of the last batch: one vector for the socket's life.
    rx_descs: Vec<XdpDesc>,
}

impl Drop for Xsk {
    fn drop(&mut self) {
        if !self.held {
            // Made and dropped inside `Umem::socket`, under the lock already.
            // SAFETY: dropped once, here; `fd` is not used after.
            unsafe { ManuallyDrop::drop(&mut self.fd) };
            return;
        }
        // In copy mode the kernel writes a socket's frames only while it is bound, and closing
        // it unbinds it (after `synchronize_net`). A zero-copy driver may still hold fill-ring
        // frames for DMA until the kernel's deferred release of the socket's pool runs, which
        // nothing here can observe: those frames are never given to another socket.
        let copy_mode = self.zero_copy() == Some(false);
        let mut st = self.umem.lock();
        st.bound.retain(|b| b.id != self.id);
        // SAFETY: dropped once, here; `fd` is not used after (the rest of the struct only
        // unmaps rings and frees vectors).
        unsafe { ManuallyDrop::drop(&mut self.fd) };
        if !copy_mode {
            return;
        }
        let r = self.frames.clone();
        let at = st.free.partition_point(|f| f.start < r.start);
        st.free.insert(at, r);
        // Neighbouring ranges joined again.
        let mut joined: Vec<Range<u32>> = Vec::with_capacity(st.free.len());
        for r in st.free.drain(..) {
            match joined.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => joined.push(r),
            }
        }
        st.free = joined;
    }
}

impl Xsk {
    /// `socket(AF_XDP)` holding `frames` of `umem` (registering the memory on it when
    /// `register`), its rings sized and mapped, not bound. Half the frames go to the fill ring
    /// when there is an RX ring (all of them without a TX ring), the rest are free for TX.
    fn new(
        umem: &Arc<Umem>,
        frames: Range<u32>,
        g: &Geometry,
        register_here: bool,
        id: u64,
    ) -> io::Result<Xsk> {
        if !g.ring_size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring size must be a power of two",
            ));
        }
        let fd = net::socket(abi::AF_XDP, libc::SOCK_RAW, 0)?;
        if register_here {
            register(fd.as_fd(), &umem.map, umem.frame_size, 0)?;
        }
        let set = |ring| sockopt::set_xdp_ring_size(fd.as_fd(), ring, g.ring_size);
        // Every socket has its own fill and completion rings (for a socket sharing the UMEM on
        // another queue, Linux 5.10).
        set(XdpRing::Fill)?;
        set(XdpRing::Completion)?;
        if g.rx {
            set(XdpRing::Rx)?;
        }
        if g.tx {
            set(XdpRing::Tx)?;
        }
        let off = sockopt::xdp_mmap_offsets(fd.as_fd())?;
        let b = fd.as_fd();
        let fill = Ring::map(b, &off.fr, g.ring_size, abi::XDP_UMEM_PGOFF_FILL_RING)?;
        let completion = Ring::map(b, &off.cr, g.ring_size, abi::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx =
            g.rx.then(|| Ring::map(b, &off.rx, g.ring_size, abi::XDP_PGOFF_RX_RING))
                .transpose()?;
        let tx =
            g.tx.then(|| Ring::map(b, &off.tx, g.ring_size, abi::XDP_PGOFF_TX_RING))
                .transpose()?;
        let size = u64::from(umem.frame_size);
        let all: Vec<u64> = frames.clone().map(|i| u64::from(i) * size).collect();
        let mut xsk = Xsk {
            fd: ManuallyDrop::new(fd),
            id,
            held: false,
            fill,
            completion,
            rx,
            tx,
            umem: Arc::clone(umem),
            sending: vec![false; frames.len()],
            frames,
            free: Vec::new(),
            bad_completions: 0,
            bad_descs: 0,
            rx_descs: Vec::new(),
        };
        let for_rx = match (g.rx, g.tx) {
            (true, true) => all.len() / 2,
            (true, false) => all.len(),
            _ => 0,
        };
        // The fill ring takes at most its size; the rest of the RX share stays free.
        let fill_n = for_rx.min(g.ring_size as usize);
        xsk.free = all[fill_n..].iter().rev().copied().collect();
        fill_with(&mut xsk.fill, &all[..fill_n]);
        Ok(xsk)
    }

    /// The socket.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The socket's frames as UMEM byte addresses: start and end.
    fn span(&self) -> (u64, u64) {
        let size = u64::from(self.umem.frame_size);
        (
            u64::from(self.frames.start) * size,
            u64::from(self.frames.end) * size,
        )
    }

    /// `bind(2)` to queue `queue` of interface `ifindex` with `flags` (`XDP_COPY`,
    /// `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`; or `XDP_SHARED_UMEM` and the socket `shared`).
    fn bind(&self, ifindex: u32, queue: u32, flags: u16, shared: RawFd) -> io::Result<()> {
        let sa = abi::SockaddrXdp {
            sxdp_family: abi::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: shared as u32,
        };
        // SAFETY: `sa` is a valid sockaddr_xdp for the duration of the call.
        cvt(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sa as *const abi::SockaddrXdp).cast(),
                size_of::<abi::SockaddrXdp>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Whether the bound socket runs zero-copy (`XDP_OPTIONS`, Linux 5.3); `None` before.
    pub fn zero_copy(&self) -> Option<bool> {
        sockopt::xdp_options(self.fd())
            .ok()
            .map(|flags| flags & abi::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// `XDP_STATISTICS`.
    pub fn statistics(&self) -> io::Result<abi::XdpStatistics> {
        sockopt::xdp_statistics(self.fd())
    }

    /// Whether the fill ring asks for a wakeup (the kernel has run out of frames to fill).
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Without a TX ring every free frame belongs on the fill ring: puts them there (frames
    /// the ring had no room for when a batch dropped).
    pub fn refill(&mut self) {
        if self.tx.is_none() && !self.free.is_empty() {
            let n = fill_with(&mut self.fill, &self.free);
            self.free.drain(..n);
        }
    }

    /// Received frames waiting on the RX ring.
    pub fn rx_ready(&mut self) -> u32 {
        self.rx.as_mut().map_or(0, Ring::available)
    }

    /// Takes up to `max` received frames off the RX ring.
    pub fn rx_batch(&mut self, max: u32) -> RxBatch<'_> {
        // The descriptors' vector lives in the socket, reused batch after batch.
        let mut descs = std::mem::take(&mut self.rx_descs);
        descs.clear();
        let mut bytes = 0u64;
        let (lo, hi) = self.span();
        let base = self.umem.map.addr();
        if let Some(rx) = self.rx.as_mut() {
            let n = rx.available().min(max);
            descs.reserve(n as usize);
            let frame_size = u64::from(self.umem.frame_size);
            for i in 0..n {
                // Descriptors a few lines ahead: the kernel wrote them on another CPU too.
                if i % 4 == 0 && i + 16 < n {
                    rx.prefetch(i + 16);
                }
                let d = rx.read(i);
                // A descriptor outside this socket's frames (another socket's on a shared UMEM),
                // or reaching past its own frame into one the kernel may be filling, would make
                // a slice of memory not ours: checked once here, as the TPACKET_V3 blocks are.
                // Such a frame is dropped (and not returned: its address is not trusted either).
                let within = (d.addr & (frame_size - 1)) + u64::from(d.len);
                if d.addr >= lo
                    && d.addr
                        .checked_add(u64::from(d.len))
                        .is_some_and(|e| e <= hi)
                    && within <= frame_size
                {
                    // The kernel wrote the frame on another CPU, and frames 2 KiB apart defeat
                    // the hardware's prefetcher (a packet ring's dense blocks do not): asked
                    // for now, its first line arrives while the rest of the batch is checked,
                    // before anyone reads it.
                    prefetch(base + d.addr as usize);
                    bytes += u64::from(d.len);
                    descs.push(d);
                } else {
                    self.bad_descs += 1;
                }
            }
            rx.release(n);
        }
        RxBatch {
            xsk: self,
            descs,
            bytes,
        }
    }

    /// Copies `data` into a free frame and puts it on the TX ring; `false` when no frame is
    /// free or the ring is full (reap completions, then try again).
    pub fn send(&mut self, data: &[u8]) -> io::Result<bool> {
        let Some(tx) = self.tx.as_mut() else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "no TX ring"));
        };
        if data.len() > self.umem.frame_size as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than a UMEM frame",
            ));
        }
        if tx.free(1) == 0 {
            return Ok(false);
        }
        let Some(addr) = self.free.pop() else {
            return Ok(false);
        };
        // SAFETY: `addr` is a frame from the free list: one of this socket's frames (the list
        // is built from its range and refilled only by checked completions), the
        // application's alone (no ring holds it), and `data` fits a frame.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.umem.map.addr() + addr as usize) as *mut u8,
                data.len(),
            );
        }
        self.sending
            [(addr / u64::from(self.umem.frame_size) - u64::from(self.frames.start)) as usize] =
            true;
        tx.write(
            0,
            XdpDesc {
                addr,
                len: data.len() as u32,
                options: 0,
            },
        );
        tx.submit(1);
        Ok(true)
    }

    /// Whether the TX ring asks for a wakeup (`sendto`); always true without need-wakeup.
    pub fn tx_needs_wakeup(&self) -> bool {
        self.tx.as_ref().is_some_and(Ring::needs_wakeup)
    }

    /// `sendto(fd, NULL, 0, MSG_DONTWAIT)`: tells the kernel to send what the TX ring holds.
    /// `EAGAIN`/`EBUSY`/`ENOBUFS` (busy, try again) are not errors.
    pub fn kick_tx(&self) -> io::Result<()> {
        // SAFETY: no buffer, no address.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        busy_is_ok(
            r,
            &[libc::EAGAIN, libc::EBUSY, libc::ENOBUFS, libc::ENETDOWN],
        )
    }

    /// `recvfrom(fd, NULL, 0, MSG_DONTWAIT)`: tells the kernel the fill ring has frames again.
    pub fn kick_rx(&self) -> io::Result<()> {
        // SAFETY: no buffer, no address.
        let r = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        busy_is_ok(r, &[libc::EAGAIN, libc::EBUSY])
    }

    /// Moves completed TX frames back to the free list; returns how many came back.
    pub fn reap(&mut self) -> u32 {
        let n = self.completion.available();
        for i in 0..n {
            let addr = self.completion.read(i);
            // Frames before this socket's wrap around to indices far past its own.
            let idx =
                (addr / u64::from(self.umem.frame_size)).wrapping_sub(u64::from(self.frames.start));
            match self.sending.get_mut(idx as usize) {
                Some(s) if *s && addr % u64::from(self.umem.frame_size) == 0 => {
                    *s = false;
                    self.free.push(addr);
                }
                _ => self.bad_completions += 1,
            }
        }
        self.completion.release(n);
        n
    }

    /// TX frames in the kernel's hands.
    pub fn in_flight(&self) -> usize {
        self.sending.iter().filter(|s| **s).count()
    }

    /// Frames free for TX.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }
}

/// Received frames, the application's until this batch drops: then they go to the fill ring
/// (frames the ring has no room for wait in the free list).
#[derive(Debug)]
pub struct RxBatch<'a> {
    xsk: &'a mut Xsk,
    descs: Vec<XdpDesc>,
    bytes: u64,
}

impl RxBatch<'_> {
    /// The socket's count of descriptors dropped as out of bounds so far.
    pub fn bad_descs(&self) -> u64 {
        self.xsk.bad_descs
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    /// Their bytes, all together.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Frame `i`: its bytes.
    pub fn frame(&self, i: usize) -> &[u8] {
        let d = self.descs[i];
        // SAFETY: checked inside this socket's frames when the batch was made (the UMEM lives
        // as long as the socket, whose `umem` holds it); the frame left the RX ring
        // and is not on the fill ring until this batch drops, so the kernel does not write it
        // while the slice (borrowed from the batch) lives.
        unsafe {
            std::slice::from_raw_parts(
                (self.xsk.umem.map.addr() + d.addr as usize) as *const u8,
                d.len as usize,
            )
        }
    }
}

impl Drop for RxBatch<'_> {
    fn drop(&mut self) {
        // The frames go back by their base addresses (the kernel hands back an address past
        // the headroom): as many as the fill ring has room for, the rest to the free list.
        let base_mask = !(u64::from(self.xsk.umem.frame_size) - 1);
        let fill = &mut self.xsk.fill;
        let n = fill
            .free(self.descs.len() as u32)
            .min(self.descs.len() as u32);
        for (i, d) in self.descs[..n as usize].iter().enumerate() {
            fill.write(i as u32, d.addr & base_mask);
        }
        fill.submit(n);
        let rest = self.descs[n as usize..].iter().map(|d| d.addr & base_mask);
        self.xsk.free.extend(rest);
        self.xsk.rx_descs = std::mem::take(&mut self.descs);
    }
}

/// Puts `addrs` (frames of the application's) on `fill`, as many as it has room for; returns
/// how many.
fn fill_with(fill: &mut Ring<u64>, addrs: &[u64]) -> usize {
    let n = fill.free(addrs.len() as u32).min(addrs.len() as u32);
    for (i, &a) in addrs[..n as usize].iter().enumerate() {
        fill.write(i as u32, a);
    }
    fill.submit(n);
    n as usize
}

/// A wakeup call's result (`r`, from `sendto` or `recvfrom`): an errno in `busy` means "busy,
/// try again", not a failure.
fn busy_is_ok(r: isize, busy: &[i32]) -> io::Result<()> {
    if r >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(n) if busy.contains(&n) => Ok(()),
        _ => Err(e),
    }
}

/// Asks the CPU to bring the cache line at `addr` in; never faults, whatever `addr` is.
#[inline]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it reads nothing architecturally and cannot fault, even
    // on an unmapped address; SSE is part of x86_64's baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
