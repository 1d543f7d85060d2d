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

mod charts;
pub mod compare;
mod figures;
pub mod input;
mod page;
pub mod plot;
mod text;
mod verdicts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::output::{self, Output};

use input::Input;
use page::HOSTS_TABLE;
pub use page::{page, page_with};

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
