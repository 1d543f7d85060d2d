//! `zcnet recv` against real senders, and its errors.

mod common;
use common::{TempDir, free_port, one_line_error, sha256, wait_bounded, zcnet};
use netlab::pattern::random_bytes;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netlab::require_program;

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

/// Issue 15 item 1, through the command: a sender writes 10 MiB, waits until the receiver's
/// kernel acknowledged all of it, then resets (SO_LINGER 0). `zcnet recv -o FILE` must have
/// written every byte, in both modes (hashes equal), and say "reset" once, on one line.
#[test]
fn a_reset_after_everything_was_acknowledged_writes_every_byte() {
    use std::io::Write;
    const LEN: usize = 10 << 20;
    let data = random_bytes(LEN, 0x1234_5678_9abc_def1);
    let dir = std::env::temp_dir().join(format!("zcnet-recv-rst-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Ten runs in a row, as the acceptance asks.
    for round in 0..10 {
        for mode in ["zero-copy", "copy"] {
            let port = free_port();
            let dst = dir.join(format!("{mode}-{round}"));
            let mut cmd = zcnet();
            cmd.args(["recv", "--listen", &format!("127.0.0.1:{port}"), "-o"])
                .arg(&dst)
                .stderr(Stdio::piped());
            if mode == "copy" {
                cmd.arg("--copy");
            }
            let recv = cmd.spawn().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut c = loop {
                match std::net::TcpStream::connect(("127.0.0.1", port)) {
                    Ok(c) => break c,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => panic!("zcnet recv never listened: {e}"),
                }
            };
            c.write_all(&data).unwrap();
            while zcnet::tcp_info::tcp_info(&c).unwrap().acked_data_bytes() != Some(LEN as u64) {
                assert!(
                    Instant::now() < deadline + Duration::from_secs(10),
                    "never acknowledged"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            socket2::SockRef::from(&c)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(c);
            let out = recv.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let got = std::fs::read(&dst).unwrap();
            assert_eq!(got.len(), LEN, "{mode} round {round}: {err}");
            assert!(got == data, "{mode} round {round}: wrong bytes");
            if !out.status.success() {
                assert_eq!(out.status.code(), Some(1), "{err}");
                let last = err.trim_end().lines().last().unwrap_or("");
                assert_eq!(last.matches("reset").count(), 1, "{last}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 35 item 14: an idle `recv` stopped by a signal left `.NAME.zcnet-PID` beside its
/// output. Stopped by SIGINT, SIGTERM or SIGHUP while it waits for its peer, it now leaves
/// nothing (a new output does not appear, an existing one is as it was) and dies of that signal,
/// as curl and nc do, so that a script sees it was interrupted.
#[test]
fn a_signal_before_the_peer_leaves_no_temporary_and_the_output_as_it_was() {
    use nix::sys::signal::{Signal, kill};
    use std::os::unix::process::ExitStatusExt;
    // A signal this test's process ignores (`nohup` ignores SIGHUP) stays ignored in the
    // command it starts, as in curl and nc: it cannot end it.
    let ignored = common::ignored_here();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        if ignored.contains(&sig) {
            netlab::skip::skip(&format!(
                "{sig} is ignored by this test's process (nohup?), so by the recv it starts"
            ));
            continue;
        }
        for existing in [false, true] {
            let dir = TempDir::new("recv-signal");
            let out = dir.join("out");
            if existing {
                std::fs::write(&out, b"precious").unwrap();
            }
            let child = zcnet()
                .args(["recv", "--listen", "127.0.0.1:0", "-o"])
                .arg(&out)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            // Listening: its socket is among its descriptors (made after the output).
            let fds = format!("/proc/{pid}/fd");
            let deadline = Instant::now() + Duration::from_secs(10);
            while !std::fs::read_dir(&fds).is_ok_and(|d| {
                d.flatten().any(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
            }) {
                assert!(Instant::now() < deadline, "recv never listened");
                std::thread::sleep(Duration::from_millis(5));
            }
            kill(pid, sig).unwrap();
            let status = wait_bounded(child, 10).status;
            assert_eq!(
                status.signal(),
                Some(sig as i32),
                "{sig} {existing}: {status}"
            );
            if existing {
                assert_eq!(dir.names(), ["out"], "{sig}");
                assert_eq!(std::fs::read(&out).unwrap(), b"precious", "{sig}");
            } else {
                assert!(dir.names().is_empty(), "{sig}: {:?}", dir.names());
            }
        }
    }
}

/// Issue 35 item 16: `recv -o ''` failed only once a peer had connected and sent data. An
/// output that cannot be opened now fails before listening: one line, exit 1, no peer needed.
#[test]
fn an_output_that_cannot_be_opened_fails_before_listening() {
    let dir = TempDir::new("recv-unopened");
    for (output, says) in [
        ("", "cannot write '': an empty file name"),
        (dir.to_str().unwrap(), "it is a directory"),
        ("/nonexistent-dir/out", "No such file or directory"),
    ] {
        let child = zcnet()
            .args(["recv", "--listen", "127.0.0.1:0", "-o", output])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = one_line_error(wait_bounded(child, 10));
        assert!(err.contains(says), "{output:?}: {err}");
    }
    assert!(dir.names().is_empty(), "nothing made: {:?}", dir.names());
}
