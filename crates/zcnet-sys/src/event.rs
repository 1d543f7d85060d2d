//! Waiting: `poll(2)`, `eventfd(2)`, `timerfd_create(2)`, `epoll(7)`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

/// `poll(2)` on one descriptor, waiting up to `timeout` (`None`: forever; rounded up to whole
/// milliseconds, so a short wait never becomes a busy `poll(0)`); returns `revents` (0 on
/// timeout).
pub fn poll(
    fd: BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
) -> io::Result<i16> {
    let timeout_ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    });
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    cvt(unsafe { libc::poll(&mut pfd, 1, timeout_ms) })?;
    Ok(pfd.revents)
}

/// `poll(2)` on several descriptors, waiting up to `timeout` (rounded up to whole
/// milliseconds); fills each `revents`, returns how many have some. `EINTR` counts as none.
pub fn poll_all(fds: &mut [libc::pollfd], timeout: std::time::Duration) -> io::Result<usize> {
    let timeout_ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfds; the kernel reads the
    // descriptor numbers and writes only `revents`.
    match cvt(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// A non-blocking, close-on-exec `eventfd(2)` counter.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the returned fd is owned from here on.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd counter: its watchers see it readable.
pub fn eventfd_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    let v = 1u64;
    // SAFETY: `v` is 8 readable bytes, as an eventfd write needs.
    let r = unsafe { libc::write(fd.as_raw_fd(), (&v as *const u64).cast(), 8) };
    if r == 8 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads (and so resets) an eventfd counter; `Ok(None)` when it is zero.
pub fn eventfd_read(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let mut v = 0u64;
    // SAFETY: `v` is 8 writable bytes, as an eventfd read needs.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    if r == 8 {
        return Ok(Some(v));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(e)
    }
}

/// A one-shot timer as a descriptor (`timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK |
/// TFD_CLOEXEC)`, `timerfd_create(2)`): each expiry wakes its watchers once, so an epoll set
/// that watches it edge-triggered sees one event per expiry and never needs it read.
#[derive(Debug)]
pub struct TimerFd(OwnedFd);

impl AsFd for TimerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<TimerFd> {
        let flags = libc::TFD_NONBLOCK | libc::TFD_CLOEXEC;
        // SAFETY: no pointers; a non-negative return is a new descriptor we own.
        let fd = cvt(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, flags) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Expires once, `after` from now (at least 1 ns: a zero value would disarm it); replaces
    /// an earlier arming (`timerfd_settime(2)`).
    pub fn arm(&self, after: std::time::Duration) -> io::Result<()> {
        let after = after.max(std::time::Duration::from_nanos(1));
        let new = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `new` is a valid itimerspec for the call; the old value is not asked for.
        cvt(unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &new, std::ptr::null_mut()) })
            .map(drop)
    }
}

/// An epoll instance (`epoll_create1(EPOLL_CLOEXEC)`, `epoll(7)`).
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Epoll {
    /// Events one [`Epoll::wait`] returns at most.
    pub const MAX_EVENTS: usize = 8;

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; a non-negative return is a new descriptor we own.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `epoll_ctl(EPOLL_CTL_ADD)` of `fd` for `events`, reported with `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })
        .map(drop)
    }

    /// `epoll_ctl(EPOLL_CTL_DEL)` of `fd`.
    pub fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is valid for the call (ignored by the kernel for a deletion).
        cvt(unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                &mut ev,
            )
        })
        .map(drop)
    }

    /// `epoll_wait(2)` for up to `timeout`, at most [`Epoll::MAX_EVENTS`] events; returns
    /// `(events, token)` pairs into `out` (cleared first). `EINTR` is an empty wait.
    pub fn wait(&self, out: &mut Vec<(u32, u64)>, timeout: std::time::Duration) -> io::Result<()> {
        self.wait_up_to::<{ Self::MAX_EVENTS }>(out, timeout)
    }

    /// [`Epoll::wait`] for at most `N` events (an event loop of many connections).
    pub fn wait_up_to<const N: usize>(
        &self,
        out: &mut Vec<(u32, u64)>,
        timeout: std::time::Duration,
    ) -> io::Result<()> {
        out.clear();
        // On the stack: a relay waits once per wake-up, and a heap buffer each time was waste.
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; N];
        // Duration::MAX: no timeout at all (-1), not a timer armed for 24 days at each wait.
        let ms = if timeout == std::time::Duration::MAX {
            -1
        } else {
            i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
        };
        // SAFETY: `evs` has room for `evs.len()` events, written by the kernel.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, ms) };
        match cvt(n) {
            Ok(n) => {
                out.extend(evs[..n as usize].iter().map(|e| ({ e.events }, { e.u64 })));
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }
}
