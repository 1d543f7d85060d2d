//! `capture IFACE [COUNT]`: prints COUNT frames (default 10) read in place from a TPACKET_V3
//! ring, then the kernel's drop count. Needs CAP_NET_RAW.

use std::error::Error;
use std::time::Duration;

use zcnet::packet::{Capture, Config};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let iface = args.next().ok_or("usage: capture IFACE [COUNT]")?;
    let want: u64 = args.next().map_or(Ok(10), |n| n.parse())?;
    let mut cap = Capture::new(&iface, Config::default())?;
    let mut seen = 0u64;
    while seen < want {
        cap.recv_frames(Some(Duration::from_secs(1)), |f| {
            if seen < want {
                println!("{}.{:09} {} bytes", f.sec, f.nsec, f.len);
                seen += 1;
            }
        })?;
    }
    let stats = cap.statistics()?;
    eprintln!("{seen} frames, {} dropped by the kernel", stats.drops);
    Ok(())
}
