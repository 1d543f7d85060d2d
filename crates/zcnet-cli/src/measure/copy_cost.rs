//! What a copy costs here, timed: streamed through a set of buffers in 64 KiB chunks against the
//! same copies from one hot buffer (docs/measuring.md: "Measure heat, don't infer it").
//! [`crate::bench::heat`] judges a send bench's pool with it, and [`CopyCost`] says what a copy
//! costs here from cache and from memory, for the report's host block.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

use super::affinity::Pinned;

/// A working set is in cache when copying from it costs at most this many times the same copy
/// from one hot buffer. Measured on the 2-vCPU machines of docs/measuring.md, with other builds running
/// (debug build, medians of 5 rounds): pools of 1-4 MiB (in L2/L3) copied at 1.13-1.41x the hot
/// buffer's cost, 16-256 MiB (in memory) at 2.5-4.2x, 8 MiB in between (1.45-1.7x: the other
/// guests and processes evict part of the L3); on a guest told of a 260 MiB L3 a 256 MiB pool
/// costs 2-3x. 1.6 sits between the two groups with room on both sides for the noise of a
/// shared machine (1.3 would call a 2 MiB pool cold whenever a neighbour loads the L3).
pub const HOT_RATIO_MAX: f64 = 1.6;

/// Bytes of one copy, at most: a large send's size.
pub const CHUNK: usize = 64 << 10;
/// Bytes one timed pass copies, at least (a small set is streamed through several times): about
/// a millisecond from a hot buffer.
pub const PASS_MIN: usize = 32 << 20;

/// Calls `copy` on every `stride`-th chunk (of at most [`CHUNK`] bytes) of `buffers`; returns
/// the bytes passed.
pub fn sampled(buffers: &[&[u8]], stride: usize, mut copy: impl FnMut(&[u8])) -> u64 {
    let mut bytes = 0;
    let mut i = 0usize;
    for b in buffers {
        for c in b.chunks(CHUNK) {
            if i % stride == 0 {
                copy(c);
                bytes += c.len() as u64;
            }
            i += 1;
        }
    }
    bytes
}

/// Copies the sample of `buffers` (every `stride`-th chunk) `passes` times into `dst`; ns per
/// KiB.
pub fn pool_pass(buffers: &[&[u8]], stride: usize, passes: usize, dst: &mut [u8]) -> f64 {
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..passes {
        bytes += sampled(buffers, stride, |c| {
            dst[..c.len()].copy_from_slice(c);
            black_box(&mut *dst);
        });
    }
    ns_per_kib(start, bytes)
}

/// Copies `src` (one hot buffer) into `dst` until [`PASS_MIN`] bytes are copied; ns per KiB.
pub fn hot_pass(src: &[u8], dst: &mut [u8]) -> f64 {
    let n = PASS_MIN.div_ceil(src.len());
    let start = Instant::now();
    for _ in 0..n {
        dst[..src.len()].copy_from_slice(black_box(src));
        black_box(&mut *dst);
    }
    ns_per_kib(start, (n * src.len()) as u64)
}

fn ns_per_kib(start: Instant, bytes: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / (bytes as f64 / 1024.0)
}

/// The median of `v` (the upper one of an even count); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Rounds per working set in [`CopyCost::measure`], each a pass over the set.
const LLC_ROUNDS: usize = 3;
/// The working sets [`CopyCost::measure`] tries, doubling: 256 KiB (in any L2) to 256 MiB, the
/// largest pool a bench keeps (far beyond the cache any guest really has to itself).
const LLC_FROM: usize = 256 << 10;
const LLC_TO: usize = 256 << 20;

/// What a copy costs on this machine from cache and from memory, and the largest working set it
/// still finds in cache: the machine fact that moves zero-copy ratios most between hosts (the
/// copy a zero-copy send saves is cheap from cache and dear from memory; docs/measuring.md).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct CopyCost {
    /// Copying from a 256 KiB set, streamed in 64 KiB chunks, ns per KiB (median of rounds).
    pub cache_ns_per_kib: f64,
    /// The same from a 256 MiB set: from memory.
    pub memory_ns_per_kib: f64,
    /// The largest set, doubling from 256 KiB, that copies nearer the cache's cost than the
    /// memory's (below their geometric mean); 256 MiB where no step to memory shows (both costs
    /// within 1.3x of each other).
    pub llc_bytes: u64,
}

impl CopyCost {
    /// Measures once per process, pinned to CPU 0 (the senders'); about 0.5 s. A guest is often
    /// told the host's last-level cache (a 260 MiB L3 shared with other guests); this is what
    /// the caches really hold for a copy here, now.
    pub fn here() -> CopyCost {
        static COST: OnceLock<CopyCost> = OnceLock::new();
        *COST.get_or_init(CopyCost::measure)
    }

