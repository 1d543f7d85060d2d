//! `zc_receiver [ADDR]`: accepts one TCP connection (default 127.0.0.1:9000) and reads it to
//! its end with `TCP_ZEROCOPY_RECEIVE`, received pages mapped instead of copied where the kernel
//! can (whole pages at page-aligned offsets: a NIC with header split, or loopback with an MSS of
//! 4108 and a MSG_ZEROCOPY sender). Prints the bytes, a checksum and how many were mapped.
//! `zcnet send --strategy mmap-zc FILE 127.0.0.1:9000` is a sender.

use std::error::Error;
use std::net::TcpListener;

use zcnet::ZeroCopyCounters;
use zcnet::tcp_rx::{Config, TcpZeroCopyReceiver};

fn main() -> Result<(), Box<dyn Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let listener = TcpListener::bind(&addr)?;
    eprintln!("waiting on {}", listener.local_addr()?);
    let (stream, peer) = listener.accept()?;
    let mut rx = TcpZeroCopyReceiver::new(stream, Config::default())?;
    if let Some(why) = rx.fallback_reason() {
        eprintln!("receiving by copy: {why}");
    }
    let mut sum = 0u64;
    while let Some(got) = rx.recv()? {
        // The slices are the kernel's pages, valid until the next receive: read them here.
        for part in [got.mapped, got.copied] {
            sum = part
                .iter()
                .fold(sum, |s, &b| s.rotate_left(5) ^ u64::from(b));
        }
    }
    let c = rx.counters();
    let share = c.zero_copy_share().map_or("nothing received".into(), |s| {
        format!("{:.1} % mapped", s * 100.0)
    });
    println!("{peer}: {} bytes, checksum {sum:016x}, {share}", c.bytes());
    Ok(())
}
