//! An `AF_XDP` socket ([`Xsk`]): made with its rings (`socket(2)`, `setsockopt(2)` `XDP_*_RING`,
//! `mmap(2)`), bound (`bind(2)`, `struct sockaddr_xdp`), closed under its UMEM's lock.

use std::io;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::ring::{Ring, fill_with};
use super::umem::register;
use super::{Geometry, Umem};
use crate::abi::{self, XdpDesc};
use crate::sockopt::{self, XdpRing};
use crate::{cvt, net};

/// An `AF_XDP` socket with its rings and its frames of a [`Umem`].
#[derive(Debug)]
pub struct Xsk {
    // Closed in `Drop`, under the UMEM's lock, before the rings unmap and the frames go back.
    pub(super) fd: ManuallyDrop<OwnedFd>,
    pub(super) id: u64,
    /// Whether the UMEM's state lists this socket and counts its frames as held (a socket that
    /// failed to bind never was).
    pub(super) held: bool,
    pub(super) fill: Ring<u64>,
    pub(super) completion: Ring<u64>,
    pub(super) rx: Option<Ring<XdpDesc>>,
    pub(super) tx: Option<Ring<XdpDesc>>,
    pub(super) umem: Arc<Umem>,
    /// The socket's frames, by index.
    pub(super) frames: Range<u32>,
    /// Frames that are the application's and hold nothing: for TX.
    pub(super) free: Vec<u64>,
    /// TX frames in the kernel's hands, by index within `frames` (a completion must name one).
    pub(super) sending: Vec<bool>,
    /// Completions naming a frame not sent: a broken ring, counted, never trusted.
    pub bad_completions: u64,
    /// RX descriptors outside the socket's frames or across a frame's end: dropped, counted.
    pub bad_descs: u64,
    /// The descriptors of the last batch: one vector for the socket's life.
    pub(super) rx_descs: Vec<XdpDesc>,
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
    pub(super) fn new(
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
    pub(super) fn span(&self) -> (u64, u64) {
        let size = u64::from(self.umem.frame_size);
        (
            u64::from(self.frames.start) * size,
            u64::from(self.frames.end) * size,
        )
    }

    /// `bind(2)` to queue `queue` of interface `ifindex` with `flags` (`XDP_COPY`,
    /// `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`; or `XDP_SHARED_UMEM` and the socket `shared`).
    pub(super) fn bind(
        &self,
        ifindex: u32,
        queue: u32,
        flags: u16,
        shared: RawFd,
    ) -> io::Result<()> {
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
}

/// A wakeup call's result (`r`, from `sendto` or `recvfrom`): an errno in `busy` means "busy,
/// try again", not a failure.
pub(super) fn busy_is_ok(r: isize, busy: &[i32]) -> io::Result<()> {
    if r >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(n) if busy.contains(&n) => Ok(()),
        _ => Err(e),
    }
}
