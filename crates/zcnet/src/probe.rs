//! Run-time detection of the zero-copy paths this kernel, these limits and these privileges allow:
//! the report that assembles every mechanism's own `support()` (see [`crate::support`]) with the
//! machine's limits and this process's privileges.
//!
//! Every answer comes from trying the operation, never from the kernel version: a backported or
//! disabled feature is reported as it is. [`features`] assembles the report once per process and
//! caches it; a mechanism never reads it (each asks its own `support()`). The JSON form (`zcnet probe
//! --json`) is this module's types serialized; its schema is documented in `docs/probe.md` and
//! versioned by [`SCHEMA`].

use std::fs;
use std::sync::OnceLock;

use serde::Serialize;

use crate::support::Probe;
pub use crate::support::{Check, CheckId, MechanismId, Status, errno_name};
use crate::sys;

/// Version tag of the serialized [`Features`]; bumped on any incompatible change.
pub const SCHEMA: &str = "zcnet-probe/1";

/// Facts about the machine that bound what zero-copy can do.
#[derive(Clone, Debug, Serialize)]
pub struct Host {
    /// `uname -r`.
    pub kernel: String,
    /// Page size in bytes.
    pub page_size: usize,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `RLIMIT_MEMLOCK` soft limit in bytes; `null` is unlimited.
    pub memlock_soft: Option<u64>,
    /// `RLIMIT_MEMLOCK` hard limit in bytes; `null` is unlimited.
    pub memlock_hard: Option<u64>,
    /// `net.core.optmem_max` of this network namespace.
    pub optmem_max: Option<u64>,
    /// MTU of `lo` as sysfs shows it.
    pub lo_mtu: Option<u32>,
    /// Transparent huge pages mode (`always`, `madvise`, `never`).
    pub transparent_hugepages: Option<String>,
    /// `net.ipv4.tcp_congestion_control` of this network namespace.
    pub tcp_congestion_control: Option<String>,
    /// `kernel.io_uring_disabled` (0 allowed, 1 group-restricted, 2 off), if the kernel has it.
    pub io_uring_disabled: Option<u32>,
    /// `fs.pipe-max-size`: the largest pipe `F_SETPIPE_SZ` grants without `CAP_SYS_RESOURCE`.
    pub pipe_max_size: Option<u64>,
    /// Whether an ordinary user may create user namespaces (what `zcnet bench` needs without
    /// root): `"allowed"`, or the setting that forbids it and its value.
    pub unprivileged_user_namespaces: String,
}

/// What the sysctls say about unprivileged user namespaces: Debian's
/// `kernel.unprivileged_userns_clone`, `user.max_user_namespaces` and Ubuntu's AppArmor switch.
pub fn unprivileged_userns(
    clone: Option<&str>,
    max: Option<&str>,
    apparmor: Option<&str>,
) -> String {
    if clone == Some("0") {
        return "forbidden: kernel.unprivileged_userns_clone = 0 (set it to 1 to allow)".into();
    }
    if max == Some("0") {
        return "forbidden: user.max_user_namespaces = 0 (raise it to allow)".into();
    }
    if apparmor == Some("1") {
        return "restricted by AppArmor: kernel.apparmor_restrict_unprivileged_userns = 1 (0, or \
                an AppArmor profile for zcnet, allows it)"
            .into();
    }
    "allowed".into()
}

/// Who we are, as far as the probed features care. A capability counts only where it works:
/// in a user namespace of our own, `CAP_NET_RAW` and `CAP_NET_ADMIN` act only on a network
/// namespace that user namespace owns (`unshare -rn`, not `unshare -r`), and `CAP_IPC_LOCK`
/// never lifts `RLIMIT_MEMLOCK`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Privileges {
    /// Effective user id (inside the user namespace, when in one).
    pub euid: u32,
    /// Running in a user namespace other than the initial one (`unshare -r`, a container).
    pub user_namespace: bool,
    /// `CAP_NET_ADMIN` in the effective set (namespaces, qdiscs, devices).
    pub cap_net_admin: bool,
    /// `CAP_NET_RAW` (packet sockets, `AF_XDP`).
    pub cap_net_raw: bool,
    /// `CAP_IPC_LOCK` (exempt from `RLIMIT_MEMLOCK`).
    pub cap_ipc_lock: bool,
    /// `CAP_SYS_ADMIN` (`setns`, mounts).
    pub cap_sys_admin: bool,
}

