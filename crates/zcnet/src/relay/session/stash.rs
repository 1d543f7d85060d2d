//! Where a session's bytes are between a read and a write: its thread's buffer ([`SCRATCH`]),
//! and what a write did not take ([`Stash`]), the only bytes a connection holds of its own;
//! the reply's ([`Reply`]).

use std::cell::RefCell;

/// Bytes a session reads at once, each way.
pub(super) const BUF: usize = 64 * 1024;

thread_local! {
    /// Where a session reads into, one per thread that relays: a session keeps bytes of its own
    /// only when a write took part of what it read (`Stash`), so an idle connection holds none.
    pub(super) static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; BUF]);
}

/// Bytes read and not yet written: what a write left of one read, until written.
#[derive(Default)]
pub(super) struct Stash {
    pub(super) bytes: Vec<u8>,
    pub(super) at: usize,
}

impl Stash {
    pub(super) fn rest(&self) -> &[u8] {
        &self.bytes[self.at..]
    }

    pub(super) fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// `w` more bytes written; freed once all are.
    pub(super) fn wrote(&mut self, w: usize) {
        self.at += w;
        if self.is_empty() {
            *self = Stash::default();
        }
    }
}

/// How a read-and-write step of one direction ended.
pub(super) enum Flow {
    /// All written: read more.
    More,
    /// A side would block, ended or failed: stop.
    Stop,
}

/// The reply: what the destination sends, copied to the source as it comes.
#[derive(Default)]
pub(super) struct Reply {
    /// Read and not yet written to the source.
    pub(super) pending: Stash,
    /// The destination's FIN was passed to the source: nothing more comes back.
    pub(super) done: bool,
}
