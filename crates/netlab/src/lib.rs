//! Private network namespaces for zcnet's tests and benchmarks.
//!
//! A [`Netns`] is a named network namespace (`ip netns add zcnet-<pid>-<n>`) deleted when the
//! value drops, on success, error and panic alike. Devices live inside namespaces only: the
//! host's interfaces and sysctls are never touched. The labs of the design build on it:
//!
//! - [`LoopbackLab`]: a fresh namespace's `lo`, with the MTU asked for;
//! - [`VethLab`]: two namespaces joined by a veth pair, IPv4 and IPv6 on both ends;
//! - [`SinkLab`]: a namespace whose route leads into an `ifb` device, which drops every locally
//!   generated packet in its transmit routine (counted as RX-dropped), so that UDP zero-copy
//!   sends complete without a copy.
//!
//! Every lab sets TCP congestion control to `reno` inside its namespaces: the host default here
//! is BBR, which distorts loopback and veth figures (design.md, section 4).
//!
//! `setns(2)` is per thread: [`Netns::spawn`] and [`Netns::run`] run a closure on a new thread
//! inside the namespace. Sockets keep the namespace they were created in, so a socket made there
//! can be used from any thread afterwards.
//!
//! Addresses come from the benchmarking ranges (198.18.0.0/15, RFC 2544; 2001:2::/48, RFC 5180),
//! which exist only inside these namespaces.
//!
//! A process killed before its labs drop leaves named namespaces behind; the next
//! [`Netns::new`] in any process removes namespaces named after a pid that no longer runs.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fs::{self, File};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use nix::sched::{CloneFlags, setns};

pub mod frame;
pub mod pattern;
pub mod skip;

