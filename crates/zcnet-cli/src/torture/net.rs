//! Where the torture rounds run: a loopback lab and a veth lab built once (or the host's
//! 127.0.0.1 where no lab can be made), the socket pairs of a round, the receiving namespace's
//! drop counters, and the per-round faults that change the machine (optmem inside a lab
//! namespace, the locked-memory limit for one thread).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::Context as _;
use netlab::{Family, LoopbackLab, Netns, Side, VethLab};

/// Which link a round crosses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A loopback lab's `lo`, or the host's 127.0.0.1/::1 where no lab could be made.
    Loopback,
    /// Two namespaces joined by a veth pair.
    Veth,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::Loopback => "loopback",
            Link::Veth => "veth",
        }
    }
}

/// The labs built for a run.
pub struct Labs {
    pub loopback: Option<LoopbackLab>,
    pub veth: Option<VethLab>,
    /// Why there is no lab, when there is none.
    pub no_lab: Option<String>,
}

impl Labs {
    /// Builds both labs where this process may; otherwise says why.
    pub fn build() -> Labs {
        if let Err(e) = netlab::check_privileges() {
            return Labs {
                loopback: None,
                veth: None,
                no_lab: Some(format!("no network namespaces here ({e})")),
            };
        }
        let (loopback, veth) = (LoopbackLab::new(None), VethLab::new(None));
        let no_lab = match (&loopback, &veth) {
            (Err(e), _) | (_, Err(e)) => Some(format!("a lab could not be built: {e}")),
            _ => None,
        };
        Labs {
            loopback: loopback.ok(),
            veth: veth.ok(),
            no_lab,
        }
    }

    /// The links rounds can use.
    pub fn links(&self) -> Vec<Link> {
        let mut l = vec![Link::Loopback];
        if self.veth.is_some() {
            l.push(Link::Veth);
        }
        l
    }

    /// The namespace that sends on `link` (`None`: the host's).
    pub fn send_ns(&self, link: Link) -> Option<&Netns> {
        match link {
            Link::Loopback => self.loopback.as_ref().map(|l| &l.ns),
            Link::Veth => self.veth.as_ref().map(|v| v.ns(Side::A)),
        }
    }

    /// The namespace that receives on `link` (`None`: the host's).
    pub fn recv_ns(&self, link: Link) -> Option<&Netns> {
        match link {
            Link::Loopback => self.loopback.as_ref().map(|l| &l.ns),
            Link::Veth => self.veth.as_ref().map(|v| v.ns(Side::B)),
        }
    }

    /// The receiver's address on `link`.
    fn recv_ip(&self, link: Link, family: Family) -> IpAddr {
        match link {
            Link::Loopback => family.loopback(),
            Link::Veth => VethLab::addr(Side::B, family),
        }
    }

