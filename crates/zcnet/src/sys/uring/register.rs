//! A ring's registrations with the kernel: its socket as fixed file 0, its own fd
//! (`IORING_REGISTER_RING_FDS`, 5.18) and the deferred enabling of a single-issuer ring
//! (`IORING_SETUP_R_DISABLED`), and `io_uring_enter(2)` through the registered fd.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use super::super::abi;
use super::super::stable::StableBytes;
use super::ring::SendRing;

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// `struct io_uring_getevents_arg`.
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// The calling thread's id, read from a thread-local once it is known: `thread::current()`
/// clones the thread's handle (two atomic operations), and every submission checks its thread.
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ID: std::thread::ThreadId = std::thread::current().id();
    }
    ID.with(|id| *id)
}

impl<B: StableBytes> SendRing<B> {
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
        if self.want.registered_ring_fd {
            let mut up = RsrcUpdate {
                offset: u32::MAX,
                resv: 0,
                data: self.ring.as_raw_fd() as u64,
            };
            // SAFETY: `up` is a valid io_uring_rsrc_update for the duration of the call; the
            // kernel writes the allocated index into `offset`.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.ring.as_raw_fd(),
                    abi::IORING_REGISTER_RING_FDS,
                    &mut up as *mut RsrcUpdate,
                    1,
                )
            };
            if r == 1 {
                self.ring_index = Some(up.offset);
                self.granted.registered_ring_fd = true;
                self.issuer = Some(this_thread());
            }
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
        let to_submit = self.sq.len() as libc::c_uint;
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let arg = GeteventsArg {
            sigmask: 0,
            sigmask_sz: 8,
            min_wait_usec: 0,
            ts: ts.as_ref().map_or(0, |t| t as *const libc::timespec as u64),
        };
        let (min_complete, flags) = match timeout {
            Some(_) => (1, abi::IORING_ENTER_GETEVENTS | abi::IORING_ENTER_EXT_ARG),
            // Deferred task work runs only in an enter that asks for events.
            None if self.granted.defer_taskrun => (0, abi::IORING_ENTER_GETEVENTS),
            None => (0, 0),
        };
        // SAFETY: `arg` and the timespec it points at live across the call; the kernel reads
        // `size_of::<GeteventsArg>()` bytes of `arg` only with EXT_ARG.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                index,
                to_submit,
                min_complete,
                flags | abi::IORING_ENTER_REGISTERED_RING,
                &arg as *const GeteventsArg,
                std::mem::size_of::<GeteventsArg>(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
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
        let mut up = RsrcUpdate {
            offset: index,
            resv: 0,
            data: 0,
        };
        // SAFETY: `up` is a valid io_uring_rsrc_update for the duration of the call, naming an
        // index this thread registered for this ring; the kernel only reads it.
        unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.ring.as_raw_fd(),
                abi::IORING_UNREGISTER_RING_FDS,
                &mut up as *mut RsrcUpdate,
                1,
            )
        };
    }
}
