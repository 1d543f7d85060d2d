//! Sending on an `AF_XDP` socket: a frame copied into a free UMEM frame and put on the TX ring,
//! the `sendto(2)` wakeup, and completions reaped back to the free list.

use std::io;
use std::os::fd::AsRawFd;

use super::Xsk;
use super::ring::Ring;
use super::socket::busy_is_ok;
use crate::abi::XdpDesc;

impl Xsk {
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
