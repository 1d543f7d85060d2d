//! A deterministic byte stream for tests and benchmarks, checked byte for byte by the receiver.
//!
//! Byte `i` of the stream depends on `i` modulo a prime period ([`PERIOD`]), so a lost,
//! repeated or misplaced page shows up as a mismatch. The generated buffer is `'static` and never
//! changes, so a `MSG_ZEROCOPY` sender may loan any slice of it to the kernel: [`chunk_at`]
//! returns the bytes for stream offset `offset` as one contiguous slice.

use std::sync::OnceLock;

/// Period of the pattern: a prime, so it never lines up with pages or segments.
pub const PERIOD: usize = 1_000_003;
/// Longest slice [`chunk_at`] returns.
pub const MAX_CHUNK: usize = 1 << 20;

fn byte(i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8 ^ (i as u8)
}

fn buffer() -> &'static [u8] {
    static BUF: OnceLock<Box<[u8]>> = OnceLock::new();
    BUF.get_or_init(|| (0..PERIOD + MAX_CHUNK).map(|i| byte(i % PERIOD)).collect())
}

/// The stream's bytes from `offset` on, `len` of them (at most [`MAX_CHUNK`]).
pub fn chunk_at(offset: u64, len: usize) -> &'static [u8] {
    let start = (offset % PERIOD as u64) as usize;
    &buffer()[start..start + len.min(MAX_CHUNK)]
}

/// Checks received bytes against the stream, in order.
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    offset: u64,
    first_bad: Option<u64>,
    pool: Option<(u64, u64)>,
    /// Whole buffers in any order ([`Verifier::buffers`]).
    buffers: Option<Box<BufferVerifier>>,
}

impl Verifier {
    /// A verifier at stream offset 0.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    /// A verifier of sends of `size` bytes cut from a pool of the stream's first bytes: the
    /// `k`-th send is the stream from offset `(k * size) % span` (a pool of `span + size`
    /// bytes, sent in order and wrapping, as the send benches do).
    pub fn pool(size: u64, span: u64) -> Verifier {
        Verifier {
            pool: Some((size.max(1), span.max(1))),
            ..Verifier::default()
        }
    }

    /// A verifier of whole buffers of a pool in any order: see [`BufferVerifier`].
    pub fn buffers(size: usize, count: usize) -> Verifier {
        Verifier {
            buffers: Some(Box::new(BufferVerifier::new(size, count))),
            ..Verifier::default()
        }
    }

    /// Where the next byte comes from in the stream, and how many follow it there.
    fn source(&self, len: usize) -> (u64, usize) {
        match self.pool {
            None => (self.offset, len.min(MAX_CHUNK)),
            Some((size, span)) => {
                let (k, within) = (self.offset / size, self.offset % size);
                let at = (k.wrapping_mul(size) % span) + within;
                (at, len.min(MAX_CHUNK).min((size - within) as usize))
            }
        }
    }

    /// Checks the next `data` of the stream.
    pub fn check(&mut self, mut data: &[u8]) {
        if let Some(b) = &mut self.buffers {
            return b.check(data);
        }
        while !data.is_empty() {
            let (at, n) = self.source(data.len());
            let expect = chunk_at(at, n);
            if self.first_bad.is_none() && data[..n] != *expect {
                let at = data
                    .iter()
                    .zip(expect)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                self.first_bad = Some(self.offset + at as u64);
            }
            self.offset += n as u64;
            data = &data[n..];
        }
    }

    /// Bytes checked so far.
    pub fn offset(&self) -> u64 {
        match &self.buffers {
            Some(b) => b.offset(),
            None => self.offset,
        }
    }

    /// Whether every byte so far matched (and, for whole buffers, the stream ends at one's
    /// end).
    pub fn ok(&self) -> bool {
        match &self.buffers {
            Some(b) => b.ok(),
            None => self.first_bad.is_none(),
        }
    }

    /// Stream offset of the first wrong byte, if any.
    pub fn first_bad(&self) -> Option<u64> {
        match &self.buffers {
            Some(b) => b.first_bad(),
            None => self.first_bad,
        }
    }
}