    /// A connected TCP pair across `link`: (sender's end, receiver's end).
    pub fn tcp_pair(&self, link: Link, family: Family) -> anyhow::Result<(TcpStream, TcpStream)> {
        let at = SocketAddr::new(self.recv_ip(link, family), 0);
        let listener = in_ns(self.recv_ns(link), move || TcpListener::bind(at))
            .context("binding the receiver")?;
        let to = listener.local_addr()?;
        let tx = in_ns(self.send_ns(link), move || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .with_context(|| format!("connecting to {to}"))?;
        let (rx, _) = listener.accept()?;
        Ok((tx, rx))
    }

    /// A connected UDP pair across `link`: (sender, receiver).
    pub fn udp_pair(&self, link: Link, family: Family) -> anyhow::Result<(UdpSocket, UdpSocket)> {
        let at = SocketAddr::new(self.recv_ip(link, family), 0);
        let rx = in_ns(self.recv_ns(link), move || UdpSocket::bind(at))
            .context("binding the receiver")?;
        let to = rx.local_addr()?;
        let from = SocketAddr::new(
            match link {
                Link::Loopback => family.loopback(),
                Link::Veth => VethLab::addr(Side::A, family),
            },
            0,
        );
        let tx = in_ns(self.send_ns(link), move || {
            let s = UdpSocket::bind(from)?;
            s.connect(to)?;
            Ok(s)
        })
        .with_context(|| format!("connecting to {to}"))?;
        Ok((tx, rx))
    }

    /// The kernel's count of datagrams dropped on their way to the receiver of `link`: UDP
    /// receive-buffer and input errors and reassembly failures in the receiving namespace
    /// (`/proc/net/snmp`, `/proc/net/snmp6`), and the devices' drop counters.
    pub fn drops(&self, link: Link) -> Drops {
        let snmp = in_ns(self.recv_ns(link), || {
            let v4 = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
            let v6 = std::fs::read_to_string("/proc/thread-self/net/snmp6").unwrap_or_default();
            Ok((v4, v6))
        })
        .unwrap_or_default();
        let mut d = Drops::from_snmp(&snmp.0, &snmp.1);
        let devices: Vec<(Option<&Netns>, &str, bool)> = match link {
            Link::Loopback => vec![(self.recv_ns(link), "lo", true)],
            Link::Veth => vec![
                (self.send_ns(link), VethLab::DEV_A, false),
                (self.recv_ns(link), VethLab::DEV_B, true),
            ],
        };
        for (ns, dev, rx_side) in devices {
            let stats = match ns {
                Some(ns) => ns.ip(&["-s", "-j", "link", "show", "dev", dev]),
                None => netlab::ip(&["-s", "-j", "link", "show", "dev", dev]),
            };
            if let Some(s) = stats.ok().and_then(|j| netlab::LinkStats::parse(&j)) {
                d.device += if rx_side { s.rx_dropped } else { s.tx_dropped };
            }
        }
        d
    }
}

/// Runs `f` in `ns` (or here, for the host) and returns its result.
pub fn in_ns<T: Send + 'static>(
    ns: Option<&Netns>,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    match ns {
        Some(ns) => Ok(ns.run(f)??),
        None => Ok(f()?),
    }
}

/// Drop counters of a receiving namespace.
#[derive(Clone, Copy, Debug, Default)]
pub struct Drops {
    /// `Udp:`/`Udp6` `RcvbufErrors` (a full receive buffer).
    pub rcvbuf: u64,
    /// `Udp:`/`Udp6` `InErrors` beyond the receive-buffer errors (checksum, memory).
    pub in_errors: u64,
    /// `Ip:`/`Ip6` `ReasmFails` (a fragmented datagram not reassembled).
    pub reasm: u64,
    /// Packets the devices dropped (a full backlog).
    pub device: u64,
    /// `Udp:`/`Udp6` `NoPorts`: datagrams that came when no socket was bound to their port.
    pub no_ports: u64,
}

impl Drops {
    fn from_snmp(v4: &str, v6: &str) -> Drops {
        // /proc/net/snmp: pairs of lines "Udp: Name1 Name2 ..." then "Udp: v1 v2 ...".
        let field = |proto: &str, name: &str| -> u64 {
            let mut lines = v4.lines().filter(|l| l.starts_with(&format!("{proto}:")));
            let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
                return 0;
            };
            names
                .split_whitespace()
                .zip(values.split_whitespace())
                .find(|(n, _)| *n == name)
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0)
        };
        // /proc/net/snmp6: "Name value" lines.
        let field6 = |name: &str| -> u64 {
            v6.lines()
                .find_map(|l| {
                    let mut it = l.split_whitespace();
                    (it.next() == Some(name)).then(|| it.next()?.parse().ok())?
                })
                .unwrap_or(0)
        };
        let rcvbuf = field("Udp", "RcvbufErrors") + field6("Udp6RcvbufErrors");
        let in_errors = field("Udp", "InErrors") + field6("Udp6InErrors");
        Drops {
            rcvbuf,
            in_errors: in_errors.saturating_sub(rcvbuf),
            reasm: field("Ip", "ReasmFails") + field6("Ip6ReasmFails"),
            device: 0,
            no_ports: field("Udp", "NoPorts") + field6("Udp6NoPorts"),
        }
    }

    /// The increase from `before` to `self`, summed; datagrams that found no socket count
    /// only where the receiver `closed` its socket during the round.
    pub fn since(&self, before: &Drops, closed: bool) -> u64 {
        let no_ports = if closed {
            self.no_ports.saturating_sub(before.no_ports)
        } else {
            0
        };
        no_ports
            + self.rcvbuf.saturating_sub(before.rcvbuf)
            + self.in_errors.saturating_sub(before.in_errors)
            + self.reasm.saturating_sub(before.reasm)
            + self.device.saturating_sub(before.device)
    }
}

