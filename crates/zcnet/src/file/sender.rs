//! The [`FileSender`]: one connected TCP socket, any number of files, pipes and readers, the
//! mode chosen per file and what went without a copy counted.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;

use super::mmap::send_mmap_zc;
use super::send::{send_file, send_pipe, send_reader};
use super::{Config, Counters, FileError, Mode, support};
use crate::support::Status;

/// Sends files, pipes and readers on one connected TCP socket (see the module docs).
#[derive(Debug)]
#[doc(alias("sendfile", "splice"))]
pub struct FileSender<S: AsFd> {
    socket: S,
    config: Config,
    mode: Mode,
    fallback: Option<String>,
    counters: Counters,
    /// [`Mode::Auto`]'s per-file decisions, boxed as the other senders' are (about 4 KB of
    /// tables).
    auto: Option<Box<crate::auto::Decider>>,
    /// The mode of the last send.
    used: Mode,
    /// After an mmap-zc send: the kernel's next `MSG_ZEROCOPY` id on the socket, where the
    /// next mmap-zc send's ids continue (`SO_ZEROCOPY` stays on, the kernel's count goes on).
    zerocopy_next: Option<u32>,
}

impl<S: AsFd> FileSender<S> {
    /// A sender on `socket`, a connected TCP socket; [`Mode::Auto`] is resolved here.
    ///
    /// # Errors
    /// [`FileError::Unsupported`] when `sendfile` or `splice` was asked for and [`support()`]
    /// found it not working. For [`Mode::MmapZeroCopy`], the first file's send fails where
    /// another sender holds the socket or `SO_ZEROCOPY` is on already
    /// ([`ZeroCopyError::SocketInUse`](crate::msg_zerocopy::ZeroCopyError::SocketInUse)): the
    /// windows are given back by their completions, which must be this sender's alone.
    pub fn new(socket: S, config: Config) -> Result<Self, FileError> {
        check_kind(socket.as_fd())?;
        let (mode, fallback) = config.mode.resolve();
        let s = support();
        for (want, check, feature) in [
            (Mode::Sendfile, &s.sendfile, "sendfile"),
            (Mode::Splice, &s.splice, "splice"),
        ] {
            if mode == want && check.status != Status::Available {
                return Err(FileError::Unsupported {
                    feature,
                    reason: check.reason.clone(),
                });
            }
        }
        let auto = (config.mode == Mode::Auto && mode != Mode::Copy).then(|| {
            Box::new(crate::auto::Decider::new(crate::auto::Choice::for_socket(
                crate::auto::SendPath::Sendfile,
                &socket,
                None,
            )))
        });
        Ok(FileSender {
            socket,
            config,
            mode,
            fallback,
            counters: Counters::default(),
            auto,
            used: mode,
            zerocopy_next: None,
        })
    }

    /// The mode in use (never [`Mode::Auto`]).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Gives the socket back.
    pub fn into_inner(self) -> S {
        self.socket
    }

    /// Why [`Mode::Auto`] chose copying, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// In [`Mode::Auto`]: the prior threshold for `sendfile` on this route, its profile, and what
    /// each size class (by file length) learned.
    pub fn auto_choice(&self) -> Option<crate::auto::Choice> {
        self.auto.as_deref().map(crate::auto::Decider::choice)
    }

    /// The mode the last [`send_file`](Self::send_file) used: [`mode`](Self::mode), or
    /// [`Mode::Copy`] for a file [`Mode::Auto`] found too short to pay.
    pub fn used(&self) -> Mode {
        self.used
    }

    /// What was sent so far.
    pub fn counters(&self) -> Counters {
        Counters {
            auto: crate::auto::Decider::counters_of(self.auto.as_deref()),
            ..self.counters
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.socket
    }

    /// Counts the bytes a failed send put out before its error: without a user copy for the
    /// `sendfile` and `splice` calls, as copied otherwise (an `mmap-zc` send cut short has no
    /// completion telling which of its bytes the kernel copied, so none is claimed).
    fn count_failed(&mut self, e: FileError) -> FileError {
        if let FileError::Io { call, sent, .. } = &e {
            let zero_copy = call.starts_with("sendfile") || call.starts_with("splice");
            self.counters.add(*sent, if zero_copy { *sent } else { 0 });
        }
        e
    }

    /// Decides the mode of a file of `len` bytes (the mode, or copy where [`Mode::Auto`]'s
    /// profile says sendfile does not pay at that length), and remembers it as [`used`](Self::used).
    pub(crate) fn choose(&mut self, len: u64) -> Mode {
        let pays = match &mut self.auto {
            Some(d) => d.zero_copy(usize::try_from(len).unwrap_or(usize::MAX)),
            None => true,
        };
        self.used = if pays { self.mode } else { Mode::Copy };
        self.used
    }

    /// Counts bytes sent, of which `zero_copy` without a user copy.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn add(&mut self, bytes: u64, zero_copy: u64) {
        self.counters.add(bytes, zero_copy);
    }

    /// The configuration.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn config(&self) -> Config {
        self.config
    }

    /// Sends `len` bytes of `file` from `offset`; returns the bytes sent (`len`).
    ///
    /// # Errors
    /// [`FileError::Io`] naming the mode, the call and the bytes sent before it failed; a file
    /// shorter than `offset + len` is `UnexpectedEof`.
    pub fn send_file(&mut self, file: &File, offset: u64, len: u64) -> Result<u64, FileError> {
        self.choose(len);
        let c = if self.used == Mode::MmapZeroCopy {
            send_mmap_zc(
                self.socket.as_fd(),
                file,
                offset,
                len,
                self.config,
                &mut self.zerocopy_next,
            )
        } else {
            send_file(
                self.socket.as_fd(),
                file,
                offset,
                len,
                self.used,
                self.config,
            )
        }
        .map_err(|e| self.count_failed(e))?;
        self.counters.add(c.bytes, c.zero_copy_bytes);
        if c.mmap_window.is_some() {
            self.counters.mmap_window = c.mmap_window;
        }
        Ok(c.bytes)
    }

    /// Splices everything from the pipe `pipe` to the socket until the writer closes it (no
    /// user copy: the pipe's pages move to the socket), whatever the mode; returns the bytes.
    ///
    /// # Errors
    /// The failing `splice`, with the bytes sent before it.
    pub fn send_pipe(&mut self, pipe: &impl AsFd) -> Result<u64, FileError> {
        let c = send_pipe(self.socket.as_fd(), pipe.as_fd()).map_err(|e| self.count_failed(e))?;
        self.counters.add(c.bytes, c.zero_copy_bytes);
        Ok(c.bytes)
    }

    /// Reads `r` to its end and sends it by copy (a source that is neither a file nor a pipe);
    /// returns the bytes.
    ///
    /// # Errors
    /// The failing read or send, with the bytes sent before it.
    pub fn send_reader(&mut self, r: &mut impl Read) -> Result<u64, FileError> {
        let c = send_reader(self.socket.as_fd(), r, self.config.chunk)
            .map_err(|e| self.count_failed(e))?;
        self.counters.add(c.bytes, c.zero_copy_bytes);
        Ok(c.bytes)
    }
}

/// The kind of socket a file sender takes (docs/api.md, "Socket kinds"): checked by the sync
/// constructor and, before it changes the socket, by the tokio twin's.
pub(crate) fn check_kind(fd: std::os::fd::BorrowedFd<'_>) -> Result<(), FileError> {
    crate::socket_kind::check(fd, crate::socket_kind::Need::TCP).map_err(|source| {
        FileError::Socket {
            what: "a file is sent on a connected TCP stream, IPv4 or IPv6",
            source,
        }
    })
}
