//! Run-time detection of the zero-copy paths this kernel, these limits and these privileges allow.
//!
//! Every answer comes from trying the operation on loopback sockets of the calling thread's
//! network namespace, never from the kernel version: a backported or disabled feature is
//! reported as it is. `EPERM`, `EACCES` and `ENOSYS` are not taken as "unsupported" on their
//! own, since a seccomp filter or a missing privilege returns them too: such checks are
//! [`Status::Blocked`] and say why.
//!
//! [`features`] runs the probe once per process and caches it. The JSON form (`zcnet probe
//! --json`) is this module's types serialized; its schema is documented in `docs/probe.md` and
//! versioned by [`SCHEMA`].

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

use crate::errqueue::Completion;
use crate::msg_zerocopy::{self, ZerocopyError};
use crate::sys::{self, abi};

/// Version tag of the serialized [`Features`]; bumped on any incompatible change.
pub const SCHEMA: &str = "zcnet-probe/1";

const TIMEOUT: Duration = Duration::from_secs(2);

/// The mechanisms of the design, as the kernel names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mechanism {
    /// TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`).
    Rx,
    /// `MSG_ZEROCOPY` sends.
    Tx,
    /// `sendfile`/`splice`.
    File,
    /// io_uring zero-copy sends.
    Uring,
    /// `SO_PEEK_OFF` on TCP.
    Peek,
    /// `AF_PACKET` `TPACKET_V3` rings.
    Ring,
    /// `AF_XDP` sockets.
    Xdp,
}

/// One probed feature. The serialized name is stable (part of the schema).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CheckId {
    /// `getsockopt(TCP_ZEROCOPY_RECEIVE)` on a TCP socket with a mapping.
    RxTcpZerocopyReceive,
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` on TCP.
    TxTcp,
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` on UDP.
    TxUdp,
    /// `sendfile(2)` from a file to a TCP socket.
    FileSendfile,
    /// `splice(2)` file → pipe → TCP socket.
    FileSplice,
    /// `io_uring_setup(2)`.
    UringSetup,
    /// `IORING_OP_SEND_ZC`.
    UringSendZc,
    /// `IORING_OP_SENDMSG_ZC`.
    UringSendmsgZc,
    /// `IORING_SEND_ZC_REPORT_USAGE`.
    UringReportUsage,
    /// `IORING_REGISTER_BUFFERS` + `IORING_RECVSEND_FIXED_BUF`.
    UringRegisteredBuffers,
    /// `SO_PEEK_OFF` on TCP over IPv4.
    PeekIpv4,
    /// `SO_PEEK_OFF` on TCP over IPv6.
    PeekIpv6,
    /// `PACKET_RX_RING` with `TPACKET_V3`.
    RingRx,
    /// `PACKET_TX_RING` with `TPACKET_V3`.
    RingTx,
    /// `PACKET_FANOUT`.
    RingFanout,
    /// `socket(AF_XDP)`.
    XdpSocket,
}

impl CheckId {
    /// The mechanism this check belongs to.
    pub fn mechanism(self) -> Mechanism {
        use CheckId::*;
        match self {
            RxTcpZerocopyReceive => Mechanism::Rx,
            TxTcp | TxUdp => Mechanism::Tx,
            FileSendfile | FileSplice => Mechanism::File,
            UringSetup
            | UringSendZc
            | UringSendmsgZc
            | UringReportUsage
            | UringRegisteredBuffers => Mechanism::Uring,
            PeekIpv4 | PeekIpv6 => Mechanism::Peek,
            RingRx | RingTx | RingFanout => Mechanism::Ring,
            XdpSocket => Mechanism::Xdp,
        }
    }

    /// The stable name used in JSON and tables (`rx.tcp_zerocopy_receive`, ...).
    pub fn name(self) -> &'static str {
        use CheckId::*;
        match self {
            RxTcpZerocopyReceive => "rx.tcp_zerocopy_receive",
            TxTcp => "tx.msg_zerocopy_tcp",
            TxUdp => "tx.msg_zerocopy_udp",
            FileSendfile => "file.sendfile",
            FileSplice => "file.splice",
            UringSetup => "uring.setup",
            UringSendZc => "uring.send_zc",
            UringSendmsgZc => "uring.sendmsg_zc",
            UringReportUsage => "uring.report_usage",
            UringRegisteredBuffers => "uring.registered_buffers",
            PeekIpv4 => "peek.tcp_ipv4",
            PeekIpv6 => "peek.tcp_ipv6",
            RingRx => "ring.tpacket_v3_rx",
            RingTx => "ring.tpacket_v3_tx",
            RingFanout => "ring.fanout",
            XdpSocket => "xdp.socket",
        }
    }
}

