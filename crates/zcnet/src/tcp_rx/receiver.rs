//! The receiver: the mapped window, the kernel's struct, one receive step.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use super::counters::NOTHING_MAPPED;
use super::{
    Config, Counters, MAX_WINDOW, Mode, NOTHING_MAPPED_AFTER, Release, RxError, WINDOW_ALIGN,
    check_kind, support,
};
use crate::support::Status;
use crate::sys::{self, tcp_zerocopy::ZcWindow};

/// One receive: mapped bytes first, then copied ones, in stream order.
#[derive(Debug)]
pub struct Received<'a> {
    /// Bytes mapped from the kernel's pages (read-only, valid until the next receive).
    pub mapped: &'a [u8],
    /// Bytes that followed them, read by copy.
    pub copied: &'a [u8],
}

impl Received<'_> {
    /// Bytes in this receive.
    pub fn len(&self) -> usize {
        self.mapped.len() + self.copied.len()
    }

    /// Never true for a receive returned by [`TcpZeroCopyReceiver::recv`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The two parts in stream order.
    pub fn parts(&self) -> [&[u8]; 2] {
        [self.mapped, self.copied]
    }
}

/// How the kernel's struct is passed, decided once from the probe.
#[derive(Clone, Copy, Debug)]
struct KernelStruct {
    optlen: usize,
    /// Bytes of `buf` lent as `copybuf` (0 where the kernel has no such field). Below one page:
    /// the kernel (5.11+) copies *everything* queued into the copy buffer whenever it all fits,
    /// mappable pages included, and a copy that ends inside a page misaligns the stream for the
    /// calls after it.
    copybuf_len: usize,
    page: usize,
}

/// A receiver on a connected TCP socket that maps received pages where it can.
#[derive(Debug)]
#[doc(alias = "TCP_ZEROCOPY_RECEIVE")]
pub struct TcpZeroCopyReceiver<S: AsFd> {
    socket: S,
    window: Option<ZcWindow>,
    kernel: KernelStruct,
    buf: Vec<u8>,
    counters: Counters,
    fallback: Option<String>,
    pending_error: Option<io::Error>,
    timeout: Option<Duration>,
    /// The socket's own wait when the receiver was made: zero if non-blocking, else its
    /// `SO_RCVTIMEO`; `None`: for ever.
    own_wait: Option<Duration>,
    /// Bytes the kernel said were still queued after the last call (`inq`, 5.7+).
    queued: usize,
    /// The last receive: whether its first part is the mapped window, and its copied bytes.
    last: (bool, usize),
    /// Bytes copied since the kernel last mapped a page.
    unmapped_run: u64,
    /// While the kernel maps nothing: the byte count at which to ask it again; receives until
    /// then go by `recv` alone (see [`PROBE_EVERY`]).
    copy_until: Option<u64>,
}

/// While a stream's pages cannot be mapped (a local sender's plain writes or page-cache pages,
/// an MSS that cuts pages), each `getsockopt(TCP_ZEROCOPY_RECEIVE)` maps nothing and hands back
/// the next segment's worth of bytes to read, so a receive cost a call and a `recv` per segment
/// instead of one `recv` per window: 1.4 times the CPU per MB of `iperf3 -s` fed by `iperf3 -c
/// -Z` (`zcnet bench iperf3`). After [`NOTHING_MAPPED_AFTER`] bytes with no page mapped, the
/// receiver reads by `recv` alone and asks the kernel to map again after each 16 MiB, going
/// back to mapping as soon as it maps a page.
pub const PROBE_EVERY: u64 = 16 << 20;

/// What one receive step found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Bytes, seen through [`TcpZeroCopyReceiver::last_received`].
    Got,
    /// End of stream.
    End,
    /// Nothing queued yet (only when the step does not wait).
    WouldBlock,
}

