//! The `zcnet` binary as a user runs it: arguments, version, completions, the man page, a
//! closed pipe, too little memory and signals.

mod common;
use common::zcnet;

#[test]
fn bad_arguments_exit_2() {
    let out = zcnet().args(["probe", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = zcnet().arg("no-such-command").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Runs `zcnet ARGS` with its stdout a pipe whose reader is gone before it writes.
fn with_stdout_closed(args: &[&str]) -> std::process::Output {
    let mut child = zcnet()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// Issue 16 item 5: what a user expects of a Rust tool: a version, shell completions and a man
/// page generated from the same argument definitions; a closed pipe is an error, not a panic.
#[test]
fn version_completions_and_man_page() {
    let out = zcnet().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("zcnet {}", env!("CARGO_PKG_VERSION"))
    );
    for (shell, marker) in [
        ("bash", "_zcnet()"),
        ("zsh", "#compdef zcnet"),
        ("fish", "complete -c zcnet"),
    ] {
        let out = zcnet().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(marker),
            "{shell}: {}",
            &text[..text.len().min(200)]
        );
        assert!(text.contains("capture"), "{shell}: subcommands listed");
    }
    let out = zcnet().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH zcnet 1"), "{page}");
    assert!(page.contains("bench"), "subcommands in the man page");
    // A reader that goes away at once: exit 1 with a message, never a panic (101).
    let out = with_stdout_closed(&["completions", "bash"]);
    assert_ne!(out.status.code(), Some(101), "{out:?}");
    // The same for a command that prints with println! (`zcnet probe | head -1`): it ends quietly
    // with SIGPIPE's status, no panic message.
    let out = with_stdout_closed(&["probe"]);
    assert_eq!(out.status.code(), Some(141), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{out:?}"
    );
}

/// Issue 48 item 10: under a small `ulimit -v` the bench died of an abort ("memory allocation
/// of 268435456 bytes failed", SIGABRT). It is one line now, exit 1, saying how much memory it
/// wanted.
#[test]
fn a_bench_without_the_memory_it_needs_says_so() {
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            r#"ulimit -v 200000 && exec "$0" bench udp-tx --lab sink --size 64000 --mode copy --runs 1 --seconds 0.1"#,
            env!("CARGO_BIN_EXE_zcnet"),
        ])
        .env_remove("ZCNET_PROFILE")
        .output()
        .unwrap();
    let err = common::one_line_error(out);
    assert!(err.contains("cannot allocate 256 MiB"), "{err}");
}

/// Issue 48 item 11: Ctrl-C, SIGTERM or SIGHUP to a bench left its `zcnet-PID-N` namespaces
/// behind. It dies of the signal as before, and netlab's reaper removes them as it dies.
#[test]
fn a_bench_ended_by_a_signal_leaves_no_namespace() {
    use nix::sys::signal::{Signal, kill};
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let ignored = common::ignored_here();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        if ignored.contains(&sig) {
            netlab::skip::skip(&format!(
                "{sig} is ignored by this test's process, so by the bench"
            ));
            continue;
        }
        let child = zcnet()
            .args([
                "bench", "udp-tx", "--lab", "sink", "--size", "64000", "--mode", "copy",
            ])
            .args(["--runs", "100", "--seconds", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mine = format!("/run/netns/zcnet-{pid}-");
        let has_lab = || {
            std::fs::read_dir("/run/netns").is_ok_and(|d| {
                d.flatten()
                    .any(|e| e.path().to_string_lossy().starts_with(&mine))
            })
        };
        let start = std::time::Instant::now();
        while !has_lab() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "no lab built"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
        let out = common::wait_bounded(child, 30);
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(
            out.status.signal(),
            Some(sig as i32),
            "{sig}: {:?}",
            out.status
        );
        // Its reaper removes them as it dies, in a moment.
        let gone = (0..250).any(|_| {
            let gone = !has_lab();
            if !gone {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            gone
        });
        assert!(gone, "{sig}: its namespaces were left behind");
    }
}
