//! Files without a user copy, on tokio: see [`FileSender`].

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{Interest, Ready};

use super::IntoStdSocket;
use crate::file::{self as sync, Config, Counters, FileError, Mode};
use crate::sys::{self, reactor::Registered, reactor::register};

/// Bytes per call, and the range whose residency in the page cache is checked before it.
const STEP: u64 = 2 << 20;

/// [`crate::file::FileSender`] on tokio: `sendfile(2)`, `splice(2)` or `pread` + `send` on a
/// non-blocking socket, awaiting writability between calls, with the same modes (but
/// [`Mode::MmapZeroCopy`]: [`ZeroCopySender`](super::ZeroCopySender) sends owned buffers), the
/// same counters, and [`Mode::Auto`] deciding per file.
///
/// # Page-cache misses
/// A socket that would block is awaited, but the file side of `sendfile` and `splice` reads
/// pages synchronously: a miss blocks the calling thread until the disk answers. So before each
/// call (at most 2 MiB) the range is checked with `cachestat(2)` (Linux 6.5), and a range not
/// wholly cached is first read in with `readahead(2)` on tokio's blocking pool
/// ([`page_ins`](Self::page_ins) counts them): the runtime thread only ever copies from, or
/// moves, pages already in memory. Before Linux 6.5 (no `cachestat`) the calls are made as they
/// are, and a miss blocks the runtime thread for that one call.
#[derive(Debug)]
pub struct FileSender<S: AsFd + IntoStdSocket<Std = S>> {
    io: AsyncFd<Registered<sync::FileSender<S>>>,
    page_ins: u64,
    cachestat: bool,
}

impl<S: AsFd + IntoStdSocket<Std = S>> FileSender<S> {
    /// A sender on `socket`, a connected TCP stream (tokio's or std's).
    ///
    /// # Errors
    /// As [`crate::file::FileSender::new`]; [`FileError::Unsupported`] for
    /// [`Mode::MmapZeroCopy`]; `Io` when the socket cannot be made non-blocking or registered.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn new<T>(socket: T, config: Config) -> Result<Self, FileError>
    where
        T: IntoStdSocket<Std = S>,
    {
        if config.mode == Mode::MmapZeroCopy {
            return Err(FileError::Unsupported {
                feature: "mmap-zc",
                reason: "the mmap window has no async form: use sendfile (Mode::Auto) or \
                         zcnet::tokio::ZeroCopySender"
                    .into(),
            });
        }
        let setup = |call| {
            move |source| FileError::Io {
                call,
                mode: config.mode.name(),
                sent: 0,
                source,
            }
        };
        // The kind first, before `O_NONBLOCK` changes the socket (issue 62).
        crate::file::sender::check_kind(socket.as_fd())?;
        let socket = socket
            .into_std_socket()
            .map_err(setup("fcntl(O_NONBLOCK)"))?;
        let inner = sync::FileSender::new(socket, config)?;
        let io = register(inner, Interest::WRITABLE).map_err(setup("epoll_ctl(EPOLL_CTL_ADD)"))?;
        Ok(FileSender {
            io,
            page_ins: 0,
            cachestat: true,
        })
    }

    fn inner(&self) -> &sync::FileSender<S> {
        &self.io.get_ref().0
    }

    /// Gives the socket back, out of the reactor and non-blocking, as the synchronous
    /// [`crate::file::FileSender::into_inner`] does: to half-close it, or hand it to
    /// `tokio::net::TcpStream::from_std` again.
    pub fn into_inner(self) -> S {
        self.io.into_inner().0.into_inner()
    }

    /// The mode in use (never [`Mode::Auto`]).
    pub fn mode(&self) -> Mode {
        self.inner().mode()
    }