/// Checks a stream made of whole buffers of a pool, in any order: the pool holds `count`
/// buffers of `size` bytes, buffer `k` the stream from offset `k * size`, and every `size` bytes
/// received must be one of them, whole. A sender whose buffers come back (and go out again) in
/// completion order sends them in no fixed order; bytes of two buffers interleaved, a buffer cut
/// short or a byte changed are caught, whole buffers swapped are not.
#[derive(Clone, Debug)]
pub struct BufferVerifier {
    size: usize,
    /// Buffer indices by their first [`HEAD`] bytes (several where the period repeats them).
    by_head: std::collections::HashMap<[u8; HEAD], Vec<u32>>,
    /// The head of the buffer being received, while incomplete.
    head: Vec<u8>,
    /// Buffers the bytes of the current one still match.
    candidates: Vec<u32>,
    /// Bytes of the current buffer received.
    within: usize,
    offset: u64,
    first_bad: Option<u64>,
}

/// Bytes of a buffer that find its candidates.
const HEAD: usize = 16;

impl BufferVerifier {
    /// A verifier of `count` buffers of `size` bytes (the stream from offset `k * size` for
    /// buffer `k`).
    pub fn new(size: usize, count: usize) -> BufferVerifier {
        let size = size.max(1);
        let mut by_head: std::collections::HashMap<[u8; HEAD], Vec<u32>> = Default::default();
        for k in 0..count {
            by_head
                .entry(Self::key(chunk_at((k * size) as u64, size.min(HEAD))))
                .or_default()
                .push(k as u32);
        }
        BufferVerifier {
            size,
            by_head,
            head: Vec::with_capacity(HEAD),
            candidates: Vec::new(),
            within: 0,
            offset: 0,
            first_bad: None,
        }
    }

    fn key(head: &[u8]) -> [u8; HEAD] {
        let mut k = [0u8; HEAD];
        k[..head.len()].copy_from_slice(head);
        k
    }

    /// Checks the next `data` of the stream.
    pub fn check(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.first_bad.is_none() {
            let head_len = self.size.min(HEAD);
            if self.within < head_len {
                let n = (head_len - self.within).min(data.len());
                self.head.extend_from_slice(&data[..n]);
                self.within += n;
                self.offset += n as u64;
                data = &data[n..];
                if self.within == head_len {
                    // Reused, not reallocated: this runs once per buffer received.
                    self.candidates.clear();
                    if let Some(ks) = self.by_head.get(&Self::key(&self.head)) {
                        self.candidates.extend_from_slice(ks);
                    }
                    if self.candidates.is_empty() {
                        self.first_bad = Some(self.offset - head_len as u64);
                    }
                }
            } else {
                let n = (self.size - self.within).min(data.len());
                let (within, size) = (self.within as u64, self.size as u64);
                self.candidates.retain(|&k| {
                    let mut at = u64::from(k) * size + within;
                    let mut rest = &data[..n];
                    while !rest.is_empty() {
                        let expect = chunk_at(at, rest.len());
                        if rest[..expect.len()] != *expect {
                            return false;
                        }
                        at += expect.len() as u64;
                        rest = &rest[expect.len()..];
                    }
                    true
                });
                if self.candidates.is_empty() {
                    self.first_bad = Some(self.offset);
                }
                self.within += n;
                self.offset += n as u64;
                data = &data[n..];
            }
            if self.within == self.size {
                self.within = 0;
                self.head.clear();
            }
        }
        self.offset += data.len() as u64;
    }

    /// Bytes checked so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether every byte so far matched and the stream ended at a buffer's end.
    pub fn ok(&self) -> bool {
        self.first_bad.is_none() && self.within == 0
    }

    /// Stream offset near the first wrong byte (the start of the buffer's part that did not
    /// match), if any.
    pub fn first_bad(&self) -> Option<u64> {
        self.first_bad
    }
}

