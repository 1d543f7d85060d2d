//! The flags every bench takes ([`Common`], and [`FamilyArg`] for those with `--family`), and
//! what they set up before a bench measures: the profile of the `auto` modes, the `--report`
//! file, the session with a `--remote` server.

use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use netlab::Family;

use crate::output::Output;

/// Flags every bench takes (docs/measuring.md, "One shape for every benchmark").
#[derive(Clone, Debug, clap::Args)]
pub struct Common {
    /// Lab to run in (repeatable): loopback, veth, sink. Default: the labs the bench names.
    #[arg(long = "lab", value_name = "LAB")]
    pub labs: Vec<String>,
    /// Alternations per mode (A B A B ...).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub runs: Option<usize>,
    /// Length of one run, in seconds.
    #[arg(long, value_name = "S", value_parser = crate::args::bench_seconds)]
    pub seconds: Option<f64>,
    /// Print one JSON document (the report schema of docs/measuring.md) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The profile the `auto` modes use (`zcnet tune` writes it). Default: $ZCNET_PROFILE,
    /// else ~/.config/zcnet/profile.toml if it exists, else the built-in thresholds.
    #[arg(long, value_name = "PATH")]
    pub profile: Option<std::path::PathBuf>,
    /// Also draw the results as an HTML page of charts and tables (as `zcnet report` does).
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
    /// The `--report` file, opened before the bench measures: a path that cannot be written
    /// fails at once, not after minutes of runs. Kept open through the runs where it exists
    /// (a FIFO is opened once); a new page is made only when it is written.
    #[arg(skip)]
    page: Page,
    /// Run across two hosts: the far side is the `zcnet serve` at HOST:PORT (instead of a
    /// lab); the report carries both hosts' figures.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::peer_port, conflicts_with = "labs")]
    pub remote: Option<std::net::SocketAddr>,
    /// With --remote: the shared token (the server's --token-file).
    #[arg(long, value_name = "PATH", requires = "remote")]
    pub token_file: Option<std::path::PathBuf>,
    /// A saved `--json` of an earlier run: after the runs, what changed against it, cell by cell,
    /// with a bootstrap interval and a verdict (as `zcnet report BASE.json NEW.json`), on stderr
    /// and at the top of the `--report` page. Read before the runs.
    #[arg(long, value_name = "BASE.json")]
    pub baseline: Option<std::path::PathBuf>,
    /// With --baseline: the smallest change of a median, in %, that counts as a change.
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = crate::args::percent)]
    pub noise: f64,
    /// With --baseline: exit 3 when a figure regressed by more than PCT % against it.
    #[arg(long, value_name = "PCT", value_parser = crate::args::percent, requires = "baseline")]
    pub fail_on_regression: Option<f64>,
    /// The `--baseline` file, read before the runs.
    #[arg(skip)]
    base: Base,
}

/// The `--baseline` file, read once before the runs and shared by the copies of [`Common`].
#[derive(Clone, Debug, Default)]
struct Base(Arc<Mutex<Option<crate::report::input::Input>>>);

/// The opened `--report` file, shared by the copies of [`Common`] until the page is written.
#[derive(Clone, Debug, Default)]
struct Page(Arc<Mutex<Option<Output>>>);

impl Common {
    /// Opens the `--report` file, before the bench measures.
    ///
    /// A new page's temporary is not kept through the runs: a bench does not take over SIGINT
    /// and SIGTERM (the programs it starts, tcpdump among them, would inherit them blocked), so
    /// nothing would remove it if a signal ended the bench. Made and removed, it proved the
    /// path writable; the page is made again when it is written.
    ///
    /// # Errors
    /// One line naming the path and why it cannot be written.
    pub(super) fn open_page(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.report {
            let out = crate::report::open_page(path)?;
            if !out.holds_temporary() {
                *self.page.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(out);
            }
        }
        Ok(())
    }

    /// The `--report` file [`Common::open_page`] kept open, if it did: taken once, to write the
    /// page into.
    pub(super) fn take_page(&self) -> Option<Output> {
        self.page
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The labs asked for (`--lab`), else `default`.
    pub fn labs_or<'a>(&'a self, default: &[&'a str]) -> Vec<&'a str> {
        if self.labs.is_empty() {
            default.to_vec()
        } else {
            self.labs.iter().map(String::as_str).collect()
        }
    }

    /// Checks that labs can be built (`what` says which and why), unless `--remote` replaces
    /// them.
    ///
    /// # Errors
    /// No privilege for private network namespaces.
    pub fn needs_labs(&self, what: &'static str) -> anyhow::Result<()> {
        if self.remote.is_none() {
            netlab::check_privileges().context(what)?;
        }
        Ok(())
    }

    /// A session with the `--remote` server, if one is given.
    ///
    /// # Errors
    /// The server cannot be reached or refuses the session.
    pub fn remote(&self) -> anyhow::Result<Option<crate::remote::Remote>> {
        self.remote
            .map(|addr| crate::remote::Remote::connect(addr, self.token_file.as_deref()))
            .transpose()
    }

    /// Reads `--baseline`, before the runs: a file that is not a zcnet report fails at once.
    ///
    /// # Errors
    /// One line naming the file and the field that did not fit.
    pub(super) fn read_baseline(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.baseline {
            let mut input = crate::report::input::read(path)
                .map_err(|e| crate::report::BadInput(format!("--baseline {e:#}")))?;
            input.label = "baseline".into();
            *self.base.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(input);
        }
        Ok(())
    }

    /// The baseline [`Common::read_baseline`] read, if any.
    pub(super) fn baseline_input(&self) -> Option<crate::report::input::Input> {
        self.base
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `--runs`, `--seconds` and `--json`: the bench's `runs` and `seconds` where they are not
    /// given.
    pub fn rounds(&self, runs: usize, seconds: f64) -> Rounds {
        Rounds {
            runs: self.runs.unwrap_or(runs),
            seconds: self.seconds.unwrap_or(seconds),
            quiet: self.json,
        }
    }

    /// Installs `--profile` for the `auto` modes.
    ///
    /// # Errors
    /// The profile cannot be read.
    pub fn use_profile(&self) -> anyhow::Result<()> {
        if let Some(p) = &self.profile {
            zcnet::auto::set_profile(zcnet::auto::Profile::load(p)?);
        }
        Ok(())
    }
}

/// How long a bench measures, and whether it prints as it goes: every bench's `--runs`,
/// `--seconds` and `--json` ([`Common::rounds`]).
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    /// Alternations per mode.
    pub runs: usize,
    /// Seconds per run.
    pub seconds: f64,
    /// No per-run lines and tables (`--json`).
    pub quiet: bool,
}

/// Address family, as a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FamilyArg {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

impl From<FamilyArg> for Family {
    fn from(f: FamilyArg) -> Family {
        match f {
            FamilyArg::Ipv4 => Family::V4,
            FamilyArg::Ipv6 => Family::V6,
        }
    }
}
