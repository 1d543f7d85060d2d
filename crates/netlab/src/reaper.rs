//! What a process's labs leave behind when it dies without dropping them: a reaper that deletes
//! them when the process ends however it ends, and stale namespaces of dead processes removed.

use std::fs;

use crate::ip::{NETNS_DIR, PREFIX, ip};

/// Starts, once per process, the reaper of its lab namespaces: a shell of its own process group (so
/// that a Ctrl-C at the terminal does not reach it) that ignores SIGINT, SIGTERM, SIGHUP and
/// SIGQUIT, waits for the end of a pipe this process holds the other end of, and then deletes every
/// `zcnet-PID-*` namespace left. However this process ends (a signal's default action, a panic that
/// aborts, SIGKILL), the kernel closes its end: its labs go with it, which drops do not do when a
/// signal kills it (issue 48 item 11: `bench` ended by Ctrl-C left them behind until the next lab
/// was built). A process that ends normally has dropped its labs already and the reaper finds none.
/// It runs before the process's first namespace is made (`Netns::new`; a signal right after that
/// namespace, before the reaper, left it behind in 1 run of 8 of
/// `a_bench_ended_by_a_signal_leaves_no_namespace`, and once in CI). It sweeps six times over
/// 1.5 s, for an `ip` of the process's that outlives it (a device made in a namespace that is
/// already gone is harmless). Under a user namespace of the process's
/// own the namespaces are mounted in its private mount namespace and vanish with it: no reaper.
pub(crate) fn start_reaper() {
    use std::process::{Command, Stdio};
    static REAPER: std::sync::OnceLock<Option<std::process::ChildStdin>> =
        std::sync::OnceLock::new();
    REAPER.get_or_init(|| {
        let initial = fs::read_to_string("/proc/self/uid_map")
            .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
        if !initial {
            return None;
        }
        let script = format!(
            "trap '' INT TERM HUP QUIT; cat >/dev/null; \
             for sweep in 1 2 3 4 5 6; do \
             for n in {NETNS_DIR}/{PREFIX}{pid}-*; do \
             [ -e \"$n\" ] && ip netns del \"${{n##*/}}\" 2>/dev/null; done; \
             sleep 0.25; done; exit 0",
            pid = std::process::id()
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // Its end of the pipe is close-on-exec: the programs this process starts do not hold
        // it open after it ends.
        cmd.spawn().ok()?.stdin.take()
    });
}

/// Deletes namespaces named after a process of ours that no longer runs (killed before its
/// labs dropped). Names of live processes are left alone.
pub(crate) fn remove_stale() {
    let Ok(entries) = fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// Deletes every namespace of this process, for a process about to die by a signal: its labs
/// would not be dropped. Whatever still uses them (a socket, a device) goes with them.
pub fn remove_namespaces_of_this_process() {
    for name in namespaces_of_this_process() {
        let _ = ip(&["netns", "del", &name]);
    }
}

/// Names of this process's live namespaces (for tests that check nothing is left behind).
pub fn namespaces_of_this_process() -> Vec<String> {
    let mine = format!("{PREFIX}{}-", std::process::id());
    fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&mine))
                .collect()
        })
        .unwrap_or_default()
}
