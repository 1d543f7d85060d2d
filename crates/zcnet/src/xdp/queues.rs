//! Several queues of one interface, one socket each on one shared UMEM, read in turn from one
//! thread: how a multi-queue device is captured whole (the kernel redirects each frame to the
//! socket of the queue it arrived on, so one socket sees only its queue's share).

use std::time::Duration;

use super::{Config, Counters, Mode, Statistics, Umem, XdpError, XdpSocket};

/// One AF_XDP socket per queue of `iface`, all on one UMEM ([`XdpSocket::new_shared`]).
#[derive(Debug)]
#[doc(alias = "XDP_SHARED_UMEM")]
pub struct Queues {
    // Drop order: the sockets before the UMEM they share.
    sockets: Vec<XdpSocket>,
    _umem: Umem,
    /// The socket to look at first on the next receive: the one after the last that had
    /// frames, so that a busy queue does not starve the others.
    next: usize,
}

impl Queues {
    /// Opens a socket on each of `queues` of `iface` (`config.queue` is ignored; each socket
    /// gets `config.frame_count` frames of one UMEM sized for all of them).
    ///
    /// # Errors
    /// [`XdpError::Config`] for no queue or a queue given twice; otherwise as
    /// [`XdpSocket::new_shared`].
    pub fn new(iface: &str, queues: &[u32], config: Config) -> Result<Queues, XdpError> {
        if queues.is_empty() {
            return Err(XdpError::Config("no queue to open".into()));
        }
        if let Some((_, q)) = queues
            .iter()
            .enumerate()
            .find(|(i, q)| queues[..*i].contains(q))
        {
            return Err(XdpError::Config(format!(
                "queue {q} is given twice: one socket per queue"
            )));
        }
        // The interface first: a name that does not exist is the error to give, not the locked
        // memory the UMEM would have needed.
        super::ifindex(iface)?;
        let umem = Umem::new(config.frame_count * queues.len() as u32, config.frame_size)?;
        let sockets = queues
            .iter()
            .map(|&queue| XdpSocket::new_shared(iface, Config { queue, ..config }, &umem))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Queues {
            sockets,
            _umem: umem,
            next: 0,
        })
    }

    /// The sockets, in the order of the queues given.
    pub fn sockets(&self) -> &[XdpSocket] {
        &self.sockets
    }

    /// Looks at each socket in turn, each waiting up to its share of `timeout`, and lends every
    /// frame that came to `f`, with the index of its socket. Returns the frames lent: 0 when
    /// none came within `timeout`; with `None`, rounds of 100 ms a socket until some came.
    ///
    /// # Errors
    /// As [`XdpSocket::recv`].
    pub fn recv_with(
        &mut self,
        timeout: Option<Duration>,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<usize, XdpError> {
        let n = self.sockets.len();
        let wait = timeout.map_or(Duration::from_millis(100), |t| t / n as u32);
        loop {
            let mut lent = 0;
            for k in 0..n {
                let i = (self.next + k) % n;
                if let Some(frames) = self.sockets[i].recv(Some(wait))? {
                    frames.iter().for_each(|data| f(i, data));
                    lent += frames.len();
                    self.next = (i + 1) % n;
                }
            }
            if lent > 0 || timeout.is_some() {
                return Ok(lent);
            }
        }
    }

    /// The kernel's statistics, summed over the sockets.
    ///
    /// # Errors
    /// As [`XdpSocket::statistics`].
    pub fn statistics(&self) -> Result<Statistics, XdpError> {
        let mut sum = Statistics::default();
        for s in &self.sockets {
            let st = s.statistics()?;
            sum.rx_dropped += st.rx_dropped;
            sum.rx_invalid_descs += st.rx_invalid_descs;
            sum.tx_invalid_descs += st.tx_invalid_descs;
            sum.rx_ring_full += st.rx_ring_full;
            sum.rx_fill_ring_empty_descs += st.rx_fill_ring_empty_descs;
            sum.tx_ring_empty_descs += st.tx_ring_empty_descs;
        }
        Ok(sum)
    }

    /// The mode in effect: the UMEM's, which every socket shares.
    pub fn mode(&self) -> Mode {
        self.sockets[0].mode()
    }

    /// Why the sockets copy although zero copy was asked, if they do.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.sockets[0].fallback_reason()
    }

    /// The counters, summed over the sockets.
    pub fn counters(&self) -> Counters {
        let mut sum = Counters {
            zero_copy: self.sockets[0].counters().zero_copy,
            ..Counters::default()
        };
        for s in &self.sockets {
            let c = s.counters();
            sum.rx_frames += c.rx_frames;
            sum.rx_bytes += c.rx_bytes;
            sum.tx_frames += c.tx_frames;
            sum.tx_bytes += c.tx_bytes;
            sum.completions += c.completions;
            sum.fill_ring_empty += c.fill_ring_empty;
            sum.bad_completions += c.bad_completions;
            sum.bad_descs += c.bad_descs;
        }
        sum
    }
}
