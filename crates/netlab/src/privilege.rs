//! Whether this process may build labs ([`check_privileges`]), and how an ordinary user can
//! (a user namespace of its own, `unshare(2)` `CLONE_NEWUSER`: [`enter_user_namespace`]).

use std::fs;

use crate::LabError;
use crate::ip::NETNS_DIR;

/// Whether this process can build labs; the reason when it cannot.
pub fn check_privileges() -> Result<(), LabError> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let (sys_admin, net_admin) = (caps & (1 << 21) != 0, caps & (1 << 12) != 0);
    if sys_admin && net_admin {
        Ok(())
    } else {
        Err(LabError::NotPrivileged(format!(
            "running as uid {} without {}",
            nix::unistd::geteuid(),
            match (sys_admin, net_admin) {
                (false, false) => "CAP_SYS_ADMIN and CAP_NET_ADMIN",
                (false, true) => "CAP_SYS_ADMIN",
                _ => "CAP_NET_ADMIN",
            }
        )))
    }
}

/// Makes this process root of a user namespace of its own, with a mount namespace and a private
/// `/run/netns`, so that an ordinary user can build labs: the network namespaces made after
/// this are owned by the new user namespace, in which the caller holds every capability
/// (`unshare -rn`, as `nobody`, works on this kernel). The caller's uid and gid map to 0.
/// `RLIMIT_MEMLOCK` still applies (`CAP_IPC_LOCK` in a user namespace does not lift it).
///
/// Must be called while the process has a single thread (`unshare(CLONE_NEWUSER)` requires
/// it), before anything else runs: the CLI does it first thing for `zcnet bench` when not root.
///
/// # Errors
/// [`LabError::NotPrivileged`] saying which setting forbids unprivileged user namespaces.
pub fn enter_user_namespace() -> Result<(), LabError> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).map_err(|e| {
        LabError::NotPrivileged(format!(
            "not root, and unshare(CLONE_NEWUSER) failed ({e}): this machine forbids unprivileged \
             user namespaces (sysctl kernel.unprivileged_userns_clone=1, or \
             kernel.apparmor_restrict_unprivileged_userns=0, would allow them)"
        ))
    })?;
    let write = |path: &str, v: String| {
        fs::write(path, v).map_err(|e| LabError::NotPrivileged(format!("writing {path}: {e}")))
    };
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    let private = |what: &str, e: nix::errno::Errno| {
        LabError::NotPrivileged(format!("{what} in a private mount namespace: {e}"))
    };
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| private("making mounts private", e))?;
    // A private /run/netns for the labs' names: over the host's where it exists, else over
    // /run (only this process sees either).
    let at = if std::path::Path::new(NETNS_DIR).is_dir() {
        NETNS_DIR
    } else {
        "/run"
    };
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .map_err(|e| private("mounting a tmpfs on /run/netns", e))?;
    fs::create_dir_all(NETNS_DIR).map_err(|e| LabError::NotPrivileged(e.to_string()))?;
    Ok(())
}