/// Errors of building or using a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The process lacks the privilege to create namespaces or devices.
    #[error("network labs need root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create namespaces: {0}")]
    NotPrivileged(String),
    /// `ip` is not installed.
    #[error("the `ip` command (Debian package iproute2) is needed to build labs")]
    NoIpCommand(#[source] std::io::Error),
    /// An `ip` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A system call or file operation failed.
    #[error("{op} failed")]
    Io {
        /// What was being done.
        op: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let op = op.into();
    move |source| LabError::Io { op, source }
}

/// Address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Both families, IPv4 first.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family of `ip`.
    pub fn of(ip: std::net::IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// `"ipv4"` or `"ipv6"`, as results name them.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// The loopback address of this family.
    pub fn loopback(self) -> IpAddr {
        match self {
            Family::V4 => Ipv4Addr::LOCALHOST.into(),
            Family::V6 => Ipv6Addr::LOCALHOST.into(),
        }
    }
}

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

/// Runs `ip` with `args`; returns its stdout.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(LabError::NoIpCommand)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

const PREFIX: &str = "zcnet-";
const NETNS_DIR: &str = "/run/netns";

/// Makes `/run/netns` a shared mount point of its own, as `ip netns add` does first. Without it,
/// a later `ip netns add` (of anyone on the host) bind-mounts `/run/netns` over itself and hides
/// the namespaces mounted below, which `ip netns del` then cannot remove ("Device or resource
/// busy"): three lab namespaces outlived a torture run that way.
fn shared_netns_dir() -> nix::Result<()> {
    use nix::mount::{MsFlags, mount};
    let share = || {
        mount(
            None::<&str>,
            NETNS_DIR,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match share() {
        // Not a mount point yet: make it one, then share it.
        Err(nix::errno::Errno::EINVAL) => {
            mount(
                Some(NETNS_DIR),
                NETNS_DIR,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            share()
        }
        r => r,
    }
}

/// Creates network namespace `name` as `ip netns add` does (a thread unshares `CLONE_NEWNET`
/// and bind-mounts its namespace on `/run/netns/NAME`), without `ip netns add`'s return to the
/// original namespace, which a user-namespace root may not enter (`setns: EPERM`).
fn add_named(name: &str) -> Result<(), LabError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |what: &str, e: &dyn std::fmt::Display| LabError::Command {
        cmd: format!("netns add {name}: {what}"),
        stderr: e.to_string(),
    };
    fs::create_dir_all(NETNS_DIR).map_err(|e| fail("mkdir /run/netns", &e))?;
    shared_netns_dir().map_err(|e| fail("make /run/netns a shared mount", &e))?;
    let path = std::path::PathBuf::from(NETNS_DIR).join(name);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map_err(|e| fail("create the mount point", &e))?;
    let target = path.clone();
    let made = std::thread::spawn(move || -> nix::Result<()> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
        nix::mount::mount(
            Some("/proc/thread-self/ns/net"),
            &target,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
    })
    .join()
    .unwrap_or(Err(nix::errno::Errno::EINVAL));
    if let Err(e) = made {
        let _ = fs::remove_file(&path);
        return Err(fail("unshare(CLONE_NEWNET) and bind mount", &e));
    }
    Ok(())
}

/// Starts, once per process, the reaper of its lab namespaces: a shell of its own process group
/// (so that a Ctrl-C at the terminal does not reach it) that ignores SIGINT, SIGTERM, SIGHUP and
/// SIGQUIT, waits for the end of a pipe this process holds the other end of, and then deletes
/// every `zcnet-PID-*` namespace left. However this process ends (a signal's default action, a
/// panic that aborts, SIGKILL), the kernel closes its end: its labs go with it, which drops do
/// not do when a signal kills it (issue 48 item 11: `bench` ended by Ctrl-C left them behind
/// until the next lab was built). A process that ends normally has dropped its labs already and
/// the reaper finds none. Under a user namespace of the process's own the namespaces are
/// mounted in its private mount namespace and vanish with it: no reaper.
fn start_reaper() {
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
             for n in {NETNS_DIR}/{PREFIX}{pid}-*; do \
             [ -e \"$n\" ] && ip netns del \"${{n##*/}}\" 2>/dev/null; done; exit 0",
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

/// A named network namespace of this process, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace named `zcnet-<pid>-<n>` with `lo` down, as the kernel makes it.
    ///
    /// # Errors
    /// [`LabError::NotPrivileged`] without root, or the failing `ip` call.
    pub fn new() -> Result<Netns, LabError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        check_privileges()?;
        remove_stale();
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        add_named(&name)?;
        start_reaper();
        Ok(Netns { name })
    }

    /// The namespace's name (`ip netns exec NAME ...` reaches it while it lives).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME args...` inside this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String, LabError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs `program` inside this namespace (`ip netns exec NAME program`), for
    /// real peers such as socat, iperf3 or tcpdump.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Starts `f` on a new thread that has entered this namespace.
    ///
    /// # Errors
    /// The `setns` failure, reported before `f` runs.
    pub fn spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>, LabError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = format!("{NETNS_DIR}/{}", self.name);
        let file = File::open(&path).map_err(io_err(format!("open {path}")))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(format!("netns {}", self.name))
            .spawn(move || {
                match setns(&file, CloneFlags::CLONE_NEWNET) {
                    Ok(()) => {
                        drop(file);
                        let _ = tx.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::from(e)));
                        // Never run `f` in the wrong namespace.
                        panic!("setns failed");
                    }
                }
                f()
            })
            .map_err(io_err("spawn thread"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(io_err(format!("setns({path})"))(e))
            }
            Err(_) => Err(LabError::Io {
                op: "thread entering the namespace".into(),
                source: std::io::Error::other("thread ended before setns"),
            }),
        }
    }

    /// Runs `f` inside this namespace and returns its result; a panic in `f` is resumed here.
    pub fn run<F, T>(&self, f: F) -> Result<T, LabError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let handle = self.spawn(f)?;
        Ok(handle
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p)))
    }

    /// Sets a sysctl of this namespace (`net.ipv4.tcp_congestion_control`, ...), writing
    /// `/proc/sys` from a thread inside it: network sysctls are per namespace.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_owned();
        let p = path.clone();
        self.run(move || {
            fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|mut f| f.write_all(value.as_bytes()))
        })?
        .map_err(io_err(format!("write {path} in {}", self.name)))
    }

    /// Reads a sysctl of this namespace.
    pub fn sysctl(&self, key: &str) -> Result<String, LabError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let p = path.clone();
        self.run(move || fs::read_to_string(&p))?
            .map(|s| s.trim().to_owned())
            .map_err(io_err(format!("read {path} in {}", self.name)))
    }

    /// Sets Receive Packet Steering of `dev`'s first RX queue to the CPUs in `mask`, so that
    /// receive processing runs there instead of on the CPU that queued the packet (on loopback:
    /// the sender's). sysfs shows a namespace's devices only when mounted inside it, which
    /// `ip netns exec` does.
    pub fn set_rps(&self, dev: &str, mask: u64) -> Result<(), LabError> {
        if !dev
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(LabError::Command {
                cmd: format!("set_rps {dev:?}"),
                stderr: "bad device name".into(),
            });
        }
        // Write only when the mask differs: writing needs CAP_NET_ADMIN of the initial user
        // namespace (`store_rps_map`), which a user-namespace lab lacks even for the default.
        let file = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
        let script = format!(
            "[ \"$(( 0x$(tr -d ',\\n' < {file}) ))\" = \"$(( 0x{mask:x} ))\" ] || echo {mask:x} > {file}"
        );
        let out = self
            .command("sh")
            .args(["-c", &script])
            .output()
            .map_err(io_err("ip netns exec sh"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(LabError::Command {
                cmd: script,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }

    /// The hardware address of device `dev` in this namespace (`ip -j link show`).
    pub fn mac(&self, dev: &str) -> Result<[u8; 6], LabError> {
        let out = self.ip(&["-j", "link", "show", "dev", dev])?;
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| frame::parse_mac(v[0]["address"].as_str()?))
            .ok_or_else(|| LabError::Command {
                cmd: format!("ip -n {} -j link show dev {dev}", self.name),
                stderr: format!("no hardware address in: {out}"),
            })
    }

    /// Counters of device `dev` in this namespace (`ip -s -j link show`).
    pub fn link_stats(&self, dev: &str) -> Result<LinkStats, LabError> {
        let out = self.ip(&["-s", "-j", "link", "show", "dev", dev])?;
        LinkStats::parse(&out).ok_or_else(|| LabError::Command {
            cmd: format!("ip -n {} -s -j link show dev {dev}", self.name),
            stderr: format!("unexpected output: {out}"),
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("netlab: could not delete namespace {}: {e}", self.name);
        }
    }
}

/// Deletes namespaces named after a process of ours that no longer runs (killed before its
/// labs dropped). Names of live processes are left alone.
fn remove_stale() {
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

/// Device counters, as `ip -s -j link` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped on receive (an `ifb` counts what it discards on transmit here).
    pub rx_dropped: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

impl LinkStats {
    /// Parses the JSON of `ip -s -j link show dev X`.
    pub fn parse(json: &str) -> Option<LinkStats> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let stats = v.get(0)?.get("stats64")?;
        let n = |dir: &str, key: &str| stats.get(dir)?.get(key)?.as_u64();
        Some(LinkStats {
            rx_packets: n("rx", "packets")?,
            rx_dropped: n("rx", "dropped")?,
            tx_packets: n("tx", "packets")?,
            tx_dropped: n("tx", "dropped")?,
        })
    }
}

/// The congestion control every lab sets inside its namespaces.
pub const CONGESTION: &str = "reno";

fn prepare(ns: &Netns, lo_mtu: Option<u32>) -> Result<(), LabError> {
    match lo_mtu {
        Some(mtu) => ns.ip(&["link", "set", "lo", "mtu", &mtu.to_string(), "up"])?,
        None => ns.ip(&["link", "set", "lo", "up"])?,
    };
    ns.set_sysctl("net.ipv4.tcp_congestion_control", CONGESTION)
}

/// A fresh namespace's loopback, with the MTU asked for (default 65536).
#[derive(Debug)]
pub struct LoopbackLab {
    /// The namespace.
    pub ns: Netns,
    /// MTU of its `lo`.
    pub mtu: u32,
}

impl LoopbackLab {
    /// Builds the lab; `mtu` `None` keeps the kernel's 65536.
    pub fn new(mtu: Option<u32>) -> Result<LoopbackLab, LabError> {
        let ns = Netns::new()?;
        prepare(&ns, mtu)?;
        Ok(LoopbackLab {
            ns,
            mtu: mtu.unwrap_or(65536),
        })
    }

    /// The address to use for `family` (127.0.0.1 or ::1).
    pub fn addr(&self, family: Family) -> IpAddr {
        family.loopback()
    }
}

/// Two namespaces, `a` and `b`, joined by a veth pair.
#[derive(Debug)]
pub struct VethLab {
    /// Side A (device [`VethLab::DEV_A`]).
    pub a: Netns,
    /// Side B (device [`VethLab::DEV_B`]).
    pub b: Netns,
    /// MTU of both ends.
    pub mtu: u32,
}

impl VethLab {
    /// Device name in `a`.
    pub const DEV_A: &'static str = "veth-a";
    /// Device name in `b`.
    pub const DEV_B: &'static str = "veth-b";

    /// Builds the lab with `mtu` on both ends (`None`: 1500).
    pub fn new(mtu: Option<u32>) -> Result<VethLab, LabError> {
        VethLab::build(mtu, 1)
    }

    /// [`VethLab::quiet`] with `queues` RX and TX queues on each end: a frame leaves veth-a by
    /// the TX queue its flow hashes to and arrives on veth-b's RX queue of the same number.
    ///
    /// # Errors
    /// As [`VethLab::quiet`].
    pub fn multiqueue(queues: u32) -> Result<VethLab, LabError> {
        VethLab::build(None, queues)?.silence()
    }

    fn build(mtu: Option<u32>, queues: u32) -> Result<VethLab, LabError> {
        let (a, b) = (Netns::new()?, Netns::new()?);
        prepare(&a, None)?;
        prepare(&b, None)?;
        let mtu = mtu.unwrap_or(1500);
        let (m, q) = (mtu.to_string(), queues.to_string());
        let each = ["mtu", &m, "numtxqueues", &q, "numrxqueues", &q];
        // Created inside `a` with its peer placed in `b`: the pair never exists on the host.
        let mut args = vec!["link", "add", Self::DEV_A];
        args.extend(each);
        args.extend(["type", "veth", "peer", "name", Self::DEV_B]);
        args.extend(each);
        args.extend(["netns", b.name()]);
        a.ip(&args)?;
        for (ns, dev, side) in [(&a, Self::DEV_A, Side::A), (&b, Self::DEV_B, Side::B)] {
            let v4 = format!("{}/24", Self::addr(side, Family::V4));
            let v6 = format!("{}/64", Self::addr(side, Family::V6));
            ns.ip(&["addr", "add", &v4, "dev", dev])?;
            ns.ip(&["addr", "add", &v6, "dev", dev, "nodad"])?;
            ns.ip(&["link", "set", dev, "up"])?;
        }
        // Permanent neighbours both ways, so that no run waits on resolution: IPv6 neighbour
        // discovery took 1.02-1.04 s here (the link-local addresses are still tentative), longer
        // than a short run (issue 48 item 7).
        let macs = [a.mac(Self::DEV_A)?, b.mac(Self::DEV_B)?];
        for (ns, dev, peer, mac) in [
            (&a, Self::DEV_A, Side::B, macs[1]),
            (&b, Self::DEV_B, Side::A, macs[0]),
        ] {
            let lladdr = mac
                .iter()
                .map(|o| format!("{o:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            for family in Family::ALL {
                let target = Self::addr(peer, family).to_string();
                ns.ip(&[
                    "neigh",
                    "replace",
                    &target,
                    "lladdr",
                    &lladdr,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ])?;
            }
        }
        Ok(VethLab { a, b, mtu })
    }

    /// [`VethLab::new`] with IPv6 off on both devices: no router or neighbour discovery, no MLD,
    /// so the only frames on the link are the ones a test or bench sends.
    ///
    /// # Errors
    /// As [`VethLab::new`], or the sysctl refused.
    pub fn quiet(mtu: Option<u32>) -> Result<VethLab, LabError> {
        VethLab::new(mtu)?.silence()
    }

    /// IPv6 off on both devices.
    fn silence(self) -> Result<VethLab, LabError> {
        for (side, dev) in [(Side::A, Self::DEV_A), (Side::B, Self::DEV_B)] {
            self.ns(side)
                .set_sysctl(&format!("net.ipv6.conf.{dev}.disable_ipv6"), "1")?;
        }
        Ok(self)
    }

    /// The address of `side` in `family`.
    pub fn addr(side: Side, family: Family) -> IpAddr {
        let host = match side {
            Side::A => 1,
            Side::B => 2,
        };
        match family {
            Family::V4 => Ipv4Addr::new(198, 18, 0, host as u8).into(),
            Family::V6 => Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, host).into(),
        }
    }

    /// The namespace of `side`.
    pub fn ns(&self, side: Side) -> &Netns {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }
}

/// One end of a [`VethLab`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first namespace.
    A,
    /// The second namespace.
    B,
}

/// A namespace whose route leads into an `ifb` device that drops what it transmits.
#[derive(Debug)]
pub struct SinkLab {
    /// The namespace.
    pub ns: Netns,
}

impl SinkLab {
    /// The sink device.
    pub const DEV: &'static str = "sink0";
    /// Its MTU: large enough for 64000-byte datagrams unfragmented.
    pub const MTU: u32 = 65535;
    const LLADDR: &'static str = "02:00:5e:00:00:02";
    /// The namespace's own IPv4 address, on the sink device.
    pub const ADDR_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

    /// Builds the lab: the device sends nothing of its own (no router solicitations), so its
    /// drop counter counts exactly what was sent into it.
    pub fn new() -> Result<SinkLab, LabError> {
        let ns = Netns::new()?;
        prepare(&ns, None)?;
        ns.ip(&[
            "link",
            "add",
            Self::DEV,
            "mtu",
            &Self::MTU.to_string(),
            "type",
            "ifb",
        ])?;
        // No router solicitations from the device: they are dropped there too, and counted
        // with what a test sends (201 drops for 200 datagrams, once in 200 runs, when one went
        // out in the test's window). With these the device sends nothing of its own.
        for (key, value) in [("router_solicitations", "0"), ("accept_ra", "0")] {
            ns.set_sysctl(&format!("net.ipv6.conf.{}.{key}", Self::DEV), value)?;
        }
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/24", Self::ADDR_V4),
            "dev",
            Self::DEV,
        ])?;
        ns.ip(&[
            "addr",
            "add",
            "2001:2:0:ff::1/64",
            "dev",
            Self::DEV,
            "nodad",
        ])?;
        ns.ip(&["link", "set", Self::DEV, "up"])?;
        // Permanent neighbours, so nothing waits on resolution before reaching the device.
        for family in Family::ALL {
            let target = Self::target(family).to_string();
            ns.ip(&[
                "neigh",
                "replace",
                &target,
                "lladdr",
                Self::LLADDR,
                "dev",
                Self::DEV,
                "nud",
                "permanent",
            ])?;
        }
        Ok(SinkLab { ns })
    }

    /// [`SinkLab::new`] with IPv6 off on the sink device as well (no IPv6 at all reaches it).
    pub fn quiet() -> Result<SinkLab, LabError> {
        let lab = SinkLab::new()?;
        lab.ns
            .set_sysctl(&format!("net.ipv6.conf.{}.disable_ipv6", Self::DEV), "1")?;
        Ok(lab)
    }

    /// [`SinkLab::new`] with the device's UDP segmentation offload off (`ethtool -K sink0
    /// tx-udp-segmentation off`, needs `ethtool`): a GSO train is cut into datagrams in
    /// software before the device drops them, as on a NIC without UDP segmentation offload.
    pub fn software_gso() -> Result<SinkLab, LabError> {
        let lab = SinkLab::new()?;
        let out = lab
            .ns
            .command("ethtool")
            .args(["-K", Self::DEV, "tx-udp-segmentation", "off"])
            .output()
            .map_err(io_err("running ethtool (apt-get install ethtool)"))?;
        if !out.status.success() {
            return Err(LabError::Command {
                cmd: format!(
                    "ethtool -K {} tx-udp-segmentation off (Debian package ethtool)",
                    Self::DEV
                ),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(lab)
    }

    /// The address to send to: routed into the sink device, where every packet is dropped.
    pub fn target(family: Family) -> IpAddr {
        match family {
            Family::V4 => Ipv4Addr::new(198, 19, 0, 2).into(),
            Family::V6 => Ipv6Addr::new(0x2001, 2, 0, 0xff, 0, 0, 0, 2).into(),
        }
    }

    /// Packets the sink has dropped so far (its RX-dropped counter).
    pub fn dropped(&self) -> Result<u64, LabError> {
        Ok(self.ns.link_stats(Self::DEV)?.rx_dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_stats_parse_fixture() {
        let json = r#"[{"ifindex":2,"ifname":"sink0","stats64":{"rx":{"bytes":0,"packets":0,"errors":0,"dropped":17,"over_errors":0,"multicast":0},"tx":{"bytes":10,"packets":3,"errors":0,"dropped":1,"carrier_errors":0,"collisions":0}}}]"#;
        assert_eq!(
            LinkStats::parse(json),
            Some(LinkStats {
                rx_packets: 0,
                rx_dropped: 17,
                tx_packets: 3,
                tx_dropped: 1
            })
        );
        assert_eq!(LinkStats::parse("[]"), None);
        assert_eq!(LinkStats::parse("not json"), None);
    }

    #[test]
    fn lab_addresses_are_in_the_benchmarking_ranges() {
        for side in [Side::A, Side::B] {
            match VethLab::addr(side, Family::V4) {
                IpAddr::V4(a) => assert_eq!(a.octets()[..2], [198, 18]),
                IpAddr::V6(_) => panic!("v4 expected"),
            }
            match VethLab::addr(side, Family::V6) {
                IpAddr::V6(a) => assert_eq!(a.segments()[..2], [0x2001, 2]),
                IpAddr::V4(_) => panic!("v6 expected"),
            }
        }
    }
}
