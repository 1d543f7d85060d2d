//! Whether a send bench's buffer pool is hot or cold, measured (docs/measuring.md: "Cache sizes
//! from sysfs are the host's ... Measure heat, don't infer it").
//!
//! A guest can be told the host CPU's last-level cache (260 MiB, shared with other guests), so a
//! pool that fits the cache sysfs names may still be cold: copying from a 256 MiB pool costs 2-3x
//! a copy from one hot buffer there. [`PoolHeat::measure`] therefore times copies from the pool
//! itself, streamed through in 64 KiB chunks, against the same copies from one small hot buffer,
//! alternating a few rounds, and [`Heat::classify`] compares the medians. The sysfs size stays in
//! the report as information.

use serde::Serialize;

use crate::measure::Pinned;
pub use crate::measure::copy_cost::HOT_RATIO_MAX;
use crate::measure::copy_cost::{
    CHUNK, PASS_MIN, hot_pass, llc_sysfs as llc_bytes, median, pool_pass, sampled,
};

/// Bytes of the pool one pass reads, at most: a larger pool is sampled, every n-th chunk, spread
/// over all of it (still far more than any cache, so the sample is no hotter than the pool).
const PASS_MAX: usize = 512 << 20;
/// Rounds, each a hot pass then a pool pass; the medians are compared.
const ROUNDS: usize = 5;

/// Hot or cold, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Heat {
    /// Copying from the pool costs about what copying from one hot buffer does: its data is in
    /// the caches.
    Hot,
    /// Copying from it costs more, or could not be measured.
    Cold,
}

impl Heat {
    /// The heat of a pool whose copies cost `pool` (ns per KiB) against `hot` for the same copies
    /// from one hot buffer: hot when `pool <= HOT_RATIO_MAX * hot`.
    ///
    /// Hot needs evidence: both costs finite, `hot` above zero, `pool` not negative. Anything
    /// else (a zero hot cost, a NaN or infinite cost: nothing was measured) is cold, the state the
    /// benches assume of a pool by default and in which their acceptance bounds are stated.
    pub fn classify(pool: f64, hot: f64) -> Heat {
        let measured = pool.is_finite() && hot.is_finite() && pool >= 0.0 && hot > 0.0;
        if measured && pool / hot <= HOT_RATIO_MAX {
            Heat::Hot
        } else {
            Heat::Cold
        }
    }
}

/// The buffer pool of a send bench as its report describes it: its size, its heat and the
/// measurement it was judged on. Copy's cost depends on the heat much more than zero copy's
/// (issue 17).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PoolHeat {
    /// Pool size, MiB.
    pub mib: usize,
    /// The largest cache of CPU 0 as sysfs gives it, bytes: information only (a guest may be
    /// told the host's cache, shared with other guests); the heat is measured.
    pub llc_bytes: Option<u64>,
    /// Hot or cold: [`Heat::classify`] of the two costs below.
    pub heat: Heat,
    /// Copying from the pool, ns per KiB (median of the rounds); `null` where nothing was
    /// measured.
    pub copy_ns_per_kib_pool: f64,
    /// The same copies from one hot buffer, ns per KiB (median).
    pub copy_ns_per_kib_hot: f64,
    /// Pool cost / hot cost.
    pub ratio: f64,
    /// The rule: hot when `ratio` is at most this ([`HOT_RATIO_MAX`]).
    pub hot_if_ratio_at_most: f64,
    /// Bytes of the pool measured: more than `mib` where a bench needs a minimum of buffers
    /// (uring-tx keeps 256: 16 MB at 64000 B).
    pub pool_bytes: u64,
    /// Bytes of each copy: 64 KiB, or the pool's buffer size where smaller.
    pub copy_bytes: usize,
    /// Bytes of the pool one pass read (all of it, or an even sample of a very large pool).
    pub pass_bytes: u64,
}

impl PoolHeat {
    /// Measures the heat of a `mib` MiB pool given as its buffers, in the order the bench sends
    /// them (one slice for a contiguous pool). Takes about 0.1-0.2 s for 256 MiB, on CPU 0 (the
    /// senders'). No buffers, or only empty ones: nothing measured, cold.
    pub fn measure(mib: usize, buffers: &[&[u8]]) -> PoolHeat {
        let copy_bytes = buffers
            .iter()
            .find(|b| !b.is_empty())
            .map_or(0, |b| b.len().min(CHUNK));
        let total: usize = buffers.iter().map(|b| b.len()).sum();
        // Every stride-th chunk: the whole pool up to PASS_MAX, an even sample beyond.
        let stride = total.div_ceil(PASS_MAX).max(1);
        let (mut pool_costs, mut hot_costs) = (Vec::new(), Vec::new());
        let mut pass_bytes = 0;
        if copy_bytes > 0 {
            let _on = Pinned::to(0);
            let mut dst = vec![0xa5u8; CHUNK];
            let hot = vec![0x5au8; CHUNK];
            pass_bytes = sampled(buffers, stride, |_| {});
            let passes = PASS_MIN.div_ceil(pass_bytes as usize).max(1);
            for _ in 0..ROUNDS {
                hot_costs.push(hot_pass(&hot[..copy_bytes], &mut dst));
                pool_costs.push(pool_pass(buffers, stride, passes, &mut dst));
            }
        }
        let pool = median(&mut pool_costs);
        let hot = median(&mut hot_costs);
        PoolHeat {
            mib,
            llc_bytes: llc_bytes(),
            heat: Heat::classify(pool, hot),
            copy_ns_per_kib_pool: pool,
            copy_ns_per_kib_hot: hot,
            ratio: pool / hot,
            hot_if_ratio_at_most: HOT_RATIO_MAX,
            pool_bytes: total as u64,
            copy_bytes,
            pass_bytes,
        }
    }

