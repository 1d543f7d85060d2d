//! The async file server (issue 19), both engines: 200 concurrent loopback connections with
//! every byte compared, refusals, and a client that resets mid-file without hurting the others.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use zcnet_cli::file_server::{Engine, Stats, fetch, serve};

/// Sizes of the served files: empty, one byte, around a page, around 64 KiB, 1 MiB + 3, 3 MiB.
const SIZES: [usize; 7] = [0, 1, 4095, 65_537, 65_536, (1 << 20) + 3, 3 << 20];

struct Dir {
    path: PathBuf,
    files: Vec<Vec<u8>>,
}

impl Dir {
    fn new(tag: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("zcnet-files-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        let files: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| netlab::pattern::random_bytes(n, 0x9e37_79b9_7f4a_7c15 + i as u64))
            .collect();
        for (i, f) in files.iter().enumerate() {
            std::fs::write(path.join(format!("f{i}")), f).unwrap();
        }
        Dir { path, files }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn start(
    dir: &Dir,
    engine: Engine,
) -> (
    std::net::SocketAddr,
    Arc<Stats>,
    tokio::task::JoinHandle<()>,
) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let stats = Arc::new(Stats::default());
    let task = tokio::spawn({
        let (path, stats) = (dir.path.clone(), stats.clone());
        async move {
            serve(l, path, engine, stats).await.unwrap();
        }
    });
    (addr, stats, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connections_get_every_byte() {
    let dir = Dir::new("200");
    let files = Arc::new(dir.files.clone());
    for engine in [Engine::Zcnet, Engine::TokioCopy, Engine::TokioCopyBuf] {
        let (addr, stats, server) = start(&dir, engine).await;
        let clients: Vec<_> = (0..200usize)
            .map(|i| {
                let files = files.clone();
                tokio::spawn(async move {
                    let mut s = BufReader::new(TcpStream::connect(addr).await?);
                    let mut got = 0u64;
                    for k in [i % 7, (i + 1) % 7, (i + 3) % 7] {
                        let want = &files[k];
                        let mut at = 0usize;
                        let (code, len) = fetch(&mut s, &format!("f{k}"), |part| {
                            assert_eq!(part, &want[at..at + part.len()], "file {k} at {at}");
                            at += part.len();
                        })
                        .await?;
                        assert_eq!((code, len, at), (200, want.len() as u64, want.len()));
                        got += len;
                    }
                    anyhow::Ok(got)
                })
            })
            .collect();
        let mut total = 0u64;
        for c in clients {
            total += tokio::time::timeout(Duration::from_secs(120), c)
                .await
                .expect("no hang")
                .unwrap()
                .unwrap();
        }
        // The server counts a file once its last byte is written, which the client may have
        // read already: its counters are read once they settle (seen once on a fresh machine:
        // 599 of 600 counted, every byte having arrived and been checked).
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while (stats.files.load(Ordering::Relaxed) < 600
            || stats.bytes.load(Ordering::Relaxed) < total)
            && std::time::Instant::now() < end
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.abort();
        assert_eq!(stats.files.load(Ordering::Relaxed), 600, "{engine:?}");
        assert_eq!(stats.bytes.load(Ordering::Relaxed), total);
        assert_eq!(stats.failed.load(Ordering::Relaxed), 0, "{engine:?}");
        let zc = stats.zero_copy_bytes.load(Ordering::Relaxed);
        let chosen = stats.auto_copied_bytes.load(Ordering::Relaxed);
        match engine {
            // Mode::Auto: by sendfile (the built-in profile's prior) but for the files it
            // chose to copy, exploring or as a connection's sender learned; none else.
            Engine::Zcnet => assert_eq!(zc + chosen, total, "{zc} + {chosen}"),
            Engine::TokioCopy | Engine::TokioCopyBuf => assert_eq!((zc, chosen), (0, 0)),
        }
        eprintln!("{engine:?}: {total} bytes to 200 connections");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_a_reset_mid_file_leave_the_server_serving() {
    let dir = Dir::new("bad");
    for engine in [Engine::Zcnet, Engine::TokioCopy, Engine::TokioCopyBuf] {
        let (addr, stats, server) = start(&dir, engine).await;
        for (name, code) in [("missing", 404), ("..", 400), ("", 400)] {
            let mut s = BufReader::new(TcpStream::connect(addr).await.unwrap());
            let (got, len) = fetch(&mut s, name, |_| {}).await.unwrap();
            assert_eq!((got, len), (code, 0), "{name:?}");
        }
        // Garbage, and a head that never ends within the limit.
        for junk in [&b"\x00\x01\x02 nonsense\r\n\r\n"[..], &[b'A'; 20_000][..]] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(junk).await.unwrap();
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
                .await
                .expect("the server answers or closes");
        }
        // A client that asks for the 3 MiB file, reads 1 KiB and resets.
        {
            let s = TcpStream::connect(addr).await.unwrap();
            let mut s = BufReader::new(s);
            s.get_mut()
                .write_all(b"GET /f6 HTTP/1.1\r\n\r\n")
                .await
                .unwrap();
            let mut first = [0u8; 1024];
            s.read_exact(&mut first).await.unwrap();
            s.get_ref().set_zero_linger().unwrap();
        }
        // The server still serves, whole files.
        let mut s = BufReader::new(TcpStream::connect(addr).await.unwrap());
        let mut body = Vec::new();
        let (code, _) = tokio::time::timeout(
            Duration::from_secs(30),
            fetch(&mut s, "f5", |p| body.extend_from_slice(p)),
        )
        .await
        .expect("no hang")
        .unwrap();
        assert_eq!(code, 200);
        assert_eq!(body, dir.files[5]);
        // The endless head ended its connection in an error; the reset one did too, unless all
        // 3 MiB fitted in the loopback socket buffers before it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let failed = stats.failed.load(Ordering::Relaxed);
        assert!((1..=2).contains(&failed), "{engine:?}: {failed} failed");
        // 404, 400 twice, and 400 for the junk line.
        assert_eq!(stats.refused.load(Ordering::Relaxed), 4, "{engine:?}");
        server.abort();
    }
}
