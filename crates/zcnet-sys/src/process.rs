//! The process and its limits: `uname(2)`, the thread's CPU clock, `/proc/meminfo`,
//! `getrlimit(2)`, user namespaces and capabilities.

use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::abi;
use super::cvt;

/// `uname(2)`: the kernel release string.
pub fn kernel_release() -> io::Result<String> {
    // SAFETY: utsname is plain data for which all-zero is valid.
    let mut u: libc::utsname = unsafe { zeroed() };
    // SAFETY: `u` is a valid utsname to fill.
    cvt(unsafe { libc::uname(&mut u) })?;
    Ok(c_string(&u.release))
}

/// The text of a NUL-terminated (or full) C character array.
pub fn c_string(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (clock_gettime(2)): CPU time of the calling thread,
/// ns. A system call (the vDSO does not serve CPU-time clocks); `None` if it fails, which
/// Linux does not do for the calling thread.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (r == 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}

/// `MemAvailable` of /proc/meminfo in bytes (Linux 3.14): what can be allocated without
/// swapping. `None` where the file or the line is missing.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
#[test]
fn mem_available_parses_meminfo() {
    let text = "MemTotal:       24683656 kB\nMemFree:        1 kB\nMemAvailable:   24191388 kB\n";
    assert_eq!(parse_mem_available(text), Some(24_191_388 * 1024));
    assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
}

/// `getrlimit(RLIMIT_MEMLOCK)`: (soft, hard); `None` is `RLIM_INFINITY`.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    rlimit(libc::RLIMIT_MEMLOCK)
}

/// `getrlimit(RLIMIT_NOFILE)`: (soft, hard); `None` is `RLIM_INFINITY`.
pub fn nofile_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    rlimit(libc::RLIMIT_NOFILE)
}

/// `getrlimit(resource)`: (soft, hard); `None` is `RLIM_INFINITY`.
fn rlimit(resource: libc::__rlimit_resource_t) -> io::Result<(Option<u64>, Option<u64>)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit to fill.
    cvt(unsafe { libc::getrlimit(resource, &mut r) })?;
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((f(r.rlim_cur), f(r.rlim_max)))
}

/// Whether this process runs in the initial user namespace: its `/proc/self/uid_map` maps the
/// whole id range onto itself (`0 0 4294967295`). Capabilities held in another user namespace
/// act only on what that namespace owns.
pub fn in_initial_user_ns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
        let fields: Vec<&str> = m.split_whitespace().collect();
        fields == ["0", "0", "4294967295"]
    })
}

/// Whether the network namespace of this thread is owned by this thread's user namespace
/// (`ioctl(NS_GET_USERNS)` on `/proc/thread-self/ns/net`, Linux 4.9, compared by inode with
/// `/proc/thread-self/ns/user`): where it is, capabilities in the user namespace (`unshare
/// -rn`) work on its sockets and devices; where it is not (`unshare -r` alone), they do not.
pub fn user_ns_owns_net_ns() -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let net = std::fs::File::open("/proc/thread-self/ns/net")?;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor we own.
    let fd = cvt(unsafe { libc::ioctl(net.as_raw_fd(), abi::NS_GET_USERNS as _) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let owner = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let owner = owner.metadata()?;
    let mine = std::fs::metadata("/proc/thread-self/ns/user")?;
    Ok(owner.ino() == mine.ino() && owner.dev() == mine.dev())
}

/// Whether this thread's effective capabilities include `CAP_IPC_LOCK` (bit 14 of `CapEff` in
/// `/proc/thread-self/status`) in the initial user namespace, the only place where it exempts
/// from `RLIMIT_MEMLOCK` (`capable()` in `mm/mlock.c`).
pub fn has_cap_ipc_lock() -> bool {
    if !in_initial_user_ns() {
        return false;
    }
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_owned();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << abi::CAP_IPC_LOCK) != 0)
}

/// `geteuid(2)`.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and takes no pointers.
    unsafe { libc::geteuid() }
}

/// The CPUs the calling thread may run on (`sched_getaffinity(2)`).
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `set` is a cpu_set_t of the size passed, written by the kernel.
    cvt(unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) })?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Moves the calling thread to `cpu` alone (`sched_setaffinity(2)`, which migrates the caller
/// before it returns). `EINVAL` for a CPU at or over `CPU_SETSIZE`.
pub fn run_only_on(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut one: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: `one` is a cpu_set_t of the size passed, only read by the kernel.
    cvt(unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) }).map(drop)
}
