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
    /// `(size, median, min, max)`, by size.
    pub points: Vec<(f64, f64, f64, f64)>,
}

const FONT: &str = "sans-serif";

fn color(i: usize) -> RGBColor {
    // Colour-blind-safe first (Okabe-Ito), then plotters' palette.
    const OKABE_ITO: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(213, 94, 0),
        RGBColor(240, 228, 66),
    ];
    OKABE_ITO.get(i).copied().unwrap_or_else(|| {
        let RGBAColor(r, g, b, _) = Palette99::pick(i).to_rgba();
        RGBColor(r, g, b)
    })
}

/// A bar chart of `groups`, each bar with its min-max whisker.
///
/// # Errors
/// A drawing error (none is expected for an SVG string).
pub fn bars(
    title: &str,
    y_desc: &str,
    series: &[String],
    groups: &[Group],
) -> anyhow::Result<String> {
    let per = series.len().max(1);
    let width = (160 + groups.len() * (per * 26 + 24)).clamp(640, 1400) as u32;
    let height = 380u32;
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
        let (plot, legend) = root.split_horizontally(width - 190);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 16))
            .margin(10)
            .x_label_area_size(70)
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
                let c = color(b.series);
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
            // The group's label under its bars, in two lines at most.
            let (px, py) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
            for (k, line) in wrap(&group.label, 22).iter().take(3).enumerate() {
                plot.draw(&Text::new(
                    line.clone(),
                    (px, py + 8 + 14 * k as i32),
                    (FONT, 11).into_font().color(&BLACK).pos(text_center()),
                ))?;
            }
        }
        draw_legend(&legend, series)?;
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
    let names: Vec<String> = lines.iter().map(|l| l.name.clone()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 380)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(710);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("message size, bytes")
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .draw()?;
        for (i, l) in lines.iter().enumerate() {
            let c = color(i);
            chart.draw_series(LineSeries::new(
                l.points.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))?;
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
        draw_legend(&legend, &names)?;
        root.present()?;
    }
    Ok(svg)
}

fn text_center() -> plotters::style::text_anchor::Pos {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    Pos::new(HPos::Center, VPos::Top)
}

/// The series names with their colours, in the right-hand column.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    names: &[String],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    for (i, name) in names.iter().enumerate() {
        let y = 40 + 20 * i as i32;
        area.draw(&Rectangle::new([(6, y), (18, y + 12)], color(i).filled()))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        area.draw(&Text::new(
            name.clone(),
            (24, y),
            (FONT, 12).into_font().color(&BLACK),
        ))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    Ok(())
}

/// Splits `s` at spaces into lines of about `width` characters.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in s.split(' ') {
        match out.last_mut() {
            Some(l) if l.len() + 1 + word.len() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => out.push(word.to_owned()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels() {
        let series = vec!["a: copy".to_owned(), "a: zc".to_owned()];
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
            points: vec![(600.0, 1.0, 0.9, 1.1), (64000.0, 3.0, 2.0, 4.0)],
        }];
        let m = [Mark {
            at: 8000.0,
            label: "tune: from 8000 B".into(),
        }];
        let svg = lines("sweep", "Gbit", &l, &m).unwrap();
        assert!(svg.contains("message size") && svg.contains("tune: from 8000 B"));
        assert_eq!(
            wrap("veth ipv4 size=8000 mtu=1500", 12),
            ["veth ipv4", "size=8000", "mtu=1500"]
        );
    }
}
