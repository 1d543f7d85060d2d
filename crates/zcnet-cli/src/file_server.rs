//! A small HTTP/1.1 file server on tokio, built twice: with zcnet
//! ([`zcnet::tokio::FileSender`], [`Mode::Auto`](zcnet::file::Mode::Auto): `sendfile` where it
//! pays) and with plain tokio (`tokio::fs::File` + `tokio::io::copy`, what a tokio server does
//! today). `zcnet bench async-serve` runs the two side by side; `examples/async_file_server.rs`
//! is the zcnet one, alone, for reading.
//!
//! Protocol: `GET /NAME HTTP/1.x`, headers ignored but `Connection: close`; the answer is
//! `200` with `Content-Length` and the file, `404` for a name that is not a regular file of the
//! directory, `400` for a malformed request or a name with a `/`, `405` for other methods.
//! HTTP/1.1 connections stay open for the next request; HTTP/1.0 ones close after one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use zcnet::ZeroCopyCounters as _;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// `zcnet::tokio::FileSender` in [`Mode::Auto`](zcnet::file::Mode::Auto).
    Zcnet,
    /// `tokio::io::copy` from a `tokio::fs::File` (an 8 KiB buffer: what the one-liner does).
    TokioCopy,
    /// `tokio::io::copy_buf` from a `tokio::fs::File` behind a 256 KiB `BufReader`: the same
    /// copy with fewer, larger reads (each a hop to the blocking pool), plain tokio at its best.
    TokioCopyBuf,
}

impl Engine {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Zcnet => "zcnet",
            Engine::TokioCopy => "tokio-copy",
            Engine::TokioCopyBuf => "tokio-copy-256k",
        }
    }
}

/// What a server did, across its connections.
#[derive(Debug, Default)]
pub struct Stats {
    /// Files served whole.
    pub files: AtomicU64,
    /// Body bytes sent.
    pub bytes: AtomicU64,
    /// Of those, bytes that left without a user copy.
    pub zero_copy_bytes: AtomicU64,
    /// Of those, bytes zcnet's `Mode::Auto` chose to send by copy: the way its size class
    /// learned, exploring, or backing off (zcnet's engine only; with `zero_copy_bytes` they
    /// make up `bytes`).
    pub auto_copied_bytes: AtomicU64,
    /// Files `Mode::Auto` sent exploring the way it had not chosen, either way (one call per
    /// file).
    pub explore_files: AtomicU64,
    /// Answers other than 200.
    pub refused: AtomicU64,
    /// Connections that ended in an error (a peer that reset, ...).
    pub failed: AtomicU64,
}

/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// Serves the regular files directly in `dir` on `listener` until the task is dropped.
///
/// # Errors
/// `accept`'s error. A connection's own failure is counted in `stats.failed`, not returned.
pub async fn serve(
    listener: TcpListener,
    dir: PathBuf,
    engine: Engine,
    stats: Arc<Stats>,
) -> io::Result<()> {
    let dir = Arc::new(dir);
    loop {
        let (stream, _) = listener.accept().await?;
        let (dir, stats) = (dir.clone(), stats.clone());
        tokio::spawn(async move {
            if connection(stream, &dir, engine, &stats).await.is_err() {
                stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// One parsed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /name`; `close` when the connection ends after it.
    Get {
        /// The file name.
        name: String,
        /// HTTP/1.0 or `Connection: close`.
        close: bool,
    },
    /// Answer with this status and close.
    Refuse(u16),
}

/// Parses a request head (the lines before the blank one).
pub fn parse_request(head: &str) -> Request {
    let mut lines = head.lines();
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Refuse(400);
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Refuse(400);
    }
    if method != "GET" {
        return Request::Refuse(405);
    }
    let Some(name) = target.strip_prefix('/') else {
        return Request::Refuse(400);
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Request::Refuse(400);
    }
    let close = version == "HTTP/1.0"
        || lines.any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("connection")
                    && v.trim().eq_ignore_ascii_case("close")
            })
        });
    Request::Get {
        name: name.to_owned(),
        close,
    }
}

/// Reads one request head; `Ok(None)` at a clean end of the connection.
async fn read_head<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<Option<String>> {
    let mut head = String::new();
    loop {
        let before = head.len();
        // Never more than the limit, also from a peer that sends no line end.
        let room = (MAX_HEAD + 1).saturating_sub(head.len()) as u64;
        let n = (&mut *r).take(room).read_line(&mut head).await?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        if head.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request head too long",
            ));
        }
        if head[before..].trim_end_matches(['\r', '\n']).is_empty() {
            return Ok(Some(head));
        }
    }
}

