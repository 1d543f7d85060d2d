//! Sending: frames copied into free UMEM frames and put on the TX ring, the kernel told
//! (`sendto(2)`), completions taken back.

use std::io;
use std::time::{Duration, Instant};

use super::{XdpError, XdpSocket, sys_err};

impl XdpSocket {
    /// Queues `frame` for sending (copied into a free UMEM frame); `Ok(false)` when no frame is
    /// free or the TX ring is full: [`XdpSocket::flush`] and try again.
    ///
    /// # Errors
    /// [`XdpError::Config`]: no TX ring, or a frame longer than a UMEM frame.
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, XdpError> {
        if self.xsk.free_frames() == 0 {
            let _ = self.reap();
        }
        match self.xsk.send(frame) {
            Ok(true) => {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += frame.len() as u64;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => Err(XdpError::Config(e.to_string())),
        }
    }

    /// Tells the kernel to send what the TX ring holds (`sendto`, where it asks for one or in
    /// copy mode, which sends only from the syscall) and takes completions back.
    ///
    /// # Errors
    /// [`XdpError::Io`] from `sendto`.
    pub fn flush(&mut self) -> Result<(), XdpError> {
        if !self.counters.zero_copy || self.xsk.tx_needs_wakeup() {
            self.xsk.kick_tx().map_err(sys_err("sendto(AF_XDP)"))?;
        }
        let _ = self.reap();
        Ok(())
    }

    /// Waits up to `timeout` for every sent frame's completion.
    ///
    /// # Errors
    /// [`XdpError::Io`]: `sendto` failed, or frames are still out at the timeout.
    pub fn drain(&mut self, timeout: Duration) -> Result<(), XdpError> {
        let end = Instant::now() + timeout;
        while self.xsk.in_flight() > 0 {
            self.flush()?;
            if Instant::now() > end {
                return Err(XdpError::Io {
                    call: "sendto(AF_XDP)",
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{} frames not completed", self.xsk.in_flight()),
                    ),
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Takes completions back: their UMEM frames are free again. Returns how many, as the
    /// loaning senders' `reap` does (reading the completion ring cannot fail: always `Ok`).
    ///
    /// # Errors
    /// None today; the signature is the senders'.
    pub fn reap(&mut self) -> io::Result<usize> {
        let n = self.xsk.reap();
        self.counters.completions += u64::from(n);
        self.counters.bad_completions = self.xsk.bad_completions;
        Ok(n as usize)
    }

    /// Frames sent whose completion has not come back.
    pub fn in_flight(&self) -> usize {
        self.xsk.in_flight()
    }

    /// UMEM frames free for sending.
    pub fn free_frames(&self) -> usize {
        self.xsk.free_frames()
    }
}
