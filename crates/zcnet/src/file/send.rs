//! Sending one file, pipe or reader in one mode: `sendfile(2)`, `splice(2)` through a pipe,
//! or `pread(2)` + `send(2)`.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use super::mmap::send_mmap_zc;
use super::{Config, Counters, FileError, Mode};
use crate::sys;

/// Sends `len` bytes of `file` from `offset` on `socket` with `strategy` (resolved).
pub(super) fn send_file(
    socket: BorrowedFd<'_>,
    file: &File,
    offset: u64,
    len: u64,
    strategy: Mode,
    opts: Config,
) -> Result<Counters, FileError> {
    let err = |op: &'static str, sent: u64| FileError::at(strategy.name(), op, sent);
    let mut sent = 0u64;
    match strategy {
        Mode::Sendfile | Mode::Auto => {
            let mut off = offset as i64;
            while sent < len {
                let want = (len - sent).min(1 << 30) as usize;
                match sys::file::sendfile(socket, file.as_fd(), &mut off, want) {
                    Ok(0) => {
                        return Err(err("sendfile", sent)(io::ErrorKind::UnexpectedEof.into()));
                    }
                    Ok(n) => sent += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(err("sendfile", sent)(e)),
                }
            }
            Ok(Counters {
                bytes: sent,
                zero_copy_bytes: sent,
                mmap_window: None,
                auto: Default::default(),
            })
        }
        Mode::Splice => {
            let (pipe_r, pipe_w) = sys::file::pipe().map_err(err("pipe", 0))?;
            // A larger pipe moves more per call; the kernel may grant less (fs.pipe-max-size).
            let _ = sys::file::set_pipe_size(pipe_w.as_fd(), opts.pipe_size);
            let mut off = offset as i64;
            let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE;
            while sent < len {
                let want = (len - sent).min(opts.pipe_size as u64) as usize;
                let n = match sys::file::splice(
                    file.as_fd(),
                    Some(&mut off),
                    pipe_w.as_fd(),
                    want,
                    flags,
                ) {
                    Ok(0) => {
                        return Err(err("splice(file -> pipe)", sent)(
                            io::ErrorKind::UnexpectedEof.into(),
                        ));
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(err("splice(file -> pipe)", sent)(e)),
                };
                let mut left = n;
                while left > 0 {
                    match sys::file::splice(pipe_r.as_fd(), None, socket, left, flags) {
                        Ok(m) => left -= m,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // What this chunk put on the socket before the error went out too.
                        Err(e) => {
                            let out = sent + (n - left) as u64;
                            return Err(err("splice(pipe -> socket)", out)(e));
                        }
                    }
                }
                sent += n as u64;
            }
            Ok(Counters {
                bytes: sent,
                zero_copy_bytes: sent,
                mmap_window: None,
                auto: Default::default(),
            })
        }
        // Its ids go on from one file to the next: `FileSender::send_file` keeps them.
        Mode::MmapZeroCopy => send_mmap_zc(socket, file, offset, len, opts, &mut None),
        Mode::Copy => {
            let mut buf = vec![0u8; opts.chunk];
            let mut pos = offset;
            while sent < len {
                let want = (len - sent).min(buf.len() as u64) as usize;
                let n = read_at(file, &mut buf[..want], pos).map_err(err("read", sent))?;
                if n == 0 {
                    return Err(err("read", sent)(io::ErrorKind::UnexpectedEof.into()));
                }
                send_all(socket, &buf[..n], sent).map_err(|(e, at)| err("send", at)(e))?;
                sent += n as u64;
                pos += n as u64;
            }
            Ok(Counters {
                bytes: sent,
                zero_copy_bytes: 0,
                mmap_window: None,
                auto: Default::default(),
            })
        }
    }
}

/// Sends all of `data` by copy; on failure, the error names the bytes sent before it
/// (`sent_before` + what this call sent).
pub(super) fn send_all(
    socket: BorrowedFd<'_>,
    data: &[u8],
    sent_before: u64,
) -> Result<(), (io::Error, u64)> {
    let mut done = 0;
    while done < data.len() {
        match sys::net::sendto(socket, &data[done..], libc::MSG_NOSIGNAL, None) {
            Ok(m) => done += m,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((e, sent_before + done as u64)),
        }
    }
    Ok(())
}

/// `pread(2)`, retrying `EINTR`.
pub(crate) fn read_at(f: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match f.read_at(buf, pos) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Splices everything from the pipe `pipe` to `socket` until the writer closes it.
pub(super) fn send_pipe(
    socket: BorrowedFd<'_>,
    pipe: BorrowedFd<'_>,
) -> Result<Counters, FileError> {
    let mut sent = 0u64;
    loop {
        match sys::file::splice(
            pipe,
            None,
            socket,
            1 << 20,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE,
        ) {
            Ok(0) => {
                return Ok(Counters {
                    bytes: sent,
                    zero_copy_bytes: sent,
                    mmap_window: None,
                    auto: Default::default(),
                });
            }
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FileError::at("splice", "splice(pipe -> socket)", sent)(e)),
        }
    }
}

/// Reads the rest of `r` and sends it by copy.
pub(super) fn send_reader(
    socket: BorrowedFd<'_>,
    r: &mut impl Read,
    chunk: usize,
) -> Result<Counters, FileError> {
    let err = |op: &'static str, sent: u64| FileError::at("copy", op, sent);
    let mut buf = vec![0u8; chunk];
    let mut sent = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => {
                return Ok(Counters {
                    bytes: sent,
                    zero_copy_bytes: 0,
                    mmap_window: None,
                    auto: Default::default(),
                });
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err("read", sent)(e)),
        };
        send_all(socket, &buf[..n], sent).map_err(|(e, at)| err("send", at)(e))?;
        sent += n as u64;
    }
}