fn status_line(code: u16) -> String {
    let text = match code {
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Error",
    };
    format!("HTTP/1.1 {code} {text}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

/// Where the server writes: zcnet's file sender, or the plain tokio stream.
enum Writer {
    Zcnet(Box<zcnet::tokio::FileSender<std::net::TcpStream>>),
    Tokio(TcpStream),
}

async fn connection(
    stream: TcpStream,
    dir: &Path,
    engine: Engine,
    stats: &Stats,
) -> anyhow::Result<()> {
    // Requests are read through tokio's stream, answers written through a duplicate of the
    // socket (epoll keys registrations by fd as well as by file, so both can be registered).
    let std = stream.into_std()?;
    let out = std.try_clone()?;
    let mut reader = BufReader::new(TcpStream::from_std(std)?);
    let mut writer = match engine {
        Engine::Zcnet => Writer::Zcnet(Box::new(zcnet::tokio::FileSender::new(
            out,
            zcnet::file::Config::default(),
        )?)),
        Engine::TokioCopy | Engine::TokioCopyBuf => Writer::Tokio(TcpStream::from_std(out)?),
    };
    while let Some(head) = read_head(&mut reader).await? {
        let (name, close) = match parse_request(&head) {
            Request::Get { name, close } => (name, close),
            Request::Refuse(code) => {
                refuse(&mut writer, code, stats).await?;
                return Ok(());
            }
        };
        let path = dir.join(&name);
        let file = match std::fs::File::open(&path) {
            Ok(f) if f.metadata()?.is_file() => f,
            _ => {
                refuse(&mut writer, 404, stats).await?;
                return Ok(());
            }
        };
        let len = file.metadata()?.len();
        let header = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
        match &mut writer {
            Writer::Zcnet(tx) => {
                let before = tx.counters();
                tx.send_bytes(header.as_bytes(), len > 0).await?;
                tx.send_file(&file, 0, len).await?;
                let after = tx.counters();
                stats.zero_copy_bytes.fetch_add(
                    after.zero_copy_bytes() - before.zero_copy_bytes(),
                    Ordering::Relaxed,
                );
                let (a, b) = (after.auto, before.auto);
                stats.auto_copied_bytes.fetch_add(
                    (a.copy_bytes + a.backoff_bytes) - (b.copy_bytes + b.backoff_bytes),
                    Ordering::Relaxed,
                );
                stats
                    .explore_files
                    .fetch_add(a.explore_calls - b.explore_calls, Ordering::Relaxed);
            }
            Writer::Tokio(w) => {
                w.write_all(header.as_bytes()).await?;
                let f = tokio::fs::File::from_std(file).take(len);
                let n = if engine == Engine::TokioCopyBuf {
                    let mut f = BufReader::with_capacity(256 << 10, f);
                    tokio::io::copy_buf(&mut f, w).await?
                } else {
                    tokio::io::copy(&mut { f }, w).await?
                };
                if n != len {
                    anyhow::bail!("{} ended after {n} of {len} bytes", path.display());
                }
            }
        }
        stats.files.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(len, Ordering::Relaxed);
        if close {
            break;
        }
    }
    Ok(())
}

async fn refuse(writer: &mut Writer, code: u16, stats: &Stats) -> anyhow::Result<()> {
    stats.refused.fetch_add(1, Ordering::Relaxed);
    let line = status_line(code);
    match writer {
        Writer::Zcnet(tx) => tx.send_bytes(line.as_bytes(), false).await?,
        Writer::Tokio(w) => w.write_all(line.as_bytes()).await?,
    }
    Ok(())
}

/// The client side: fetches `name` on `stream` (kept open) and hands each part of the body to
/// `sink`; returns the status and the body length. Any stream: `zcnet serve` bounds its reads.
///
/// # Errors
/// I/O errors, and an answer that is not HTTP or ends before its `Content-Length`.
pub async fn fetch<S: AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut BufReader<S>,
    name: &str,
    mut sink: impl FnMut(&[u8]),
) -> anyhow::Result<(u16, u64)> {
    let req = format!("GET /{name} HTTP/1.1\r\nHost: zcnet\r\n\r\n");
    stream.get_mut().write_all(req.as_bytes()).await?;
    let head = read_head(stream)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the server closed before answering"))?;
    let code: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {head:?}"))?;
    let len: u64 = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| anyhow::anyhow!("no Content-Length: {head:?}"))?;
    let mut left = len;
    let mut buf = vec![0u8; 256 * 1024];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = stream.read(&mut buf[..want]).await?;
        if n == 0 {
            anyhow::bail!("the body ended after {} of {len} bytes", len - left);
        }
        sink(&buf[..n]);
        left -= n as u64;
    }
    Ok((code, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_expected() {
        let get = |name: &str, close| Request::Get {
            name: name.into(),
            close,
        };
        assert_eq!(
            parse_request("GET /a.bin HTTP/1.1\r\nHost: x\r\n\r\n"),
            get("a.bin", false)
        );
        assert_eq!(parse_request("GET /a HTTP/1.0\r\n\r\n"), get("a", true));
        assert_eq!(
            parse_request("GET /a HTTP/1.1\r\nconnection:  Close \r\n\r\n"),
            get("a", true)
        );
        for bad in [
            "",
            "GET\r\n\r\n",
            "GET /a\r\n\r\n",
            "GET /a HTTP/2\r\n\r\n",
            "GET a HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET /../etc/passwd HTTP/1.1\r\n\r\n",
            "GET /.. HTTP/1.1\r\n\r\n",
            "GET /a/b HTTP/1.1\r\n\r\n",
            "GET /a HTTP/1.1 extra\r\n\r\n",
        ] {
            assert_eq!(parse_request(bad), Request::Refuse(400), "{bad:?}");
        }
        assert_eq!(
            parse_request("POST /a HTTP/1.1\r\n\r\n"),
            Request::Refuse(405)
        );
    }
}
