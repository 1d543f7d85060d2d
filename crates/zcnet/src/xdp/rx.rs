//! Receiving: frames waited for (`poll(2)`, the fill ring woken with `recvfrom(2)`) and lent
//! as a [`Frames`] batch, given back to the fill ring when it drops.

use std::io;
use std::time::{Duration, Instant};

use super::{XdpError, XdpSocket, sys_err};
use crate::sys;

/// Most frames one receive hands over.
const BATCH: u32 = 1024;

impl XdpSocket {
    /// Waits up to `timeout` (`None`: forever) for received frames; `Ok(None)` when none came.
    ///
    /// # Errors
    /// [`XdpError::Io`] from `poll`.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Frames<'_>>, XdpError> {
        let end = timeout.map(|t| Instant::now() + t);
        loop {
            self.xsk.refill();
            // A zero-copy driver refills from the fill ring in its NAPI poll, which it runs
            // again only when told; in copy mode the kernel takes fill frames as frames arrive.
            if self.counters.zero_copy && self.xsk.fill_needs_wakeup() {
                self.counters.fill_ring_empty += 1;
                self.xsk.kick_rx().map_err(sys_err("recvfrom(AF_XDP)"))?;
            }
            let ready = self.xsk.rx_ready();
            if ready > 0 {
                // A full batch is there already: no reason to wait.
                if ready < BATCH && !self.coalesce.is_zero() {
                    std::thread::sleep(self.coalesce);
                }
                break;
            }
            let left = match end {
                None => None,
                Some(e) => match e.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Ok(None),
                },
            };
            // Short polls: with need-wakeup the kernel may wait on the fill ring first.
            let wait = left.map_or(Duration::from_millis(100), |l| {
                l.min(Duration::from_millis(100))
            });
            let revents = sys::event::poll(self.xsk.fd(), libc::POLLIN, Some(wait))
                .map_err(sys_err("poll"))?;
            if revents == 0 {
                // An unbound socket polls as merely idle: its error says why it is quiet.
                self.take_socket_error()?;
            }
        }
        let batch = self.xsk.rx_batch(BATCH);
        self.counters.bad_descs = batch.bad_descs();
        self.counters.rx_frames += batch.len() as u64;
        self.counters.rx_bytes += batch.bytes();
        Ok(Some(Frames { batch }))
    }

    /// Reads (and clears) the socket's error: `ENETDOWN` is what the kernel sets when it
    /// unbinds the socket from an interface being unregistered.
    fn take_socket_error(&self) -> Result<(), XdpError> {
        match sys::sockopt::take_error(self.xsk.fd()).map_err(sys_err("getsockopt(SO_ERROR)"))? {
            0 => Ok(()),
            libc::ENETDOWN => Err(XdpError::InterfaceGone {
                iface: self.iface.clone(),
                source: io::Error::from_raw_os_error(libc::ENETDOWN),
            }),
            e => Err(XdpError::Io {
                call: "poll",
                source: io::Error::from_raw_os_error(e),
            }),
        }
    }
}

/// A batch of received frames, borrowed from the socket; they go back to the fill ring when the
/// batch drops.
///
/// The batch holds the socket's `&mut`: its frames are read before the next receive, which
/// could otherwise hand them to the kernel to fill again while they are read.
/// ```
/// fn count(xsk: &mut zcnet::xdp::XdpSocket) -> Result<usize, zcnet::xdp::XdpError> {
///     let mut bytes = 0;
///     if let Some(frames) = xsk.recv(None)? {
///         bytes += frames.iter().map(<[u8]>::len).sum::<usize>();
///     } // the frames go back here
///     let _next = xsk.recv(None)?;
///     Ok(bytes)
/// }
/// ```
/// ```compile_fail,E0499
/// fn keep(xsk: &mut zcnet::xdp::XdpSocket) {
///     let first = xsk.recv(None).unwrap().unwrap();
///     let _next = xsk.recv(None);
///     println!("{:?}", first.get(0)); // refilled by the kernel meanwhile
/// }
/// ```
#[derive(Debug)]
pub struct Frames<'a> {
    batch: sys::xdp::RxBatch<'a>,
}

impl Frames<'_> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.batch.len() == 0
    }

    /// Frame `i`, from its Ethernet header.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < self.batch.len()).then(|| self.batch.frame(i))
    }

    /// Every frame, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.batch.len()).map(|i| self.batch.frame(i))
    }
}
