//! Where the send benches (`udp-tx`, `tcp-tx`, `uring-tx`, `udp-gso`) and `zcnet tune` send: a
//! lab (or a `zcnet serve` on another host) with a receiver that discards or checks what
//! arrives, and one timed run of a sender in it. What is sent, and how, is the caller's: a
//! closure that gets the connected socket. The alternation of the modes and what is made of
//! the runs are [`super::engine`]'s.
//!
//! The sender runs pinned to CPU 0 in the lab, the receiver pinned to CPU 1. The `sink` lab
//! routes UDP into an `ifb` device that drops it in its transmit routine: the only lab here
//! where the kernel really sends without copying; TCP cannot run into it (it drops the SYN).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::bail;
use netlab::{Family, LoopbackLab, Netns, Side, SinkLab, VethLab, pattern};

use crate::measure::{Run, pin};
use crate::remote::{
    self, Remote,
    proto::{Check, Role},
};

/// Transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// UDP datagrams.
    Udp,
    /// A TCP stream.
    Tcp,
}

/// Where a send run goes: a lab built here, or the receiver of a `zcnet serve`.
pub(crate) enum Lab {
    Loopback(LoopbackLab),
    Veth(VethLab),
    Sink(SinkLab),
    /// `--remote`: the receiver is a `zcnet serve` on another host.
    Remote(std::sync::Mutex<Remote>),
}

impl Lab {
    /// Builds the lab `name` (`loopback`, `veth`, `sink`) for `proto`.
    pub(crate) fn build(name: &str, proto: Proto) -> anyhow::Result<Lab> {
        Ok(match (name, proto) {
            ("loopback", _) => Lab::Loopback(LoopbackLab::new(None)?),
            // UDP datagrams must not be fragmented: a fragment lost to a full backlog leaves the
            // others in the reassembly queue for ipfrag_time (30 s), holding their zero-copy
            // pages, and the sender's drain times out. veth carries 65535 bytes in one frame.
            ("veth", Proto::Udp) => Lab::Veth(VethLab::new(Some(VETH_UDP_MTU))?),
            ("veth", Proto::Tcp) => Lab::Veth(VethLab::new(None)?),
            ("sink", Proto::Udp) => Lab::Sink(SinkLab::new()?),
            ("sink", Proto::Tcp) => {
                bail!("TCP cannot run into the sink lab: it drops the handshake")
            }
            (other, _) => bail!("no lab {other:?} (loopback, veth, sink)"),
        })
    }

    /// (sender namespace, receiver namespace if any, destination address); `None` for the
    /// remote, whose far side is no namespace here.
    pub(crate) fn ends(&self, family: Family) -> Option<(&Netns, Option<&Netns>, IpAddr)> {
        Some(match self {
            Lab::Loopback(l) => (&l.ns, Some(&l.ns), l.addr(family)),
            Lab::Veth(v) => (&v.a, Some(&v.b), VethLab::addr(Side::B, family)),
            Lab::Sink(s) => (&s.ns, None, SinkLab::target(family)),
            Lab::Remote(_) => return None,
        })
    }
}

/// The address a socket of `family` binds to before connecting.
fn unspecified(family: Family) -> SocketAddr {
    match family {
        Family::V4 => "0.0.0.0:0".parse().expect("literal"),
        Family::V6 => "[::]:0".parse().expect("literal"),
    }
}

/// What a receiver got: bytes, and for a checked TCP stream the verifier that saw them.
type Received = (u64, Option<pattern::Verifier>);

/// A receiver on CPU 1 that discards what it gets, after checking a TCP stream against `check`
/// (datagrams are counted); returns the bytes it received and its verifier.
fn receiver(
    ns: &Netns,
    proto: Proto,
    ip: IpAddr,
    check: Check,
) -> anyhow::Result<(SocketAddr, std::thread::JoinHandle<Received>)> {
    match proto {
        Proto::Udp => {
            let sock = ns.run(move || UdpSocket::bind(SocketAddr::new(ip, 0)))??;
            let addr = sock.local_addr()?;
            sock.set_read_timeout(Some(Duration::from_millis(300)))?;
            let h = std::thread::spawn(move || {
                pin(1);
                let mut buf = vec![0u8; 65536];
                let mut total = 0u64;
                // Ends when the sender has gone quiet (the read timeout).
                while let Ok(n) = sock.recv(&mut buf) {
                    total += n as u64;
                }
                (total, None)
            });
            Ok((addr, h))
        }
        Proto::Tcp => {
            let l = ns.run(move || TcpListener::bind(SocketAddr::new(ip, 0)))??;
            let addr = l.local_addr()?;
            let mut verifier = match check {
                Check::Count => None,
                Check::Pattern => Some(pattern::Verifier::new()),
                Check::Pool { size, span } => Some(pattern::Verifier::pool(size, span)),
                Check::Buffers { size, count } => {
                    Some(pattern::Verifier::buffers(size as usize, count as usize))
                }
            };
            let h = std::thread::spawn(move || {
                pin(1);
                let Ok((mut c, _)) = l.accept() else {
                    return (0, verifier);
                };
                let mut buf = vec![0u8; 1 << 20];
                let mut total = 0u64;
                while let Ok(n) = std::io::Read::read(&mut c, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                    if let Some(v) = &mut verifier {
                        v.check(&buf[..n]);
                    }
                }
                (total, verifier)
            });
            Ok((addr, h))
        }
    }
}

