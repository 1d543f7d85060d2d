//! `zcnet probe`: what the machine supports, decided by trying each operation.

use std::fmt::Write as _;

use zcnet::probe::{self, Features, Status};

/// Options of `zcnet probe`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// Print the findings as one JSON document (schema: docs/probe.md).
    #[arg(long)]
    json: bool,
}

/// Runs the probe and prints it.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let f = probe::features();
    if opt.json {
        println!("{}", serde_json::to_string_pretty(f)?);
    } else {
        print!("{}", render(f));
    }
    Ok(())
}

fn kib(v: Option<u64>) -> String {
    v.map_or_else(|| "unlimited".to_owned(), |n| format!("{} KiB", n / 1024))
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".to_owned(), ToString::to_string)
}

/// The human table.
pub fn render(f: &Features) -> String {
    let h = &f.host;
    let p = &f.privileges;
    let mut out = String::new();
    let caps: Vec<&str> = [
        (p.cap_net_admin, "CAP_NET_ADMIN"),
        (p.cap_net_raw, "CAP_NET_RAW"),
        (p.cap_ipc_lock, "CAP_IPC_LOCK"),
        (p.cap_sys_admin, "CAP_SYS_ADMIN"),
    ]
    .iter()
    .filter(|(has, _)| *has)
    .map(|(_, n)| *n)
    .collect();
    let who = match (p.euid, p.user_namespace) {
        (0, false) => "root".to_owned(),
        (0, true) => "root of a user namespace".to_owned(),
        (uid, false) => format!("uid {uid}"),
        (uid, true) => format!("uid {uid} of a user namespace"),
    };
    let _ = writeln!(
        out,
        "host: Linux {}, {} CPUs, page {} B, {who} ({})",
        h.kernel,
        h.cpus,
        h.page_size,
        if caps.is_empty() {
            "no capabilities".to_owned()
        } else {
            caps.join(" ")
        }
    );
    let _ = writeln!(
        out,
        "limits: RLIMIT_MEMLOCK {} (hard {}){}, optmem_max {}, lo MTU {}, THP {}, tcp cc {}, pipe-max-size {}, io_uring_disabled {}, unprivileged user namespaces {}",
        kib(h.memlock_soft),
        kib(h.memlock_hard),
        if p.cap_ipc_lock {
            ", exempt by CAP_IPC_LOCK"
        } else {
            ""
        },
        opt(&h.optmem_max),
        opt(&h.lo_mtu),
        opt(&h.transparent_hugepages),
        opt(&h.tcp_congestion_control),
        opt(&h.pipe_max_size),
        opt(&h.io_uring_disabled),
        h.unprivileged_user_namespaces,
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<5} {:<25} {:<11} reason", "mech", "check", "status");
    for c in &f.checks {
        let status = match c.status {
            Status::Available => "available",
            Status::Unavailable => "UNAVAILABLE",
            Status::Blocked => "BLOCKED",
            Status::Skipped => "skipped",
        };
        let mech = serde_json::to_value(c.mechanism)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{mech:<5} {:<25} {status:<11} {}",
            c.id.name(),
            c.reason
        );
        let _ = writeln!(out, "{:<43} how: {}", "", c.method);
    }
    let counts = |s: Status| f.checks.iter().filter(|c| c.status == s).count();
    let _ = writeln!(
        out,
        "\n{} available, {} unavailable, {} blocked, {} skipped",
        counts(Status::Available),
        counts(Status::Unavailable),
        counts(Status::Blocked),
        counts(Status::Skipped)
    );
    out
}
