//! Sending a file over a TCP socket without copying it through user space.
//!
//! | strategy | calls | user copy | "safe to modify the file" signal |
//! |---|---|---|---|
//! | [`Mode::Sendfile`] | `sendfile(2)` | none | **none**: pages go out straight from the page cache, later writes to the file may change bytes not yet transmitted |
//! | [`Mode::Splice`] | `splice(2)` file → pipe → socket (pipe sized with `F_SETPIPE_SZ`) | none | none, as `sendfile` |
//! | [`Mode::MmapZeroCopy`] | `mmap` a sliding window, `send(MSG_ZEROCOPY)` | none (unless the kernel copies: loopback, local delivery) | **yes**: a window is unmapped only when its completions say the kernel is done with it |
//! | [`Mode::Copy`] | `read(2)` + `send(2)` | read and send both copy | not needed |
//!
//! [`FileSender::new`]`(socket, `[`Config`]`)` sends any number of files, pipes or readers on one
//! connected TCP socket and counts what went without a copy ([`FileSender::counters`]).
//! [`Mode::Auto`] picks `sendfile` where [`support()`] found it working, else `splice`, else
//! copy, and says why when it copies ([`FileSender::fallback_reason`]). The mmap window is the seed's recipe ("a server that mmaps a file and sends it moves the
//! data exactly once: disk to memory"); use it for files that change while being served.
//!
//! # References
//! `sendfile(2)`, `splice(2)`, `fcntl(2)` (`F_SETPIPE_SZ`), the kernel's
//! `Documentation/networking/msg_zerocopy.rst`.

mod config;
mod counters;
mod error;
mod mmap;
mod send;
pub(crate) mod sender;
mod support;

pub use config::{Config, Mode};
pub use counters::Counters;
pub use error::FileError;
#[cfg(feature = "tokio")]
pub(crate) use send::read_at;
pub use sender::FileSender;
pub use support::{Support, support};
