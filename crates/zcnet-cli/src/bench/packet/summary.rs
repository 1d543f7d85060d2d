//! How `packet` shows its runs: a line per run, and the summary rows of one condition and
//! size (the ring against recvfrom, tcpdump and AF_XDP).

use crate::bench::outcome::SummaryRow;
use crate::bench::verdict::{Goal, Verdict};
use crate::measure::{Comparison, Metric, ResultSet, Run, ratio_pairs};

use super::mode::{Condition, Mode};

/// One line per run.
pub(super) fn describe(mode: Mode, run: &Run) -> String {
    let offered = run.packets_offered.unwrap_or(0) as f64 / run.seconds.max(1e-9);
    let captured = run.requests_per_s.unwrap_or(0.0);
    let ns = run.cpu_ns_per_request.unwrap_or(f64::NAN);
    format!(
        "{:<9} {:>6.3} Mpps captured of {:>6.3} offered ({:>5.1} %), {} dropped, capture CPU {:>6.1} ns/packet ({:.1} M packets per CPU-s), {} c-switches",
        mode.name(),
        captured / 1e6,
        offered / 1e6,
        100.0 * captured / offered.max(1e-9),
        run.packets_dropped.unwrap_or(0),
        ns,
        1e3 / ns,
        run.ctx_switches
    ) + &run.far_part()
}

pub(super) fn median(set: &ResultSet, metric: Metric) -> f64 {
    set.median_of(metric).unwrap_or(f64::NAN)
}

/// The capture's CPU per packet, as a summary row shows it.
pub(super) const CPU_PER_PACKET: (&str, Metric, f64) =
    ("CPU ns/packet", Metric::CpuNsPerRequest, 1.0);

/// The summary rows of one condition and size: ring against recvfrom (CPU per packet, judged
/// where the capture's CPU is its own) and ring against tcpdump (the share of the offered
/// packets captured, judged in both conditions: the offered rate moves from run to run with
/// the generator's CPU, so the share, not the raw rate, compares runs). Verdicts for the
/// issue's 64-byte frames only.
pub(super) fn summary_rows(
    lab: &str,
    cond: Condition,
    size: usize,
    ring: &ResultSet,
    recvfrom: Option<&ResultSet>,
    tcpdump: Option<&ResultSet>,
    xdp: Option<&ResultSet>,
) -> Vec<SummaryRow> {
    let judged = size == 64;
    let name = cond.name();
    let mut rows = Vec::new();
    let pairs = |a: &ResultSet, b: &ResultSet, m: Metric| ratio_pairs(&a.runs, &b.runs, m);
    // The row of `a -> b`: their medians of `metric` (times `scale`), judged on the pairs `p`;
    // none without pairs.
    let mut row = |(a, b): (&ResultSet, &ResultSet),
                   (unit, metric, scale): (&str, Metric, f64),
                   p: &[f64],
                   verdict: &Verdict| {
        if !p.is_empty() {
            rows.push(SummaryRow::new(
                format!("packet {lab} {name} {size} B: {} -> {}", a.mode, b.mode),
                unit,
                (scale * median(a, metric), scale * median(b, metric)),
                None,
                verdict,
            ));
        }
    };
    if let Some(r) = recvfrom {
        let p = pairs(ring, r, Metric::CpuNsPerRequest);
        let judged = judged && cond == Condition::RxOnGenerator;
        // Packets per CPU second is the inverse of CPU per packet: at least 2x means <= 0.5.
        let verdict = Verdict::judge(&p, judged.then_some(Goal::AtMost(0.5)));
        let per_cpu_s = 1.0 / verdict.ratio();
        let verdict = verdict.note(format!("{per_cpu_s:.1}x packets per CPU-s"));
        row((r, ring), CPU_PER_PACKET, &p, &verdict);
    }
    if let Some(t) = tcpdump {
        let p = pairs(ring, t, Metric::CaptureShare);
        let drops = |s: &ResultSet| s.runs.iter().all(|r| r.packets_dropped.is_some());
        // The raw rates, shown beside the verdict: they follow the generator's rate.
        let rate =
            Comparison::new(ring, t, Metric::RequestsPerS).map_or(f64::NAN, |r| r.ratio_median);
        let verdict = Verdict::judge(&p, judged.then_some(Goal::AtLeast(1.0)))
            .require(drops(ring) && drops(t), "drops not reported")
            .note(format!(
                "drops {:.0} / {:.0}, pkt/s ratio {rate:.2}",
                median(t, Metric::PacketsDropped),
                median(ring, Metric::PacketsDropped),
            ));
        row(
            (t, ring),
            ("captured %", Metric::CaptureShare, 100.0),
            &p,
            &verdict,
        );
    }
    // Issue 18: AF_XDP's CPU per packet at most the ring's, its captured share at least the
    // ring's, in the same run (at 64 B, where per-packet costs show most).
    if let Some(x) = xdp {
        let p = pairs(x, ring, Metric::CpuNsPerRequest);
        let judged = judged && cond == Condition::RxOnGenerator;
        let share = Verdict::judge(
            &pairs(x, ring, Metric::CaptureShare),
            judged.then_some(Goal::AtLeast(1.0)),
        );
        let verdict =
            Verdict::judge(&p, judged.then_some(Goal::AtMost(1.0))).and("share ratio", share);
        row((ring, x), CPU_PER_PACKET, &p, &verdict);
    }
    rows
}
