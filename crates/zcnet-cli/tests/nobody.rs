//! zcnet run as `nobody`: the probe, a bench in each kind of lab, io_uring under a small
//! memlock limit.

mod common;

use std::process::Command;

/// Run as `nobody`, the probe still works and says which checks it could not run and why.
#[test]
fn probe_without_root_says_what_it_could_not_check() {
    let _nobody = NOBODY.lock().unwrap_or_else(|e| e.into_inner());
    if !netlab::skip::on_path("setpriv") {
        netlab::skip::skip("setpriv (util-linux) is not installed");
        return;
    }
    if nix::unistd::geteuid().as_raw() != 0 {
        netlab::skip::skip("needs root to switch to an unprivileged user");
        return;
    }
    let (dir, bin) = copy_for_nobody("nobody");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&bin)
        .args(["probe", "--json"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["privileges"]["euid"], 65534);
    assert_eq!(v["privileges"]["cap_net_raw"], false);
    let checks = v["checks"].as_array().unwrap();
    let ring_rx = checks
        .iter()
        .find(|c| c["id"] == "ring.tpacket_v3_rx")
        .unwrap();
    assert_eq!(ring_rx["status"], "blocked", "{ring_rx}");
    assert_eq!(ring_rx["errno"], "EPERM");
    assert!(ring_rx["reason"].as_str().unwrap().contains("CAP_NET_RAW"));
    // What needs no privilege is still decided.
    let tx = checks
        .iter()
        .find(|c| c["id"] == "tx.msg_zerocopy_udp")
        .unwrap();
    assert_ne!(tx["status"], "blocked", "{tx}");
}

/// A copy of zcnet that nobody can execute, in a directory of its own under the temporary
/// directory (outside a tree nobody may not traverse): (directory, binary).
fn copy_for_nobody(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("zcnet-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("zcnet");
    std::fs::copy(env!("CARGO_BIN_EXE_zcnet"), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// Tests that run zcnet as `nobody` hold this: the kernel counts locked memory (pages pinned by
/// zero-copy sends, io_uring rings) per user, so one such test's pins would count against
/// another's limit.
static NOBODY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// zcnet run as `nobody` in labs of its own: a copy of the binary nobody may execute, and a PATH
/// of the real directories of the programs the labs run (the caller's PATH may be a directory
/// nobody cannot enter, as under shared/tools/fresh-machine). Holds [`NOBODY`].
struct Nobody {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    path: std::ffi::OsString,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl Nobody {
    /// `None`, the skip recorded, where this machine cannot: no setpriv, not root, no
    /// unprivileged user namespaces, a program the labs run missing.
    fn new(name: &str) -> Option<Nobody> {
        if !netlab::skip::on_path("setpriv") {
            netlab::skip::skip("setpriv (util-linux) is not installed");
            return None;
        }
        if nix::unistd::geteuid().as_raw() != 0 {
            netlab::skip::skip("needs root to switch to an unprivileged user");
            return None;
        }
        let lock = NOBODY.lock().unwrap_or_else(|e| e.into_inner());
        // Can nobody make a user namespace here at all? (Programs by their real path: a PATH of
        // symlinks in a directory nobody may enter would say no for another reason.)
        let real = |p: &str| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths).find_map(|d| std::fs::canonicalize(d.join(p)).ok())
            })
        };
        let (Some(unshare), Some(truth)) = (real("unshare"), real("true")) else {
            netlab::skip::skip("unshare or true is not installed");
            return None;
        };
        let userns = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&unshare)
            .arg("-rn")
            .arg(&truth)
            .status()
            .is_ok_and(|s| s.success());
        if !userns {
            netlab::skip::skip("unprivileged user namespaces are not allowed here");
            return None;
        }
        let mut dirs: Vec<std::path::PathBuf> = Vec::new();
        for p in ["ip", "sh", "tr"] {
            let Some(dir) = real(p).and_then(|r| r.parent().map(std::path::Path::to_path_buf))
            else {
                netlab::skip::skip(&format!("{p} is not installed"));
                return None;
            };
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        let (dir, bin) = copy_for_nobody(name);
        Some(Nobody {
            dir,
            bin,
            path: std::env::join_paths(&dirs).unwrap(),
            _lock: lock,
        })
    }

    /// `zcnet` as nobody, run by `via` (`prlimit ...`; none: directly).
    fn zcnet(&self, via: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(via)
            .arg(&self.bin)
            .current_dir(&self.dir)
            .env("PATH", &self.path);
        c
    }
}

