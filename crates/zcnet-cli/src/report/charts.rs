//! The page's charts: the palette (one colour per mode on the whole page), bars with min-max
//! whiskers per condition and mode, and the lines against message size with the break-even
//! marks of a profile.

use std::collections::BTreeMap;

use super::figures::{Bench, Figure, condition_without_size, send_path, size_of, spread};
use super::input::Input;
use super::plot;
use super::plot::{Bar, Group, Line};
use super::text::condition;

/// One colour per mode on the whole page, in the order modes first appear, and lighter for the
/// second and later host: the same mode is the same colour in every chart, legend and table.
pub(super) struct Palette {
    modes: Vec<String>,
    hosts: Vec<String>,
}

impl Palette {
    pub(super) fn of(inputs: &[Input]) -> Palette {
        let mut modes: Vec<String> = Vec::new();
        for set in inputs
            .iter()
            .flat_map(|i| &i.reports)
            .flat_map(|r| &r.results)
        {
            if !modes.contains(&set.mode) {
                modes.push(set.mode.clone());
            }
        }
        Palette {
            modes,
            hosts: inputs.iter().map(|i| i.label.clone()).collect(),
        }
    }

    pub(super) fn color(&self, host: &str, mode: &str) -> plotters::style::RGBColor {
        let m = self.modes.iter().position(|x| x == mode).unwrap_or(0);
        let h = self.hosts.iter().position(|x| x == host).unwrap_or(0);
        plot::color(m, h)
    }

    /// A swatch of the colour, for a table cell.
    pub(super) fn swatch(&self, host: &str, mode: &str) -> String {
        format!(
            "<span class=\"sw\" style=\"background:{}\"></span>",
            plot::css(self.color(host, mode))
        )
    }
}

/// A bar chart of `figure` for one bench: a group per condition, a series per host and mode.
pub(super) fn bar_chart(
    b: &Bench<'_>,
    figure: Figure,
    hosts: usize,
    palette: &Palette,
) -> anyhow::Result<Option<String>> {
    let mut series: Vec<plot::Series> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    for (label, r, extra) in &b.reports {
        for set in &r.results {
            let Some((median, min, max)) = spread(set, figure) else {
                continue;
            };
            let name = if hosts > 1 {
                format!("{label}: {}", set.mode)
            } else {
                set.mode.clone()
            };
            let s = series
                .iter()
                .position(|n| n.name == name)
                .unwrap_or_else(|| {
                    series.push(plot::Series {
                        name,
                        color: palette.color(label, &set.mode),
                    });
                    series.len() - 1
                });
            let cond = condition(set) + extra;
            let bar = Bar {
                series: s,
                median,
                min,
                max,
            };
            match groups.iter_mut().find(|g| g.label == cond) {
                Some(g) => g.bars.push(bar),
                None => groups.push(Group {
                    label: cond,
                    bars: vec![bar],
                }),
            }
        }
    }
    if groups.is_empty() {
        return Ok(None);
    }
    let (title, y) = figure.title();
    plot::bars(title, y, &series, &groups).map(Some)
}

/// Lines of `figure` against size where a condition of the bench sweeps three sizes or more,
/// with the profile's break-even sizes of the paths drawn.
pub(super) fn sweep_chart(
    b: &Bench<'_>,
    figure: Figure,
    hosts: usize,
    profile: Option<&zcnet::auto::Profile>,
    palette: &Palette,
) -> anyhow::Result<Option<String>> {
    type Points = Vec<(f64, f64, f64, f64)>;
    // Per line: its colour (the mode's), its condition (drawn solid, dashed, dotted, ...).
    let mut lines: BTreeMap<String, (plotters::style::RGBColor, String, Points)> = BTreeMap::new();
    let mut marks: Vec<plot::Mark> = Vec::new();
    for (label, r, extra) in &b.reports {
        for set in &r.results {
            let (Some(size), Some((m, lo, hi))) = (size_of(set), spread(set, figure)) else {
                continue;
            };
            if let (Some(p), Some((path, route))) = (profile, send_path(&b.name, set))
                && let zcnet::auto::Threshold::From(n) = p.entry(path, route).threshold
            {
                let label = format!("tune: {} {} from {n} B", path.name(), route.name());
                if !marks.iter().any(|m| m.label == label) {
                    marks.push(plot::Mark {
                        at: n as f64,
                        label,
                    });
                }
            }
            let cond = if hosts > 1 {
                format!("{label}: {}{extra}", condition_without_size(set))
            } else {
                format!("{}{extra}", condition_without_size(set))
            };
            let name = format!("{cond} {}", set.mode);
            lines
                .entry(name)
                .or_insert_with(|| (palette.color(label, &set.mode), cond, Vec::new()))
                .2
                .push((size, m, lo, hi));
        }
    }
    let mut conditions: Vec<String> = Vec::new();
    let lines: Vec<Line> = lines
        .into_iter()
        .filter(|(_, (_, _, p))| p.len() >= 3)
        .map(|(name, (color, cond, mut points))| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let style = conditions
                .iter()
                .position(|c| *c == cond)
                .unwrap_or_else(|| {
                    conditions.push(cond);
                    conditions.len() - 1
                });
            Line {
                name,
                color,
                style,
                points,
            }
        })
        .collect();
    if lines.is_empty() {
        return Ok(None);
    }
    let (title, y) = figure.title();
    plot::lines(&format!("{title} against message size"), y, &lines, &marks).map(Some)
}

/// Where zero copy pays in one sweep: the smallest size from which the mode's throughput is at
/// least copy's at every larger size (`None`: it never does), and its gain at the largest size.
pub(super) fn break_even(points: &[(f64, f64, f64)]) -> (Option<f64>, f64) {
    // (size, zero-copy median, copy median), by size.
    let mut from = None;
    for (i, p) in points.iter().enumerate() {
        if points[i..].iter().all(|q| q.1 >= q.2) {
            from = Some(p.0);
            break;
        }
    }
    let gain = points.last().map_or(f64::NAN, |p| p.1 / p.2);
    (from, gain)
}
