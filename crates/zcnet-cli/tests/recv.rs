//! `zcnet recv` against real senders, and its errors.

mod common;
use common::{one_line_error, random_bytes, sha256, zcnet};

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netlab::require_program;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn receives_200_mb_from_socat_byte_identical() {
    require_program!("socat");
    require_program!("sha256sum");
    let dir = std::env::temp_dir().join(format!("zcnet-recv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    // 200 MB of pseudo-random bytes, not a page multiple.
    let size = 200_000_003usize;
    let data = random_bytes(size, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(&src, &data).unwrap();
    drop(data);

    let port = free_port();
    let mut recv = zcnet()
        .args(["recv", "--listen", &format!("127.0.0.1:{port}"), "-o"])
        .arg(&dst)
        .arg("--json")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = Command::new("socat")
        .arg("-u")
        .arg(format!("FILE:{}", src.display()))
        .arg(format!("TCP:127.0.0.1:{port},retry=100,interval=0.05"))
        .status()
        .unwrap();
    assert!(status.success(), "socat failed");
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(s) = recv.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "zcnet recv did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut summary = String::new();
    recv.stdout
        .take()
        .unwrap()
        .read_to_string(&mut summary)
        .unwrap();
    assert!(code.success());
    let v: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    assert_eq!(v["bytes"], size as u64);
    assert_eq!(v["complete"], true);
    assert_eq!(sha256(&src), sha256(&dst));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_address_is_one_line_and_exit_1() {
    let err = one_line_error(
        zcnet()
            .args(["recv", "--listen", "not-an-address"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("bad address"), "{err}");
}

#[test]
fn port_in_use_is_one_line_and_exit_1() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let err = one_line_error(
        zcnet()
            .args(["recv", "--listen", &addr, "-o", "/dev/null"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("in use"), "{err}");
}

#[test]
fn unwritable_output_is_one_line_and_exit_1() {
    let err = one_line_error(
        zcnet()
            .args([
                "recv",
                "--listen",
                "127.0.0.1:0",
                "-o",
                "/nonexistent-dir/out",
            ])
            .output()
            .unwrap(),
    );
    assert!(err.contains("cannot write /nonexistent-dir/out"), "{err}");
}
