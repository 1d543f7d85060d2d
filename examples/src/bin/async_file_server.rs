//! `async_file_server DIR [ADDR]`: serves the regular files of DIR over HTTP/1.1 on tokio
//! (default 127.0.0.1:8080), each body by `sendfile` where it pays (`Mode::Auto`), many clients
//! at once. `curl http://127.0.0.1:8080/NAME` fetches one. Ctrl-C ends it.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use zcnet::file::Config;
use zcnet::tokio::FileSender;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let dir = Arc::new(PathBuf::from(
        args.next().ok_or("usage: async_file_server DIR [ADDR]")?,
    ));
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("serving {} on {}", dir.display(), listener.local_addr()?);
    loop {
        let (stream, peer) = listener.accept().await?;
        let dir = dir.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(stream, &dir).await {
                eprintln!("{peer}: {e}");
            }
        });
    }
}

/// Answers the requests of one connection until it closes.
async fn serve(
    stream: TcpStream,
    dir: &std::path::Path,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    // Requests are read through tokio; answers go out through zcnet's sender on a duplicate of
    // the socket.
    let std = stream.into_std()?;
    let mut tx = FileSender::new(std.try_clone()?, Config::default())?;
    let mut rx = BufReader::new(TcpStream::from_std(std)?);
    loop {
        let mut head = String::new();
        // A request head: lines up to a blank one, 8 KiB at most.
        loop {
            let before = head.len();
            if (&mut rx).take(8192).read_line(&mut head).await? == 0 {
                return Ok(());
            }
            if head.len() >= 8192 {
                return Err("request head too long".into());
            }
            if head[before..].trim().is_empty() {
                break;
            }
        }
        let target = head.split(' ').nth(1).unwrap_or("");
        let name = target.strip_prefix('/').unwrap_or("");
        let file = if name.is_empty() || name.contains('/') || name.starts_with('.') {
            None
        } else {
            tokio::fs::File::open(dir.join(name)).await.ok()
        };
        let len = match &file {
            Some(f) => f
                .metadata()
                .await
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()),
            None => None,
        };
        let (Some(file), Some(len)) = (file, len) else {
            tx.send_bytes(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                false,
            )
            .await?;
            continue;
        };
        let header = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
        tx.send_bytes(header.as_bytes(), len > 0).await?;
        // The whole file as it is now; a file that changed size since breaks the response.
        if tx.send_whole_file(&file).await? != len {
            return Err(format!("/{name} changed size while it was sent").into());
        }
        let c = tx.counters();
        eprintln!(
            "/{name}: {len} bytes by {}, {} of {} bytes so far without a user copy",
            tx.used().name(),
            c.zero_copy_bytes,
            c.bytes
        );
    }
}
