//! `TPACKET_V3` block parsing on plain bytes: the block descriptor (`struct tpacket_block_desc`
//! with `struct tpacket_hdr_v1`) and the frames (`struct tpacket3_hdr`) it chains
//! (`linux/if_packet.h`). Every offset and length is checked against the block once, in
//! [`BlockInfo::parse`]; walking the frames afterwards cannot fail or read out of bounds.

use crate::sys::abi;

/// A block that does not describe itself consistently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The block is shorter than its descriptor.
    #[error("block of {0} bytes is shorter than its 48-byte descriptor")]
    Short(usize),
    /// `blk_len` outside the block.
    #[error("block length {blk_len} outside the {size}-byte block")]
    Length {
        /// `hdr.bh1.blk_len`.
        blk_len: u32,
        /// The block size.
        size: usize,
    },
    /// `offset_to_first_pkt` inside the descriptor or past the data.
    #[error("first packet at offset {0}, outside the block's data")]
    FirstPacket(u32),
    /// A frame header or its data outside the block.
    #[error("frame {index} at offset {offset}: {what}")]
    Frame {
        /// Frame number in the block.
        index: u32,
        /// Offset of its header in the block.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// The checked descriptor of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// `block_status` (`TP_STATUS_USER`, `TP_STATUS_BLK_TMO`, ...).
    pub status: u32,
    /// Frames in the block.
    pub num_pkts: u32,
    /// Offset of the first frame header.
    pub first: usize,
    /// Bytes of the block in use.
    pub blk_len: usize,
    /// Sequence number of the block, counting from 1 since the ring was set up.
    pub seq: u64,
}

/// One captured frame, borrowed from its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The bytes captured, from the link-layer header on (`tp_snaplen` of them).
    pub data: &'a [u8],
    /// Length of the packet on the wire (`tp_len`).
    pub len: u32,
    /// Seconds of the receive timestamp (`tp_sec`).
    pub sec: u32,
    /// Nanoseconds of the receive timestamp (`tp_nsec`).
    pub nsec: u32,
    /// `tp_status` of the frame.
    pub status: u32,
    /// The flow hash the kernel computed (`hv1.tp_rxhash`), 0 if none.
    pub rxhash: u32,
    /// The VLAN tag the device stripped: (TCI, TPID), when `TP_STATUS_VLAN_VALID`.
    pub vlan: Option<(u16, u16)>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

impl BlockInfo {
    /// Checks a whole block: its descriptor and every frame header and data range.
    ///
    /// # Errors
    /// The first inconsistency found.
    pub fn parse(b: &[u8]) -> Result<BlockInfo, BlockError> {
        if b.len() < abi::TPACKET_BLOCK_DESC_LEN {
            return Err(BlockError::Short(b.len()));
        }
        let field = |off| u32_at(b, off).ok_or(BlockError::Short(b.len()));
        let status = field(8)?;
        let num_pkts = field(12)?;
        let first = field(16)?;
        let blk_len = field(20)?;
        let seq = u64::from(field(24)?) | (u64::from(field(28)?) << 32);
        if (blk_len as usize) > b.len() || (blk_len as usize) < abi::TPACKET_BLOCK_DESC_LEN {
            return Err(BlockError::Length {
                blk_len,
                size: b.len(),
            });
        }
        if num_pkts > 0 && ((first as usize) < abi::TPACKET_BLOCK_DESC_LEN || first >= blk_len) {
            return Err(BlockError::FirstPacket(first));
        }
        let info = BlockInfo {
            status,
            num_pkts,
            first: first as usize,
            blk_len: blk_len as usize,
            seq,
        };
        let mut off = info.first;
        for index in 0..num_pkts {
            let (_, next) = frame_at(&b[..info.blk_len], off, index, index + 1 == num_pkts)?;
            off = next;
        }
        Ok(info)
    }
}

/// The frame whose header is at `off`, and the offset of the next one.
fn frame_at(
    b: &[u8],
    off: usize,
    index: u32,
    last: bool,
) -> Result<(Frame<'_>, usize), BlockError> {
    let bad = |what| BlockError::Frame {
        index,
        offset: off,
        what,
    };
    if off
        .checked_add(abi::TPACKET3_HDR_LEN)
        .is_none_or(|end| end > b.len())
    {
        return Err(bad("header past the block's data"));
    }
    let h = &b[off..off + abi::TPACKET3_HDR_LEN];
    let word = |o| u32_at(h, o).unwrap_or(0);
    let next = word(0) as usize;
    let snaplen = word(12) as usize;
    let len = word(16);
    let status = word(20);
    let mac = u16_at(h, 24).unwrap_or(0) as usize;
    if mac < abi::TPACKET3_HDR_LEN {
        return Err(bad("data inside its own header"));
    }
    let start = off + mac;
    let data = b
        .get(start..start.saturating_add(snaplen))
        .ok_or_else(|| bad("data past the block's data"))?;
    if snaplen > len as usize {
        return Err(bad("more bytes captured than the packet had"));
    }
    if !last && (next < abi::TPACKET3_HDR_LEN || off + next >= b.len()) {
        return Err(bad("next frame offset outside the block"));
    }
    let vlan = (status & abi::TP_STATUS_VLAN_VALID != 0).then(|| {
        let tpid = if status & abi::TP_STATUS_VLAN_TPID_VALID != 0 {
            u16_at(h, 36).unwrap_or(0)
        } else {
            0x8100
        };
        (word(32) as u16, tpid)
    });
    let frame = Frame {
        data,
        len,
        sec: word(4),
        nsec: word(8),
        status,
        rxhash: word(28),
        vlan,
    };
    Ok((frame, off + next))
}

