//! The page's charts, drawn by `plotters` into SVG strings: bars with min-max whiskers, and
//! lines against message size.

use plotters::prelude::*;

/// One bar: a series (host and mode) in a group (a condition), its median and spread.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Index into the chart's series names.
    pub series: usize,
    /// Median.
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

/// A group of bars under one label.
#[derive(Clone, Debug)]
pub struct Group {
    /// The condition (`sink ipv4 size=8000`).
    pub label: String,
    /// Its bars.
    pub bars: Vec<Bar>,
}

/// One line of a size sweep.
#[derive(Clone, Debug)]
pub struct Line {
    /// Series name.
    pub name: String,
    /// Its mode's colour ([`color`]).
    pub color: RGBColor,
    /// Its condition among the chart's: 0 solid, 1 dashed, 2 dotted, and so on.
    pub style: usize,
    /// `(size, median, min, max)`, by size.
    pub points: Vec<(f64, f64, f64, f64)>,
}

const FONT: &str = "sans-serif";

/// The colour of mode number `mode` (in the page's order of first appearance), the same in every
/// chart and table of the page: colour-blind-safe first (Okabe-Ito), then plotters' palette.
/// The second and later host of a page draws its modes lighter (`host` 1, 2, ...).
pub fn color(mode: usize, host: usize) -> RGBColor {
    const OKABE_ITO: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(213, 94, 0),
        RGBColor(120, 94, 240),
    ];
    let RGBColor(r, g, b) = OKABE_ITO.get(mode).copied().unwrap_or_else(|| {
        let RGBAColor(r, g, b, _) = Palette99::pick(mode).to_rgba();
        RGBColor(r, g, b)
    });
    // Towards white by 45 % per host after the first, at most twice.
    let k = 0.45 * host.min(2) as f64;
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * k).round() as u8;
    RGBColor(mix(r), mix(g), mix(b))
}

/// The CSS `#rrggbb` of a colour, for the page's tables.
pub fn css(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A series of a chart: its name in the legend and its colour.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend's text.
    pub name: String,
    /// Its colour ([`color`]).
    pub color: RGBColor,
}

/// Width of every chart: the page's (its CSS caps it at the window).
pub const WIDTH: u32 = 1360;

/// Pixels of one character of the 11-pixel label font, as the page's fonts draw it at most
/// (sans-serif averages 0.5-0.55 em; digits and capitals 0.6).
pub const CHAR_PX: f64 = 6.6;

/// A bar chart of `groups`, each bar with its min-max whisker.
///
/// # Errors
/// A drawing error (none is expected for an SVG string).
pub fn bars(
    title: &str,
    y_desc: &str,
    series: &[Series],
    groups: &[Group],
) -> anyhow::Result<String> {
    let per = series.len().max(1);
    let width = WIDTH;
    let legend_w = 240;
    // The groups' labels, wrapped to the width of a group (a word longer than that is cut into
    // pieces): the label area grows with the lines they need, so no two labels meet.
    let group_px = f64::from(width - legend_w - 64 - 20) / groups.len().max(1) as f64;
    let chars = ((group_px - 6.0) / CHAR_PX).floor().max(3.0) as usize;
    let labels: Vec<Vec<String>> = groups.iter().map(|g| wrap(&g.label, chars)).collect();
    let lines = labels.iter().map(Vec::len).max().unwrap_or(1).min(16);
    let height = 320 + 14 * lines as u32;
    let top = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.max.max(b.median)))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(width - legend_w);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 16))
            .margin(10)
            .x_label_area_size(20 + 14 * lines as u32)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..groups.len().max(1) as f64, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .draw()?;
        let slot = 0.8 / per as f64;
        for (g, group) in groups.iter().enumerate() {
            for b in &group.bars {
                let x0 = g as f64 + 0.1 + b.series as f64 * slot;
                let x1 = x0 + slot * 0.9;
                let c = series.get(b.series).map_or(BLACK, |s| s.color);
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, b.median.max(0.0))],
                    c.filled(),
                )))?;
                let xm = (x0 + x1) / 2.0;
                let whisker = BLACK.stroke_width(1);
                chart.draw_series([
                    PathElement::new(vec![(xm, b.min), (xm, b.max)], whisker),
                    PathElement::new(
                        vec![(x0 + slot * 0.2, b.min), (x1 - slot * 0.2, b.min)],
                        whisker,
                    ),
                    PathElement::new(
                        vec![(x0 + slot * 0.2, b.max), (x1 - slot * 0.2, b.max)],
                        whisker,
                    ),
                ])?;
            }
            // The group's label under its bars, wrapped to its width.
            let (px, py) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
            for (k, line) in labels[g].iter().take(lines).enumerate() {
                plot.draw(&Text::new(
                    line.clone(),
                    (px, py + 8 + 14 * k as i32),
                    (FONT, 11).into_font().color(&BLACK).pos(text_center()),
                ))?;
            }
        }
        draw_legend(&legend, series, &[])?;
        root.present()?;
    }
    Ok(svg)
}

