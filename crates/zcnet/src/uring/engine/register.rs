//! A ring's registrations with the kernel: its socket as fixed file 0, its own fd
//! (`IORING_REGISTER_RING_FDS`, 5.18) and the deferred enabling of a single-issuer ring
//! (`IORING_SETUP_R_DISABLED`), and `io_uring_enter(2)` through the registered fd.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use super::ring::SendRing;
use crate::loan::OwnedBuf;
use crate::sys;

/// The calling thread's id, read from a thread-local once it is known: `thread::current()`
/// clones the thread's handle (two atomic operations), and every submission checks its thread.
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ID: std::thread::ThreadId = std::thread::current().id();
    }
    ID.with(|id| *id)
}

impl<B: OwnedBuf> SendRing<B> {
    /// Registers `fd` as fixed file 0 (`IORING_REGISTER_FILES`, 5.1) when the set-up asks for
    /// it: requests on it then skip the per-request file lookup. Refused registration leaves
    /// requests on the plain fd.
    pub fn register_file(&mut self, fd: BorrowedFd<'_>) {
        if !self.want.registered_file || self.file.is_some() {
            return;
        }
        if self
            .ring
            .submitter()
            .register_files(&[fd.as_raw_fd()])
            .is_ok()
        {
            self.file = Some(fd.as_raw_fd());
            self.granted.registered_file = true;
        }
    }

    /// Before the first submission: enables a ring created disabled (this thread becomes its
    /// single issuer) and registers the ring fd (per thread) when asked.
    pub(super) fn ready(&mut self) -> io::Result<()> {
        if let Some(issuer) = self.issuer {
            if issuer != this_thread() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "this io_uring sender is set up for the one thread that sent first \
                     (Setup single_issuer / registered_ring_fd) and was used from another",
                ));
            }
        }
        if self.enabled {
            return Ok(());
        }
        self.ring.submitter().register_enable_rings()?;
        self.enabled = true;
        if self.granted.single_issuer {
            self.issuer = Some(this_thread());
        }
        if self.want.registered_ring_fd
            && let Ok(index) = sys::uring::register_ring_fd(self.fd())
        {
            self.ring_index = Some(index);
            self.granted.registered_ring_fd = true;
            self.issuer = Some(this_thread());
        }
        Ok(())
    }

    /// `io_uring_enter(2)` through the registered ring index: submits what is queued and, with
    /// `timeout`, waits for one CQE at most that long.
    pub(super) fn enter_registered(
        &mut self,
        index: u32,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let to_submit = self.sq.len() as u32;
        // Deferred task work runs only in an enter that asks for events.
        sys::uring::enter_registered(index, to_submit, timeout, self.granted.defer_taskrun)
    }

    /// Takes the ring fd out of the registering thread's io_uring context, which holds a
    /// reference to the ring of its own: without this, closing the ring fd closed nothing, and
    /// the ring (its pages counted against `RLIMIT_MEMLOCK`, the socket registered with it) lived
    /// until that thread ended, for the main thread until the process did. The index is the
    /// thread's own: from another thread it would name another ring, so there the ring lives on
    /// until its thread ends.
    pub(super) fn unregister_ring_fd(&mut self) {
        let Some(index) = self.ring_index.take() else {
            return;
        };
        if self.issuer != Some(this_thread()) {
            return;
        }
        let _ = sys::uring::unregister_ring_fd(self.fd(), index);
    }
}
