//! The receiver of the `veth` lab: `UDP_GRO` reads trains whole, [`zcnet::udp_gso::datagrams`]
//! cuts them, and every datagram is checked against the pool.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::udp_gso;

use super::train::TrainPool;
use crate::measure::pin;

/// What a GRO receiver saw.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Datagrams received.
    pub datagrams: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Trains read.
    pub trains: u64,
    /// Datagrams (or trains) that were wrong.
    pub wrong: u64,
    /// What was wrong with the first.
    pub first_bad: Option<String>,
}

/// A receiver on CPU 1 with `UDP_GRO`: reads trains whole, cuts them, checks every datagram;
/// ends when `done` is set and nothing came for 300 ms.
pub(super) fn gro_receiver(
    sock: UdpSocket,
    pool: TrainPool,
    done: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<Seen>> {
    udp_gso::enable_gro(&sock).context("setsockopt(UDP_GRO) on the receiver")?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    Ok(std::thread::spawn(move || {
        pin(1);
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = Seen::default();
        let mut quiet = Instant::now();
        loop {
            match udp_gso::recv_train(&sock, &mut buf, 0) {
                Ok(t) => {
                    quiet = Instant::now();
                    seen.trains += 1;
                    if t.truncated {
                        seen.wrong += 1;
                        seen.first_bad
                            .get_or_insert("a train longer than 64 KiB".into());
                    }
                    // A train's segment size is its first datagram's: the kernel coalesces
                    // only datagrams of that size, the last one shorter.
                    for d in t.datagrams(&buf) {
                        seen.datagrams += 1;
                        seen.bytes += d.len() as u64;
                        if let Err(why) = pool.check(d) {
                            seen.wrong += 1;
                            seen.first_bad.get_or_insert(why);
                        }
                    }
                }
                Err(_) => {
                    if done.load(Ordering::SeqCst) && quiet.elapsed() > Duration::from_millis(300) {
                        return seen;
                    }
                }
            }
        }
    }))
}
