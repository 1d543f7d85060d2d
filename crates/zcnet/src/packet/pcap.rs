//! The pcap file format with nanosecond timestamps (magic `0xa1b23c4d`, version 2.4,
//! `LINKTYPE_ETHERNET`), as tcpdump and tshark read it (`pcap-savefile(5)`).

use std::io::{self, Write};

use crate::sys::abi;

/// Magic of a pcap file whose timestamps are in nanoseconds.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;

/// Writes a pcap stream: the file header at creation, then one record per frame.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    snaplen: u32,
}

impl<W: Write> Writer<W> {
    /// Writes the file header for Ethernet frames captured up to `snaplen` bytes.
    ///
    /// # Errors
    /// The writer's error.
    pub fn new(mut out: W, snaplen: u32) -> io::Result<Writer<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NANOS.to_ne_bytes());
        h.extend_from_slice(&2u16.to_ne_bytes());
        h.extend_from_slice(&4u16.to_ne_bytes());
        h.extend_from_slice(&0i32.to_ne_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_ne_bytes()); // sigfigs
        h.extend_from_slice(&snaplen.to_ne_bytes());
        h.extend_from_slice(&abi::LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)?;
        Ok(Writer { out, snaplen })
    }

    /// Writes one record: `data` (cut at the snap length) of a packet of `len` bytes.
    ///
    /// # Errors
    /// The writer's error.
    pub fn write(&mut self, sec: u32, nsec: u32, data: &[u8], len: u32) -> io::Result<()> {
        let data = &data[..data.len().min(self.snaplen as usize)];
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_ne_bytes());
        h[4..8].copy_from_slice(&nsec.to_ne_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&len.max(data.len() as u32).to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    /// Flushes the underlying writer.
    ///
    /// # Errors
    /// The writer's error.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_bytes() {
        let mut w = Writer::new(Vec::new(), 96).unwrap();
        w.write(1_700_000_000, 5, &[0xaa; 100], 120).unwrap();
        let b = w.into_inner();
        assert_eq!(b.len(), 24 + 16 + 96);
        assert_eq!(&b[0..4], &MAGIC_NANOS.to_ne_bytes());
        assert_eq!(u32::from_ne_bytes(b[16..20].try_into().unwrap()), 96);
        assert_eq!(u32::from_ne_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[28..32].try_into().unwrap()), 5);
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 96);
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 120);
    }
}
