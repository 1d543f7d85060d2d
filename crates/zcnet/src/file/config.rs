//! How a [`FileSender`](super::FileSender) sends: the [`Mode`] (and what `Auto` resolves to) and
//! the [`Config`].

use super::support;
use crate::support::Status;

/// How a [`FileSender`](super::FileSender) sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// The best available: sendfile, else splice, else copy; and per file, copy where
    /// `sendfile` does not pay at this length ([`crate::auto`]: the profile's threshold for this
    /// route to start with, the built-in one "always", then what this sender learns per size
    /// class from its thread's CPU per byte).
    #[default]
    Auto,
    /// `sendfile(2)`.
    #[doc(alias = "sendfile")]
    Sendfile,
    /// `splice(2)` through a pipe.
    #[doc(alias = "splice")]
    Splice,
    /// `mmap` window + `MSG_ZEROCOPY` (the only zero-copy mode that says when the file's pages
    /// are free again).
    MmapZeroCopy,
    /// `read(2)` + `send(2)`, the copying twin.
    Copy,
}

impl Mode {
    /// The name used on the command line and in reports (`mmap-zc` for [`Mode::MmapZeroCopy`]).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Sendfile => "sendfile",
            Mode::Splice => "splice",
            Mode::MmapZeroCopy => "mmap-zc",
            Mode::Copy => "copy",
        }
    }

    /// What [`Mode::Auto`] means on this machine, and why when it means copying.
    pub fn resolve(self) -> (Mode, Option<String>) {
        if self != Mode::Auto {
            return (self, None);
        }
        let s = support();
        if s.sendfile.status == Status::Available {
            (Mode::Sendfile, None)
        } else if s.splice.status == Status::Available {
            (Mode::Splice, None)
        } else {
            (
                Mode::Copy,
                Some(format!(
                    "neither sendfile nor splice works here ({}; {}): sending by copy",
                    s.sendfile.reason, s.splice.reason
                )),
            )
        }
    }
}

/// How a [`FileSender`](super::FileSender) is set up.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Which calls: [`Mode::Auto`] by default.
    pub mode: Mode,
    /// Bytes per call (read/send, MSG_ZEROCOPY send).
    pub chunk: usize,
    /// Pipe size asked for with `F_SETPIPE_SZ` (splice).
    pub pipe_size: usize,
    /// Size of one mmap window (mmap-zc); at most two windows are in flight.
    pub window: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Auto,
            chunk: 256 * 1024,
            pipe_size: 1 << 20,
            window: 4 << 20,
        }
    }
}