/// The frames of a block checked by [`BlockInfo::parse`].
#[derive(Debug, Clone)]
pub struct BlockFrames<'a> {
    bytes: &'a [u8],
    off: usize,
    index: u32,
    count: u32,
}

impl<'a> BlockFrames<'a> {
    /// Frames of `bytes`, which `info` was parsed from.
    pub fn new(bytes: &'a [u8], info: &BlockInfo) -> BlockFrames<'a> {
        BlockFrames {
            bytes: bytes.get(..info.blk_len).unwrap_or(&[]),
            off: info.first,
            index: 0,
            count: info.num_pkts,
        }
    }
}

impl<'a> Iterator for BlockFrames<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        if self.index >= self.count {
            return None;
        }
        let last = self.index + 1 == self.count;
        // Checked once by BlockInfo::parse over the same bytes; an error here ends the walk.
        let (f, next) = frame_at(self.bytes, self.off, self.index, last).ok()?;
        self.index += 1;
        self.off = next;
        Some(f)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.index) as usize;
        (0, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block as the kernel lays it out: descriptor, then frames of `payloads` each behind a
    /// 48-byte header and 2 bytes of padding (tp_mac = 50, as for Ethernet), 16-aligned.
    fn block(payloads: &[&[u8]], size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let put =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, 8, abi::TP_STATUS_USER);
        put(&mut b, 12, payloads.len() as u32);
        put(&mut b, 16, 48);
        put(&mut b, 24, 7);
        let mut off = 48;
        for (i, p) in payloads.iter().enumerate() {
            let mac = 50usize;
            let end = off + mac + p.len();
            let next = if i + 1 == payloads.len() {
                0
            } else {
                (end - off).div_ceil(16) * 16
            };
            put(&mut b, off, next as u32);
            put(&mut b, off + 4, 1_700_000_000 + i as u32);
            put(&mut b, off + 8, 123_456_789);
            put(&mut b, off + 12, p.len() as u32);
            put(&mut b, off + 16, p.len() as u32 + 4);
            put(
                &mut b,
                off + 20,
                if i == 1 { abi::TP_STATUS_VLAN_VALID } else { 0 },
            );
            b[off + 24..off + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            put(&mut b, off + 28, 0xabcd + i as u32);
            put(&mut b, off + 32, 42);
            b[off + mac..end].copy_from_slice(p);
            off = if next == 0 { end } else { off + next };
        }
        put(&mut b, 20, off as u32);
        b
    }

    #[test]
    fn frames_come_out_with_their_fields() {
        let b = block(&[b"first", b"second frame", b"3"], 4096);
        let info = BlockInfo::parse(&b).unwrap();
        assert_eq!((info.num_pkts, info.seq), (3, 7));
        let frames: Vec<_> = BlockFrames::new(&b, &info).collect();
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].data, b"first");
        assert_eq!(frames[1].data, b"second frame");
        assert_eq!(frames[2].data, b"3");
        assert_eq!(frames[1].len, 16);
        assert_eq!(
            (frames[2].sec, frames[2].nsec),
            (1_700_000_002, 123_456_789)
        );
        assert_eq!(frames[0].rxhash, 0xabcd);
        assert_eq!(frames[1].vlan, Some((42, 0x8100)));
        assert_eq!(frames[0].vlan, None);
    }

    #[test]
    fn an_empty_block_has_no_frames() {
        let b = block(&[], 4096);
        let info = BlockInfo::parse(&b).unwrap();
        assert_eq!(BlockFrames::new(&b, &info).count(), 0);
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let good = block(&[b"aaaa", b"bbbb"], 1024);
        let set = |mut b: Vec<u8>, off: usize, v: u32| {
            b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
            b
        };
        assert_eq!(BlockInfo::parse(&good[..40]), Err(BlockError::Short(40)));
        // blk_len past the block.
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 20, 5000)),
            Err(BlockError::Length { .. })
        ));
        // First packet inside the descriptor, or past the data.
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 16, 8)),
            Err(BlockError::FirstPacket(8))
        ));
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 16, 1000)),
            Err(BlockError::FirstPacket(1000))
        ));
        // More frames than the data holds: the chain runs out of the block.
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 12, 3)),
            Err(BlockError::Frame { index: 1, .. })
        ));
        // A snap length running past the data.
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 48 + 12, 900)),
            Err(BlockError::Frame { index: 0, .. })
        ));
        // A next offset of zero before the last frame.
        assert!(matches!(
            BlockInfo::parse(&set(good.clone(), 48, 0)),
            Err(BlockError::Frame { index: 0, .. })
        ));
        // Data overlapping its header.
        let mut b = good.clone();
        b[48 + 24..48 + 26].copy_from_slice(&4u16.to_ne_bytes());
        assert!(matches!(
            BlockInfo::parse(&b),
            Err(BlockError::Frame { index: 0, .. })
        ));
    }

    #[test]
    fn random_corruption_never_panics() {
        // xorshift: every byte of the descriptor and first header, set to edge values.
        let good = block(&[b"aaaa", b"bbbbbbbb", b"c"], 512);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = good.clone();
            let pos = (x as usize) % 160;
            b[pos] = [0, 1, 0x7f, 0x80, 0xff][(x >> 32) as usize % 5];
            if let Ok(info) = BlockInfo::parse(&b) {
                for f in BlockFrames::new(&b, &info) {
                    assert!(f.data.len() <= b.len());
                }
            }
        }
    }
}
