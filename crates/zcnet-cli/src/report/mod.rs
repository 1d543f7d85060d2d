//! `zcnet report RUN.json [RUN2.json ...] -o report.html`: one self-contained HTML page (inline
//! SVG and CSS, nothing fetched) of the bench reports in the files, several files (two kernels,
//! two machines) drawn side by side in the same charts, labelled by host.
//!
//! Per bench: CPU per MB and throughput as bars with min-max whiskers per condition and mode;
//! the share without a copy where the bench reports it; lines against message size where a
//! condition sweeps sizes; the table of every set under the charts. At the top: each file's
//! machine, kernel, date and the probe's checks.
//!
//! With two files or more, the page opens with what changed from the first (the base) to the
//! last ([`compare`]): each figure of each cell both have, with a bootstrap interval and a
//! verdict; `--fail-on-regression PCT` makes a regression beyond PCT % exit 3.

pub mod compare;
pub mod input;
pub mod plot;
mod text;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::output::{self, Output};

use input::{Input, Report, Set};
use plot::{Bar, Group, Line};
use text::{condition, esc, shown};

/// Options of `zcnet report`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// The JSON of `zcnet bench --json` or `zcnet bench NAME --json` (one or more).
    #[arg(required = true, value_name = "RUN.json")]
    pub inputs: Vec<PathBuf>,
    /// The page to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// The `zcnet tune` profile whose break-even sizes mark the size sweeps. Default:
    /// $ZCNET_PROFILE, else ~/.config/zcnet/profile.toml if it exists (none: no marks).
    #[arg(long, value_name = "PATH")]
    pub profile: Option<PathBuf>,
    /// With two files or more: the smallest change of a median, in %, that counts as a change
    /// (beyond the 95 % interval too); the runs of this kind of machine move by about 10 %
    /// between invocations.
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = crate::args::percent)]
    pub noise: f64,
    /// With two files or more: exit 3 when a figure of the last file regressed by more than PCT %
    /// against the first (a verdict "regressed"), after writing the page.
    #[arg(long, value_name = "PCT", value_parser = crate::args::percent)]
    pub fail_on_regression: Option<f64>,
    /// With two files or more: print the changes as JSON on stdout (every figure of every cell
    /// both files have, its interval and verdict).
    #[arg(long)]
    pub json: bool,
}

/// Figures that regressed beyond `--fail-on-regression` (exit 3).
#[derive(Debug)]
pub struct Regressed(pub String);

impl std::fmt::Display for Regressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Regressed {}

/// A failure of the inputs (exit 2), apart from failing to write the page (exit 1).
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `zcnet report`.
///
/// # Errors
/// [`BadInput`] for a file that is not a zcnet report (the file and the field), an I/O error
/// writing the page.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    crate::interrupt::watch().context("taking SIGINT and SIGTERM")?;
    // Refused before anything is read or written (issue 48 item 15): a gate with nothing to
    // compare, and a page that would replace one of its own inputs.
    if opt.fail_on_regression.is_some() && opt.inputs.len() < 2 {
        return Err(BadInput(
            "--fail-on-regression compares the last file with the first: give two files or more"
                .into(),
        )
        .into());
    }
    if let Some(same) = opt.inputs.iter().find(|i| same_file(i, &opt.output)) {
        return Err(BadInput(format!(
            "-o {} is the input {}: the page would replace it",
            opt.output.display(),
            same.display()
        ))
        .into());
    }
    let out = open_page(&opt.output)?;
    let mut inputs = Vec::new();
    for path in &opt.inputs {
        let mut i = input::read(path).map_err(|e| BadInput(format!("{e:#}")))?;
        if i.label.is_empty() {
            i.label = path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into(),
            );
        }
        inputs.push(i);
    }
    unique_labels(&mut inputs);
    let profile = match &opt.profile {
        Some(p) => Some(
            zcnet::auto::Profile::load(p).map_err(|e| BadInput(crate::error_line::chain(&e)))?,
        ),
        None => tuned_profile(),
    };
    let (page, changes) = page_compared(&inputs, profile.as_ref(), opt.noise / 100.0)?;
    write(out, &opt.output, &page)?;
    if opt.json {
        println!("{}", serde_json::to_string_pretty(&changes)?);
    }
    fail_on_regression(&changes, opt.fail_on_regression)
}

