//! Receiving on an `AF_XDP` socket: frames taken off the RX ring as an [`RxBatch`], lent until
//! the batch drops and given to the fill ring then; the `recvfrom(2)` wakeup.

use std::io;
use std::os::fd::AsRawFd;

use super::Xsk;
use super::ring::{Ring, fill_with, prefetch};
use super::socket::busy_is_ok;
use crate::abi::XdpDesc;

impl Xsk {
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

    /// Whether the batch holds no descriptor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