/// Everything the probe found.
#[derive(Clone, Debug, Serialize)]
pub struct Features {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Machine facts and limits.
    pub host: Host,
    /// Privileges of this process.
    pub privileges: Privileges,
    /// One entry per [`CheckId`], in mechanism order. A mechanism whose Cargo feature this
    /// build of zcnet left out keeps its entries, [`Status::Skipped`] with the reason "not
    /// compiled in: zcnet was built without its feature `uring`" (the JSON keeps its shape).
    pub checks: Vec<Check>,
}

impl Features {
    /// The check `id`.
    pub fn check(&self, id: CheckId) -> &Check {
        self.checks
            .iter()
            .find(|c| c.id == id)
            .expect("the probe runs every check")
    }

    /// Whether `id` is available.
    pub fn available(&self, id: CheckId) -> bool {
        self.check(id).status == Status::Available
    }

    /// Runs every check now (uncached). Prefer [`features`].
    pub fn detect() -> Features {
        let privileges = Privileges::detect();
        let host = Host::detect();
        let checks = MechanismId::ALL.into_iter().flat_map(checks_of).collect();
        Features {
            schema: SCHEMA,
            host,
            privileges,
            checks,
        }
    }
}

/// The checks of `mechanism`: its own `support()` where its feature is compiled in, else one
/// [`Status::Skipped`] check per id saying so, so that every build reports every [`CheckId`].
fn checks_of(mechanism: MechanismId) -> Vec<Check> {
    match mechanism {
        #[cfg(feature = "tcp_rx")]
        MechanismId::TcpRx => crate::tcp_rx::support().checks(),
        #[cfg(feature = "msg_zerocopy")]
        MechanismId::MsgZerocopy => crate::msg_zerocopy::support().checks(),
        #[cfg(feature = "file")]
        MechanismId::File => crate::file::support().checks(),
        #[cfg(feature = "uring")]
        MechanismId::Uring => crate::uring::support().checks(),
        #[cfg(feature = "peek")]
        MechanismId::Peek => crate::peek::support().checks(),
        #[cfg(feature = "packet")]
        MechanismId::Packet => crate::packet::support().checks(),
        #[cfg(feature = "xdp")]
        MechanismId::Xdp => crate::xdp::support().checks(),
        // Unreachable only in a build with every mechanism.
        #[allow(unreachable_patterns)]
        _ => not_compiled(mechanism),
    }
}

/// A [`Status::Skipped`] check per id of `mechanism`, saying that its feature was left out.
fn not_compiled(mechanism: MechanismId) -> Vec<Check> {
    CheckId::ALL
        .into_iter()
        .filter(|id| id.mechanism() == mechanism)
        .map(|id| {
            Probe::new(id).skipped(format!(
                "not compiled in: zcnet was built without its feature `{}`",
                mechanism.feature()
            ))
        })
        .collect()
}

/// The probe's findings for this process: computed on first use, then cached.
pub fn features() -> &'static Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    FEATURES.get_or_init(Features::detect)
}

// ---------------------------------------------------------------------------------------------
// Host facts

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// The bracketed choice of a sysfs mode file (`always [madvise] never` → `madvise`).
pub fn selected_mode(s: &str) -> Option<&str> {
    let start = s.find('[')? + 1;
    let end = start + s[start..].find(']')?;
    Some(&s[start..end])
}