/// Whether `a` and `b` name the same file (device and inode), whatever the path; false where
/// either does not exist.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The page of `inputs` and, with two or more, what changed from the first to the last (at the
/// top, after the verdicts), with the floor `noise` (a fraction).
///
/// # Errors
/// A chart that cannot be drawn.
pub fn page_compared(
    inputs: &[Input],
    profile: Option<&zcnet::auto::Profile>,
    noise: f64,
) -> anyhow::Result<(String, Vec<compare::Change>)> {
    let mut page = page_with(inputs, profile)?;
    let changes = match inputs {
        [base, .., new] => {
            let changes = compare::compare(base, new, noise);
            let section = compare::section(&base.label, &new.label, &changes, noise);
            // What changed comes right after the verdicts, before the hosts.
            let at = page
                .find(HOSTS_TABLE)
                .or_else(|| page.find("</h1>\n").map(|i| i + "</h1>\n".len()))
                .unwrap_or(0);
            page.insert_str(at, &section);
            changes
        }
        _ => Vec::new(),
    };
    Ok((page, changes))
}

/// [`Regressed`] when a figure regressed by more than `pct` %, naming the count and the first.
///
/// # Errors
/// That [`Regressed`].
pub fn fail_on_regression(changes: &[compare::Change], pct: Option<f64>) -> anyhow::Result<()> {
    let Some(pct) = pct else {
        return Ok(());
    };
    // A gate that compared nothing has not passed (issue 48 item 4): another bench, empty
    // results, sizes or modes the base does not have.
    if changes.is_empty() {
        return Err(BadInput(
            "--fail-on-regression compared nothing: no cell (bench, condition, mode) of the new \
             run is in the base"
                .into(),
        )
        .into());
    }
    let bad: Vec<&compare::Change> = changes
        .iter()
        .filter(|c| c.verdict == compare::Verdict::Regressed && c.worse_by() * 100.0 > pct)
        .collect();
    match bad.first() {
        Some(first) => Err(Regressed(format!(
            "{} figures regressed by more than {pct} %, the first: {} {} {} {} {:+.1} %",
            bad.len(),
            first.bench,
            first.condition,
            first.mode,
            first.metric,
            100.0 * first.change
        ))
        .into()),
        None => Ok(()),
    }
}

/// The profile `zcnet tune` wrote, where one is installed ($ZCNET_PROFILE, else the default
/// path); the built-in thresholds were not measured and mark nothing.
pub fn tuned_profile() -> Option<zcnet::auto::Profile> {
    let path = std::env::var_os("ZCNET_PROFILE")
        .map(PathBuf::from)
        .or_else(zcnet::auto::Profile::default_path)?;
    zcnet::auto::Profile::load(&path).ok()
}

/// The zero-copy path and route of a set of a sending bench, where its mode has a threshold.
fn send_path(bench: &str, set: &Set) -> Option<(zcnet::auto::SendPath, zcnet::auto::Route)> {
    use zcnet::auto::{Route, SendPath};
    let route = if set.lab == "loopback" {
        Route::Local
    } else {
        Route::Device
    };
    let path = match (bench, set.mode.as_str()) {
        ("udp-tx", "zc" | "auto") => SendPath::MsgZerocopyUdp,
        ("tcp-tx", "zc" | "zc-adaptive" | "auto") => SendPath::MsgZerocopyTcp,
        ("uring-tx", "zc" | "auto") => SendPath::UringZc,
        ("uring-tx", "zc-fixed") => SendPath::UringZcFixed,
        _ => return None,
    };
    Some((path, route))
}