impl<S: AsFd> TcpZeroCopyReceiver<S> {
    /// Sets up a receiver on `socket`, a connected TCP socket.
    ///
    /// # Errors
    /// [`RxError::Config`] for a window over [`MAX_WINDOW`], [`RxError::Io`] when `SO_RCVLOWAT` cannot be set. A socket that cannot be mapped is
    /// not an error: the receiver falls back to copying and says why.
    pub fn new(socket: S, config: Config) -> Result<Self, RxError> {
        // Checked before anything is set on it: TCP_ZEROCOPY_RECEIVE maps TCP streams only.
        check_kind(socket.as_fd())?;
        let page = sys::mm::page_size();
        if config.window > MAX_WINDOW {
            return Err(RxError::Config(format!(
                "a receive window of {} bytes is over the {MAX_WINDOW}-byte maximum",
                config.window
            )));
        }
        let window_len = config.window.max(page).next_multiple_of(page);
        if let Some(lowat) = config.rcvlowat {
            let lowat = lowat.min(i32::MAX as usize) as i32;
            sys::sockopt::set_receive_low_water(socket.as_fd(), lowat).map_err(|source| {
                RxError::Io {
                    call: "setsockopt(SO_RCVLOWAT)",
                    source,
                }
            })?;
        }
        let support = support();
        let kernel = KernelStruct {
            optlen: if support.struct_len > 0 {
                support.struct_len
            } else {
                16
            },
            copybuf_len: if support.copybuf { page - 1 } else { 0 },
            page,
        };
        let check = &support.check;
        // Copy mode asked for is no fallback: no reason to give (issue 62 item 6).
        let (window, fallback) = if config.mode == Mode::Copy {
            (None, None)
        } else if check.status != Status::Available {
            (
                None,
                Some(format!(
                    "TCP_ZEROCOPY_RECEIVE unavailable: {}",
                    check.reason
                )),
            )
        } else {
            match ZcWindow::new(
                socket.as_fd(),
                window_len,
                WINDOW_ALIGN,
                config.release == Release::Madvise,
            ) {
                Ok(w) => (Some(w), None),
                Err(e) => (None, Some(format!("mmap on this socket failed: {e}"))),
            }
        };
        // The socket's own wait, as `Read` has it: none if non-blocking, else `SO_RCVTIMEO`.
        let own_wait = match sys::net::is_nonblocking(socket.as_fd()) {
            Ok(true) => Some(Duration::ZERO),
            _ => sys::sockopt::recv_timeout(socket.as_fd()).ok().flatten(),
        };
        Ok(TcpZeroCopyReceiver {
            socket,
            window,
            kernel,
            buf: vec![0; window_len],
            counters: Counters::default(),
            fallback,
            pending_error: None,
            timeout: config.timeout,
            own_wait,
            queued: 0,
            last: (false, 0),
            unmapped_run: 0,
            copy_until: None,
        })
    }

    /// The mode in effect: [`Mode::ZeroCopy`] while the receive window is mapped, else
    /// [`Mode::Copy`] (asked for, or fallen back to: [`fallback_reason`](Self::fallback_reason)).
    pub fn mode(&self) -> Mode {
        if self.window.is_some() {
            Mode::ZeroCopy
        } else {
            Mode::Copy
        }
    }