impl Host {
    fn detect() -> Host {
        let (memlock_soft, memlock_hard) = sys::process::memlock_limit().unwrap_or((None, None));
        Host {
            kernel: sys::process::kernel_release().unwrap_or_else(|e| format!("unknown ({e})")),
            page_size: sys::mm::page_size(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memlock_soft,
            memlock_hard,
            optmem_max: read_trimmed("/proc/sys/net/core/optmem_max").and_then(|s| s.parse().ok()),
            lo_mtu: read_trimmed("/sys/class/net/lo/mtu").and_then(|s| s.parse().ok()),
            transparent_hugepages: read_trimmed("/sys/kernel/mm/transparent_hugepage/enabled")
                .and_then(|s| selected_mode(&s).map(str::to_owned)),
            tcp_congestion_control: read_trimmed("/proc/sys/net/ipv4/tcp_congestion_control"),
            io_uring_disabled: read_trimmed("/proc/sys/kernel/io_uring_disabled")
                .and_then(|s| s.parse().ok()),
            pipe_max_size: read_trimmed("/proc/sys/fs/pipe-max-size").and_then(|s| s.parse().ok()),
            unprivileged_user_namespaces: unprivileged_userns(
                read_trimmed("/proc/sys/kernel/unprivileged_userns_clone").as_deref(),
                read_trimmed("/proc/sys/user/max_user_namespaces").as_deref(),
                read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref(),
            ),
        }
    }
}

/// Parses the effective capability mask (`CapEff:`) out of `/proc/<pid>/status`.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

impl Privileges {
    fn detect() -> Privileges {
        let caps = fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| parse_cap_eff(&s))
            .unwrap_or(0);
        let has = |bit: u32| caps & (1 << bit) != 0;
        let user_namespace = !sys::process::in_initial_user_ns();
        // In a user namespace the network capabilities reach only a network namespace it owns.
        let net = !user_namespace || sys::process::user_ns_owns_net_ns().unwrap_or(false);
        Privileges {
            euid: sys::process::euid(),
            user_namespace,
            cap_net_admin: has(12) && net,
            cap_net_raw: has(13) && net,
            cap_ipc_lock: has(14) && !user_namespace,
            cap_sys_admin: has(21) && !user_namespace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_namespace_settings_name_what_forbids_them() {
        assert_eq!(unprivileged_userns(None, Some("96364"), None), "allowed");
        assert!(unprivileged_userns(Some("0"), None, None).contains("unprivileged_userns_clone"));
        assert!(unprivileged_userns(Some("1"), Some("0"), None).contains("max_user_namespaces"));
        assert!(unprivileged_userns(None, None, Some("1")).contains("AppArmor"));
    }

    #[test]
    fn a_mechanism_left_out_keeps_its_checks_skipped_with_its_feature() {
        let mut ids = Vec::new();
        for m in MechanismId::ALL {
            let checks = not_compiled(m);
            assert!(!checks.is_empty(), "{m:?} has no check");
            for c in checks {
                assert_eq!((c.mechanism, c.status), (m, Status::Skipped));
                assert_eq!(
                    c.reason,
                    format!(
                        "not compiled in: zcnet was built without its feature `{}`",
                        m.feature()
                    )
                );
                ids.push(c.id);
            }
        }
        assert_eq!(ids, CheckId::ALL, "every check once, in report order");
        assert_eq!(MechanismId::Packet.feature(), "packet");
    }

    #[test]
    fn selected_mode_reads_the_bracket() {
        assert_eq!(selected_mode("always [madvise] never\n"), Some("madvise"));
        assert_eq!(selected_mode("[always] madvise never"), Some("always"));
        assert_eq!(selected_mode("always madvise never"), None);
    }

    #[test]
    fn cap_eff_parses_the_status_fixture() {
        let status = "Name:\tzcnet\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000003000\nCapBnd:\t000001ffffffffff\n";
        let caps = parse_cap_eff(status).unwrap();
        assert_eq!(caps & (1 << 12), 1 << 12, "CAP_NET_ADMIN");
        assert_eq!(caps & (1 << 13), 1 << 13, "CAP_NET_RAW");
        assert_eq!(caps & (1 << 21), 0, "CAP_SYS_ADMIN");
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }
}
