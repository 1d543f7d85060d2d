//! This mechanism's own checks, run once per process: do `sendfile(2)` and `splice(2)` move a
//! memfd's bytes to a loopback TCP socket intact ([`support`])?

use std::fs;
use std::io::{self, Read, Write as _};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::OnceLock;

use crate::support::{Check, CheckId, Probe, Status, errno_name, tcp_pair};
use crate::sys;

/// What this kernel allows of file sending: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `file.sendfile`: `sendfile(2)` from a file to a TCP socket.
    pub sendfile: Check,
    /// `file.splice`: `splice(2)` file to pipe to TCP socket.
    pub splice: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.sendfile.clone(), self.splice.clone()]
    }
}

/// Whether `sendfile` and `splice` move a memfd's bytes to a loopback TCP socket intact; once
/// per process, then cached.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| Support {
        sendfile: sendfile_check(),
        splice: splice_check(),
    })
}

fn pattern_file(len: usize) -> io::Result<fs::File> {
    let mut f = fs::File::from(sys::file::memfd("zcnet-probe")?);
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    f.write_all(&data)?;
    Ok(f)
}

fn read_back(server: &TcpStream, len: usize) -> io::Result<bool> {
    let mut got = vec![0u8; len];
    (&*server).read_exact(&mut got)?;
    Ok(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8))
}

fn sendfile_check() -> Check {
    let mut p = Probe::new(CheckId::FileSendfile);
    let len = 2 * sys::mm::page_size();
    let setup = pattern_file(len).and_then(|f| Ok((f, tcp_pair(false)?)));
    let (file, (client, server)) = match setup {
        Ok(s) => s,
        Err(e) => return p.failed("memfd + TCP pair", &e, "needs memfd_create and loopback"),
    };
    p.step("sendfile(memfd -> TCP socket, 8 KiB)");
    let mut off = 0i64;
    while (off as usize) < len {
        let want = len - off as usize;
        match sys::file::sendfile(client.as_fd(), file.as_fd(), &mut off, want) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return p.failed("sendfile", &e, "sendfile to sockets needs Linux 2.6.33+"),
        }
    }
    match read_back(&server, len) {
        Ok(true) => p.ok("sendfile moved a file to a TCP socket intact"),
        Ok(false) => p.done(Status::Unavailable, "sendfile delivered wrong bytes", None),
        Err(e) => p.failed("read back", &e, ""),
    }
}

fn splice_check() -> Check {
    let mut p = Probe::new(CheckId::FileSplice);
    let len = 2 * sys::mm::page_size();
    let setup = pattern_file(len).and_then(|f| Ok((f, tcp_pair(false)?, sys::file::pipe()?)));
    let (file, (client, server), (pipe_r, pipe_w)) = match setup {
        Ok(s) => s,
        Err(e) => {
            return p.failed(
                "memfd + TCP pair + pipe",
                &e,
                "needs memfd, loopback, pipes",
            );
        }
    };
    p.step("fcntl(F_SETPIPE_SZ, 1 MiB)");
    match sys::file::set_pipe_size(pipe_w.as_fd(), 1 << 20) {
        Ok(n) => p.detail("pipe_size", n),
        Err(e) => {
            p.step(&format!(
                "F_SETPIPE_SZ -> {}",
                errno_name(e.raw_os_error().unwrap_or(0))
            ));
            p.detail("pipe_size", serde_json::Value::Null);
        }
    }
    p.step("splice(memfd -> pipe); splice(pipe -> TCP socket)");
    let mut off = 0i64;
    let mut moved = 0;
    while moved < len {
        let n =
            match sys::file::splice(file.as_fd(), Some(&mut off), pipe_w.as_fd(), len - moved, 0) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return p.failed("splice(file -> pipe)", &e, "needs splice (2.6.17+)"),
            };
        let mut left = n;
        while left > 0 {
            match sys::file::splice(pipe_r.as_fd(), None, client.as_fd(), left, 0) {
                Ok(m) => left -= m,
                Err(e) => return p.failed("splice(pipe -> socket)", &e, "needs splice (2.6.17+)"),
            }
        }
        moved += n;
    }
    match read_back(&server, len) {
        Ok(true) => p.ok("splice moved a file through a pipe to a TCP socket intact"),
        Ok(false) => p.done(Status::Unavailable, "splice delivered wrong bytes", None),
        Err(e) => p.failed("read back", &e, ""),
    }
}
