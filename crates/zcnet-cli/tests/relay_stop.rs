//! `zcnet relay` stopped by a signal (issue 65): the first SIGTERM stops the accepting (newcomers
//! are refused), lets the live connections end for `--drain-timeout`, resets what is left (its
//! source reads a reset, never a clean end of a cut stream) and exits 0; a second signal ends it
//! at once. Loopback only; every wait bounded.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use common::zcnet;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A destination that answers each connection with what it got, once its client half-closed.
fn answering_after_fin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut all = Vec::new();
                if c.read_to_end(&mut all).is_ok() {
                    let _ = c.write_all(&all);
                    let _ = c.shutdown(Shutdown::Write);
                }
            });
        }
    });
    addr
}

/// `zcnet relay` to `to` with `args`, and the address it listens on.
fn relay(to: SocketAddr, args: &[&str]) -> (Child, SocketAddr) {
    let mut cmd = zcnet();
    cmd.args(["relay", "--listen", "127.0.0.1:0", "--to", &to.to_string()])
        .args(args);
    let (child, addr, mut err) = common::spawn_listening(&mut cmd);
    // The rest of its stderr, drained so that it never blocks.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (child, addr)
}

/// Waits at most `within` for `child` to exit.
fn exited(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A client with `n` bytes sent and its stream not ended; reads time out after 10 s.
fn client(relay: SocketAddr, n: usize) -> TcpStream {
    let mut c = TcpStream::connect(relay).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&netlab::pattern::random_bytes(n, n as u64))
        .unwrap();
    c
}

#[test]
fn sigterm_drains_the_live_resets_the_rest_and_exits_0() {
    let dest = answering_after_fin();
    let (mut child, addr) = relay(dest, &["--drain-timeout", "2"]);
    let mut finishing = client(addr, 100_000);
    let mut cut = client(addr, 200_000);
    // Both relayed (the destination took them) before the signal.
    std::thread::sleep(Duration::from_millis(300));
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // A newcomer is refused, not queued.
    let newcomer = TcpStream::connect(addr).and_then(|mut c| {
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        c.read(&mut [0u8; 1])
    });
    assert!(newcomer.is_err(), "a newcomer after the stop: {newcomer:?}");
    // One ends within the drain: its whole answer, then a clean end.
    finishing.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    finishing.read_to_end(&mut back).unwrap();
    assert_eq!(back, netlab::pattern::random_bytes(100_000, 100_000));
    // The other outlives it: a reset, never a clean end.
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    let end = loop {
        match cut.read(&mut buf) {
            Ok(0) => break Ok(0),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    let e = end.expect_err("the cut stream ended cleanly");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let status = exited(&mut child, Duration::from_secs(5)).expect("the relay exited");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_second_signal_ends_the_relay_at_once() {
    let dest = answering_after_fin();
    let (mut child, addr) = relay(dest, &["--drain-timeout", "60"]);
    let _live = client(addr, 10_000);
    std::thread::sleep(Duration::from_millis(300));
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "it drains, for 60 s");
    kill(pid, Signal::SIGTERM).unwrap();
    let status = exited(&mut child, Duration::from_secs(5)).expect("ended at once");
    assert!(!status.success(), "{status:?}");
}

/// The processes whose parent is `pid`, by `/proc/*/stat`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                // The fields after the command's closing parenthesis: state, then the parent.
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// `zcnet bench relay` killed with SIGKILL (no time to stop anything) takes its relay and its
/// echo destination along: each ends when its stdin, a pipe from the bench, ends.
#[test]
fn a_killed_bench_relay_takes_its_processes_along() {
    let mut bench = zcnet()
        .args(["bench", "relay", "--connections", "1", "--mode", "loops"])
        .args(["--runs", "50", "--seconds", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = bench.id();
    // The echo first, then a relay: two children.
    let start = Instant::now();
    let children = loop {
        let c = children_of(pid);
        if c.len() >= 2 {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no relay started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let _ = bench.wait();
    for child in children {
        let gone = (0..500).any(|_| {
            let gone = !std::path::Path::new(&format!("/proc/{child}/stat")).exists()
                || std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                });
            if !gone {
                std::thread::sleep(Duration::from_millis(20));
            }
            gone
        });
        assert!(gone, "process {child} of the killed bench still runs");
    }
}