/// A pool of `mib` MiB of pattern bytes, made once per size and kept for the process (the
/// kernel may hold any part of it; `'static` makes that safe without tracking).
pub fn pool(mib: usize) -> anyhow::Result<&'static [u8]> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static POOLS: Mutex<Option<HashMap<usize, &'static [u8]>>> = Mutex::new(None);
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    let pools = pools.get_or_insert_with(HashMap::new);
    let mib = mib.max(1);
    if let Some(&p) = pools.get(&mib) {
        return Ok(p);
    }
    let p: &'static [u8] = Box::leak(pattern_bytes(mib << 20)?.into_boxed_slice());
    pools.insert(mib, p);
    Ok(p)
}

/// The first `len` bytes of the pattern stream.
///
/// # Errors
/// The memory cannot be had (`ulimit -v`, an overcommit policy): one line saying how much, not
/// an abort (issue 48 item 10).
pub fn pattern_bytes(len: usize) -> anyhow::Result<Vec<u8>> {
    let mut v = crate::measure::copy_cost::buffer(len)?;
    while v.len() < len {
        let off = v.len() as u64;
        v.extend_from_slice(pattern::chunk_at(
            off,
            (len - v.len()).min(pattern::MAX_CHUNK),
        ));
    }
    Ok(v)
}

/// MTU of the veth lab for UDP: the largest frame veth carries, so that no datagram is
/// fragmented.
const VETH_UDP_MTU: u32 = 65535;

/// The sender's connected socket.
pub(crate) enum Conn {
    /// Connected UDP.
    Udp(UdpSocket),
    /// TCP.
    Tcp(TcpStream),
}

/// One run in `lab`: a discarding receiver where the lab has one, then `send` on a socket
/// connected to it, in the sender's namespace, pinned to CPU 0; checks the TCP byte count.
/// `far`: the run's seconds and what a remote receiver checks the stream against.
pub(crate) fn run_in_lab<F>(
    lab: &Lab,
    proto: Proto,
    family: Family,
    far: (f64, Check),
    send: F,
) -> anyhow::Result<Run>
where
    F: FnOnce(Conn) -> anyhow::Result<Run> + Send + 'static,
{
    let Some((send_ns, recv_ns, ip)) = lab.ends(family) else {
        let Lab::Remote(remote) = lab else {
            unreachable!("only the remote has no namespaces")
        };
        let mut remote = remote.lock().unwrap_or_else(|e| e.into_inner());
        return run_remote(&mut remote, proto, far, send);
    };
    let (dest, receiver) = match recv_ns {
        Some(ns) => {
            let (a, h) = receiver(ns, proto, ip, far.1)?;
            (a, Some(h))
        }
        // The sink: any port, nothing listens, every datagram is dropped by the device.
        None => (SocketAddr::new(ip, 9), None),
    };
    let run = send_ns.run(move || -> anyhow::Result<Run> {
        pin(0);
        match proto {
            Proto::Udp => {
                let s = UdpSocket::bind(unspecified(family))?;
                s.connect(dest)?;
                send(Conn::Udp(s))
            }
            Proto::Tcp => send(Conn::Tcp(TcpStream::connect(dest)?)),
        }
    })??;
    let mut run = run;
    if let Some(h) = receiver {
        let (received, verifier) = h.join().map_err(|_| anyhow::anyhow!("receiver panicked"))?;
        if proto == Proto::Tcp && received != run.bytes {
            bail!("sent {} bytes but the receiver got {received}", run.bytes);
        }
        if let Some(v) = verifier {
            // A bench that moves wrong bytes fast is a failure, not a figure.
            if let Some(at) = v.first_bad() {
                bail!("the receiver got wrong bytes at stream offset {at} of {received}");
            }
            if !v.ok() {
                bail!("the stream ended inside a buffer, at {received} bytes");
            }
            run.verified = Some(true);
        }
    }
    Ok(run)
}

/// Runs `f` on a thread in the sending namespace of `lab`, pinned to CPU 0 as every sender is,
/// with the address the lab's senders send to: for a program run beside zcnet's senders
/// ([`super::reference`]), which inherits both. Only the `sink` lab, which needs no receiver.
pub(crate) fn in_sink<T, F>(lab: &Lab, family: Family, f: F) -> anyhow::Result<T>
where
    F: FnOnce(IpAddr) -> anyhow::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let Lab::Sink(sink) = lab else {
        bail!("a reference program runs in the sink lab only (it has no receiver elsewhere)");
    };
    let dest = SinkLab::target(family);
    sink.ns.run(move || {
        pin(0);
        f(dest)
    })?
}

/// [`run_in_lab`] against a `zcnet serve`: its receiver counts (UDP) or checks (TCP) what
/// arrives; the sender runs on this thread, pinned to CPU 0.
fn run_remote<F>(
    remote: &mut Remote,
    proto: Proto,
    (seconds, check): (f64, Check),
    send: F,
) -> anyhow::Result<Run>
where
    F: FnOnce(Conn) -> anyhow::Result<Run> + Send + 'static,
{
    let role = Role::Receive {
        proto: match proto {
            Proto::Udp => remote::proto::Proto::Udp,
            Proto::Tcp => remote::proto::Proto::Tcp,
        },
        check: if proto == Proto::Udp {
            Check::Count
        } else {
            check
        },
        rate_bps: None,
    };
    let (run, far) = remote.run_with(role.clone(), seconds, move |dest| {
        pin(0);
        match proto {
            Proto::Udp => send(Conn::Udp(dest.udp()?)),
            Proto::Tcp => send(Conn::Tcp(dest.connect()?)),
        }
    })?;
    remote::client::received_all(&role, run.bytes, &far)?;
    Ok(run.with_far(&far))
}
