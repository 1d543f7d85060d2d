//! The UMEM (`XDP_UMEM_REG`, `Documentation/networking/af_xdp.rst`): memory cut into frames,
//! shared by the sockets on it, each holding a range of frames of its own.

use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::Xsk;
use crate::abi;
use crate::mm::Mmap;
use crate::sockopt;

/// `XDP_UMEM_REG` with the UMEM `umem`.
pub(super) fn register(
    fd: BorrowedFd<'_>,
    umem: &Mmap,
    frame_size: u32,
    headroom: u32,
) -> io::Result<()> {
    // SAFETY: `umem` is the memory of a `Umem` that every socket on it keeps alive (an `Arc`)
    // until after its fd is closed (in `Xsk`'s drop), used for nothing but frames; the kernel
    // keeps its own pin until then.
    unsafe { sockopt::register_umem(fd, umem.addr(), umem.len(), frame_size, headroom) }
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
    pub(super) map: Mmap,
    pub(super) frame_size: u32,
    pub(super) frame_count: u32,
    pub(super) state: Mutex<UmemState>,
}

#[derive(Debug)]
pub(super) struct UmemState {
    /// Frame ranges (indices) no socket holds, in order.
    pub(super) free: Vec<Range<u32>>,
    /// Open, bound sockets on this memory.
    pub(super) bound: Vec<BoundSocket>,
    pub(super) next_id: u64,
}

impl UmemState {
    pub(super) fn free_count(&self) -> u32 {
        self.free.iter().map(|r| r.end - r.start).sum()
    }
}

#[derive(Debug)]
pub(super) struct BoundSocket {
    pub(super) id: u64,
    pub(super) fd: RawFd,
    pub(super) ifindex: u32,
    pub(super) queue: u32,
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, UmemState> {
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
