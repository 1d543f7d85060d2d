//! The suite's rows of `udp-gso`: GSO by copy over one send per datagram, the zero-copy modes
//! over GSO by copy, in bytes per CPU second; `gso-auto` over its better way.

use crate::bench::outcome::SummaryRow;
use crate::bench::verdict::{Goal, Verdict};
use crate::measure::{Metric, ResultSet, ratio_pairs};

/// `a` over `b` in bytes per CPU second: `b`'s CPU per MB over `a`'s, pair by pair.
fn per_cpu(a: &ResultSet, b: &ResultSet) -> Vec<f64> {
    ratio_pairs(&b.runs, &a.runs, Metric::CpuUsPerMb)
}

/// The suite's rows: the acceptance's ratios, at 1472-byte segments and 42-segment trains
/// into the sink; information elsewhere.
pub(super) fn summary_rows(
    lab: &str,
    segment: usize,
    n: usize,
    sets: &[ResultSet],
) -> Vec<SummaryRow> {
    let find = |name: &str| sets.iter().find(|s| s.mode == name);
    let bound = lab == "sink" && segment == 1472 && n == 42;
    let mut rows = Vec::new();
    let mut row = |a: &ResultSet, b: &ResultSet, verdict: Verdict| {
        if per_cpu(a, b).is_empty() {
            return;
        }
        let mbps = |s: &ResultSet| {
            s.median_of(Metric::CpuUsPerMb)
                .map_or(f64::NAN, |us| 1e6 / us)
        };
        rows.push(SummaryRow::new(
            format!(
                "udp-gso {lab} {segment} B x {n}: {} over {}",
                a.mode, b.mode
            ),
            "MB per CPU s",
            (mbps(b), mbps(a)),
            a.median_of(Metric::ZeroCopyShare),
            &verdict,
        ));
    };
    if let (Some(copy), Some(one)) = (find("gso-copy"), find("sendmsg")) {
        let goal = bound.then_some(Goal::AtLeast(10.0));
        row(copy, one, Verdict::judge(&per_cpu(copy, one), goal));
    }
    if let Some(copy) = find("gso-copy") {
        for m in ["gso-zc", "gso-zc-fixed"] {
            let Some(s) = find(m) else { continue };
            let share_ok = s
                .median_of(Metric::ZeroCopyShare)
                .is_some_and(|x| x >= 0.999);
            let pairs = per_cpu(s, copy);
            let v = if bound {
                // The acceptance's bound for both: 1.3x GSO by copy, nothing copied.
                Verdict::judge(&pairs, Some(Goal::AtLeast(1.3))).require(share_ok, "copied > 0 %")
            } else if lab == "veth" {
                Verdict::info(&pairs, "veth delivery copies")
            } else {
                Verdict::info(&pairs, "")
            };
            row(s, copy, v);
        }
        if let Some(s) = find("gso-auto") {
            // Auto chooses between the two ways of its own sender: judged against the better.
            let own: Vec<ResultSet> = sets
                .iter()
                .filter(|s| matches!(s.mode.as_str(), "gso-copy" | "gso-zc"))
                .cloned()
                .collect();
            let req = |s: &ResultSet| s.median_of(Metric::RequestsPerS).unwrap_or(f64::NAN);
            let verdict = crate::bench::outcome::auto_verdict(s, &own);
            if verdict.interval.is_some() {
                rows.push(SummaryRow::new(
                    format!(
                        "udp-gso {lab} {segment} B x {n}: {} over its better way",
                        s.mode
                    ),
                    "trains/s",
                    (req(copy), req(s)),
                    s.median_of(Metric::ZeroCopyShare),
                    &verdict,
                ));
            }
        }
    }
    rows
}