/// Opens the page's file at `path` before the work, as `-o` opens (see [`crate::output`]): a
/// path that cannot be written fails now, and an existing file is left as it was until
/// [`write`].
///
/// # Errors
/// One line naming the path and why.
pub fn open_page(path: &Path) -> anyhow::Result<Output> {
    Output::open(path).with_context(|| format!("writing {}", output::shown(path)))
}

/// Writes `page` into `out`, opened by [`open_page`] at `path`.
///
/// # Errors
/// The write's error, naming the path.
pub fn write(out: Output, path: &Path, page: &str) -> anyhow::Result<()> {
    out.write_whole(page.as_bytes())
        .with_context(|| format!("writing {}", output::shown(path)))
}

/// Labels made distinct: the same host twice becomes `host (2)`.
pub fn unique_labels(inputs: &mut [Input]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in inputs.iter_mut() {
        let n = seen.entry(i.label.clone()).or_default();
        *n += 1;
        if *n > 1 {
            i.label = format!("{} ({n})", i.label);
        }
    }
}

/// What tells apart reports of the same bench in one file (the suite runs udp-tx with a large
/// and a small pool): the scalar settings whose values differ between them, as ` key=value`.
fn distinguishing(reports: &[&Report], r: &Report) -> String {
    if reports.len() < 2 {
        return String::new();
    }
    let Some(mine) = r.settings.as_object() else {
        return String::new();
    };
    let mut out = String::new();
    for (k, v) in mine {
        if v.is_object() || v.is_array() {
            continue;
        }
        if reports.iter().any(|o| o.settings.get(k) != Some(v))
            && let Some(v) = shown(v)
        {
            let _ = write!(out, " {k}={v}");
        }
    }
    out
}

/// The parameters that are a message size, where a bench sweeps sizes.
const SIZE_KEYS: [&str; 4] = ["size", "bytes", "frame_bytes", "file_bytes"];

/// The message size of a set.
fn size_of(set: &Set) -> Option<f64> {
    SIZE_KEYS.iter().find_map(|k| set.params.get(*k)?.as_f64())
}

/// The condition without its size, for the sweep's lines.
fn condition_without_size(set: &Set) -> String {
    let mut s = format!("{} {}", set.lab, set.family);
    for (k, v) in &set.params {
        if !SIZE_KEYS.contains(&k.as_str())
            && let Some(v) = shown(v)
        {
            let _ = write!(s, " {k}={v}");
        }
    }
    s
}

/// What one chart plots of a run.
#[derive(Clone, Copy)]
enum Figure {
    Cpu,
    Gbit,
    Requests,
    Share,
    FarCpu,
}

impl Figure {
    fn of(self, r: &input::Run) -> Option<f64> {
        let v = match self {
            Figure::Cpu => Some(r.cpu_us_per_mb),
            Figure::Gbit => Some(r.gbit),
            Figure::Requests => r.requests_per_s,
            Figure::Share => r.zero_copy_share.map(|s| 100.0 * s),
            Figure::FarCpu => r.remote_cpu_us_per_mb,
        };
        v.filter(|v| v.is_finite())
    }

    fn title(self) -> (&'static str, &'static str) {
        match self {
            Figure::Cpu => ("CPU per MB (median, min-max)", "CPU us/MB"),
            Figure::Gbit => ("Throughput (median, min-max)", "Gbit/s"),
            Figure::Requests => ("Requests per second (median, min-max)", "req/s"),
            Figure::Share => ("Share without a copy (median, min-max)", "%"),
            Figure::FarCpu => (
                "Far host's CPU per MB, zcnet serve (median, min-max)",
                "far CPU us/MB",
            ),
        }
    }
}

