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
        self.offset
    }

    /// Whether every byte so far matched.
    pub fn ok(&self) -> bool {
        self.first_bad.is_none()
    }

    /// Stream offset of the first wrong byte, if any.
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
}
