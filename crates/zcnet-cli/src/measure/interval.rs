//! How sure a figure is: percentile-bootstrap intervals, one engine for the suite's verdicts
//! ([`crate::bench::verdict`]) and the run comparison ([`crate::report::compare`]).
//!
//! Two shapes of data:
//! - pairs (a ratio per alternation, runs made side by side): [`median_of_pairs`] resamples the
//!   pairs and takes the median of each resample, the statistic the tables print;
//! - two independent samples (a base file against a new one, or runs chosen by what ran before
//!   them): [`ratio_of_medians`] resamples each side apart.
//!
//! Both resample [`RESAMPLES`] times from a fixed seed, so that the same runs give the same
//! interval. The percentile bootstrap of a median is the range of the values when there are
//! few: with 3 pairs the interval is their minimum to maximum, which holds the true median with
//! a probability of 75 % (1 - 2 x 0.5^3), 94 % with 5 pairs, 97 % with 6 (the order-statistic
//! bound); it reaches its nominal 95 % from about 8. docs/verdicts.md says so where it tells how
//! to read a verdict.

/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 2000;

/// A value with its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The point estimate (the median, or the ratio of the medians).
    pub point: f64,
    /// 2.5th percentile of the resampled estimates.
    pub low: f64,
    /// 97.5th percentile.
    pub high: f64,
}

impl Interval {
    /// Whether `x` lies inside, bounds included.
    pub fn holds(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// A small, fixed-seed generator (xorshift64*): the bootstrap needs no more.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    /// Fills `out` with draws from `from`, with replacement.
    fn resample(&mut self, from: &[f64], out: &mut [f64]) {
        for x in out.iter_mut() {
            *x = from[self.below(from.len())];
        }
    }
}

/// The median of `v`, sorting it in place (the mean of the middle two for an even count).
/// `v` must not be empty.
fn median_in_place(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The 2.5th and 97.5th percentiles of `draws` (sorted here); `None` when empty.
fn percentiles(draws: &mut [f64]) -> Option<(f64, f64)> {
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    let last = draws.len() - 1;
    let at = |q: f64| draws[((q * draws.len() as f64) as usize).min(last)];
    Some((at(0.025), at(0.975)))
}

/// The median of `pairs` (one ratio per alternation; NaN and infinite values left out) and its
/// 95 % percentile-bootstrap interval; `None` without a finite value. One value gives an
/// interval of no width: callers that judge need at least two ([`crate::bench::verdict`]).
pub fn median_of_pairs(pairs: &[f64]) -> Option<Interval> {
    let v: Vec<f64> = pairs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let point = median_in_place(&mut v.clone());
    let mut rng = Rng::new();
    let mut sample = vec![0.0; v.len()];
    let mut draws: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            rng.resample(&v, &mut sample);
            median_in_place(&mut sample)
        })
        .collect();
    let (low, high) = percentiles(&mut draws)?;
    Some(Interval { point, low, high })
}

/// The ratio of medians `new / base` of two independent samples and its 95 %
/// percentile-bootstrap interval, both sides resampled apart; `None` when either side is empty
/// or the base's median is not above 0. A resample whose base median is 0 has no ratio and is
/// left out (a base of some zero runs).
pub fn ratio_of_medians(base: &[f64], new: &[f64]) -> Option<Interval> {
    if base.is_empty() || new.is_empty() {
        return None;
    }
    let base_median = median_in_place(&mut base.to_vec());
    if base_median.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let point = median_in_place(&mut new.to_vec()) / base_median;
    let mut rng = Rng::new();
    let (mut b, mut n) = (vec![0.0; base.len()], vec![0.0; new.len()]);
    let mut draws = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        rng.resample(base, &mut b);
        rng.resample(new, &mut n);
        let bm = median_in_place(&mut b);
        if bm > 0.0 {
            draws.push(median_in_place(&mut n) / bm);
        }
    }
    let (low, high) = percentiles(&mut draws).unwrap_or((point, point));
    Some(Interval { point, low, high })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_pairs_give_their_range() {
        // The percentile bootstrap of a median of 3: each extreme is the resampled median with a
        // probability of 7/27 (above 2.5 %), so the interval is the range.
        let i = median_of_pairs(&[1.2, 0.9, 1.5]).unwrap();
        assert_eq!((i.point, i.low, i.high), (1.2, 0.9, 1.5));
        // Many pairs: the interval is narrower than the range and holds the median.
        let many: Vec<f64> = (0..40).map(|k| 1.0 + f64::from(k % 10) / 100.0).collect();
        let i = median_of_pairs(&many).unwrap();
        assert!(i.low > 1.0 && i.high < 1.09 && i.holds(i.point), "{i:?}");
    }

    #[test]
    fn pairs_without_a_finite_value_have_no_interval() {
        assert_eq!(median_of_pairs(&[]), None);
        assert_eq!(median_of_pairs(&[f64::NAN, f64::INFINITY]), None);
        let one = median_of_pairs(&[f64::NAN, 2.0]).unwrap();
        assert_eq!((one.low, one.high), (2.0, 2.0));
    }

    #[test]
    fn the_same_runs_give_the_same_interval() {
        let v = [0.8, 1.1, 0.95, 1.3, 1.0];
        assert_eq!(median_of_pairs(&v), median_of_pairs(&v));
        let (a, b) = ([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]);
        assert_eq!(ratio_of_medians(&a, &b), ratio_of_medians(&a, &b));
    }

    #[test]
    fn a_ratio_of_medians_holds_its_point() {
        let i =
            ratio_of_medians(&[10.0, 11.0, 9.0, 10.5, 9.5], &[7.0, 7.7, 6.3, 7.35, 6.65]).unwrap();
        assert!((i.point - 0.7).abs() < 1e-9, "{i:?}");
        assert!(
            i.low <= i.point && i.point <= i.high && i.high < 1.0,
            "{i:?}"
        );
        // No spread: no width.
        let i = ratio_of_medians(&[5.0], &[5.0]).unwrap();
        assert_eq!((i.point, i.low, i.high), (1.0, 1.0, 1.0));
        // A collapse to zero is a ratio of 0, the whole interval there.
        let i = ratio_of_medians(&[10.0; 3], &[0.0; 3]).unwrap();
        assert_eq!((i.point, i.high), (0.0, 0.0));
        // A base of some zero runs: the resamples with a zero median are left out.
        let i = ratio_of_medians(&[0.0, 10.0, 10.0], &[10.0; 3]).unwrap();
        assert!(
            i.point == 1.0 && i.low.is_finite() && i.high.is_finite(),
            "{i:?}"
        );
        // Nothing to divide by.
        assert_eq!(ratio_of_medians(&[0.0, 0.0], &[1.0]), None);
        assert_eq!(ratio_of_medians(&[], &[1.0]), None);
    }
}
