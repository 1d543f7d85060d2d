//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Output, Stdio};

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The `zcnet` binary under test.
pub fn zcnet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
}

/// Spawns a server command (stdin and stdout to null, stderr piped) and reads the address of
/// its first stderr line ("... listening on ADDR ..."): the child, that address and the rest of
/// its stderr, which the caller must keep draining.
pub fn spawn_listening(cmd: &mut Command) -> (Child, SocketAddr, BufReader<ChildStderr>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (child, addr, err)
}

/// sha256 of a file, by coreutils' `sha256sum`.
pub fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum (coreutils)");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// The error of a failed command's stderr, checked by the rule rather than by one machine's
/// output (issue 46): the error is the last line, `zcnet: ...` (`zcnet: error: ...`, or the
/// argument parser's `zcnet: invalid value ...`), and no line before it is an error. Notes a
/// machine prints before it are allowed (`zcnet: not root: the labs run in a user namespace`,
/// `lab sink-swgso left out: it needs ethtool`): a bare box and a full one differ there, not in
/// the error.
pub fn error_line(err: &str) -> &str {
    let lines: Vec<&str> = err.trim_end().lines().collect();
    let (last, notes) = lines.split_last().expect("an error line");
    assert!(last.starts_with("zcnet: "), "the error comes last: {err:?}");
    assert!(
        notes.iter().all(|l| !l.contains("error")),
        "one error line expected: {err:?}"
    );
    last
}

/// The error line of a failed run (exit status 1), by [`error_line`]'s rule; it names each
/// cause once.
pub fn one_line_error(out: Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    let line = error_line(&err).to_owned();
    assert_no_repeat(&line);
    line
}

/// Issue 22 item 5: an error line names each cause once. Its ": "-separated segments are
/// distinct ("sendfile: sendfile failed", "X: X" are defects).
pub fn assert_no_repeat(line: &str) {
    let segments: Vec<&str> = line.trim_end().split(": ").map(str::trim).collect();
    for (i, a) in segments.iter().enumerate() {
        assert!(
            !segments[i + 1..].contains(a),
            "{a:?} is said twice in {line:?}"
        );
    }
}

/// Runs `cmd` with at most 1 GiB of address space and 60 s (`ulimit -v`, coreutils'
/// `timeout`): a regression that reads what it should not (`/dev/zero` whole) then fails in
/// bounded memory and time instead of taking the machine.
pub fn output_bounded(cmd: &Command) -> Output {
    let mut sh = Command::new("sh");
    sh.args([
        "-c",
        r#"ulimit -v 1048576 && exec timeout -s KILL 60 "$@""#,
        "sh",
    ])
    .arg(cmd.get_program())
    .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh.stdin(std::process::Stdio::null()).output().expect("sh")
}

/// A directory of the test's own in the temporary directory, removed when dropped, also when
/// the test fails.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// `zcnet-NAME-PID`, empty.
    pub fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("zcnet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// The names in it, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits up to `secs` for `child`; kills it (by its id) and fails if it is still running.
pub fn wait_bounded(mut child: std::process::Child, secs: u64) -> Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {secs} s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// The signals this process ignores, which a child inherits.
pub fn ignored_here() -> Vec<nix::sys::signal::Signal> {
    zcnet_cli::interrupt::ignored()
}
