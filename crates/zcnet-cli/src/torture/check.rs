//! What the torture harness checks with: a seeded random source, the byte pattern keyed by
//! stream offset (TCP) or by datagram sequence (UDP) and its checkers, and the loan ledger that
//! sees every buffer handed to a sender come back exactly once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use netlab::pattern::{PERIOD, chunk_at};

/// SplitMix64: small, seedable, the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u64 - 1) as usize]
    }

    /// A call size in `min..=max`: log-uniform (as many 10-byte as 100-KiB calls), with the
    /// sizes where behaviour changes drawn now and then on purpose.
    pub fn size(&mut self, min: usize, max: usize) -> usize {
        const EDGES: [usize; 9] = [1, 4095, 4096, 4097, 16_383, 16_384, 65_507, 65_536, 1 << 20];
        if self.chance(0.1) {
            let e = self.pick(&EDGES);
            if (min..=max).contains(&e) {
                return e;
            }
        }
        let (lo, hi) = ((min.max(1) as f64).ln(), (max.max(1) as f64).ln());
        let x = lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64);
        (x.exp() as usize).clamp(min, max)
    }

    /// A seed for something else, independent of what this source draws next.
    pub fn fork(&mut self) -> u64 {
        self.next_u64() | 1
    }
}

/// `len` bytes of the pattern from stream offset `off` of the stream keyed `base`.
pub fn pattern(base: u64, off: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let at = base.wrapping_add(off + out.len() as u64);
        out.extend_from_slice(chunk_at(at, len - out.len()));
    }
    out
}

/// Writes the pattern into `out` (a pool buffer).
pub fn fill(base: u64, off: u64, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let c = chunk_at(base.wrapping_add(off + done as u64), out.len() - done);
        out[done..done + c.len()].copy_from_slice(c);
        done += c.len();
    }
}

/// Checks a received byte stream against the pattern, byte by byte at its stream offset, so a
/// lost, repeated or reordered byte shows as wrong bytes.
#[derive(Debug)]
pub struct StreamCheck {
    base: u64,
    /// Bytes checked so far (the stream offset of the next byte).
    pub off: u64,
    /// Bytes that differed from the pattern.
    pub wrong: u64,
    /// Stream offset of the first wrong byte.
    pub first_bad: Option<u64>,
    /// Test-only: flip one bit of the next byte seen, to prove the harness can fail.
    corrupt: bool,
}

impl StreamCheck {
    /// A checker of the stream keyed `base`, from offset 0.
    pub fn new(base: u64, corrupt: bool) -> StreamCheck {
        StreamCheck {
            base,
            off: 0,
            wrong: 0,
            first_bad: None,
            corrupt,
        }
    }

    /// Checks the next `data` of the stream.
    pub fn check(&mut self, data: &[u8]) {
        if self.corrupt && !data.is_empty() {
            self.corrupt = false;
            let mut bad = data.to_vec();
            bad[0] ^= 0x01;
            return self.check(&bad);
        }
        let mut data = data;
        while !data.is_empty() {
            let expect = chunk_at(self.base.wrapping_add(self.off), data.len());
            let n = expect.len();
            let got = &data[..n];
            if got != expect {
                let mut first = None;
                for (i, (a, b)) in got.iter().zip(expect).enumerate() {
                    if a != b {
                        self.wrong += 1;
                        first.get_or_insert(i);
                    }
                }
                if self.first_bad.is_none() {
                    self.first_bad = first.map(|i| self.off + i as u64);
                }
            }
            self.off += n as u64;
            data = &data[n..];
        }
    }
}

/// Bytes of a datagram's header: magic, stream id, sequence, length.
pub const HEADER: usize = 20;
const MAGIC: u32 = 0x746e_637a; // "zcnt"

/// The pattern key of datagram `seq` of the stream keyed `base`.
fn dgram_key(base: u64, seq: u64) -> u64 {
    base.wrapping_add(seq.wrapping_mul(0x9e37_79b9)) % PERIOD as u64
}

/// Datagram `seq` of stream `stream`: its header, then `len - HEADER` bytes of the pattern keyed
/// by its sequence (`len >= HEADER`).
pub fn datagram(stream: u32, base: u64, seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(HEADER);
    let mut d = Vec::with_capacity(len);
    d.extend_from_slice(&MAGIC.to_le_bytes());
    d.extend_from_slice(&stream.to_le_bytes());
    d.extend_from_slice(&seq.to_le_bytes());
    d.extend_from_slice(&(len as u32).to_le_bytes());
    d.extend_from_slice(&pattern(dgram_key(base, seq), 0, len - HEADER));
    d
}

