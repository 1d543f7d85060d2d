//! The page's opening: where zero copy pays in each size sweep, and the suite's verdicts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::charts::{Palette, break_even};
use super::figures::{Figure, condition_without_size, distinguishing, size_of, spread};
use super::input;
use super::input::{Input, Report};
use super::text::esc;

/// The page's opening: what a reader came for. Per bench, condition and zero-copy mode of the
/// size sweeps, where zero copy pays against copy (throughput) and its gain at the largest
/// size; then the suite's verdicts, MISSes first, each linking to its bench.
pub(super) fn verdicts(inputs: &[Input], palette: &Palette) -> String {
    let mut h = String::from("<h2 id=\"verdicts\">Verdicts</h2>\n");
    let mut rows = String::new();
    for i in inputs {
        for r in &i.reports {
            let same: Vec<&Report> = i.reports.iter().filter(|o| o.bench == r.bench).collect();
            let extra = distinguishing(&same, r);
            // Per condition without its size: copy's and each mode's medians by size.
            let mut by: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
            for set in &r.results {
                let (Some(size), Some((m, _, _))) = (size_of(set), spread(set, Figure::Gbit))
                else {
                    continue;
                };
                by.entry((condition_without_size(set), set.mode.clone()))
                    .or_default()
                    .push((size, m));
            }
            for ((cond, mode), points) in &by {
                if mode == "copy" || points.len() < 2 {
                    continue;
                }
                let Some(copy) = by.get(&(cond.clone(), "copy".to_owned())) else {
                    continue;
                };
                let mut joined: Vec<(f64, f64, f64)> = points
                    .iter()
                    .filter_map(|&(size, m)| {
                        let c = copy.iter().find(|c| c.0 == size)?.1;
                        (c > 0.0).then_some((size, m, c))
                    })
                    .collect();
                joined.sort_by(|a, b| a.0.total_cmp(&b.0));
                if joined.len() < 2 {
                    continue;
                }
                let (from, gain) = break_even(&joined);
                let largest = joined.last().map_or(0.0, |p| p.0);
                let _ = writeln!(
                    rows,
                    "<tr><td><a href=\"#{b}\">{b}</a></td><td>{}</td><td>{}{}</td><td>{}</td>\
                     <td>{:.2}x at {largest} B</td></tr>",
                    esc(&format!("{}: {cond}{extra}", i.label)),
                    palette.swatch(&i.label, mode),
                    esc(mode),
                    from.map_or("never (in the sizes measured)".to_owned(), |f| {
                        format!("from {f} B")
                    }),
                    gain,
                    b = esc(&r.bench),
                );
            }
        }
    }
    if !rows.is_empty() {
        h.push_str(
            "<p>Where zero copy pays against copy here, by throughput: the smallest size measured \
             from which the mode is at least as fast at every larger size, and its gain at the \
             largest.</p>\n<table class=\"pays\"><tr><th>bench</th><th>host: condition</th>\
             <th>mode</th><th>pays</th><th>gain</th></tr>\n",
        );
        h.push_str(&rows);
        h.push_str("</table>\n");
    }
    let mut summary: Vec<(&str, &input::SummaryRow)> = inputs
        .iter()
        .flat_map(|i| i.summary.iter().map(move |r| (i.label.as_str(), r)))
        .collect();
    // FAILs and MISSes first, then the unsure, then the rest in the suite's order.
    summary.sort_by_key(|(_, r)| match r.word().as_str() {
        "fail" | "miss" => 0,
        "unsure" => 1,
        _ => 2,
    });
    if !summary.is_empty() {
        h.push_str(
            "<p>A verdict is judged on the 95 % bootstrap interval of its ratio over the runs: \
             <b>ok</b> and <b>MISS</b> when the whole interval lies on one side of the goal, \
             <b>unsure</b> when it straddles it (the verdict says how many runs would likely \
             decide). A run whose machine was busy with other work says so.</p>\n\
             <table class=\"summary\"><tr><th>verdict</th><th>host</th><th>experiment</th>\
             <th>metric</th><th>ratio</th><th>95 % interval</th><th>zero-copied</th>\
             <th>machine busy</th></tr>\n",
        );
        for (label, r) in summary {
            let bench = r.experiment.split(' ').next().unwrap_or("");
            let class = match r.word().as_str() {
                "fail" | "miss" => "miss",
                "unsure" => "unsure",
                "ok" => "ok",
                _ => "info",
            };
            let interval = match (r.ratio_low, r.ratio_high) {
                (Some(lo), Some(hi)) => format!("{lo:.3}-{hi:.3}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                h,
                "<tr><td class=\"{class}\">{}</td><td>{}</td><td><a href=\"#{}\">{}</a></td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.verdict),
                esc(label),
                esc(bench),
                esc(&r.experiment),
                esc(&r.metric),
                r.ratio.map_or("-".to_owned(), |x| format!("{x:.3}")),
                interval,
                r.zero_copy_share
                    .map_or("-".to_owned(), |z| format!("{:.1} %", 100.0 * z)),
                esc(r.load.as_deref().unwrap_or("-")),
            );
        }
        h.push_str("</table>\n");
    }
    if rows.is_empty() && inputs.iter().all(|i| i.summary.is_empty()) {
        h.push_str("<p>No size sweep against copy and no suite summary in these files.</p>\n");
    }
    h
}
