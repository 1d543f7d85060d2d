//! zcnet beside the kernel's program, as the tables and the summary give it: mode by mode, CPU
//! per MB of each and zcnet's over the program's, pair by pair.

use crate::bench::outcome::SummaryRow;
use crate::bench::verdict::{Goal, Verdict};
use crate::measure::{Comparison, Metric, ResultSet, ratio_pairs};

/// Whose CPU a table of zcnet beside the kernel's program gives, and the rate its gains
/// compare (each one's zero copy over its copy).
#[derive(Clone, Copy, Debug)]
pub struct Side {
    pub whose: &'static str,
    /// As a summary row's metric names it.
    pub short: &'static str,
    pub rate: Metric,
}

/// The sending benches: sender CPU, gains in requests/s.
pub const SENDER: Side = Side {
    whose: "sender",
    short: "send",
    rate: Metric::RequestsPerS,
};

/// `tcp-rx`: receiver CPU, gains in Gbit/s.
pub const RECEIVER: Side = Side {
    whose: "receiver",
    short: "recv",
    rate: Metric::Gbit,
};

/// zcnet beside the kernel's program in one lab of `bench`, mode by mode: sender CPU µs per
/// MB ([`table_of`] with [`SENDER`]).
pub fn table(
    bench: &str,
    program: (&str, Option<&str>),
    lab: &str,
    rows: &[(usize, Vec<ResultSet>, Vec<ResultSet>)],
) -> String {
    table_of(SENDER, bench, program, lab, rows)
}

/// zcnet beside the kernel's program in one lab of `bench`, mode by mode: `side`'s CPU µs per
/// MB (medians) and zcnet's over the program's, pair by pair (median, min-max); then each one's
/// zero copy over its copy in `side`'s rate; and `note`, where the two differ in what they
/// measure or send. `program` is (its name, the note); `rows` are (size, zcnet's sets, the
/// program's sets, each named `ref-` and its twin's mode, copy first).
pub fn table_of(
    side: Side,
    bench: &str,
    (program, note): (&str, Option<&str>),
    lab: &str,
    rows: &[(usize, Vec<ResultSet>, Vec<ResultSet>)],
) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "{bench} {lab}: zcnet beside the kernel's {program} ({} CPU us/MB, medians; zcnet / \
         selftest: median of pairs, min-max)\n",
        side.whose
    );
    let _ = writeln!(
        out,
        "{:>8} | {:<9} | {:>9} | {:>9} | {:>20} | {:>16} | {:>16}",
        "IO size",
        "mode",
        "selftest",
        "zcnet",
        "zcnet / selftest",
        "selftest / copy",
        "zcnet / copy"
    );
    for (size, ours, refs) in rows {
        let (Some(ref_copy), Some(our_copy)) = (refs.first(), ours.first()) else {
            continue;
        };
        for r in refs {
            let Some(o) = ours.iter().find(|o| format!("ref-{}", o.mode) == r.mode) else {
                continue;
            };
            let cpu = |s: &ResultSet| s.median_of(Metric::CpuUsPerMb).unwrap_or(f64::NAN);
            let ratio = Comparison::new(o, r, Metric::CpuUsPerMb)
                .map(|c| {
                    format!(
                        "{:.3} ({:.2}-{:.2})",
                        c.ratio_median, c.ratio_min, c.ratio_max
                    )
                })
                .unwrap_or_else(|| "n/a".into());
            let gain = |s: &ResultSet, base: &ResultSet| {
                if std::ptr::eq(s, base) {
                    return "-".to_owned();
                }
                Comparison::new(s, base, side.rate)
                    .map(|c| format!("{:.2}x", c.ratio_median))
                    .unwrap_or_else(|| "n/a".into())
            };
            let _ = writeln!(
                out,
                "{size:>8} | {:<9} | {:>9.1} | {:>9.1} | {ratio:>20} | {:>16} | {:>16}",
                o.mode,
                cpu(r),
                cpu(o),
                gain(r, ref_copy),
                gain(o, our_copy),
            );
        }
    }
    if let Some(note) = note {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The summary's rows of zcnet beside the kernel's `program`: for each of the program's sets
/// (`ref-` and a mode) in `refs`, zcnet's twin in `ours` over it in `side`'s CPU per MB, pair by
/// pair, judged "at most the program's cost". Each row is named `what` and the mode; its two
/// figures are the program's and zcnet's.
pub fn beside_rows(
    side: Side,
    what: &str,
    program: &str,
    ours: &[ResultSet],
    refs: &[ResultSet],
) -> Vec<SummaryRow> {
    let cpu = |s: &ResultSet| s.median_of(Metric::CpuUsPerMb).unwrap_or(f64::NAN);
    refs.iter()
        .filter_map(|r| {
            let o = ours.iter().find(|o| format!("ref-{}", o.mode) == r.mode)?;
            let pairs = ratio_pairs(&o.runs, &r.runs, Metric::CpuUsPerMb);
            let verdict = Verdict::judge(&pairs, Some(Goal::AtMost(1.0)));
            Some(SummaryRow::new(
                format!("{what} {}: zcnet over {program}", o.mode),
                &format!("{} us/MB", side.short),
                (cpu(r), cpu(o)),
                o.median_of(Metric::ZeroCopyShare),
                &verdict,
            ))
        })
        .collect()
}
