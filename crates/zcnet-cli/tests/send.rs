//! `zcnet send` with socat as the receiver, every strategy, and its errors.

mod common;
use common::{one_line_error, sha256, zcnet};
use netlab::pattern::random_bytes;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netlab::require_program;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zcnet-send-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sends `src` to a socat listener with `strategy`; returns the received file and the summary.
fn send_through_socat(src: &Path, dst: &Path, strategy: &str) -> serde_json::Value {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut socat = Command::new("socat")
        .arg("-u")
        .arg(format!("TCP-LISTEN:{port},reuseaddr"))
        .arg(format!("OPEN:{},creat,trunc", dst.display()))
        .spawn()
        .unwrap();
    // Until socat listens, the connection is refused: try again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = zcnet()
            .arg("send")
            .arg(src)
            .arg(format!("127.0.0.1:{port}"))
            .args(["--strategy", strategy, "--json"])
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("refused");
        if !refused || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        out.status.success(),
        "{strategy}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(socat.wait().unwrap().success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_strategy_is_byte_identical_through_socat() {
    require_program!("socat");
    require_program!("sha256sum");
    let dir = tmpdir("strategies");
    let odd = dir.join("odd");
    // 3 MiB + 5 bytes of pseudo-random data: not a page multiple, more than one mmap chunk.
    let data = random_bytes((3 << 20) + 5, 0x2545_f491_4f6c_dd1d);
    std::fs::write(&odd, &data).unwrap();
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    for src in [&odd, &empty] {
        for strategy in ["auto", "sendfile", "splice", "mmap-zc", "copy"] {
            let dst = dir.join("received");
            let v = send_through_socat(src, &dst, strategy);
            assert_eq!(sha256(src), sha256(&dst), "{strategy} {}", src.display());
            assert_eq!(v["bytes"], std::fs::metadata(src).unwrap().len());
            let share = v["zero_copy_share"].as_f64().unwrap();
            match v["strategy"].as_str().unwrap() {
                "sendfile" | "splice" if src == &odd => assert_eq!(share, 1.0),
                // Over loopback the kernel copies MSG_ZEROCOPY data for local delivery.
                "mmap-zc" | "copy" => assert_eq!(share, 0.0, "{strategy}"),
                _ => {}
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_file_directory_and_refused_connection_are_one_line_errors() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let err = one_line_error(
        zcnet()
            .args(["send", "/no/such/file", &closed])
            .output()
            .unwrap(),
    );
    assert!(err.contains("cannot read /no/such/file"), "{err}");
    let err = one_line_error(zcnet().args(["send", "/tmp", &closed]).output().unwrap());
    assert!(err.contains("directory"), "{err}");
    let dir = tmpdir("refused");
    let f = dir.join("f");
    std::fs::write(&f, b"data").unwrap();
    let err = one_line_error(
        zcnet()
            .arg("send")
            .arg(&f)
            .arg(&closed)
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("cannot connect") && err.contains("refused"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unreadable_file_is_a_one_line_error() {
    if !netlab::skip::on_path("setpriv") || nix::unistd::geteuid().as_raw() != 0 {
        netlab::skip::skip("needs root and setpriv to run as a user who cannot read the file");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tmpdir("unreadable");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.join("secret");
    std::fs::write(&f, b"root only").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bin = dir.join("zcnet");
    std::fs::copy(env!("CARGO_BIN_EXE_zcnet"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .arg("send")
        .arg(&f)
        .arg("127.0.0.1:9")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = one_line_error(out);
    assert!(err.contains("Permission denied"), "{err}");
}

/// A receiver thread on 127.0.0.1: everything one connection sends.
fn collector() -> (String, std::thread::JoinHandle<Vec<u8>>) {
    collector_on("127.0.0.1:0")
}

/// A receiver on `bind` that reads one connection to its end: its address and its bytes.
fn collector_on(bind: &str) -> (String, std::thread::JoinHandle<Vec<u8>>) {
    use std::io::Read;
    let l = TcpListener::bind(bind).unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        got
    });
    (addr, h)
}

fn send_json(args: &[&str], stdin: Stdio) -> (serde_json::Value, Vec<u8>) {
    let (addr, h) = collector();
    let out = zcnet()
        .arg("send")
        .args(args)
        .arg(&addr)
        .arg("--json")
        .stdin(stdin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        h.join().unwrap(),
    )
}

/// Issue 15 item 4: sources whose size is 0 or unknown sent 0 bytes and exited 0.
#[test]
fn sources_of_unknown_size_are_read_to_their_end() {
    // A /proc file reports size 0 but has content.
    let version = std::fs::read("/proc/version").unwrap();
    assert!(!version.is_empty());
    let (v, got) = send_json(&["/proc/version"], Stdio::null());
    assert_eq!(got, version);
    assert_eq!(v["bytes"], version.len() as u64);
    assert_eq!(v["strategy"], "copy");
    // The same on standard input.
    let (v, got) = send_json(
        &["-"],
        Stdio::from(std::fs::File::open("/proc/version").unwrap()),
    );
    assert_eq!(got, version);
    assert_eq!(v["strategy"], "copy");
    // An endless device, bounded by --limit.
    let (v, got) = send_json(&["/dev/zero", "--limit", "3000001"], Stdio::null());
    assert_eq!(got.len(), 3_000_001);
    assert!(got.iter().all(|&b| b == 0));
    assert_eq!(v["bytes"], 3_000_001);
}

#[test]
fn a_fifo_is_spliced_and_a_pipe_follows_the_strategy() {
    let dir = tmpdir("fifo");
    let fifo = dir.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let data = random_bytes((1 << 20) + 3, 0x9e37_79b9_7f4a_7c15);
    let writer = {
        let (fifo, data) = (fifo.clone(), data.clone());
        std::thread::spawn(move || std::fs::write(fifo, data).unwrap())
    };
    let (v, got) = send_json(&[fifo.to_str().unwrap()], Stdio::null());
    writer.join().unwrap();
    assert!(
        got == data,
        "FIFO contents differ ({} of {} bytes)",
        got.len(),
        data.len()
    );
    assert_eq!(v["strategy"], "splice");
    // A pipe on stdin: spliced by default, copied when copy is asked for (it used to say
    // "splice" whatever --strategy said).
    for (strategy, expect) in [("auto", "splice"), ("copy", "copy")] {
        let mut cat = Command::new("cat")
            .arg("/proc/version")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = Stdio::from(cat.stdout.take().unwrap());
        let (v, got) = send_json(&["-", "--strategy", strategy], stdin);
        assert!(cat.wait().unwrap().success());
        assert_eq!(got, std::fs::read("/proc/version").unwrap());
        assert_eq!(v["strategy"], expect, "--strategy {strategy}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 15 item 7: `send --connect-timeout` is validated like every duration, and a closed
/// port on 127.0.0.1 is a one-line error.
#[test]
fn connect_refusal_and_bad_timeouts_are_one_line_errors() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = zcnet()
        .args(["send", "/proc/version", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let err = one_line_error(out);
    assert!(err.contains("cannot connect to 127.0.0.1"), "{err}");
    for bad in ["-1", "0", "nan", "inf", "1e30"] {
        let out = zcnet()
            .args([
                "send",
                "/proc/version",
                "127.0.0.1:9",
                "--connect-timeout",
                bad,
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "--connect-timeout {bad}: {out:?}"
        );
    }
}

/// Issue 15 item 7: a SYN nobody answers (before, `send` waited 135 s). In a veth lab, A has a
/// permanent neighbour entry for an address B does not hold, so the SYN reaches B and is dropped
/// there: `send` run in A must give up after its `--connect-timeout` with one line.
#[test]
fn an_unanswered_connect_gives_up_after_the_timeout() {
    netlab::require_lab!();
    let lab = netlab::VethLab::new(None).unwrap();
    let b = lab.ns(netlab::Side::B);
    let mac = b.mac(netlab::VethLab::DEV_B).unwrap();
    let mac = mac.map(|x| format!("{x:02x}")).join(":");
    let silent = "198.18.0.99";
    lab.ns(netlab::Side::A)
        .ip(&[
            "neigh",
            "replace",
            silent,
            "lladdr",
            &mac,
            "dev",
            netlab::VethLab::DEV_A,
            "nud",
            "permanent",
        ])
        .unwrap();
    let start = Instant::now();
    let out = lab
        .ns(netlab::Side::A)
        .command(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "send",
            "/proc/version",
            &format!("{silent}:9"),
            "--connect-timeout",
            "0.5",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    let err = one_line_error(out);
    assert!(err.contains("cannot connect to 198.18.0.99:9"), "{err}");
    assert!(err.contains("timed out"), "{err}");
    assert!(
        took < Duration::from_secs(10),
        "gave up after {took:?}, not 0.5 s"
    );
}

/// Issue 22 item 1: a receiver that closes without reading resets the connection; `send` printed
/// "sent 100000 bytes" and exited 0. Each strategy must now fail with one line, exit 1.
#[test]
fn a_receiver_that_resets_unread_is_an_error() {
    let dir = tmpdir("reset");
    let src = dir.join("src");
    std::fs::write(&src, random_bytes(100_000, 7)).unwrap();
    for strategy in ["auto", "splice", "mmap-zc", "copy"] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        // Accepts, lets the whole file arrive unread, then closes: the kernel answers with RST.
        let peer = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            let end = Instant::now() + Duration::from_secs(10);
            let mut queued = vec![0u8; 100_000];
            while c.peek(&mut queued).unwrap() < queued.len() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(c);
        });
        let out = zcnet()
            .args(["send", src.to_str().unwrap(), &addr, "--strategy", strategy])
            .output()
            .unwrap();
        peer.join().unwrap();
        let err = one_line_error(out);
        assert!(
            err.contains("without reading everything: 100000 bytes sent"),
            "{strategy}: {err}"
        );
        assert!(err.contains("reset"), "{strategy}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 22 item 6: a sysfs file reports a size of a page for a few bytes; `send` sent them
/// and then failed with "unexpected end of file". Its end is where its data ends.
#[test]
fn a_file_shorter_than_its_size_is_sent_to_its_end() {
    let path = "/sys/class/net/lo/address";
    let data = std::fs::read(path).unwrap();
    assert!((data.len() as u64) < std::fs::metadata(path).unwrap().len());
    for strategy in ["auto", "splice", "copy"] {
        let (v, got) = send_json(&[path, "--strategy", strategy], Stdio::null());
        assert_eq!(got, data, "{strategy}");
        assert_eq!(v["bytes"], data.len() as u64, "{strategy}");
    }
}

/// Issue 22 item 7: IPv6 addresses with a zone, by name or index, where the kernel takes them:
/// `[::1%lo]` on loopback, a link-local `[fe80::2%veth-a]` across a veth pair.
#[test]
fn scoped_ipv6_addresses_are_accepted() {
    let (addr, h) = collector_on("[::1]:0");
    let addr = addr.replace("[::1]", "[::1%lo]");
    let out = zcnet()
        .args(["send", "/proc/version", &addr])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(h.join().unwrap(), std::fs::read("/proc/version").unwrap());
    let out = zcnet()
        .args(["send", "/proc/version", "[::1%zcnet-none0]:9"])
        .output()
        .unwrap();
    let err = one_line_error(out);
    assert!(err.contains("no such interface"), "{err}");

    netlab::require_lab!();
    let lab = netlab::VethLab::new(None).unwrap();
    for (side, dev, ip) in [
        (netlab::Side::A, netlab::VethLab::DEV_A, "fe80::1/64"),
        (netlab::Side::B, netlab::VethLab::DEV_B, "fe80::2/64"),
    ] {
        lab.ns(side)
            .ip(&["addr", "add", ip, "dev", dev, "nodad"])
            .unwrap();
    }
    let dir = tmpdir("scoped");
    let dst = dir.join("dst");
    let port = 47_123;
    let mut recv = lab
        .ns(netlab::Side::B)
        .command(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "recv",
            "--listen",
            &format!("[fe80::2%{}]:{port}", netlab::VethLab::DEV_B),
            "-o",
            dst.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The listener is up once a connect from inside B succeeds; send from A then.
    let to = format!("[fe80::2%{}]:{port}", netlab::VethLab::DEV_A);
    let mut sent = None;
    for _ in 0..100 {
        let out = lab
            .ns(netlab::Side::A)
            .command(env!("CARGO_BIN_EXE_zcnet"))
            .args(["send", "/proc/version", &to, "--connect-timeout", "1"])
            .output()
            .unwrap();
        if out.status.success() {
            sent = Some(out);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = recv.wait().unwrap();
    assert!(sent.is_some(), "send to {to} never succeeded");
    assert!(status.success());
    assert_eq!(
        std::fs::read(&dst).unwrap(),
        std::fs::read("/proc/version").unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 35 item 18: a file truncated while it was sent ended with a warning, exit 0, and the
/// receiver saw a clean end of a partial file. A sized file that ends short is now an error,
/// exit 1, and the receiver sees the connection reset; `--allow-short` sends what the file held
/// and ends cleanly. Every strategy. The file is 1 GiB, sparse: the receiver reads nothing until
/// it is cut to 1 MiB, so the sender is always still sending then, whatever the buffers.
#[test]
fn a_file_that_shrinks_while_sent_is_an_error_the_receiver_sees() {
    use std::io::Read;
    let dir = common::TempDir::new("send-shrinks");
    let src = dir.join("src");
    for strategy in ["auto", "splice", "mmap-zc", "copy"] {
        for allow in [false, true] {
            std::fs::File::create(&src)
                .unwrap()
                .set_len(1 << 30)
                .unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let cut = src.clone();
            let peer = std::thread::spawn(move || {
                let (mut c, _) = l.accept().unwrap();
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                // The first bytes are in: the sender is at work. Cut the file under it.
                c.peek(&mut [0u8; 1]).unwrap();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&cut)
                    .unwrap()
                    .set_len(1 << 20)
                    .unwrap();
                let mut got = Vec::new();
                let end = c.read_to_end(&mut got);
                (got.len() as u64, end.map(drop).map_err(|e| e.kind()))
            });
            let mut cmd = zcnet();
            cmd.args(["send", src.to_str().unwrap(), &addr, "--strategy", strategy])
                .arg("--json");
            if allow {
                cmd.arg("--allow-short");
            }
            let out = common::wait_bounded(
                cmd.stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
                60,
            );
            let (got, end) = peer.join().unwrap();
            assert!(got < 1 << 30, "{strategy}: {got} bytes");
            if allow {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "{strategy}: {err}");
                assert!(err.contains("sent what it held (--allow-short)"), "{err}");
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v["bytes"], got, "{strategy}: what it says it sent arrived");
                assert_eq!(end, Ok(()), "{strategy}: a clean end");
            } else {
                let err = one_line_error(out);
                assert!(
                    err.contains("bytes its size gave (it shrank while being sent)")
                        && err.contains("--allow-short"),
                    "{strategy}: {err}"
                );
                assert_eq!(
                    end,
                    Err(std::io::ErrorKind::ConnectionReset),
                    "{strategy}: the receiver sees the transfer cut ({got} bytes)"
                );
            }
        }
    }
}

/// Issue 48 item 5: `send -` sent standard input from its first byte whatever its offset (with
/// stdin at byte 1000 of a file, `cat` sent the rest and `zcnet send -` all of it). It now starts
/// where standard input stands, and leaves it where the send ended, as a read would.
#[test]
fn standard_input_is_sent_from_its_offset() {
    use std::io::{Seek, SeekFrom};
    let dir = tmpdir("offset");
    let path = dir.join("file");
    let data = random_bytes(2_000_000, 48);
    std::fs::write(&path, &data).unwrap();
    for strategy in ["auto", "copy", "splice"] {
        let mut f = std::fs::File::open(&path).unwrap();
        f.seek(SeekFrom::Start(1000)).unwrap();
        let shared = f.try_clone().unwrap();
        let (v, got) = send_json(&["-", "--strategy", strategy], Stdio::from(shared));
        assert!(got == data[1000..], "{strategy}: {} bytes", got.len());
        assert_eq!(v["bytes"], data.len() as u64 - 1000, "{strategy}");
        // The offset the shell's next command sees: the end.
        assert_eq!(
            f.stream_position().unwrap(),
            data.len() as u64,
            "{strategy}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 48 item 6: SIGINT, SIGTERM or SIGHUP during a send ended it by the signal, and the
/// receiver got a FIN: a clean end holding part of the file. The connection is now reset
/// unless every byte was sent, so the receiver sees the transfer cut.
#[test]
fn an_interrupted_send_resets_the_connection() {
    use nix::sys::signal::{Signal, kill};
    use std::io::Read as _;
    let ignored = common::ignored_here();
    let dir = tmpdir("interrupted");
    let path = dir.join("big");
    // Sparse: 2 GiB to send, nothing on disk.
    std::fs::File::create(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        if ignored.contains(&sig) {
            netlab::skip::skip(&format!(
                "{sig} is ignored by this test's process, so by send"
            ));
            continue;
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut child = zcnet()
            .arg("send")
            .arg(&path)
            .arg(addr.to_string())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (mut c, _) = l.accept().unwrap();
        // A slow reader: some bytes, then the signal while the send goes on.
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0usize;
        while got < 8 << 20 {
            got += c.read(&mut buf).unwrap();
        }
        kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "{sig}");
        let end = loop {
            match c.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => got += n,
                Err(e) => break Err(e),
            }
        };
        let e = end.expect_err(&format!(
            "{sig}: a clean end after {got} of {} bytes",
            2u64 << 30
        ));
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{sig}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