/// Median, min and max of `figure` over the runs of `set`; `None` where no run has it.
fn spread(set: &Set, figure: Figure) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = set.runs.iter().filter_map(|r| figure.of(r)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

/// The reports of one bench across the inputs, each with its input's label and what tells it
/// apart from the file's other reports of the bench.
struct Bench<'a> {
    name: String,
    reports: Vec<(&'a str, &'a Report, String)>,
}

fn benches(inputs: &[Input]) -> Vec<Bench<'_>> {
    let mut out: Vec<Bench<'_>> = Vec::new();
    for i in inputs {
        for r in &i.reports {
            let same: Vec<&Report> = i.reports.iter().filter(|o| o.bench == r.bench).collect();
            let entry = (i.label.as_str(), r, distinguishing(&same, r));
            match out.iter_mut().find(|b| b.name == r.bench) {
                Some(b) => b.reports.push(entry),
                None => out.push(Bench {
                    name: r.bench.clone(),
                    reports: vec![entry],
                }),
            }
        }
    }
    out
}

/// One colour per mode on the whole page, in the order modes first appear, and lighter for the
/// second and later host: the same mode is the same colour in every chart, legend and table.
struct Palette {
    modes: Vec<String>,
    hosts: Vec<String>,
}

impl Palette {
    fn of(inputs: &[Input]) -> Palette {
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

    fn color(&self, host: &str, mode: &str) -> plotters::style::RGBColor {
        let m = self.modes.iter().position(|x| x == mode).unwrap_or(0);
        let h = self.hosts.iter().position(|x| x == host).unwrap_or(0);
        plot::color(m, h)
    }

    /// A swatch of the colour, for a table cell.
    fn swatch(&self, host: &str, mode: &str) -> String {
        format!(
            "<span class=\"sw\" style=\"background:{}\"></span>",
            plot::css(self.color(host, mode))
        )
    }
}

/// A bar chart of `figure` for one bench: a group per condition, a series per host and mode.
fn bar_chart(
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
fn sweep_chart(
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

/// The reports' settings as a small table: a row per setting (nested objects one level down as
/// `key.sub`, lists joined), a column per report.
fn settings_table(b: &Bench<'_>) -> String {
    let value = |v: &serde_json::Value| match v {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(shown)
            .collect::<Vec<_>>()
            .join(", "),
        v => shown(v).unwrap_or_else(|| "-".into()),
    };
    // Every setting of every report, in first-seen order, flattened one level.
    let mut keys: Vec<String> = Vec::new();
    let mut columns: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for (label, r, extra) in &b.reports {
        let mut col = BTreeMap::new();
        for (k, v) in r.settings.as_object().into_iter().flatten() {
            let flat: Vec<(String, String)> = match v.as_object() {
                Some(inner) => inner
                    .iter()
                    .map(|(k2, v2)| (format!("{k}.{k2}"), value(v2)))
                    .collect(),
                None => vec![(k.clone(), value(v))],
            };
            for (key, v) in flat {
                if !keys.contains(&key) {
                    keys.push(key.clone());
                }
                col.insert(key, v);
            }
        }
        // What competed for the CPU while it ran (issue 46): a busy machine's figures are its
        // load's as much as zcnet's.
        if let Some(c) = &r.host.competing {
            let key = "machine during the runs".to_owned();
            if !keys.contains(&key) {
                keys.push(key.clone());
            }
            col.insert(key, c.text());
        }
        columns.push((format!("{label}{extra}"), col));
    }
    if keys.is_empty() {
        return String::new();
    }
    let mut t = String::from("<table class=\"settings\"><tr><th>setting</th>");
    for (name, _) in &columns {
        let _ = write!(t, "<th>{}</th>", esc(name));
    }
    t.push_str("</tr>\n");
    for key in &keys {
        let _ = write!(t, "<tr><td>{}</td>", esc(key));
        for (_, col) in &columns {
            let _ = write!(
                t,
                "<td>{}</td>",
                esc(col.get(key).map_or("-", String::as_str))
            );
        }
        t.push_str("</tr>\n");
    }
    t.push_str("</table>\n");
    t
}

/// Where zero copy pays in one sweep: the smallest size from which the mode's throughput is at
/// least copy's at every larger size (`None`: it never does), and its gain at the largest size.
fn break_even(points: &[(f64, f64, f64)]) -> (Option<f64>, f64) {
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

/// The page's opening: what a reader came for. Per bench, condition and zero-copy mode of the
/// size sweeps, where zero copy pays against copy (throughput) and its gain at the largest
/// size; then the suite's verdicts, MISSes first, each linking to its bench.
fn verdicts(inputs: &[Input], palette: &Palette) -> String {
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

fn table(b: &Bench<'_>, hosts: usize, palette: &Palette) -> String {
    let far = b.reports.iter().any(|(_, r, _)| r.remote_host.is_some());
    let mut t = String::from(
        "<table><tr><th>host</th><th>condition</th><th>mode</th><th>runs</th>\
         <th>Gbit/s</th><th>CPU us/MB</th><th>req/s</th><th>without a copy</th>",
    );
    t.push_str(if far {
        "<th>far host CPU us/MB</th></tr>\n"
    } else {
        "</tr>\n"
    });
    let cell = |s: Option<(f64, f64, f64)>, digits: usize| match s {
        Some((m, lo, hi)) => format!("{m:.digits$} <small>({lo:.digits$}-{hi:.digits$})</small>"),
        None => "-".into(),
    };
    for (label, r, extra) in &b.reports {
        for set in &r.results {
            let _ = write!(
                t,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                if hosts > 1 {
                    esc(label)
                } else {
                    esc(&r.host.hostname)
                },
                esc(&(condition(set) + extra)),
                palette.swatch(label, &set.mode) + &esc(&set.mode),
                set.runs.len(),
                cell(spread(set, Figure::Gbit), 2),
                cell(spread(set, Figure::Cpu), 1),
                cell(spread(set, Figure::Requests), 0),
                cell(spread(set, Figure::Share), 1),
            );
            if far {
                let _ = write!(t, "<td>{}</td>", cell(spread(set, Figure::FarCpu), 1));
            }
            t.push_str("</tr>\n");
        }
    }
    t.push_str("</table>\n");
    t
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}\
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
small{color:#666}.charts{display:flex;flex-direction:column;gap:8px;margin:8px 0}\
.charts svg{max-width:100%;height:auto}\
.available,.ok,.improved{color:#070}.unavailable,.failed,.blocked,.miss,.regressed{color:#a00}.unsure{color:#a60}\
.sw{display:inline-block;width:10px;height:10px;margin-right:6px;vertical-align:baseline}\
table.settings td{font-size:12px}a{color:#0060a0}\
@media (prefers-color-scheme:dark){body{background:#111;color:#ddd}th{background:#222}\
td,th{border-color:#444}small{color:#999}a{color:#6ab0ff}.charts svg{background:#fff}}\
@media print{body{margin:0;max-width:none}h2{break-before:auto;break-after:avoid}\
.charts>div,table{break-inside:avoid}}";

/// The head of the table of the page's hosts: what makes their figures comparable (issue 46).
const HOSTS_TABLE: &str = "<table><tr><th>host</th><th>kernel</th><th>CPUs</th><th>CPU</th>\
                           <th>cache a copy finds</th><th>virtualization</th>\
                           <th>load at start</th><th>date</th><th>zcnet</th><th>benches</th>\
                           </tr>\n";

/// The machine columns of a host's row (CPU, measured cache, virtualization, load).
fn machine_cells(h: &input::Host) -> String {
    let llc = match h.llc_measured_bytes {
        Some(0) => "< 1 MiB".to_owned(),
        Some(b) => format!("{} MiB", b >> 20),
        None => "-".to_owned(),
    };
    format!(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        esc(h.cpu_model.as_deref().unwrap_or("-")),
        llc,
        esc(h.virtualization.as_deref().unwrap_or("-")),
        h.load_average
            .as_ref()
            .and_then(|l| l.first())
            .map_or("-".to_owned(), |l| format!("{l:.2}")),
    )
}

/// The page, without break-even marks.
///
/// # Errors
/// A chart that cannot be drawn.
pub fn page(inputs: &[Input]) -> anyhow::Result<String> {
    page_with(inputs, None)
}

/// The page; the size sweeps mark `profile`'s break-even sizes.
///
/// # Errors
/// A chart that cannot be drawn.
pub fn page_with(
    inputs: &[Input],
    profile: Option<&zcnet::auto::Profile>,
) -> anyhow::Result<String> {
    let hosts = inputs.len();
    let palette = Palette::of(inputs);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>zcnet report</title><style>{STYLE}</style></head><body>\n<h1>zcnet report</h1>\n"
    );
    h.push_str(&verdicts(inputs, &palette));
    h.push_str(HOSTS_TABLE);
    for i in inputs {
        let r = &i.reports[0];
        let names: Vec<&str> = i.reports.iter().map(|r| r.bench.as_str()).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&i.label),
            esc(&r.host.kernel),
            r.host.cpus,
            machine_cells(&r.host),
            esc(&r.host.date),
            esc(&r.zcnet_version),
            esc(&names.join(", "))
        );
        // The far hosts of its two-host runs, each once.
        let mut far: Vec<&input::Host> = Vec::new();
        for rh in i.reports.iter().filter_map(|r| r.remote_host.as_ref()) {
            if !far
                .iter()
                .any(|f| f.hostname == rh.hostname && f.kernel == rh.kernel)
            {
                far.push(rh);
            }
        }
        for f in far {
            let benches: Vec<&str> = i
                .reports
                .iter()
                .filter(|r| {
                    r.remote_host
                        .as_ref()
                        .is_some_and(|x| x.hostname == f.hostname)
                })
                .map(|r| r.bench.as_str())
                .collect();
            let _ = writeln!(
                h,
                "<tr><td>{} <small>(far host of {}: zcnet serve)</small></td><td>{}</td><td>{}</td>\
                 {}<td>{}</td><td></td><td>{}</td></tr>",
                esc(&f.hostname),
                esc(&i.label),
                esc(&f.kernel),
                f.cpus,
                machine_cells(f),
                esc(&f.date),
                esc(&benches.join(", "))
            );
        }
    }
    h.push_str("</table>\n");
    for i in inputs {
        let Some(p) = &i.probe else { continue };
        let _ = writeln!(
            h,
            "<h2>Probe: {}</h2>\n<table><tr><th>check</th><th>status</th><th>why</th></tr>",
            esc(&i.label)
        );
        for c in &p.checks {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                esc(&c.id),
                esc(&c.status),
                esc(&c.status),
                esc(&c.reason)
            );
        }
        h.push_str("</table>\n");
    }
    for b in benches(inputs) {
        let _ = writeln!(h, "<h2 id=\"{0}\">{0}</h2>", esc(&b.name));
        h.push_str(&settings_table(&b));
        h.push_str("<div class=\"charts\">\n");
        let figures = [
            Figure::Cpu,
            Figure::Gbit,
            Figure::Requests,
            Figure::Share,
            Figure::FarCpu,
        ];
        for figure in figures {
            if let Some(svg) = bar_chart(&b, figure, hosts, &palette)? {
                let _ = writeln!(h, "<div>{svg}</div>");
            }
        }
        for figure in [Figure::Cpu, Figure::Gbit] {
            if let Some(svg) = sweep_chart(&b, figure, hosts, profile, &palette)? {
                let _ = writeln!(h, "<div>{svg}</div>");
            }
        }
        h.push_str("</div>\n");
        h.push_str(&table(&b, hosts, &palette));
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