    /// Whether the pool measured hot.
    pub fn is_hot(self) -> bool {
        self.heat == Heat::Hot
    }

    /// " hot pool" in an experiment's name when the pool is hot, else nothing.
    pub fn suffix(self) -> &'static str {
        if self.is_hot() { " hot pool" } else { "" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_copying_near_the_hot_cost_are_hot() {
        // A 2 MiB pool measured here: 26.8 ns/KiB against 22.5 (1.19x).
        assert_eq!(Heat::classify(26.8, 22.5), Heat::Hot);
        // Under load here: 41.2 against 29.2 (1.41x).
        assert_eq!(Heat::classify(41.2, 29.2), Heat::Hot);
        // Cheaper than the hot buffer (noise) and exactly at the bound.
        assert_eq!(Heat::classify(20.0, 22.5), Heat::Hot);
        assert_eq!(Heat::classify(32.0, 20.0), Heat::Hot);
        assert_eq!(Heat::classify(0.0, 20.0), Heat::Hot);
    }

    #[test]
    fn pools_copying_well_above_the_hot_cost_are_cold() {
        // A 256 MiB pool measured here: 57.2 ns/KiB against 22.9 (2.5x); the 260 MiB-LLC guest
        // of docs/measuring.md: 2-3x.
        assert_eq!(Heat::classify(57.2, 22.9), Heat::Cold);
        assert_eq!(Heat::classify(2.0 * 25.0, 25.0), Heat::Cold);
        // Just above the bound.
        assert_eq!(Heat::classify(32.01, 20.0), Heat::Cold);
    }

    #[test]
    fn nothing_measured_is_cold() {
        for (pool, hot) in [
            (0.0, 0.0),
            (10.0, 0.0),
            (f64::NAN, 20.0),
            (20.0, f64::NAN),
            (f64::NAN, f64::NAN),
            (f64::INFINITY, 20.0),
            (20.0, f64::INFINITY),
            (-1.0, 20.0),
            (20.0, -1.0),
        ] {
            assert_eq!(Heat::classify(pool, hot), Heat::Cold, "{pool} {hot}");
        }
    }

    #[test]
    fn a_measured_pool_reports_its_figures_and_the_rule() {
        // 4 MiB in one slice: a few passes of 64 KiB copies, both costs measured.
        let pool = vec![7u8; 4 << 20];
        let h = PoolHeat::measure(4, &[&pool]);
        assert_eq!(h.copy_bytes, CHUNK);
        assert_eq!(h.pass_bytes, 4 << 20);
        assert_eq!(h.pool_bytes, 4 << 20);
        assert!(
            h.copy_ns_per_kib_pool > 0.0 && h.copy_ns_per_kib_hot > 0.0,
            "{h:?}"
        );
        assert_eq!(
            h.heat,
            Heat::classify(h.copy_ns_per_kib_pool, h.copy_ns_per_kib_hot)
        );
        assert_eq!(h.hot_if_ratio_at_most, HOT_RATIO_MAX);
        // Buffers smaller than a chunk are copied whole, each.
        let bufs: Vec<&[u8]> = pool.chunks(1000).collect();
        assert_eq!(PoolHeat::measure(4, &bufs).copy_bytes, 1000);
    }

    #[test]
    fn no_buffers_measure_nothing_and_are_cold() {
        let h = PoolHeat::measure(1, &[]);
        assert!(h.copy_ns_per_kib_pool.is_nan() && h.ratio.is_nan());
        assert_eq!(h.heat, Heat::Cold);
        let v = serde_json::to_value(h).unwrap();
        assert_eq!(v["ratio"], serde_json::Value::Null);
        assert_eq!(v["heat"], "cold");
    }

    #[test]
    fn a_very_large_pool_is_sampled_evenly() {
        // 1 GiB of 64 KiB buffers (not touched: counted only): every second chunk, 512 MiB.
        let one = [0u8; CHUNK];
        let bufs = vec![&one[..]; (1 << 30) / CHUNK];
        let stride = (1usize << 30).div_ceil(PASS_MAX);
        assert_eq!(stride, 2);
        assert_eq!(sampled(&bufs, stride, |_| {}), PASS_MAX as u64);
    }
}