impl Serialize for CheckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The operation worked.
    Available,
    /// The kernel said it does not support it (`EINVAL`, `EOPNOTSUPP`, `ENOPROTOOPT`, ...).
    Unavailable,
    /// Could not be decided: a privilege, a limit or a policy (seccomp, sysctl) stood in the way.
    Blocked,
    /// Not tried, because a check it depends on failed.
    Skipped,
}

/// The result of one check: verdict, reason, and how it was decided.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Which feature.
    pub id: CheckId,
    /// Its mechanism.
    pub mechanism: Mechanism,
    /// The verdict.
    pub status: Status,
    /// One line on why, and for anything not available, what would enable it.
    pub reason: String,
    /// The calls made to decide.
    pub method: String,
    /// The errno that decided a negative verdict (`"EOPNOTSUPP"`), if any.
    pub errno: Option<&'static str>,
    /// Extra facts (struct fields the kernel fills, whether a completion was copied, ...).
    pub detail: BTreeMap<&'static str, serde_json::Value>,
}

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
}

/// Who we are, as far as the probed features care.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Privileges {
    /// Effective user id.
    pub euid: u32,
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
    /// One entry per [`CheckId`], in mechanism order.
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
        let mut checks = vec![
            rx_check(),
            tx_tcp_check(),
            tx_udp_check(),
            sendfile_check(),
            splice_check(),
        ];
        checks.extend(uring_checks(&host, &privileges));
        checks.push(peek_check(false));
        checks.push(peek_check(true));
        checks.extend(ring_checks());
        checks.push(xdp_check());
        Features {
            schema: SCHEMA,
            host,
            privileges,
            checks,
        }
    }
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
        let (memlock_soft, memlock_hard) = sys::memlock_limit().unwrap_or((None, None));
        Host {
            kernel: sys::kernel_release().unwrap_or_else(|e| format!("unknown ({e})")),
            page_size: sys::page_size(),
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
        Privileges {
            euid: sys::euid(),
            cap_net_admin: has(12),
            cap_net_raw: has(13),
            cap_ipc_lock: has(14),
            cap_sys_admin: has(21),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Symbolic name of the errnos the probe meets.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::ENODEV => "ENODEV",
        libc::EFAULT => "EFAULT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EAGAIN => "EAGAIN",
        libc::ECONNREFUSED => "ECONNREFUSED",
        _ => "E?",
    }
}

struct Probe {
    id: CheckId,
    method: String,
    detail: BTreeMap<&'static str, serde_json::Value>,
}

impl Probe {
    fn new(id: CheckId) -> Probe {
        Probe {
            id,
            method: String::new(),
            detail: BTreeMap::new(),
        }
    }

    /// Records a call made; the method line lists them in order.
    fn step(&mut self, call: &str) {
        if !self.method.is_empty() {
            self.method.push_str("; ");
        }
        self.method.push_str(call);
    }

    fn detail(&mut self, key: &'static str, v: impl Into<serde_json::Value>) {
        self.detail.insert(key, v.into());
    }

    fn done(self, status: Status, reason: impl Into<String>, errno: Option<&'static str>) -> Check {
        Check {
            id: self.id,
            mechanism: self.id.mechanism(),
            status,
            reason: reason.into(),
            method: self.method,
            errno,
            detail: self.detail,
        }
    }

    fn ok(self, reason: impl Into<String>) -> Check {
        self.done(Status::Available, reason, None)
    }

    fn skipped(self, reason: impl Into<String>) -> Check {
        self.done(Status::Skipped, reason, None)
    }