/// A vertical mark on a sweep: where `zcnet tune` found zero copy starts to pay.
#[derive(Clone, Debug)]
pub struct Mark {
    /// The size, bytes.
    pub at: f64,
    /// What it is (`tune: msg_zerocopy_udp device from 8000 B`).
    pub label: String,
}

/// Lines of `metric` against size, log scale, with min-max whiskers at each point, and `marks`
/// as dashed vertical lines.
///
/// # Errors
/// A drawing error.
pub fn lines(title: &str, y_desc: &str, lines: &[Line], marks: &[Mark]) -> anyhow::Result<String> {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::MAX, 0f64), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if lo < hi {
        (lo / 1.3, hi * 1.3)
    } else {
        (1.0, 10.0)
    };
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.3.max(p.1)))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };
    let names: Vec<Series> = lines
        .iter()
        .map(|l| Series {
            name: l.name.clone(),
            color: l.color,
        })
        .collect();
    let styles: Vec<usize> = lines.iter().map(|l| l.style).collect();
    // Ticks at the powers of 4 from 256 B (256 B, 1 KiB, 4 KiB, ...) inside the range.
    let ticks: Vec<f64> = (4..=15)
        .map(|k| 2f64.powi(2 * k))
        .filter(|t| (lo..=hi).contains(t))
        .collect();
    let mut svg = String::new();
    {
        let legend_w = 420;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(WIDTH - legend_w);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 16))
            .margin(10)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((lo..hi).log_scale().with_key_points(ticks), 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("message size (log scale)")
            .x_label_formatter(&|x| bytes_label(*x))
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .draw()?;
        for l in lines {
            let c = l.color;
            let points = l.points.iter().map(|p| (p.0, p.1));
            match l.style {
                0 => chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?,
                k => chart.draw_series(DashedLineSeries::new(
                    points,
                    if k == 1 { 8 } else { 2 },
                    if k == 1 { 5 } else { 4 },
                    c.stroke_width(2),
                ))?,
            };
            chart.draw_series(
                l.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 3, c.filled())),
            )?;
            chart.draw_series(
                l.points
                    .iter()
                    .map(|p| PathElement::new(vec![(p.0, p.2), (p.0, p.3)], c.stroke_width(1))),
            )?;
        }
        for (k, m) in marks.iter().enumerate() {
            if m.at < lo || m.at > hi {
                continue;
            }
            let grey = RGBColor(90, 90, 90);
            chart.draw_series(DashedLineSeries::new(
                [(m.at, 0.0), (m.at, top)],
                6,
                4,
                grey.stroke_width(1),
            ))?;
            let (px, py) = chart.backend_coord(&(m.at, top));
            plot.draw(&Text::new(
                m.label.clone(),
                (px + 4, py + 4 + 14 * k as i32),
                (FONT, 11).into_font().color(&grey),
            ))?;
        }
        draw_legend(&legend, &names, &styles)?;
        root.present()?;
    }
    Ok(svg)
}