    /// Why [`Mode::Auto`] chose copying, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner().fallback_reason()
    }

    /// The mode the last [`send_file`](Self::send_file) used.
    pub fn used(&self) -> Mode {
        self.inner().used()
    }

    /// What was sent so far.
    pub fn counters(&self) -> Counters {
        self.inner().counters()
    }

    /// Ranges read into the page cache on the blocking pool before a call (see the type's docs).
    pub fn page_ins(&self) -> u64 {
        self.page_ins
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        self.inner().get_ref()
    }

    /// Sends `len` bytes of `file` from `offset`; returns the bytes sent (`len`).
    ///
    /// Cancellation: the bytes already sent stay sent ([`counters`](Self::counters) has them);
    /// the stream then ends part-way through the file, so a protocol that cannot resume should
    /// close the connection.
    ///
    /// # Errors
    /// As [`crate::file::FileSender::send_file`]: the call, the mode and the bytes sent before.
    pub async fn send_file(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<u64, FileError> {
        let mode = self.io.get_mut().0.choose(len);
        let result = match mode {
            Mode::Splice => self.splice(file, offset, len).await,
            Mode::Copy => self.copy(file, offset, len).await,
            _ => self.sendfile(file, offset, len).await,
        };
        // Every call's bytes are counted as they go (a cancelled send keeps its count), so an
        // error is not counted again.
        result.map(|()| len)
    }

    /// Sends the whole of `file` from its start, as its size is now (`fstat`): a
    /// `tokio::fs::File` as well as a `std::fs::File`, or any descriptor of a regular file.
    /// Returns the bytes sent. The file's own offset is neither used nor moved.
    ///
    /// # Errors
    /// As [`send_file`](Self::send_file); [`FileError::Io`] naming `fcntl(F_DUPFD_CLOEXEC)` or
    /// `fstat` when the file cannot be looked at.
    pub async fn send_whole_file(&mut self, file: &impl AsFd) -> Result<u64, FileError> {
        let mode = self.mode().name();
        let file = file
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .map_err(FileError::at(mode, "fcntl(F_DUPFD_CLOEXEC)", 0))?;
        let len = file
            .metadata()
            .map_err(FileError::at(mode, "fstat", 0))?
            .len();
        self.send_file(&file, 0, len).await
    }

    /// Sends `data` by copy (counted as copied), as the protocol header before a file. With
    /// `more`, the bytes wait (`MSG_MORE`) for the send that follows, so a header and the start
    /// of its file leave in one segment; the last bytes of a response go without it.
    ///
    /// Cancellation: the bytes already sent stay sent, as for [`send_file`](Self::send_file).
    ///
    /// # Errors
    /// [`FileError::Io`] naming `send` and the bytes sent before it.
    pub async fn send_bytes(&mut self, data: &[u8], more: bool) -> Result<(), FileError> {
        let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
        let mut done = 0;
        while done < data.len() {
            let m = self
                .on_socket(|s| sys::net::sendto(s, &data[done..], flags, None))
                .await
                .map_err(FileError::at("copy", "send", done as u64))?;
            done += m;
            self.io.get_mut().0.add(m as u64, 0);
        }
        Ok(())
    }

    /// Reads `[off, off + len)` of `file` into the page cache on the blocking pool unless
    /// `cachestat` says it is all there.
    async fn resident(&mut self, file: &File, off: u64, len: u64) -> io::Result<()> {
        if !self.cachestat || len == 0 {
            return Ok(());
        }
        let page = sys::mm::page_size() as u64;
        let pages = (off + len).div_ceil(page) - off / page;
        match sys::file::cachestat(file.as_fd(), off, len)? {
            None => self.cachestat = false,
            Some(cached) if cached >= pages => {}
            Some(_) => {
                let file = file.try_clone()?;
                self.page_ins += 1;
                ::tokio::task::spawn_blocking(move || {
                    sys::file::readahead(file.as_fd(), off, len as usize)
                })
                .await
                .map_err(io::Error::other)??;
            }
        }
        Ok(())
    }

    /// Runs `op` on the socket until it does not say `EAGAIN`, awaiting writability between.
    async fn on_socket<R>(
        &mut self,
        mut op: impl FnMut(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            let mut guard = self.io.writable_mut().await?;
            match op(guard.get_inner().0.get_ref().as_fd()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready_matching(Ready::WRITABLE);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    async fn sendfile(&mut self, file: &File, offset: u64, len: u64) -> Result<(), FileError> {
        let mut sent = 0u64;
        let mut off = offset as i64;
        while sent < len {
            let err = |call| FileError::at("sendfile", call, sent);
            let want = (len - sent).min(STEP);
            self.resident(file, offset + sent, want)
                .await
                .map_err(err("readahead"))?;
            let n = self
                .on_socket(|s| sys::file::sendfile(s, file.as_fd(), &mut off, want as usize))
                .await
                .map_err(err("sendfile"))?;
            if n == 0 {
                return Err(err("sendfile")(io::ErrorKind::UnexpectedEof.into()));
            }
            sent += n as u64;
            self.io.get_mut().0.add(n as u64, n as u64);
        }
        Ok(())
    }

    async fn splice(&mut self, file: &File, offset: u64, len: u64) -> Result<(), FileError> {
        let pipe_size = self.inner().config().pipe_size;
        let (pipe_r, pipe_w) = sys::file::pipe().map_err(FileError::at("splice", "pipe", 0))?;
        let _ = sys::file::set_pipe_size(pipe_w.as_fd(), pipe_size);
        let mut sent = 0u64;
        let mut off = offset as i64;
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE;
        while sent < len {
            let err = |call| FileError::at("splice", call, sent);
            let want = (len - sent).min(pipe_size as u64).min(STEP);
            self.resident(file, offset + sent, want)
                .await
                .map_err(err("readahead"))?;
            // The pipe is empty here: this call fills it from the page cache without waiting.
            let n = loop {
                match sys::file::splice(
                    file.as_fd(),
                    Some(&mut off),
                    pipe_w.as_fd(),
                    want as usize,
                    flags,
                ) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r.map_err(err("splice(file -> pipe)"))?,
                }
            };
            if n == 0 {
                return Err(err("splice(file -> pipe)")(
                    io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            let mut left = n;
            while left > 0 {
                let m = self
                    .on_socket(|s| {
                        sys::file::splice(
                            pipe_r.as_fd(),
                            None,
                            s,
                            left,
                            flags | libc::SPLICE_F_NONBLOCK,
                        )
                    })
                    .await
                    .map_err(FileError::at("splice", "splice(pipe -> socket)", sent))?;
                left -= m;
                sent += m as u64;
                self.io.get_mut().0.add(m as u64, m as u64);
            }
        }
        Ok(())
    }

    async fn copy(&mut self, file: &File, offset: u64, len: u64) -> Result<(), FileError> {
        let chunk = self.inner().config().chunk.max(1);
        let mut buf = vec![0u8; chunk];
        let mut sent = 0u64;
        while sent < len {
            let err = |call| FileError::at("copy", call, sent);
            let want = (len - sent).min(chunk as u64) as usize;
            self.resident(file, offset + sent, want as u64)
                .await
                .map_err(err("readahead"))?;
            let n = sync::read_at(file, &mut buf[..want], offset + sent).map_err(err("read"))?;
            if n == 0 {
                return Err(err("read")(io::ErrorKind::UnexpectedEof.into()));
            }
            let mut done = 0;
            while done < n {
                let m = self
                    .on_socket(|s| sys::net::sendto(s, &buf[done..n], libc::MSG_NOSIGNAL, None))
                    .await
                    .map_err(FileError::at("copy", "send", sent + done as u64))?;
                done += m;
                self.io.get_mut().0.add(m as u64, 0);
            }
            sent += n as u64;
        }
        Ok(())
    }
}
