//! The five programs of issue 49, run as a user runs them: each example binary on loopback,
//! its output checked against what was sent. (The fifth, a C program, is
//! `crates/zcnet-ffi/tests/c_examples.rs`: it needs the workspace's libzcnet.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child killed (by its id: it is ours) when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `bin` with `args` and waits for the stderr line that contains `marker`, returning
/// the last word of it (the address the program listens on).
fn start(bin: &str, args: &[&str], marker: &str) -> (Running, String) {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "{bin} ended before '{marker}'"
        );
        if line.contains(marker) {
            break;
        }
    }
    // Keep reading stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let word = |l: &str| l.split_whitespace().last().unwrap().to_owned();
    let addr = if marker == "relaying" {
        line.split_whitespace().nth(1).unwrap().to_owned()
    } else {
        word(&line)
    };
    (Running(child), addr)
}

/// Bytes whose value depends on their position, so a gap or a swap shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect()
}

#[test]
fn a_gso_sender_recycles_a_fixed_pool() {
    let out = Command::new(env!("CARGO_BIN_EXE_gso_pool_sender"))
        .arg("300")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("is not supported") {
        return println!("SKIP: no UDP GSO on this kernel: {stderr}");
    }
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("300 trains"), "{stdout}");
    assert!(stdout.contains("0 still loaned"), "{stdout}");
}

#[test]
fn a_zero_copy_receiver_reads_a_stream_whole() {
    let (mut rx, addr) = start(
        env!("CARGO_BIN_EXE_zc_receiver"),
        &["127.0.0.1:0"],
        "waiting on",
    );
    let data = pattern(8 << 20);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&data).unwrap();
    drop(s);
    let mut stdout = String::new();
    rx.0.stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let sum = data
        .iter()
        .fold(0u64, |s, &b| s.rotate_left(5) ^ u64::from(b));
    assert!(
        stdout.contains(&format!("{} bytes", data.len())),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("checksum {sum:016x}")), "{stdout}");
}

#[test]
fn an_async_file_server_serves_a_file_whole() {
    let dir = std::env::temp_dir().join(format!("zcnet-five-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body = pattern(3 << 20);
    std::fs::write(dir.join("f"), &body).unwrap();
    let dir_arg = dir.to_str().unwrap().to_owned();
    let (_server, addr) = start(
        env!("CARGO_BIN_EXE_async_file_server"),
        &[&dir_arg, "127.0.0.1:0"],
        "serving",
    );
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /f HTTP/1.1\r\nHost: x\r\n\r\nGET /missing HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut len = 0;
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if let Some(v) = l.strip_prefix("Content-Length: ") {
            len = v.trim().parse().unwrap();
        }
        if l == "\r\n" {
            break;
        }
    }
    let mut got = vec![0u8; len];
    r.read_exact(&mut got).unwrap();
    assert!(got == body, "the body differs from the file");
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_relay_forwards_a_stream_whole() {
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let target_addr = target.local_addr().unwrap().to_string();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = target.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let (_relay, addr) = start(
        env!("CARGO_BIN_EXE_async_relay"),
        &["127.0.0.1:0", &target_addr],
        "relaying",
    );
    let data = pattern(5 << 20);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(&data).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    // The relay ends the connection once both directions ended (the target closes after
    // reading everything).
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(sink.join().unwrap() == data, "the target got other bytes");
}