impl Drop for Nobody {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Issue 16 item 3: an ordinary user (`nobody`) runs one bench of each lab kind, loopback, sink
/// and veth, in a user namespace zcnet makes itself, and gets results, not skips.
#[test]
fn nobody_runs_a_bench_in_each_kind_of_lab() {
    let Some(nobody) = Nobody::new("nobody-bench") else {
        return;
    };
    let short = ["--runs", "1", "--seconds", "0.3", "--json"];
    for (bench, extra) in [
        ("tcp-rx", &["--lab", "loopback"][..]),
        ("udp-tx", &["--lab", "sink", "--size", "64000"][..]),
        (
            "packet",
            &[
                "--lab", "veth", "--size", "64", "--mode", "recvfrom", "--mode", "ring",
            ][..],
        ),
    ] {
        let out = nobody
            .zcnet(&[])
            .args(["bench", bench])
            .args(extra)
            .args(short)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{bench} as nobody: {err}");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{bench}: {e}: {err}"));
        let results = v["results"].as_array().unwrap();
        assert!(!results.is_empty(), "{bench}: no results: {err}");
        assert!(
            results
                .iter()
                .all(|r| r["runs"].as_array().is_some_and(|a| !a.is_empty())),
            "{bench}: {v}"
        );
    }
}

/// Issue 35 item 13: `bench uring-tx` as `nobody` under `ulimit -l 64` aborted at its second
/// run, most times, with io_uring_setup's ENOMEM: the ring the bench set up first (to report
/// the set-up granted) had its fd registered with the main thread, which kept it, its pages
/// counted as locked memory, until the process ended; and a ring closed just before is freed
/// by the kernel later, in a worker. Now every mode that can runs: zc-fixed is left out with
/// the limit and the `ulimit -l` that would do, zc and auto send what they cannot pin by copy,
/// saying so, and every byte arrives intact.
#[test]
fn nobody_under_a_64_kib_memlock_runs_uring_tx_with_fallbacks() {
    if !netlab::skip::on_path("prlimit") {
        return netlab::skip::skip("prlimit (util-linux) is not installed");
    }
    let Some(nobody) = Nobody::new("nobody-memlock") else {
        return;
    };
    let short = [
        "--runs",
        "2",
        "--seconds",
        "0.05",
        "--pool-mib",
        "2",
        "--json",
    ];
    let out = nobody
        .zcnet(&["prlimit", "--memlock=65536"])
        .args(["bench", "uring-tx", "--lab", "sink", "--lab", "loopback"])
        .args(["--size", "64000"])
        .args(short)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("io_uring is not available") {
        return netlab::skip::skip(&format!("no io_uring here: {err}"));
    }
    assert!(out.status.success(), "{err}");
    // The pool: 2 MiB of 64000-byte buffers (at least two batches); in flight: a window, one
    // buffer less than the pool.
    let buffers = zcnet_cli::bench::uring_tx::PoolSpec::Mib(2).buffers(64000);
    let window = zcnet_cli::bench::uring_tx::CONFIG.window.min(buffers - 1);
    let (pool, in_flight) = (buffers * 64000, window * 64000);
    let said = |what: &str| {
        err.lines()
            .any(|l| l.contains(what) && l.contains("RLIMIT_MEMLOCK"))
    };
    assert!(said("zc-fixed skipped"), "{err}");
    assert!(said(&format!("`ulimit -l {}`", pool / 1024)), "{err}");
    assert!(
        said(&format!("zc and auto pin up to {in_flight} bytes")),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sets: Vec<(&str, &str)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["lab"].as_str().unwrap(), r["mode"].as_str().unwrap()))
        .collect();
    assert_eq!(
        sets,
        [
            ("sink", "copy"),
            ("sink", "zc"),
            ("sink", "auto"),
            ("loopback", "copy"),
            ("loopback", "zc"),
            ("loopback", "auto")
        ],
        "{v}"
    );
    for r in v["results"].as_array().unwrap() {
        let runs = r["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{r}");
        for run in runs {
            assert!(run["bytes"].as_u64().unwrap() > 0, "{r}");
            // The sink drops what it is sent; over loopback the receiver checks every byte.
            if r["lab"] == "loopback" {
                assert_eq!(run["verified"], true, "{r}");
            }
        }
    }
}