    fn measure() -> CopyCost {
        let _on = Pinned::to(0);
        // One buffer, touched once; each set is a prefix of it. Where a process may not have
        // that much (ulimit -v), the sets it can have.
        let mut to = LLC_TO;
        let mut all = buffer(to);
        while all.is_err() && to > LLC_FROM {
            to /= 2;
            all = buffer(to);
        }
        let Ok(mut all) = all else {
            return CopyCost::from_costs(&[]);
        };
        all.resize(to, 0x3c);
        let mut dst = vec![0xa5u8; CHUNK];
        let mut costs = Vec::new();
        let mut size = LLC_FROM;
        while size <= to {
            let set = &all[..size];
            let passes = PASS_MIN.div_ceil(size).max(1);
            // A first pass brings the set into whatever cache holds it.
            pool_pass(&[set], 1, 1, &mut dst);
            let mut p: Vec<f64> = (0..LLC_ROUNDS)
                .map(|_| pool_pass(&[set], 1, passes, &mut dst))
                .collect();
            costs.push((size as u64, median(&mut p)));
            size *= 2;
        }
        CopyCost::from_costs(&costs)
    }

    /// The figures of `costs` (set size, ns per KiB), smallest set first.
    fn from_costs(costs: &[(u64, f64)]) -> CopyCost {
        let cache = costs.first().map_or(f64::NAN, |c| c.1);
        let memory = costs.last().map_or(f64::NAN, |c| c.1);
        let largest = costs.last().map_or(0, |c| c.0);
        // No step to memory (or nothing measured: NaN compares false): the largest set tried.
        let stepped = memory > 1.3 * cache;
        let llc_bytes = if !stepped {
            largest
        } else {
            let edge = (cache * memory).sqrt();
            costs
                .iter()
                .take_while(|c| c.1 < edge)
                .last()
                .map_or(0, |c| c.0)
        };
        CopyCost {
            cache_ns_per_kib: cache,
            memory_ns_per_kib: memory,
            llc_bytes,
        }
    }
}

/// An empty vector with room for `len` bytes, or an error saying the memory cannot be had
/// (`ulimit -v`, an overcommit policy) instead of the abort of an infallible allocation.
///
/// # Errors
/// The allocation failed.
pub fn buffer(len: usize) -> anyhow::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        anyhow::anyhow!(
            "cannot allocate {} MiB of buffers ({len} bytes): the memory this process may use is \
             too small (ulimit -v, or the machine's overcommit policy)",
            len.div_ceil(1 << 20)
        )
    })?;
    Ok(v)
}

/// The largest cache of CPU 0 (index0..: L1d, L1i, L2, L3), as sysfs says.
pub fn llc_sysfs() -> Option<u64> {
    static LLC: OnceLock<Option<u64>> = OnceLock::new();
    *LLC.get_or_init(|| {
        (0..8)
            .filter_map(|i| {
                let path = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
                std::fs::read_to_string(path).ok()
            })
            .filter_map(|s| parse_cache_size(s.trim()))
            .max()
    })
}

/// A sysfs cache size: `2048K`, `32M`, `512`.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("512K"), Some(512 << 10));
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("64"), Some(64));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn the_cache_ends_where_copies_cost_nearer_memory() {
        let mib = |n: u64| n << 20;
        // A machine with a 16 MiB last-level cache: cheap to 16 MiB, then memory's cost.
        let costs = [
            (mib(1), 20.0),
            (mib(2), 22.0),
            (mib(4), 24.0),
            (mib(8), 26.0),
            (mib(16), 30.0),
            (mib(32), 70.0),
            (mib(64), 80.0),
            (mib(256), 82.0),
        ];
        let c = CopyCost::from_costs(&costs);
        assert_eq!(c.llc_bytes, mib(16));
        assert_eq!((c.cache_ns_per_kib, c.memory_ns_per_kib), (20.0, 82.0));
        // No step to memory: the largest set tried.
        let flat = [(mib(1), 20.0), (mib(256), 22.0)];
        assert_eq!(CopyCost::from_costs(&flat).llc_bytes, mib(256));
        // Dearer from the first set on: not even the smallest.
        let none = [(mib(1), 20.0), (mib(2), 80.0), (mib(256), 82.0)];
        assert_eq!(CopyCost::from_costs(&none).llc_bytes, mib(1));
        assert_eq!(CopyCost::from_costs(&[]).llc_bytes, 0);
    }

    #[test]
    fn this_machine_measures_a_tried_size() {
        // The rule, not this machine's number: a power of two from 256 KiB to 256 MiB, costs
        // measured, the same figures on a second call.
        let c = CopyCost::here();
        assert!(
            c.llc_bytes.is_power_of_two()
                && (LLC_FROM as u64..=LLC_TO as u64).contains(&c.llc_bytes),
            "{c:?}"
        );
        assert!(
            c.cache_ns_per_kib > 0.0 && c.memory_ns_per_kib > 0.0,
            "{c:?}"
        );
        assert_eq!(c, CopyCost::here(), "measured once");
    }

    #[test]
    fn a_sample_passes_every_stride_th_chunk() {
        // 1 GiB of 64 KiB buffers (not touched: counted only): every second chunk, 512 MiB.
        let one = [0u8; CHUNK];
        let bufs = vec![&one[..]; (1 << 30) / CHUNK];
        assert_eq!(sampled(&bufs, 2, |_| {}), 512 << 20);
    }
}