/// A size as the sweeps' axis names it: `256 B`, `1 KiB`, `64 KiB`, `1 MiB`.
pub fn bytes_label(x: f64) -> String {
    let units = [("MiB", 1048576.0), ("KiB", 1024.0)];
    for (unit, size) in units {
        if x >= size {
            let v = x / size;
            return if (v - v.round()).abs() < 1e-9 {
                format!("{} {unit}", v.round())
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{} B", x.round())
}

fn text_center() -> plotters::style::text_anchor::Pos {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    Pos::new(HPos::Center, VPos::Top)
}

/// The series names with their colours (and line styles, where given), in the right-hand
/// column.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
    styles: &[usize],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e| anyhow::anyhow!("{e:?}");
    for (i, s) in series.iter().enumerate() {
        let y = 40 + 20 * i as i32;
        match styles.get(i) {
            // A line's sample: its colour and dashes.
            Some(&k) => {
                let pieces: Vec<(i32, i32)> = match k {
                    0 => vec![(4, 18)],
                    1 => vec![(4, 10), (14, 18)],
                    _ => vec![(4, 6), (9, 11), (14, 16)],
                };
                for (a, b) in pieces {
                    area.draw(&PathElement::new(
                        vec![(a, y + 6), (b, y + 6)],
                        s.color.stroke_width(3),
                    ))
                    .map_err(err)?;
                }
            }
            None => area
                .draw(&Rectangle::new([(6, y), (18, y + 12)], s.color.filled()))
                .map_err(err)?,
        }
        area.draw(&Text::new(
            s.name.clone(),
            (24, y),
            (FONT, 12).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// Splits `s` at spaces into lines of at most `width` characters; a longer word is cut into
/// pieces of `width`.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out: Vec<String> = Vec::new();
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        let chars: Vec<char> = word.chars().collect();
        for piece in chars.chunks(width) {
            let piece: String = piece.iter().collect();
            match out.last_mut() {
                Some(l) if l.chars().count() + 1 + piece.chars().count() <= width => {
                    l.push(' ');
                    l.push_str(&piece);
                }
                _ => out.push(piece),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels() {
        let series = vec![
            Series {
                name: "a: copy".into(),
                color: color(0, 0),
            },
            Series {
                name: "a: zc".into(),
                color: color(1, 0),
            },
        ];
        let groups = vec![Group {
            label: "sink ipv4 size=8000".into(),
            bars: vec![
                Bar {
                    series: 0,
                    median: 10.0,
                    min: 9.0,
                    max: 11.0,
                },
                Bar {
                    series: 1,
                    median: 5.0,
                    min: 4.0,
                    max: f64::NAN,
                },
            ],
        }];
        let svg = bars("CPU", "us/MB", &series, &groups).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("sink ipv4") && svg.contains("a: zc"));
        let l = vec![Line {
            name: "zc".into(),
            color: color(1, 0),
            style: 1,
            points: vec![(600.0, 1.0, 0.9, 1.1), (64000.0, 3.0, 2.0, 4.0)],
        }];
        let m = [Mark {
            at: 8000.0,
            label: "tune: from 8000 B".into(),
        }];
        let svg = lines("sweep", "Gbit", &l, &m).unwrap();
        assert!(svg.contains("message size") && svg.contains("tune: from 8000 B"));
        assert!(
            svg.contains("1 KiB") && svg.contains("16 KiB"),
            "readable ticks"
        );
        assert!(!svg.contains("1000.0"), "no raw tick numbers");
        assert_eq!(
            wrap("veth ipv4 size=8000 mtu=1500", 12),
            ["veth ipv4", "size=8000", "mtu=1500"]
        );
        assert_eq!(
            wrap("proto=udp,segment=1472", 8),
            ["proto=ud", "p,segmen", "t=1472"]
        );
        assert_eq!(bytes_label(65536.0), "64 KiB");
        assert_eq!(bytes_label(256.0), "256 B");
        assert_eq!(bytes_label(1536.0), "1.5 KiB");
        // One colour per mode; a second host's is lighter, never another mode's.
        assert_ne!(color(0, 0), color(1, 0));
        assert_ne!(color(0, 0), color(0, 1));
        assert_eq!(css(color(0, 0)), "#0072b2");
    }
}
