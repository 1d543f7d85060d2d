//! The trains `udp-gso` sends ([`TrainPool`]): pattern bytes, each datagram's first 8 bytes its
//! offset in the pool, so that a receiver can check every datagram it gets.

/// A pool of trains: pattern bytes, each datagram's first 8 bytes its offset in the pool.
#[derive(Clone, Copy, Debug)]
pub struct TrainPool {
    data: &'static [u8],
    train: usize,
    segment: usize,
}

impl TrainPool {
    /// Bytes of a datagram's header: its offset in the pool.
    const HEADER: usize = 8;

    /// A pool of about `kib` KiB (at least two trains) of `train`-byte trains cut in
    /// `segment`-byte datagrams, made once per shape and kept for the process (the kernel may
    /// read any of it while a zero-copy send is in flight).
    ///
    /// # Errors
    /// The memory cannot be had.
    pub fn new(train: usize, segment: usize, kib: usize) -> anyhow::Result<TrainPool> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        type Made = HashMap<(usize, usize, usize), &'static [u8]>;
        static MADE: Mutex<Option<Made>> = Mutex::new(None);
        let count = ((kib << 10) / train).max(2);
        let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
        let made = made.get_or_insert_with(HashMap::new);
        let data = match made.get(&(train, segment, count)) {
            Some(&d) => d,
            None => {
                let mut v = crate::bench::sweep::pattern_bytes(train * count)?;
                for t in 0..count {
                    for at in (0..train).step_by(segment) {
                        let off = t * train + at;
                        if train - at >= Self::HEADER {
                            v[off..off + Self::HEADER].copy_from_slice(&(off as u64).to_le_bytes());
                        }
                    }
                }
                let d: &'static [u8] = Box::leak(v.into_boxed_slice());
                made.insert((train, segment, count), d);
                d
            }
        };
        Ok(TrainPool {
            data,
            train,
            segment,
        })
    }

    /// Bytes of a train.
    pub fn train_bytes(&self) -> usize {
        self.train
    }

    /// Trains in the pool.
    pub fn count(&self) -> usize {
        self.data.len() / self.train
    }

    /// Train `i` (wrapping).
    pub fn train(&self, i: u64) -> &'static [u8] {
        let at = (i % self.count() as u64) as usize * self.train;
        &self.data[at..at + self.train]
    }

    /// Checks one received datagram: its offset names a datagram start of some train, it has
    /// that datagram's size and bytes. `Err` says what is wrong.
    pub fn check(&self, d: &[u8]) -> Result<(), String> {
        if self.train < Self::HEADER {
            return if self.data.windows(d.len().max(1)).any(|w| w == d) {
                Ok(())
            } else {
                Err(format!(
                    "a {}-byte datagram that is no part of the pool",
                    d.len()
                ))
            };
        }
        let Some(head) = d.get(..Self::HEADER) else {
            return Err(format!(
                "a {}-byte datagram, shorter than its header",
                d.len()
            ));
        };
        let off = u64::from_le_bytes(head.try_into().expect("8 bytes")) as usize;
        let in_train = off % self.train;
        if off >= self.data.len() || in_train % self.segment != 0 {
            return Err(format!(
                "a datagram claiming offset {off}, no datagram's start"
            ));
        }
        let want = self.segment.min(self.train - in_train);
        if d.len() != want {
            return Err(format!(
                "the datagram at offset {off} has {} bytes, not its {want} (segment {}, train {})",
                d.len(),
                self.segment,
                self.train
            ));
        }
        if d != &self.data[off..off + want] {
            return Err(format!("the datagram at offset {off} has wrong bytes"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet::udp_gso;

    #[test]
    fn the_pool_checks_every_datagram_by_its_offset() {
        let pool = TrainPool::new(1000, 300, 64).unwrap();
        let t = pool.train(1);
        let parts: Vec<&[u8]> = udp_gso::datagrams(t, Some(300)).collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        for p in &parts {
            pool.check(p).unwrap();
        }
        // Cut at the wrong place, truncated, or another datagram's bytes.
        assert!(pool.check(&t[..299]).is_err());
        assert!(pool.check(&t[300..700]).is_err());
        let mut bad = parts[1].to_vec();
        bad[100] ^= 1;
        assert!(pool.check(&bad).is_err());
        let mut moved = parts[2].to_vec();
        moved[..8].copy_from_slice(&(1300u64).to_le_bytes());
        assert!(pool.check(&moved).unwrap_err().contains("wrong bytes"));
        assert!(pool.check(&[1, 2, 3]).is_err());
    }
}