/// `len` pseudo-random bytes (xorshift64 from `seed`, which must not be 0): contents that no
/// page or pattern period lines up with, the same in every test that asks for the same seed.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_the_stream_across_the_period() {
        let a = chunk_at(PERIOD as u64 - 3, 10);
        let b = chunk_at(0, 7);
        assert_eq!(&a[3..], b);
        assert_eq!(chunk_at(5, MAX_CHUNK + 100).len(), MAX_CHUNK);
    }

    #[test]
    fn pool_verifier_follows_the_wrapping_sends() {
        // A pool of 10 000 bytes sent 3 000 at a time (span 7 000): sends from 0, 3000, 6000, 2000, ...
        let (size, pool_len) = (3000usize, 10_000usize);
        let pool: Vec<u8> = (0..pool_len as u64).map(|i| chunk_at(i, 1)[0]).collect();
        let span = (pool_len - size) as u64;
        let mut stream = Vec::new();
        for k in 0..9u64 {
            let at = ((k * size as u64) % span) as usize;
            stream.extend_from_slice(&pool[at..at + size]);
        }
        let mut v = Verifier::pool(size as u64, span);
        for part in stream.chunks(1234) {
            v.check(part);
        }
        assert!(v.ok());
        assert_eq!(v.offset(), stream.len() as u64);
        // The plain stream is not what the pool sends after the first wrap.
        let mut plain = Verifier::new();
        plain.check(&stream);
        assert_eq!(plain.first_bad(), Some(9000));
        let mut bad = Verifier::pool(size as u64, span);
        stream[12_345] ^= 0x80;
        bad.check(&stream);
        assert_eq!(bad.first_bad(), Some(12_345));
    }

    #[test]
    fn verifier_accepts_the_stream_in_any_split_and_finds_errors() {
        let mut v = Verifier::new();
        let mut off = 0u64;
        for len in [1usize, 4095, 4097, 3 * MAX_CHUNK / 2, 7] {
            let mut data = Vec::new();
            let mut left = len;
            while left > 0 {
                let c = chunk_at(off + (len - left) as u64, left);
                data.extend_from_slice(c);
                left -= c.len();
            }
            v.check(&data);
            off += len as u64;
        }
        assert!(v.ok());
        assert_eq!(v.offset(), off);
        let mut bad = chunk_at(off, 4096).to_vec();
        bad[100] ^= 1;
        v.check(&bad);
        assert_eq!(v.first_bad(), Some(off + 100));
        // A page from the wrong place is caught too.
        let mut w = Verifier::new();
        w.check(chunk_at(4096, 4096));
        assert!(!w.ok());
    }

    #[test]
    fn buffer_verifier_takes_whole_buffers_in_any_order_and_nothing_else() {
        let (size, count) = (3000usize, 50usize);
        let buf = |k: usize| {
            let mut v = Vec::new();
            while v.len() < size {
                v.extend_from_slice(chunk_at((k * size + v.len()) as u64, size - v.len()));
            }
            v
        };
        let order = [7usize, 3, 3, 49, 0, 12, 7];
        let stream: Vec<u8> = order.iter().flat_map(|&k| buf(k)).collect();
        for split in [1usize, 7, 16, 1000, 4096, stream.len()] {
            let mut v = BufferVerifier::new(size, count);
            for part in stream.chunks(split) {
                v.check(part);
            }
            assert!(v.ok(), "split {split}: {:?}", v.first_bad());
            assert_eq!(v.offset(), stream.len() as u64);
        }
        // Two buffers interleaved: the first 1000 bytes of buffer 3, then buffer 12 whole.
        let mut mixed = buf(7);
        mixed.extend_from_slice(&buf(3)[..1000]);
        mixed.extend_from_slice(&buf(12));
        let mut v = BufferVerifier::new(size, count);
        v.check(&mixed);
        let bad = v.first_bad().expect("the interleaving is caught");
        assert!((3000..=4000).contains(&bad), "{bad}");
        // One byte changed in the middle of a buffer.
        let mut flipped = stream.clone();
        flipped[2 * size + 2500] ^= 1;
        let mut v = BufferVerifier::new(size, count);
        v.check(&flipped);
        assert!(!v.ok());
        // A buffer beyond the pool, and a stream that ends mid-buffer.
        let mut v = BufferVerifier::new(size, count);
        v.check(&buf(count));
        assert_eq!(v.first_bad(), Some(0));
        let mut v = BufferVerifier::new(size, count);
        v.check(&buf(1)[..size - 1]);
        assert!(!v.ok() && v.first_bad().is_none());
    }
}