    /// Why this receiver copies instead of mapping, if it does: the window could not be set
    /// up, or (in [`Mode::ZeroCopy`]) the kernel has mapped nothing of the first
    /// [`NOTHING_MAPPED_AFTER`] bytes or more (issue 62 item 6: `mode()` said `ZeroCopy` and
    /// this said nothing while 0 % was mapped). `None` in copy mode asked for.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref().or_else(|| {
            (self.window.is_some()
                && self.counters.mapped_bytes == 0
                && self.counters.copied_bytes >= NOTHING_MAPPED_AFTER)
                .then_some(NOTHING_MAPPED)
        })
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Moves the socket's low-water mark (`setsockopt(SO_RCVLOWAT)`, socket(7)) to `bytes`: a
    /// protocol that batches with [`Config::rcvlowat`] lowers it to 1 to take the last bytes of
    /// a message or a test, which would otherwise wait below the mark
    /// ([`RxError::BelowLowWater`]), and raises it again after.
    ///
    /// # Errors
    /// [`RxError::Io`] with the kernel's error.
    pub fn set_rcvlowat(&mut self, bytes: usize) -> Result<(), RxError> {
        let bytes = bytes.clamp(1, i32::MAX as usize) as i32;
        sys::sockopt::set_receive_low_water(self.socket.as_fd(), bytes).map_err(|source| {
            RxError::Io {
                call: "setsockopt(SO_RCVLOWAT)",
                source,
            }
        })
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Gives the socket back (the window is unmapped).
    pub fn into_inner(self) -> S {
        self.socket
    }

    fn fail(&self, source: io::Error) -> RxError {
        RxError::Receive {
            received: self.counters.bytes(),
            source,
        }
    }

    /// Waits until the socket is readable (data, EOF or error) or the timeout passes. The
    /// socket's own mode counts, as for `Read` (issue 62, the second adversarial pass: a
    /// non-blocking socket and one with `SO_RCVTIMEO` waited for ever): non-blocking, nothing
    /// queued is `WouldBlock` at once; `SO_RCVTIMEO` bounds the wait, then `WouldBlock`. Both as
    /// the socket was when the receiver was made (looked at once, off the receive path).
    fn wait(&self) -> Result<(), RxError> {
        let (timeout, own) = match (self.own_wait, self.timeout) {
            (Some(own), Some(t)) if t < own => (Some(t), false),
            (Some(own), _) => (Some(own), true),
            (None, t) => (t, false),
        };
        loop {
            match sys::event::poll(self.socket.as_fd(), libc::POLLIN, timeout) {
                Ok(0) if own => return Err(self.fail(io::ErrorKind::WouldBlock.into())),
                Ok(0) => {
                    let waited = self.timeout.unwrap_or_default();
                    return Err(match sys::net::queued(self.socket.as_fd()) {
                        Ok(queued) if queued > 0 => RxError::BelowLowWater { queued, waited },
                        _ => RxError::TimedOut(waited),
                    });
                }
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// `recv(MSG_DONTWAIT)` into `buf[at..at + len]`; `Ok(None)` when nothing is queued.
    fn recv_into(&mut self, at: usize, len: usize) -> Result<Option<usize>, RxError> {
        let end = (at + len).min(self.buf.len());
        self.counters.recv_calls += 1;
        match sys::net::recv(
            self.socket.as_fd(),
            &mut self.buf[at..end],
            libc::MSG_DONTWAIT,
        ) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Receives the next bytes: `Ok(None)` at end of stream.
    ///
    /// The returned slices stay valid until the next call; mapped pages are released then.
    ///
    /// # Errors
    /// [`RxError::Receive`] when the connection fails (a reset: `ConnectionReset`), after every
    /// byte received before the failure has been returned; [`RxError::TimedOut`].
    pub fn recv(&mut self) -> Result<Option<Received<'_>>, RxError> {
        Ok(match self.step(true)? {
            Step::Got => Some(self.last_received()),
            Step::End | Step::WouldBlock => None,
        })
    }

    /// The bytes of the last [`Step::Got`].
    pub(crate) fn last_received(&self) -> Received<'_> {
        let (from_window, copied) = self.last;
        Received {
            mapped: match (&self.window, from_window) {
                (Some(w), true) => w.mapped(),
                _ => &[],
            },
            copied: &self.buf[..copied],
        }
    }

    /// One receive: with `wait`, polls until something is queued (or the timeout passes);
    /// without, returns [`Step::WouldBlock`] when nothing is.
    pub(crate) fn step(&mut self, wait: bool) -> Result<Step, RxError> {
        loop {
            // When the last call left a whole window queued, or the connection already failed
            // (the rest is queued or gone), call again at once: polling would only return.
            if wait && self.queued < self.buf.len() && self.pending_error.is_none() {
                self.wait()?;
            }
            self.queued = 0;
            let copying = self
                .copy_until
                .is_some_and(|until| self.counters.bytes() < until);
            let mapped = match self.window.as_mut() {
                None => None,
                Some(_) if self.pending_error.is_some() || copying => None,
                Some(window) => {
                    self.counters.zero_copy_calls += 1;
                    let copybuf = &mut self.buf[..self.kernel.copybuf_len];
                    match window.receive(self.socket.as_fd(), copybuf, self.kernel.optlen) {
                        Ok(out) => Some(out),
                        // EIO: nothing queued and the peer is done; recv tells EOF from an error.
                        Err(e) if e.raw_os_error() == Some(libc::EIO) => None,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock && !wait => {
                            return Ok(Step::WouldBlock);
                        }
                        Err(e) => return Err(self.fail(e)),
                    }
                }
            };
            let Some(out) = mapped else {
                // The copying path: the fallback, the end of a zero-copy stream, or draining
                // what a failed connection still has queued.
                let len = self.buf.len();
                match self.recv_into(0, len) {
                    // Nothing queued: wait for more, unless the connection already failed.
                    Ok(None) => match self.pending_error.take() {
                        Some(e) => return Err(self.fail(e)),
                        None if wait => continue,
                        None => return Ok(Step::WouldBlock),
                    },
                    Ok(Some(0)) => {
                        // End of stream: the error the kernel reported with earlier data, if
                        // any, now that every queued byte has been handed out.
                        return match self.pending_error.take() {
                            Some(e) => Err(self.fail(e)),
                            None => Ok(Step::End),
                        };
                    }
                    Ok(Some(n)) => {
                        self.counters.copied_bytes += n as u64;
                        self.last = (false, n);
                        return Ok(Step::Got);
                    }
                    Err(e) => {
                        return Err(match self.pending_error.take() {
                            Some(first) => self.fail(first),
                            None => e,
                        });
                    }
                }
            };
            self.queued = out.inq.map_or(0, |n| n as usize);
            let mut copied = out.copied;
            if out.skip_hint > 0 && copied < self.buf.len() {
                // The unmappable bytes the copy buffer did not take: read them now, in order.
                if let Some(n) = self.recv_into(copied, out.skip_hint)? {
                    copied += n;
                }
            }
            let got = out.mapped + copied;
            if let Some(errno) = out.err {
                // `err` is the socket's pending error, which this call consumed (sock_error):
                // a reset, say. Bytes may still be queued behind it (acknowledged, so the peer
                // counts them delivered): hand them all out first, by copy from here on, and
                // report the error at the end of the queue (issue 15: the error used to come
                // first and what was queued was lost).
                self.pending_error
                    .get_or_insert_with(|| io::Error::from_raw_os_error(errno));
            }
            if got == 0 {
                // Nothing queued (or a window of nothing): wait, or say so.
                if wait || self.pending_error.is_some() {
                    continue;
                }
                return Ok(Step::WouldBlock);
            }
            self.counters.mapped_bytes += out.mapped as u64;
            self.counters.mapped_pages += (out.mapped / self.kernel.page) as u64;
            self.counters.copied_bytes += copied as u64;
            self.learn(out.mapped, copied);
            self.last = (true, copied);
            return Ok(Step::Got);
        }
    }

    /// After a receive through the window: whether the kernel maps this stream's pages. A run of
    /// [`NOTHING_MAPPED_AFTER`] copied bytes starts a stretch of [`PROBE_EVERY`] bytes by
    /// `recv` alone; a mapped page ends it.
    fn learn(&mut self, mapped: usize, copied: usize) {
        if mapped > 0 {
            self.unmapped_run = 0;
            self.copy_until = None;
            return;
        }
        self.unmapped_run += copied as u64;
        if self.unmapped_run >= NOTHING_MAPPED_AFTER {
            self.unmapped_run = 0;
            // Nothing stays mapped meanwhile: the call that mapped nothing released the window's
            // pages of the call before it.
            self.copy_until = Some(self.counters.bytes() + PROBE_EVERY);
        }
    }

    /// Receives until end of stream, writing everything to `out`; returns the bytes received.
    ///
    /// # Errors
    /// As [`recv`](Self::recv), plus [`RxError::Write`].
    pub fn copy_to(&mut self, out: &mut impl Write) -> Result<u64, RxError> {
        let mut total = 0u64;
        while let Some(r) = self.recv()? {
            for part in r.parts() {
                out.write_all(part).map_err(RxError::Write)?;
            }
            total += r.len() as u64;
        }
        out.flush().map_err(RxError::Write)?;
        Ok(total)
    }
}