/// Descriptors open in this process now.
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Sets `net.core.optmem_max` of the sending namespace of `link` to `value` for as long as
/// the guard lives (the old value comes back on drop). Never on the host.
pub struct Optmem<'a> {
    ns: &'a Netns,
    old: String,
}

impl<'a> Optmem<'a> {
    pub fn set(ns: &'a Netns, value: u64) -> anyhow::Result<Optmem<'a>> {
        let old = ns.sysctl("net.core.optmem_max")?;
        ns.set_sysctl("net.core.optmem_max", &value.to_string())?;
        Ok(Optmem { ns, old })
    }
}

impl Drop for Optmem<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.ns.set_sysctl("net.core.optmem_max", &self.old) {
            eprintln!("torture: restoring optmem_max in {}: {e}", self.ns.name());
        }
    }
}

/// Lowers this process's soft `RLIMIT_MEMLOCK` to `limit` while the guard lives.
pub struct Memlock {
    old: (u64, u64),
}

impl Memlock {
    pub fn set(limit: u64) -> anyhow::Result<Memlock> {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let old = getrlimit(Resource::RLIMIT_MEMLOCK)?;
        setrlimit(Resource::RLIMIT_MEMLOCK, limit.min(old.1), old.1)
            .context("setrlimit(RLIMIT_MEMLOCK)")?;
        Ok(Memlock { old })
    }
}

impl Drop for Memlock {
    fn drop(&mut self) {
        use nix::sys::resource::{Resource, setrlimit};
        if let Err(e) = setrlimit(Resource::RLIMIT_MEMLOCK, self.old.0, self.old.1) {
            eprintln!("torture: restoring RLIMIT_MEMLOCK: {e}");
        }
    }
}

/// Drops `CAP_IPC_LOCK` from the calling thread's effective set (capabilities are per thread):
/// from then on `RLIMIT_MEMLOCK` binds the pages this thread's zero-copy sends pin. `Ok(false)`
/// when the thread did not have it.
pub fn drop_ipc_lock() -> anyhow::Result<bool> {
    use caps::{CapSet, Capability};
    let had = caps::has_cap(None, CapSet::Effective, Capability::CAP_IPC_LOCK)
        .map_err(|e| anyhow::anyhow!("capget: {e}"))?;
    if had {
        caps::drop(None, CapSet::Effective, Capability::CAP_IPC_LOCK)
            .map_err(|e| anyhow::anyhow!("capset (dropping CAP_IPC_LOCK): {e}"))?;
    }
    Ok(had)
}

/// Whether a socket option change took: the kernel rounds `SO_SNDBUF` up to its minimum.
pub fn set_sndbuf(fd: &impl std::os::fd::AsFd, bytes: usize) -> anyhow::Result<usize> {
    let s = socket2::SockRef::from(fd);
    s.set_send_buffer_size(bytes)?;
    Ok(s.send_buffer_size()?)
}

/// The receive buffer of a UDP receiver: forced past `rmem_max` where allowed (root).
pub fn set_rcvbuf(fd: &impl std::os::fd::AsFd, bytes: usize) {
    let s = socket2::SockRef::from(fd);
    if nix::sys::socket::setsockopt(&fd.as_fd(), nix::sys::socket::sockopt::RcvBufForce, &bytes)
        .is_err()
    {
        let _ = s.set_recv_buffer_size(bytes);
    }
}

/// Resets the connection of `fd` on close: `SO_LINGER` 0.
pub fn linger_zero(fd: &impl std::os::fd::AsFd) {
    let _ = socket2::SockRef::from(fd).set_linger(Some(Duration::ZERO));
}
