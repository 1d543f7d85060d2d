//! The tables `uring-tx` prints: the patches' table (requests/s by IO size, each mode's change
//! against copy) with the figures to check it against (zcnet beside the kernel's program is
//! [`super::super::reference::table`]).

use crate::bench::sweep::Proto;
use crate::measure::{Metric, ResultSet};

/// Requests/s of the io_uring zero-copy send patches' cover letter (UDP to a `dummy` device):
/// (IO size, `SEND`, `SEND_ZC`).
pub const PATCHES: [(usize, f64, f64); 4] = [
    (600, 2.11e6, 2.38e6),
    (1200, 2.07e6, 2.36e6),
    (4000, 1.87e6, 2.34e6),
    (8000, 1.30e6, 2.40e6),
];

/// The patches' table: IO size | non-zc | zc (+x %) | zc-fixed (+x %), requests/s medians, the
/// change against copy from the pairwise ratios, and the share really zero-copied; and beside
/// it the figure to check it against: the same changes of the kernel's program run beside zcnet
/// (`--reference`), else the patches' own where they measured the size.
pub(super) fn seed_table(
    lab: &str,
    proto: Proto,
    rows: &[(usize, Vec<ResultSet>)],
    against: &[(usize, Vec<ResultSet>, Vec<ResultSet>)],
) -> String {
    use std::fmt::Write as _;
    let proto = if proto == Proto::Udp { "UDP" } else { "TCP" };
    let mut out = format!(
        "uring-tx {lab} {proto}: requests/s (medians; change vs copy's median; zero-copied share)\n"
    );
    let Some((_, first)) = rows.first() else {
        return out;
    };
    let _ = write!(out, "{:>8} |", "IO size");
    for s in first {
        let _ = write!(out, " {:>28} |", s.mode);
    }
    let _ = writeln!(out, " check against");
    for (size, sets) in rows {
        let _ = write!(out, "{size:>8} |");
        let copy = &sets[0];
        let copy_rps = copy.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
        for s in sets {
            let rps = s.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
            let share = s.median_of(Metric::ZeroCopyShare).unwrap_or(0.0);
            let cell = if std::ptr::eq(s, copy) {
                format!("{rps:.0}")
            } else {
                format!(
                    "{rps:.0} ({}, zc {:.0} %)",
                    change(copy_rps, rps),
                    100.0 * share
                )
            };
            let _ = write!(out, " {cell:>28} |");
        }
        let refs = against
            .iter()
            .find(|(s, _, _)| s == size)
            .map(|(_, _, r)| &r[..])
            .unwrap_or(&[]);
        let _ = writeln!(out, " {}", check_against(*size, refs));
    }
    out
}

/// What a reader checks a row's changes against: the kernel's program's changes vs its copy,
/// measured beside zcnet, or the patches' zc change at this size, or nothing.
fn check_against(size: usize, refs: &[ResultSet]) -> String {
    if let Some((base, rest)) = refs.split_first() {
        let base_rps = base.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
        let cells: Vec<String> = rest
            .iter()
            .map(|r| {
                let rps = r.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
                format!(
                    "{} {}",
                    r.mode.trim_start_matches("ref-"),
                    change(base_rps, rps)
                )
            })
            .collect();
        return format!("io_uring_zerocopy_tx here: {}", cells.join(", "));
    }
    match PATCHES.iter().find(|(s, _, _)| *s == size) {
        Some((_, copy, zc)) => format!("the patches (dummy device): zc {}", change(*copy, *zc)),
        None => "-".into(),
    }
}

/// The change of `median` against `base` in whole percent, from the two medians themselves, so
/// that its sign always agrees with them (issue 17: "424483 (-10 %)" was shown beside a median
/// above copy's, the change being the median of pairwise ratios).
pub fn change(base: f64, median: f64) -> String {
    let pct = 100.0 * (median / base - 1.0);
    if !pct.is_finite() {
        return "n/a".into();
    }
    // Rounded; a change that rounds to 0 keeps its sign ("+0 %", "-0 %").
    let shown = pct.round();
    if shown != 0.0 {
        format!("{shown:+.0} %")
    } else if pct > 0.0 {
        "+0 %".into()
    } else if pct < 0.0 {
        "-0 %".into()
    } else {
        "0 %".into()
    }
}

#[cfg(test)]
#[test]
fn changes_agree_in_sign_with_the_medians() {
    assert_eq!(change(100.0, 90.0), "-10 %");
    assert_eq!(change(100.0, 110.0), "+10 %");
    assert_eq!(change(100.0, 100.4), "+0 %");
    assert_eq!(change(100.0, 99.6), "-0 %");
    assert_eq!(change(100.0, 100.0), "0 %");
    assert_eq!(change(0.0, 5.0), "n/a");
    // The case of the issue: a median above copy's shows a positive change.
    assert!(change(400_000.0, 424_483.0).starts_with('+'));
}
