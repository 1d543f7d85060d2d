//! `zcnet send` with socat as the receiver, every strategy, and its errors.

mod common;
use common::{one_line_error, random_bytes, sha256, zcnet};

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
