//! The progress bar of a bench's runs.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr, shown only on a terminal and only for work expected to last over
/// a second.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `steps` steps expected to take `expected` in all.
    pub fn new(label: &str, steps: u64, expected: Duration) -> Progress {
        if !std::io::stderr().is_terminal() || expected < Duration::from_secs(1) {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} runs, {elapsed}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_owned());
        Progress(Some(bar))
    }

    /// A bar that never draws.
    pub fn hidden() -> Progress {
        Progress(None)
    }

    /// One step done.
    pub fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
