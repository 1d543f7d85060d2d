//! `send_file FILE HOST:PORT`: sends a file with the best zero-copy path this machine has
//! (sendfile, else splice, else copy) and says what went without a copy.

use std::error::Error;
use std::fs::File;
use std::net::TcpStream;

use zcnet::ZeroCopyCounters;
use zcnet::file::{Config, FileSender};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(addr)) = (args.next(), args.next()) else {
        return Err("usage: send_file FILE HOST:PORT".into());
    };
    let file = File::open(&path)?;
    let len = file.metadata()?.len();
    let socket = TcpStream::connect(&addr)?;
    let mut tx = FileSender::new(&socket, Config::default())?;
    if let Some(why) = tx.fallback_reason() {
        eprintln!("copying: {why}");
    }
    tx.send_file(&file, 0, len)?;
    let c = tx.counters();
    eprintln!(
        "sent {} bytes by {}, {:.1} % without a user copy",
        c.bytes,
        tx.mode().name(),
        100.0 * c.zero_copy_share().unwrap_or(0.0)
    );
    Ok(())
}