    /// A failed call: the errno decides between unavailable and blocked. `what` names the
    /// call, `enable` says what would make an unsupported feature work.
    fn failed(mut self, what: &str, err: &io::Error, enable: &str) -> Check {
        let errno = err.raw_os_error();
        let name = errno.map(errno_name);
        self.step(&format!("{what} -> {}", name.unwrap_or("error")));
        let (status, reason) = match errno {
            Some(libc::EPERM | libc::EACCES) => (
                Status::Blocked,
                format!(
                    "{what}: {}, so not checked; run with that privilege (a seccomp or LSM policy can also refuse it)",
                    name.unwrap_or("not permitted")
                ),
            ),
            Some(libc::ENOSYS) => (
                Status::Blocked,
                format!(
                    "{what}: ENOSYS, either a kernel without it or a seccomp filter; cannot tell which"
                ),
            ),
            Some(libc::ENOMEM | libc::ENOBUFS) => (
                Status::Blocked,
                format!("{what}: a memory limit refused it ({err})"),
            ),
            _ => (Status::Unavailable, format!("{what}: {err}; {enable}")),
        };
        self.done(status, reason, name)
    }
}

fn loopback(v6: bool) -> SocketAddr {
    if v6 {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    }
}

/// A connected TCP pair over loopback: (client, accepted server side).
fn tcp_pair(v6: bool) -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind(loopback(v6))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    client.set_read_timeout(Some(TIMEOUT))?;
    server.set_read_timeout(Some(TIMEOUT))?;
    Ok((client, server))
}

