//! `zcnet tune` (issue 17): it writes a profile the library reads, `--show` prints it, and the
//! benches' `auto` mode follows the profile named by `--profile`.

mod common;
use common::{one_line_error, zcnet};

use std::path::PathBuf;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zcnet-tune-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Labs can be built and MSG_ZEROCOPY works on UDP; else the test is recorded as skipped.
fn can_run() -> bool {
    if let Err(e) = netlab::check_privileges() {
        netlab::skip::skip(&e.to_string());
        return false;
    }
    if zcnet::msg_zerocopy::support().udp.status != zcnet::support::Status::Available {
        netlab::skip::skip("MSG_ZEROCOPY on UDP is not available here");
        return false;
    }
    true
}

/// A short tune of one path writes a profile with both routes of that path measured (or the
/// built-in entry kept, with the reason on stderr), every other path built in.
#[test]
fn tune_writes_a_profile_that_show_and_the_library_read() {
    if !can_run() {
        return;
    }
    let dir = tmpdir("write");
    // In a directory that does not exist yet, as ~/.config/zcnet on a fresh machine.
    let file = dir.join("new").join("profile.toml");
    let out = zcnet()
        .args(["tune", "--path", "msg-zerocopy-udp", "--path", "sendfile"])
        .args(["--runs", "1"])
        .args(["--seconds", "0.05", "--json", "--profile"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["written"], file.to_str().unwrap());
    let profile = zcnet::auto::Profile::load(&file).unwrap();
    assert!(!profile.kernel.is_empty() && !profile.date.is_empty());
    use zcnet::auto::{Route, SendPath, Threshold};
    let local = profile.entry(SendPath::MsgZerocopyUdp, Route::Local);
    let device = profile.entry(SendPath::MsgZerocopyUdp, Route::Device);
    assert_eq!(local.lab, "loopback");
    assert_eq!(device.lab, "sink");
    // Loopback copies MSG_ZEROCOPY data: never zero copy there.
    assert!(local.copies);
    assert_eq!(local.threshold, Threshold::Never);
    assert!(!device.copies);
    // Every size of the sweep was measured, with a ratio that is a number.
    assert!(device.ratios.len() >= 7, "{:?}", device.ratios);
    assert!(device.ratios.iter().all(|(_, r)| r.is_finite() && *r > 0.0));
    // A crossing comes with the sizes around it.
    if let Threshold::From(n) = device.threshold {
        let [lo, hi] = device.between.unwrap();
        assert!(lo < hi && hi == n, "{lo} {hi} {n}");
    }
    // sendfile against read + send, by file length, both routes measured.
    for route in [Route::Local, Route::Device] {
        let e = profile.entry(SendPath::Sendfile, route);
        assert_ne!(e.lab, "builtin", "{e:?}");
        assert!(e.ratios.len() >= 7 && !e.copies, "{e:?}");
    }
    // Paths not tuned keep their built-in entries.
    assert_eq!(
        profile.entry(SendPath::UringZc, Route::Device).lab,
        "builtin"
    );
    // --show prints the same file.
    let out = zcnet()
        .args(["tune", "--show", "--json", "--profile"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["threshold"], v["threshold"]);
    // ...and says it is where Mode::Auto starts learning, with the learner's settings.
    assert_eq!(
        shown["learning"]["first_pairs"],
        zcnet::auto::LEARNING.first_pairs as u64
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench --profile` with a profile that says "always" on the sink's device route makes `auto`
/// start by zero copy; "never" makes it start by copy.
#[test]
fn bench_auto_follows_the_profile_it_is_given() {
    if !can_run() {
        return;
    }
    use zcnet::auto::{Profile, Route, SendPath, Threshold};
    let dir = tmpdir("bench");
    for (threshold, share) in [(Threshold::Always, 1.0), (Threshold::Never, 0.0)] {
        let mut p = Profile::builtin();
        for e in &mut p.entries {
            if e.path == SendPath::MsgZerocopyUdp && e.route == Route::Device {
                e.threshold = threshold;
            }
        }
        let file = dir.join("p.toml");
        std::fs::write(&file, p.to_toml()).unwrap();
        let out = zcnet()
            .args(["bench", "udp-tx", "--lab", "sink", "--size", "1000"])
            .args(["--mode", "copy", "--mode", "auto", "--runs", "1"])
            .args(["--seconds", "0.1", "--json", "--profile"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            v["settings"]["auto_profile"]
                .as_str()
                .unwrap()
                .contains(file.to_str().unwrap()),
            "{}",
            v["settings"]
        );
        let auto = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["mode"] == "auto")
            .unwrap();
        // The profile is auto's prior: the first round of sends (1024 of 1000 B) goes its way,
        // then the sender learns from what it measures on this machine.
        let run = &auto["runs"][0];
        let got = run["zero_copy_share"].as_f64().unwrap();
        let sends = run["requests_per_s"].as_f64().unwrap() * run["seconds"].as_f64().unwrap();
        let first = sends.min(1024.0) / sends;
        if share == 1.0 {
            assert!(
                got >= first - 0.01,
                "{threshold}: share {got}, {sends} sends"
            );
        } else {
            assert!(
                got <= 1.0 - first + 0.01,
                "{threshold}: share {got}, {sends} sends"
            );
        }
        assert!(run["auto_explore_share"].as_f64().is_some(), "{run}");
    }
    // A profile that is not one: one line, exit 1, before any lab is built.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "threshold = 3\n").unwrap();
    let err = one_line_error(
        zcnet()
            .args(["bench", "udp-tx", "--profile"])
            .arg(&bad)
            .output()
            .unwrap(),
    );
    assert!(err.contains("is not valid"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stranger's run found: `tune` as a user whose HOME cannot be written measured for a minute
/// and only then failed to write; a profile that cannot be read was passed over silently. Now
/// the first fails at once with one line, the second is named where the profile is shown, and
/// `bench --profile` with a missing file is one line, exit 1.
#[test]
fn unwritable_and_unreadable_profiles_say_so_at_once() {
    let start = std::time::Instant::now();
    let err = one_line_error(
        zcnet()
            .args(["tune", "--profile", "/proc/zcnet-none/profile.toml"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("cannot write the profile /proc/zcnet-none"),
        "{err}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let out = zcnet()
        .args(["tune", "--show"])
        .env("ZCNET_PROFILE", "/nonexistent/zcnet.toml")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("built-in defaults (cannot read the profile /nonexistent/zcnet.toml"),
        "{text}"
    );
    let err = one_line_error(
        zcnet()
            .args(["bench", "udp-tx", "--profile", "/nonexistent/zcnet.toml"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("cannot read the profile"), "{err}");
}

/// Issue 35 item 11: a profile was read whole (`--profile /dev/zero`: 2 GB in 3 s). It is read
/// up to 1 MiB: past that, `bench --profile` is one line naming the file and the cap, exit 1,
/// and a `$ZCNET_PROFILE` over the cap is passed over for the built-in one, saying why.
#[test]
fn a_profile_is_read_to_its_cap() {
    let mut cmd = zcnet();
    cmd.args(["bench", "udp-tx", "--profile", "/dev/zero"]);
    let err = one_line_error(common::output_bounded(&cmd));
    assert!(
        err.contains("the profile /dev/zero is larger than 1 MiB, the cap for a profile"),
        "{err}"
    );
    let mut cmd = zcnet();
    cmd.args(["tune", "--show"])
        .env("ZCNET_PROFILE", "/dev/zero");
    let out = common::output_bounded(&cmd);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("built-in defaults (the profile /dev/zero is larger than 1 MiB"),
        "{text}"
    );
}

/// Issue 48 item 12: a FIFO without a writer as the profile held `tune --show`, `bench` and
/// `report` in `open` for good, with no word. It is opened without blocking now: read as an
/// empty file, it is not a profile, one line naming it.
#[test]
fn a_fifo_without_a_writer_as_the_profile_is_an_error_at_once() {
    let dir = std::env::temp_dir().join(format!("zcnet-tune-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("profile.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let input = dir.join("in.json");
    std::fs::write(&input, include_str!("fixtures/suite.json")).unwrap();
    let f = fifo.to_str().unwrap();
    let page = dir.join("p.html");
    let commands: [Vec<&str>; 3] = [
        vec!["tune", "--show", "--profile", f],
        vec!["bench", "udp-tx", "--profile", f],
        vec![
            "report",
            input.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
            "--profile",
            f,
        ],
    ];
    for args in commands {
        let mut cmd = zcnet();
        cmd.args(&args);
        let out = common::output_bounded(&cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{args:?}: {:?} {err}",
            out.status
        );
        assert!(common::error_line(&err).contains(f), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 48 item 14: `tune` wrote its profile to the default path while `$ZCNET_PROFILE`, which
/// `Mode::Auto` reads, named another file. It writes the file `$ZCNET_PROFILE` names: one it
/// cannot write fails at once, naming it.
#[test]
fn tune_writes_the_profile_mode_auto_reads() {
    let err = one_line_error(
        zcnet()
            .arg("tune")
            .env("ZCNET_PROFILE", "/proc/zcnet-none/profile.toml")
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("cannot write the profile /proc/zcnet-none/profile.toml"),
        "{err}"
    );
}

/// Issue 62 item 10: with HOME and XDG_CONFIG_HOME unset, `tune --show` exited 1 ("give
/// --profile") where it should show what `Mode::Auto` uses then: the built-in defaults.
#[test]
fn show_without_a_home_shows_the_builtin_defaults() {
    let out = common::zcnet()
        .args(["tune", "--show"])
        .env_remove("HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("ZCNET_PROFILE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("built-in defaults"), "{text}");
    assert!(text.contains("built-in (not measured)"), "{text}");
}
