//! A named network namespace ([`Netns`], `ip netns add`, `setns(2)`): made, entered by a thread,
//! configured (sysctls, RPS, links), deleted on drop.

use std::fs::{self, File};
use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use nix::sched::{CloneFlags, setns};

use crate::frame;
use crate::ip::{NETNS_DIR, PREFIX, ip};
use crate::reaper::{remove_stale, start_reaper};
use crate::{LabError, LinkStats, check_privileges, io_err};

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
        // The reaper first: a process killed after its first namespace was made but before the
        // reaper ran left that namespace behind (`a_bench_ended_by_a_signal_leaves_no_namespace`
        // kills the bench as soon as the namespace shows: 1 failure in 3 runs here).
        start_reaper();
        add_named(&name)?;
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