fn wait_readable(s: &impl AsFd) -> io::Result<()> {
    if sys::poll(s.as_fd(), libc::POLLIN, Some(TIMEOUT))? & libc::POLLIN == 0 {
        return Err(io::Error::from(io::ErrorKind::TimedOut));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RX

fn rx_check() -> Check {
    let mut p = Probe::new(CheckId::RxTcpZerocopyReceive);
    let page = sys::page_size();
    let (client, server) = match tcp_pair(false) {
        Ok(pair) => pair,
        Err(e) => return p.failed("TCP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    p.step("mmap(PROT_READ, MAP_SHARED) on a connected TCP socket");
    let map = match sys::Mmap::shared(server.as_fd(), page, libc::PROT_READ) {
        Ok(m) => m,
        Err(e) => return p.failed("mmap(TCP socket)", &e, "needs Linux 4.18+ (tcp_mmap)"),
    };
    if let Err(e) = (&client)
        .write_all(b"z")
        .and_then(|()| wait_readable(&server))
    {
        return p.failed("send 1 byte over loopback", &e, "loopback TCP must work");
    }
    let mut zc = abi::TcpZerocopyReceive {
        address: map.addr() as u64,
        length: page as u32,
        ..Default::default()
    };
    p.step("getsockopt(TCP_ZEROCOPY_RECEIVE, optlen 64) after 1 byte");
    let optlen = match sys::tcp_zerocopy_receive(server.as_fd(), &mut zc) {
        Ok(n) => n,
        Err(e) => {
            return p.failed("getsockopt(TCP_ZEROCOPY_RECEIVE)", &e, "needs Linux 4.18+");
        }
    };
    let fields: Vec<&str> = abi::TcpZerocopyReceive::FIELDS
        .iter()
        .filter(|(_, _, end)| *end as usize <= optlen)
        .map(|(name, _, _)| *name)
        .collect();
    let newest = abi::TcpZerocopyReceive::FIELDS
        .iter()
        .filter(|(_, _, end)| *end as usize <= optlen)
        .map(|(_, v, _)| *v)
        .next_back()
        .unwrap_or("?");
    p.detail("struct_len", optlen);
    p.detail("fields", fields.clone());
    p.detail("copybuf", fields.contains(&"copybuf_address"));
    // One byte cannot be mapped: the kernel must map nothing and hint that 1 byte be copied.
    if zc.length != 0 || zc.recv_skip_hint != 1 {
        return p.done(
            Status::Unavailable,
            format!(
                "TCP_ZEROCOPY_RECEIVE returned length {} and recv_skip_hint {} for 1 queued byte (expected 0 and 1)",
                zc.length, zc.recv_skip_hint
            ),
            None,
        );
    }
    p.ok(format!(
        "works; the kernel fills {optlen} bytes of struct tcp_zerocopy_receive (the {newest} layout: {})",
        fields.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------------
// TX

fn zerocopy_outcome(mut p: Probe, r: Result<Completion, ZerocopyError>, proto: &str) -> Check {
    match r {
        Ok(c) => {
            p.detail("copied", c.copied);
            let how = if c.copied {
                "flagged copied, as it always is over loopback"
            } else {
                "not copied"
            };
            p.ok(format!(
                "SO_ZEROCOPY accepted and a {proto} MSG_ZEROCOPY send completed on the error queue ({how})"
            ))
        }
        Err(ZerocopyError::Unsupported { reason, .. }) => {
            p.step("setsockopt(SO_ZEROCOPY) -> unsupported");
            let need = if proto == "UDP" {
                "Linux 5.0+"
            } else {
                "Linux 4.14+"
            };
            p.done(
                Status::Unavailable,
                format!("SO_ZEROCOPY refused on {proto}: {reason}; needs {need}"),
                Some("ENOPROTOOPT"),
            )
        }
        Err(ZerocopyError::Timeout(t)) => p.done(
            Status::Unavailable,
            format!("MSG_ZEROCOPY send accepted but no completion within {t:?}"),
            Some("ETIMEDOUT"),
        ),
        Err(ZerocopyError::Io { op, source }) => p.failed(op, &source, "MSG_ZEROCOPY send failed"),
    }
}

fn tx_tcp_check() -> Check {
    let mut p = Probe::new(CheckId::TxTcp);
    let (client, _server) = match tcp_pair(false) {
        Ok(pair) => pair,
        Err(e) => return p.failed("TCP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); send(MSG_ZEROCOPY) over loopback TCP; recvmsg(MSG_ERRQUEUE)",
    );
    let r = msg_zerocopy::enable(&client)
        .and_then(|()| msg_zerocopy::send_once(&client, None, 4096, TIMEOUT));
    zerocopy_outcome(p, r, "TCP")
}

fn tx_udp_check() -> Check {
    let mut p = Probe::new(CheckId::TxUdp);
    let receiver = match UdpSocket::bind(loopback(false)) {
        Ok(s) => s,
        Err(e) => return p.failed("bind UDP 127.0.0.1", &e, "needs IPv4 loopback"),
    };
    let dest = match receiver.local_addr() {
        Ok(a) => a,
        Err(e) => return p.failed("getsockname", &e, ""),
    };
    p.step(
        "setsockopt(SO_ZEROCOPY, 1); sendto(MSG_ZEROCOPY) over loopback UDP; recvmsg(MSG_ERRQUEUE)",
    );
    zerocopy_outcome(p, msg_zerocopy::udp_send_once(dest, 4096, TIMEOUT), "UDP")
}

// ---------------------------------------------------------------------------------------------
// FILE

fn pattern_file(len: usize) -> io::Result<fs::File> {
    let mut f = fs::File::from(sys::memfd("zcnet-probe")?);
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    f.write_all(&data)?;
    Ok(f)
}

fn read_back(server: &TcpStream, len: usize) -> io::Result<bool> {
    let mut got = vec![0u8; len];
    (&*server).read_exact(&mut got)?;
    Ok(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8))
}

fn sendfile_check() -> Check {
    let mut p = Probe::new(CheckId::FileSendfile);
    let len = 2 * sys::page_size();
    let setup = pattern_file(len).and_then(|f| Ok((f, tcp_pair(false)?)));
    let (file, (client, server)) = match setup {
        Ok(s) => s,
        Err(e) => return p.failed("memfd + TCP pair", &e, "needs memfd_create and loopback"),
    };
    p.step("sendfile(memfd -> TCP socket, 8 KiB)");
    let mut off = 0i64;
    while (off as usize) < len {
        let want = len - off as usize;
        match sys::sendfile(client.as_fd(), file.as_fd(), &mut off, want) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return p.failed("sendfile", &e, "sendfile to sockets needs Linux 2.6.33+"),
        }
    }
    match read_back(&server, len) {
        Ok(true) => p.ok("sendfile moved a file to a TCP socket intact"),
        Ok(false) => p.done(Status::Unavailable, "sendfile delivered wrong bytes", None),
        Err(e) => p.failed("read back", &e, ""),
    }
}

fn splice_check() -> Check {
    let mut p = Probe::new(CheckId::FileSplice);
    let len = 2 * sys::page_size();
    let setup = pattern_file(len).and_then(|f| Ok((f, tcp_pair(false)?, sys::pipe()?)));
    let (file, (client, server), (pipe_r, pipe_w)) = match setup {
        Ok(s) => s,
        Err(e) => {
            return p.failed(
                "memfd + TCP pair + pipe",
                &e,
                "needs memfd, loopback, pipes",
            );
        }
    };
    p.step("fcntl(F_SETPIPE_SZ, 1 MiB)");
    match sys::set_pipe_size(pipe_w.as_fd(), 1 << 20) {
        Ok(n) => p.detail("pipe_size", n),
        Err(e) => {
            p.step(&format!(
                "F_SETPIPE_SZ -> {}",
                errno_name(e.raw_os_error().unwrap_or(0))
            ));
            p.detail("pipe_size", serde_json::Value::Null);
        }
    }
    p.step("splice(memfd -> pipe); splice(pipe -> TCP socket)");
    let mut off = 0i64;
    let mut moved = 0;
    while moved < len {
        let n = match sys::splice(file.as_fd(), Some(&mut off), pipe_w.as_fd(), len - moved, 0) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => return p.failed("splice(file -> pipe)", &e, "needs splice (2.6.17+)"),
        };
        let mut left = n;
        while left > 0 {
            match sys::splice(pipe_r.as_fd(), None, client.as_fd(), left, 0) {
                Ok(m) => left -= m,
                Err(e) => return p.failed("splice(pipe -> socket)", &e, "needs splice (2.6.17+)"),
            }
        }
        moved += n;
    }
    match read_back(&server, len) {
        Ok(true) => p.ok("splice moved a file through a pipe to a TCP socket intact"),
        Ok(false) => p.done(Status::Unavailable, "splice delivered wrong bytes", None),
        Err(e) => p.failed("read back", &e, ""),
    }
}

// ---------------------------------------------------------------------------------------------
// URING

fn uring_checks(host: &Host, privs: &Privileges) -> Vec<Check> {
    use CheckId::*;
    let mut setup = Probe::new(UringSetup);
    setup.step("io_uring_setup(4)");
    let ring = match sys::uring::setup(4) {
        Ok(r) => r,
        Err(e) => {
            let why = match (e.raw_os_error(), host.io_uring_disabled) {
                (_, Some(2)) => " (kernel.io_uring_disabled = 2: io_uring is switched off)".to_owned(),
                (Some(libc::EPERM), Some(1)) => {
                    " (kernel.io_uring_disabled = 1: only members of kernel.io_uring_group may use it)".to_owned()
                }
                (Some(libc::ENOSYS), Some(_)) => {
                    " (the kernel has io_uring, so a seccomp filter must be refusing it)".to_owned()
                }
                _ => String::new(),
            };
            let first = setup.failed(
                &format!("io_uring_setup{why}"),
                &e,
                "needs Linux 5.1+ with CONFIG_IO_URING",
            );
            let rest = [
                UringSendZc,
                UringSendmsgZc,
                UringReportUsage,
                UringRegisteredBuffers,
            ]
            .map(|id| Probe::new(id).skipped("io_uring is not usable here (see uring.setup)"));
            return std::iter::once(first).chain(rest).collect();
        }
    };
    let mut out = vec![setup.ok("io_uring_setup works")];

    let mut send_zc = Probe::new(UringSendZc);
    let mut sendmsg_zc = Probe::new(UringSendmsgZc);
    send_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    sendmsg_zc.step("io_uring_register(IORING_REGISTER_PROBE)");
    let ops = match sys::uring::probe_opcodes(&ring) {
        Ok(ops) => ops,
        Err(e) => {
            out.push(send_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(sendmsg_zc.failed("IORING_REGISTER_PROBE", &e, "needs Linux 5.6+"));
            out.push(Probe::new(UringReportUsage).skipped("opcode probe failed"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("opcode probe failed"));
            return out;
        }
    };
    drop(ring);
    out.push(if ops.sendmsg_zc {
        sendmsg_zc.ok("the kernel lists IORING_OP_SENDMSG_ZC as supported")
    } else {
        sendmsg_zc.done(
            Status::Unavailable,
            "IORING_OP_SENDMSG_ZC is not in the opcode probe; needs Linux 6.1+",
            None,
        )
    });
    if !ops.send_zc {
        out.insert(
            1,
            send_zc.done(
                Status::Unavailable,
                "IORING_OP_SEND_ZC is not in the opcode probe; needs Linux 6.0+",
                None,
            ),
        );
        out.push(Probe::new(UringReportUsage).skipped("no IORING_OP_SEND_ZC"));
        out.push(Probe::new(UringRegisteredBuffers).skipped("no IORING_OP_SEND_ZC"));
        return out;
    }

    // A real SEND_ZC over a connected UDP loopback pair, plain and with a registered buffer.
    let pair = UdpSocket::bind(loopback(false)).and_then(|rx| {
        let tx = UdpSocket::bind(loopback(false))?;
        tx.connect(rx.local_addr()?)?;
        Ok((tx, rx))
    });
    let (tx, _rx) = match pair {
        Ok(p) => p,
        Err(e) => {
            out.insert(
                1,
                send_zc.failed("UDP pair on 127.0.0.1", &e, "needs IPv4 loopback"),
            );
            out.push(Probe::new(UringReportUsage).skipped("no UDP loopback"));
            out.push(Probe::new(UringRegisteredBuffers).skipped("no UDP loopback"));
            return out;
        }
    };
    let mut usage = Probe::new(UringReportUsage);
    usage.step("IORING_OP_SEND_ZC with IORING_SEND_ZC_REPORT_USAGE over loopback UDP");
    send_zc.step("IORING_OP_SEND_ZC over loopback UDP");
    match sys::uring::send_zc_once(
        tx.as_fd(),
        1024,
        abi::IORING_SEND_ZC_REPORT_USAGE,
        false,
        TIMEOUT,
    ) {
        Ok(o) if o.result == -libc::EINVAL => {
            out.insert(1, send_zc.ok("the opcode probe lists IORING_OP_SEND_ZC"));
            out.push(usage.done(
                Status::Unavailable,
                "SEND_ZC rejects IORING_SEND_ZC_REPORT_USAGE (EINVAL); needs Linux 6.2+",
                Some("EINVAL"),
            ));
        }
        Ok(o) if o.result < 0 => {
            let e = io::Error::from_raw_os_error(-o.result);
            out.insert(
                1,
                send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
            );
            out.push(Probe::new(UringReportUsage).skipped("SEND_ZC itself failed"));
        }
        Ok(o) => {
            send_zc.detail("more", o.more);
            out.insert(
                1,
                send_zc.ok(format!(
                    "a SEND_ZC request sent {} bytes; result CQE then notification CQE",
                    o.result
                )),
            );
            match o.copied() {
                Some(copied) => {
                    usage.detail("copied", copied);
                    let how = if copied {
                        "copied, as over loopback"
                    } else {
                        "not copied"
                    };
                    out.push(usage.ok(format!("the notification reports usage ({how})")));
                }
                None => out.push(usage.done(
                    Status::Unavailable,
                    "no notification CQE followed the result",
                    None,
                )),
            }
        }
        Err(e) => {
            out.insert(
                1,
                send_zc.failed("IORING_OP_SEND_ZC", &e, "needs Linux 6.0+"),
            );
            out.push(Probe::new(UringReportUsage).skipped("SEND_ZC itself failed"));
        }
    }

    let mut fixed = Probe::new(UringRegisteredBuffers);
    fixed.step(
        "IORING_REGISTER_BUFFERS (one page); IORING_OP_SEND_ZC with IORING_RECVSEND_FIXED_BUF",
    );
    fixed.detail("memlock_soft", host.memlock_soft);
    fixed.detail("memlock_exempt", privs.cap_ipc_lock);
    let limit = match (privs.cap_ipc_lock, host.memlock_soft) {
        (true, _) => "CAP_IPC_LOCK exempts this process from RLIMIT_MEMLOCK".to_owned(),
        (false, None) => "RLIMIT_MEMLOCK is unlimited".to_owned(),
        (false, Some(n)) => format!(
            "registered buffers may pin up to {} KiB (RLIMIT_MEMLOCK)",
            n / 1024
        ),
    };
    out.push(
        match sys::uring::send_zc_once(tx.as_fd(), sys::page_size(), 0, true, TIMEOUT) {
            Ok(o) if o.result >= 0 => {
                fixed.ok(format!("a registered-buffer SEND_ZC worked; {limit}"))
            }
            Ok(o) => fixed.failed(
                "SEND_ZC(FIXED_BUF)",
                &io::Error::from_raw_os_error(-o.result),
                "needs Linux 6.0+",
            ),
            Err(e) => fixed.failed("IORING_REGISTER_BUFFERS", &e, &limit),
        },
    );
    out
}

// ---------------------------------------------------------------------------------------------
// PEEK

fn peek_check(v6: bool) -> Check {
    let (id, fam) = if v6 {
        (CheckId::PeekIpv6, "IPv6")
    } else {
        (CheckId::PeekIpv4, "IPv4")
    };
    let mut p = Probe::new(id);
    let (client, server) = match tcp_pair(v6) {
        Ok(pair) => pair,
        Err(e) => {
            return p.failed(
                &format!("TCP pair on {fam} loopback"),
                &e,
                "needs an IPv6 loopback address",
            );
        }
    };
    p.step("setsockopt(SO_PEEK_OFF, 0)");
    if let Err(e) = sys::setsockopt(server.as_fd(), libc::SOL_SOCKET, abi::SO_PEEK_OFF, &0i32) {
        return p.failed(
            &format!("setsockopt(SO_PEEK_OFF) on TCP/{fam}"),
            &e,
            "TCP support came in Linux 6.9 (IPv4) and later for IPv6",
        );
    }
    p.step("send 8 bytes; recv(MSG_PEEK, 4) twice");
    let peek_twice = || -> io::Result<([u8; 4], [u8; 4])> {
        (&client).write_all(b"abcdefgh")?;
        // Wait until all 8 bytes are queued, so the second peek has something to find.
        let mut probe = [0u8; 8];
        sys::setsockopt(server.as_fd(), libc::SOL_SOCKET, abi::SO_PEEK_OFF, &-1i32)?;
        for _ in 0..200 {
            wait_readable(&server)?;
            if sys::recv(server.as_fd(), &mut probe, libc::MSG_PEEK)? == 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        sys::setsockopt(server.as_fd(), libc::SOL_SOCKET, abi::SO_PEEK_OFF, &0i32)?;
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        sys::recv(server.as_fd(), &mut a, libc::MSG_PEEK)?;
        sys::recv(server.as_fd(), &mut b, libc::MSG_PEEK)?;
        Ok((a, b))
    };
    match peek_twice() {
        Ok((a, b)) if &a == b"abcd" && &b == b"efgh" => p.ok(format!(
            "SO_PEEK_OFF works on TCP over {fam}: successive peeks advance"
        )),
        Ok((a, b)) => p.done(
            Status::Unavailable,
            format!(
                "SO_PEEK_OFF accepted on TCP/{fam} but peeks read {:?} then {:?} (offset ignored)",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ),
            None,
        ),
        Err(e) => p.failed("peek", &e, ""),
    }
}

// ---------------------------------------------------------------------------------------------
// RING

fn ring_req(tx: bool) -> abi::TpacketReq3 {
    let block = 4 * sys::page_size() as u32;
    abi::TpacketReq3 {
        tp_block_size: block,
        tp_block_nr: 2,
        tp_frame_size: 2048,
        tp_frame_nr: 2 * block / 2048,
        // The TX ring rejects the RX-only fields.
        tp_retire_blk_tov: if tx { 0 } else { 10 },
        ..Default::default()
    }
}

fn ring_check(tx: bool) -> Check {
    let (id, opt, name) = if tx {
        (CheckId::RingTx, abi::PACKET_TX_RING, "PACKET_TX_RING")
    } else {
        (CheckId::RingRx, abi::PACKET_RX_RING, "PACKET_RX_RING")
    };
    let mut p = Probe::new(id);
    p.step("socket(AF_PACKET, SOCK_RAW, 0)");
    let fd = match sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) {
        Ok(fd) => fd,
        Err(e) => {
            return p.failed(
                "socket(AF_PACKET) (needs CAP_NET_RAW)",
                &e,
                "needs CONFIG_PACKET",
            );
        }
    };
    p.step("setsockopt(PACKET_VERSION, TPACKET_V3)");
    if let Err(e) = sys::setsockopt(
        fd.as_fd(),
        abi::SOL_PACKET,
        abi::PACKET_VERSION,
        &abi::TPACKET_V3,
    ) {
        return p.failed(
            "setsockopt(PACKET_VERSION, TPACKET_V3)",
            &e,
            "needs Linux 3.2+",
        );
    }
    let req = ring_req(tx);
    p.step(&format!(
        "setsockopt({name}, 2 blocks of {} B)",
        req.tp_block_size
    ));
    if let Err(e) = sys::setsockopt(fd.as_fd(), abi::SOL_PACKET, opt, &req) {
        let need = if tx {
            "TX rings under TPACKET_V3 need Linux 4.11+"
        } else {
            "needs Linux 3.2+"
        };
        return p.failed(&format!("setsockopt({name})"), &e, need);
    }
    p.step("mmap(ring)");
    let len = (req.tp_block_size * req.tp_block_nr) as usize;
    match sys::Mmap::shared(fd.as_fd(), len, libc::PROT_READ | libc::PROT_WRITE) {
        Ok(_) => p.ok(format!(
            "a TPACKET_V3 {} ring was set up and mapped",
            if tx { "TX" } else { "RX" }
        )),
        Err(e) => p.failed("mmap(ring)", &e, ""),
    }
}

fn fanout_check() -> Check {
    let mut p = Probe::new(CheckId::RingFanout);
    p.step("socket(AF_PACKET, SOCK_RAW, ETH_P_ALL); bind(lo)");
    let fd = match sys::socket(
        libc::AF_PACKET,
        libc::SOCK_RAW,
        i32::from(abi::ETH_P_ALL.to_be()),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            return p.failed(
                "socket(AF_PACKET) (needs CAP_NET_RAW)",
                &e,
                "needs CONFIG_PACKET",
            );
        }
    };
    let bound =
        sys::if_nametoindex("lo").and_then(|i| sys::bind_packet(fd.as_fd(), i, abi::ETH_P_ALL));
    if let Err(e) = bound {
        return p.failed("bind(AF_PACKET, lo)", &e, "");
    }
    // A group id of our own (the low 16 bits of the pid) so concurrent probes do not join.
    let group = std::process::id() & 0xffff;
    p.step("setsockopt(PACKET_FANOUT, PACKET_FANOUT_HASH)");
    match sys::setsockopt(
        fd.as_fd(),
        abi::SOL_PACKET,
        abi::PACKET_FANOUT,
        &(group | (abi::PACKET_FANOUT_HASH << 16)),
    ) {
        Ok(()) => p.ok("a packet socket joined a PACKET_FANOUT_HASH group"),
        Err(e) => p.failed("setsockopt(PACKET_FANOUT)", &e, "needs Linux 3.1+"),
    }
}

fn ring_checks() -> Vec<Check> {
    vec![ring_check(false), ring_check(true), fanout_check()]
}

// ---------------------------------------------------------------------------------------------
// AF_XDP

fn xdp_check() -> Check {
    let mut p = Probe::new(CheckId::XdpSocket);
    p.step("socket(AF_XDP, SOCK_RAW, 0)");
    match sys::socket(abi::AF_XDP, libc::SOCK_RAW, 0) {
        Ok(_) => p.ok(
            "AF_XDP sockets can be created; copy mode works on any device, zero-copy bind (XDP_ZEROCOPY) needs a driver with AF_XDP zero-copy support (not checked: needs a real device)",
        ),
        Err(e) => p.failed("socket(AF_XDP) (needs CAP_NET_RAW)", &e, "needs Linux 4.18+ with CONFIG_XDP_SOCKETS"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn check_names_are_the_serde_names() {
        assert_eq!(
            CheckId::RxTcpZerocopyReceive.name(),
            "rx.tcp_zerocopy_receive"
        );
        assert_eq!(CheckId::PeekIpv6.name(), "peek.tcp_ipv6");
        assert_eq!(CheckId::XdpSocket.mechanism(), Mechanism::Xdp);
    }
}
