//! Property tests on every parser of kernel memory (issue 15): error-queue control messages,
//! TPACKET_V3 blocks and their frame walk, the pcap writer. Random and truncated inputs give an
//! error or a bounded result, never a panic; well-formed inputs parse back to what was built.

use proptest::prelude::*;
use zcnet::errqueue::{self, Completion, Entry};
use zcnet::packet::pcap::Writer;
use zcnet::packet::{BlockFrames, BlockInfo};

const USZ: usize = size_of::<usize>();
/// `SOL_IP`, `IP_RECVERR`, `SO_EE_ORIGIN_ZEROCOPY`, `SO_EE_CODE_ZEROCOPY_COPIED`.
const SOL_IP: i32 = 0;
const IP_RECVERR: i32 = 11;
const ORIGIN_ZEROCOPY: u8 = 5;
const CODE_COPIED: u8 = 1;

/// One `IP_RECVERR` cmsg carrying a zero-copy completion `first..=last`.
fn cmsg(first: u32, last: u32, copied: bool) -> Vec<u8> {
    let hdr = USZ + 8;
    let len = hdr + 16;
    let mut b = Vec::new();
    b.extend_from_slice(&len.to_ne_bytes());
    b.extend_from_slice(&SOL_IP.to_ne_bytes());
    b.extend_from_slice(&IP_RECVERR.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // ee_errno
    b.push(ORIGIN_ZEROCOPY); // ee_origin
    b.push(0); // ee_type
    b.push(if copied { CODE_COPIED } else { 0 }); // ee_code
    b.push(0); // ee_pad
    b.extend_from_slice(&first.to_ne_bytes()); // ee_info
    b.extend_from_slice(&last.to_ne_bytes()); // ee_data
    while b.len() % USZ != 0 {
        b.push(0);
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn errqueue_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = errqueue::parse(&bytes);
    }

    #[test]
    fn errqueue_parse_reads_back_what_was_built(
        ranges in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<bool>()), 1..8),
        cut in 0usize..64,
    ) {
        let mut control = Vec::new();
        for &(first, last, copied) in &ranges {
            control.extend(cmsg(first, last, copied));
        }
        let parsed = errqueue::parse(&control).unwrap();
        let want: Vec<Entry> = ranges
            .iter()
            .map(|&(first, last, copied)| Entry::Zerocopy(Completion { first, last, copied }))
            .collect();
        prop_assert_eq!(parsed, want);
        // Truncated anywhere inside: an error or fewer entries, never a panic.
        let end = control.len().saturating_sub(cut + 1);
        if let Ok(p) = errqueue::parse(&control[..end]) {
            prop_assert!(p.len() < ranges.len());
        }
    }

    #[test]
    fn block_parse_and_frame_walk_stay_inside_the_block(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        words in proptest::collection::vec((0usize..64, any::<u32>()), 0..16),
    ) {
        // Random bytes, with some plausible 32-bit fields planted at random aligned offsets so
        // that the walk gets past the header checks now and then.
        let mut b = bytes;
        for (slot, v) in words {
            let at = slot * 4;
            if at + 4 <= b.len() {
                b[at..at + 4].copy_from_slice(&(v % 8192).to_ne_bytes());
            }
        }
        if let Ok(info) = BlockInfo::parse(&b) {
            prop_assert!(info.blk_len <= b.len());
            let range = b.as_ptr_range();
            for f in BlockFrames::new(&b, &info).take(10_000) {
                let fr = f.data.as_ptr_range();
                prop_assert!(fr.start >= range.start && fr.end <= range.end);
            }
        }
    }

    #[test]
    fn pcap_records_are_cut_at_the_snap_length(
        snaplen in 1u32..70_000,
        records in proptest::collection::vec(
            (any::<u32>(), 0u32..1_000_000_000, proptest::collection::vec(any::<u8>(), 0..2000), any::<u32>()),
            0..8,
        ),
    ) {
        let mut w = Writer::new(Vec::new(), snaplen).unwrap();
        for (sec, nsec, data, len) in &records {
            w.write(*sec, *nsec, data, *len).unwrap();
        }
        let out = w.into_inner();
        prop_assert_eq!(u32::from_ne_bytes(out[16..20].try_into().unwrap()), snaplen);
        let mut at = 24;
        for (sec, nsec, data, len) in &records {
            let caplen = u32::from_ne_bytes(out[at + 8..at + 12].try_into().unwrap()) as usize;
            prop_assert_eq!(caplen, data.len().min(snaplen as usize));
            prop_assert_eq!(u32::from_ne_bytes(out[at..at + 4].try_into().unwrap()), *sec);
            prop_assert_eq!(u32::from_ne_bytes(out[at + 4..at + 8].try_into().unwrap()), *nsec);
            let orig = u32::from_ne_bytes(out[at + 12..at + 16].try_into().unwrap());
            prop_assert!(orig >= caplen as u32 || orig == *len);
            prop_assert_eq!(&out[at + 16..at + 16 + caplen], &data[..caplen]);
            at += 16 + caplen;
        }
        prop_assert_eq!(at, out.len());
    }
}

/// A second control message whose length is `usize::MAX`: `off + cmsg_len` used to overflow.
#[test]
fn a_huge_cmsg_len_after_a_valid_one_is_truncation_not_overflow() {
    let mut control = cmsg(1, 2, false);
    let mut bad = cmsg(3, 4, false);
    bad[..USZ].copy_from_slice(&usize::MAX.to_ne_bytes());
    control.extend(bad);
    assert!(errqueue::parse(&control).is_err());
}