/// Checks received datagrams: each must be one the sender made (header and payload), once.
#[derive(Debug)]
pub struct DgramCheck {
    stream: u32,
    base: u64,
    /// Sequences received intact.
    pub got: BTreeSet<u64>,
    /// Datagrams that were not what any send made, or came twice.
    pub wrong: u64,
    /// Bytes of intact datagrams.
    pub bytes: u64,
    /// The first problem, said.
    pub first_bad: Option<String>,
    corrupt: bool,
}

impl DgramCheck {
    /// A checker of stream `stream` keyed `base`.
    pub fn new(stream: u32, base: u64, corrupt: bool) -> DgramCheck {
        DgramCheck {
            stream,
            base,
            got: BTreeSet::new(),
            wrong: 0,
            bytes: 0,
            first_bad: None,
            corrupt,
        }
    }

    fn bad(&mut self, why: String) {
        self.wrong += 1;
        self.first_bad.get_or_insert(why);
    }

    /// Checks one received datagram.
    pub fn check(&mut self, d: &[u8]) {
        if self.corrupt && !d.is_empty() {
            self.corrupt = false;
            let mut bad = d.to_vec();
            let last = bad.len() - 1;
            bad[last] ^= 0x01;
            return self.check(&bad);
        }
        if d.len() < HEADER {
            return self.bad(format!(
                "a datagram of {} bytes, shorter than its header",
                d.len()
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes(d[i..i + 4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(d[8..16].try_into().expect("8 bytes"));
        let (magic, stream, len) = (u32_at(0), u32_at(4), u32_at(16) as usize);
        if magic != MAGIC || stream != self.stream {
            return self.bad(format!(
                "a datagram of another stream or none (magic {magic:#x}, stream {stream})"
            ));
        }
        if len != d.len() {
            return self.bad(format!(
                "datagram {seq}: {} bytes arrived, its header says {len}",
                d.len()
            ));
        }
        let expect = pattern(dgram_key(self.base, seq), 0, len - HEADER);
        if d[HEADER..] != expect[..] {
            let at = d[HEADER..]
                .iter()
                .zip(&expect)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return self.bad(format!("datagram {seq}: payload byte {at} differs"));
        }
        if !self.got.insert(seq) {
            return self.bad(format!("datagram {seq} arrived twice"));
        }
        self.bytes += d.len() as u64;
    }
}

/// What became of a buffer handed to a sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Still the sender's.
    Out,
    /// Given back (with its completion, or inside a `SendError`): bytes sent, error if any.
    Back { sent: usize, error: Option<String> },
    /// Dropped by a send future that was cancelled before the sender took it (documented).
    DroppedUnsent,
}

struct Entry {
    /// Our own reference: its count says whether the sender still holds the other one.
    buf: Option<Arc<[u8]>>,
    len: usize,
    fate: Fate,
}

/// Every buffer handed to a sender, and what came back: each must come back exactly once, or be
/// dropped unsent by a cancelled future where the API says so.
#[derive(Default)]
pub struct Ledger {
    entries: Vec<Entry>,
    by_addr: HashMap<usize, usize>,
    /// Problems seen (a buffer back twice, one that never came back, a wrong count).
    pub problems: Vec<String>,
    /// Buffers handed out.
    pub out: u64,
    /// Buffers back.
    pub back: u64,
}

fn addr(b: &Arc<[u8]>) -> usize {
    b.as_ptr() as usize
}

impl Ledger {
    /// Hands out `data` as a loanable buffer; returns it and its index.
    pub fn lend(&mut self, data: Vec<u8>) -> (Arc<[u8]>, usize) {
        let buf: Arc<[u8]> = data.into();
        let i = self.entries.len();
        self.by_addr.insert(addr(&buf), i);
        self.entries.push(Entry {
            buf: Some(buf.clone()),
            len: buf.len(),
            fate: Fate::Out,
        });
        self.out += 1;
        (buf, i)
    }

    /// Counts a buffer the caller tracks itself (a pool buffer, by its index): returns the
    /// index to give [`Ledger::back_index`] when it comes back.
    pub fn lend_untracked(&mut self, len: usize) -> usize {
        self.entries.push(Entry {
            buf: None,
            len,
            fate: Fate::Out,
        });
        self.out += 1;
        self.entries.len() - 1
    }

    /// A buffer came back from the sender.
    pub fn back(&mut self, buf: Arc<[u8]>, sent: usize, error: Option<String>) {
        let Some(&i) = self.by_addr.get(&addr(&buf)) else {
            self.problems
                .push("a buffer came back that was never handed out".into());
            return;
        };
        self.back_index(i, sent, error);
    }

    /// Buffer `i` came back from the sender.
    pub fn back_index(&mut self, i: usize, sent: usize, error: Option<String>) {
        let e = &mut self.entries[i];
        if e.fate != Fate::Out {
            self.problems
                .push(format!("buffer {i} came back twice (was {:?})", e.fate));
            return;
        }
        if sent > e.len {
            self.problems.push(format!(
                "buffer {i}: {sent} bytes sent of a {}-byte buffer",
                e.len
            ));
        }
        if error.is_none() && sent != e.len {
            self.problems.push(format!(
                "buffer {i} came back without an error after {sent} of {} bytes",
                e.len
            ));
        }
        e.fate = Fate::Back { sent, error };
        e.buf = None;
        self.back += 1;
    }

    /// After a send future was cancelled: whether the sender kept buffer `i` (it holds the
    /// other reference) or the future dropped it unsent; records the latter.
    pub fn kept_after_cancel(&mut self, i: usize) -> bool {
        let e = &mut self.entries[i];
        match (&e.fate, &e.buf) {
            (Fate::Out, Some(b)) if Arc::strong_count(b) == 1 => {
                // Accounted for: the API says the future drops it unsent.
                e.fate = Fate::DroppedUnsent;
                e.buf = None;
                self.back += 1;
                false
            }
            _ => true,
        }
    }

    /// The fates in call order, with lengths.
    pub fn fates(&self) -> impl Iterator<Item = (usize, &Fate)> {
        self.entries.iter().map(|e| (e.len, &e.fate))
    }

    /// Ends the round: every buffer still out is a problem (a leak, or one the sender dropped
    /// without giving it back).
    pub fn close(&mut self, what: &str) {
        for (i, e) in self.entries.iter_mut().enumerate() {
            if e.fate != Fate::Out {
                continue;
            }
            let held = e.buf.as_ref().map_or(0, Arc::strong_count);
            self.problems.push(if held > 1 {
                format!(
                    "{what}: buffer {i} ({} bytes) never came back (still held)",
                    e.len
                )
            } else {
                format!(
                    "{what}: buffer {i} ({} bytes) was dropped by the sender without coming back",
                    e.len
                )
            });
            e.buf = None;
        }
    }

    /// Bytes of the stream the sender says it put out, in call order: each buffer's bytes sent,
    /// up to and including the first one that came back short; the buffers dropped unsent by a
    /// cancelled future are not part of it.
    pub fn stream_len(&self) -> (u64, bool) {
        let mut total = 0u64;
        for e in &self.entries {
            match &e.fate {
                Fate::DroppedUnsent => {}
                Fate::Back { sent, .. } => {
                    total += *sent as u64;
                    if *sent < e.len {
                        return (total, true);
                    }
                }
                Fate::Out => return (total, true),
            }
        }
        (total, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_check_finds_a_flipped_and_a_misplaced_byte() {
        let data = pattern(77, 0, 300_000);
        let mut c = StreamCheck::new(77, false);
        for part in data.chunks(4097) {
            c.check(part);
        }
        assert_eq!((c.off, c.wrong), (300_000, 0));
        let mut flipped = StreamCheck::new(77, true);
        flipped.check(&data);
        assert_eq!((flipped.wrong, flipped.first_bad), (1, Some(0)));
        let mut shifted = StreamCheck::new(77, false);
        shifted.check(&data[1..]);
        assert!(shifted.wrong > 0);
    }

    #[test]
    fn datagrams_are_checked_whole_and_once() {
        let mut c = DgramCheck::new(3, 5, false);
        for (seq, len) in [(0, 20), (1, 21), (2, 65_507)] {
            c.check(&datagram(3, 5, seq, len));
        }
        assert_eq!((c.got.len(), c.wrong), (3, 0));
        c.check(&datagram(3, 5, 1, 21));
        c.check(&datagram(4, 5, 9, 100));
        let mut cut = datagram(3, 5, 7, 100);
        cut.truncate(60);
        c.check(&cut);
        let mut swapped = datagram(3, 5, 8, 100);
        swapped[8] = 9; // claims to be datagram 9: its payload is 8's
        c.check(&swapped);
        assert_eq!(c.wrong, 4);
    }

    #[test]
    fn the_ledger_sees_double_returns_and_leaks() {
        let mut l = Ledger::default();
        let (a, _) = l.lend(vec![1; 10]);
        let (b, _) = l.lend(vec![2; 10]);
        let a2 = a.clone();
        l.back(a, 10, None);
        l.back(a2, 10, None);
        assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
        let held = b.clone();
        l.close("test");
        assert_eq!(l.problems.len(), 2, "{:?}", l.problems);
        drop((b, held));
        let mut m = Ledger::default();
        let (c, i) = m.lend(vec![3; 4]);
        drop(c);
        assert!(!m.kept_after_cancel(i));
        assert_eq!(m.stream_len(), (0, false));
    }
}
