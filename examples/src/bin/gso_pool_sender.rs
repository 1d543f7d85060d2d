//! `gso_pool_sender [TRAINS]`: sends TRAINS (default 200) GSO trains of 1200-byte datagrams over
//! loopback with `Mode::Auto`, from a fixed pool of 4 buffers that it recycles: each send takes
//! a free buffer, or waits for the kernel to give one back (`wait_returned`). A receiver thread
//! checks every datagram it gets by position. Prints the sender's counters and what auto chose.

use std::error::Error;
use std::net::UdpSocket;
use std::time::Duration;

use zcnet::ZeroCopyCounters;
use zcnet::msg_zerocopy::{Config, Mode, ZeroCopySender};
use zcnet::udp_gso::Segment;

const SEGMENT: usize = 1200;
const PER_TRAIN: usize = 40;

/// The byte at `pos` of datagram `seg` of train `train`.
fn byte(train: u32, seg: usize, pos: usize) -> u8 {
    (train as usize * 31 + seg * 7 + pos) as u8
}

fn main() -> Result<(), Box<dyn Error>> {
    let trains: u32 = match std::env::args().nth(1) {
        None => 200,
        Some(a) => a
            .parse()
            .map_err(|_| format!("TRAINS: a whole number, not {a:?}"))?,
    };
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(500)))?;
    let tx_socket = UdpSocket::bind("127.0.0.1:0")?;
    tx_socket.connect(rx.local_addr()?)?;
    let receiver = std::thread::spawn(move || -> Result<u64, String> {
        let mut buf = vec![0u8; 65536];
        let mut good = 0u64;
        while let Ok(n) = rx.recv(&mut buf) {
            // Each datagram says which train and segment it is in its first 8 bytes.
            let train = u32::from_le_bytes(buf[..4].try_into().unwrap());
            let seg = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
            if n != SEGMENT || (8..n).any(|p| buf[p] != byte(train, seg, p)) {
                return Err(format!("datagram {seg} of train {train} is damaged"));
            }
            good += 1;
        }
        Ok(good)
    });

    let config = Config {
        mode: Mode::Auto,
        segment: Some(Segment::new(SEGMENT)?),
        ..Config::default()
    };
    let mut tx = ZeroCopySender::new(tx_socket, config).map_err(|e| e.error)?;
    let mut pool: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; SEGMENT * PER_TRAIN]).collect();
    for train in 0..trains {
        let mut buf = match pool.pop() {
            Some(b) => b,
            None => {
                let back = tx
                    .wait_returned(Duration::from_secs(5))?
                    .ok_or("no buffer came back in 5 s")?;
                if let Some(e) = back.error {
                    return Err(format!("a train failed after {} bytes: {e}", back.sent).into());
                }
                back.buf
            }
        };
        for (seg, d) in buf.chunks_mut(SEGMENT).enumerate() {
            d[..4].copy_from_slice(&train.to_le_bytes());
            d[4..8].copy_from_slice(&(seg as u32).to_le_bytes());
            for (p, b) in d.iter_mut().enumerate().skip(8) {
                *b = byte(train, seg, p);
            }
        }
        tx.send(buf).map_err(|e| e.error)?;
    }
    tx.drain(Duration::from_secs(5))?;
    let c = tx.counters();
    let choice = tx.auto_choice().map(|c| c.to_string()).unwrap_or_default();
    let closed = tx.close(Duration::from_secs(5));
    let good = receiver.join().map_err(|_| "the receiver panicked")??;
    let share = c
        .zero_copy_share()
        .map_or("no zero-copy completion".into(), |s| {
            format!("{:.0} % not copied", s * 100.0)
        });
    println!(
        "{trains} trains: {} loaned, {} copied by the sender; {share}; auto: {choice}",
        c.loaned_calls, c.copy_calls
    );
    println!(
        "{} buffers back at the close, {} still loaned; {good} datagrams received intact \
         (loopback UDP may drop some)",
        closed.returned.len(),
        closed.still_loaned
    );
    Ok(())
}
