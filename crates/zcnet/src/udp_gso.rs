//! UDP GSO trains (`UDP_SEGMENT`, Linux 4.18) and their receive side (`UDP_GRO`, Linux 5.0).
//!
//! A *train* is one send of up to 64 segments of one size: the kernel builds one large skb and
//! cuts it into datagrams as late as it can (in the device where it offloads UDP segmentation,
//! else just before the driver), so the sending path runs once per train instead of once per
//! datagram. It is what QUIC and real-time media servers send, and exactly the size where
//! `MSG_ZEROCOPY` and io_uring `SEND_ZC` pay.
//!
//! This is not a mechanism of its own: the UDP senders take a [`Segment`] in their `Config`
//! ([`msg_zerocopy::Config::segment`](crate::msg_zerocopy::Config::segment),
//! [`uring::Config::segment`](crate::uring::Config::segment)), set it on their socket with
//! [`set_segment`] and check every buffer against [`Segment::check_train`] before the kernel sees
//! it; the loan, the completions and `Mode::Auto` are theirs, per train. The receive side is
//! [`enable_gro`] and [`recv_train`], which read a coalesced train in one call, and
//! [`datagrams`], which cuts it back into its datagrams.
//!
//! What the kernel checks, and what each refusal means (`udp_send_skb` in `net/ipv4/udp.c`):
//! - `EMSGSIZE`: a segment and its headers exceed the route's MTU, or the train 64 KiB.
//! - `EINVAL`: more than [`MAX_SEGMENTS`] segments (zcnet refuses those itself, with the
//!   count), or UDP checksums switched off (`SO_NO_CHECK`).
//! - `EIO`: the device has no checksum offload, or the route goes through IPsec.
//!
//! # References
//! - `udp(7)` (`UDP_SEGMENT`, `UDP_GRO`)
//! - the kernel's `Documentation/networking/segmentation-offloads.rst` ("UDP fragmentation
//!   offload" and "UDP GSO"), and `tools/testing/selftests/net/udpgso_bench_tx.c`

use std::io;
use std::net::UdpSocket;
use std::num::NonZeroU16;
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::cmsg;
use crate::support::{Check, CheckId, Probe, Status, TIMEOUT, loopback};
use crate::sys::{self, abi};

/// Segments in one train at most: `UDP_MAX_SEGMENTS` of every kernel since 4.18 (6.13 raised
/// it to 128; zcnet keeps to the limit every kernel takes).
pub const MAX_SEGMENTS: usize = 64;

/// The largest segment: one IPv4 UDP datagram (65535 less the IPv4 and UDP headers).
pub const MAX_SEGMENT: usize = 65535 - 20 - 8;

/// A GSO segment size: the payload bytes of every datagram of a train but its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment(NonZeroU16);

impl Segment {
    /// A segment of `bytes` payload bytes (QUIC servers use 1200 to 1452; 1472 fills an
    /// Ethernet MTU of IPv4).
    ///
    /// # Errors
    /// [`GsoError::BadSegment`] outside 1..=[`MAX_SEGMENT`].
    pub fn new(bytes: usize) -> Result<Segment, GsoError> {
        u16::try_from(bytes)
            .ok()
            .filter(|&b| usize::from(b) <= MAX_SEGMENT)
            .and_then(NonZeroU16::new)
            .map(Segment)
            .ok_or(GsoError::BadSegment(bytes))
    }

    /// Its size in bytes.
    pub fn get(self) -> usize {
        usize::from(self.0.get())
    }

    /// The datagrams a buffer of `len` bytes becomes (one for an empty buffer).
    pub fn segments(self, len: usize) -> usize {
        len.div_ceil(self.get()).max(1)
    }

    /// Whether the kernel takes a train of `len` bytes in these segments: at most
    /// [`MAX_SEGMENTS`] of them. (Its byte limit, 64 KiB with the headers, is the kernel's to
    /// say: `EMSGSIZE`.)
    ///
    /// # Errors
    /// [`GsoError::TooManySegments`].
    pub fn check_train(self, len: usize) -> Result<(), GsoError> {
        let segments = self.segments(len);
        if segments > MAX_SEGMENTS {
            return Err(GsoError::TooManySegments {
                len,
                segment: self.get(),
                segments,
            });
        }
        Ok(())
    }
}

/// Errors of GSO trains and GRO receives.
#[derive(Debug, thiserror::Error)]
pub enum GsoError {
    /// A segment size of 0 or over [`MAX_SEGMENT`].
    #[error("segment size {0} is out of range: 1 to {MAX_SEGMENT} bytes")]
    BadSegment(usize),
    /// A train of more segments than the kernel takes.
    #[error(
        "a train of {len} bytes in {segment}-byte segments is {segments} datagrams; the kernel \
         takes at most {MAX_SEGMENTS} in one send"
    )]
    TooManySegments {
        /// Bytes of the train.
        len: usize,
        /// The segment size.
        segment: usize,
        /// Datagrams it would make.
        segments: usize,
    },
    /// `UDP_SEGMENT` or `UDP_GRO` asked of a socket that is not UDP.
    #[error("{0} is a UDP socket option: this socket is not UDP")]
    NotUdp(&'static str),
    /// The kernel has no such option (`ENOPROTOOPT`).
    #[error("{feature} is not supported: {reason}")]
    Unsupported {
        /// `UDP_SEGMENT` or `UDP_GRO`.
        feature: &'static str,
        /// The kernel's error and the version that brings it.
        reason: String,
    },
    /// A system call failed.
    #[error("{call} failed")]
    Io {
        /// The call.
        call: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

impl GsoError {
    /// The message with the kernel's error, if there is one, on one line.
    pub fn reason(&self) -> String {
        match self {
            GsoError::Io { call, source } => format!("{call}: {source}"),
            other => other.to_string(),
        }
    }
}

impl From<GsoError> for io::Error {
    fn from(e: GsoError) -> io::Error {
        match e {
            GsoError::Io { source, .. } => source,
            GsoError::Unsupported { .. } => io::Error::new(io::ErrorKind::Unsupported, e),
            e => io::Error::new(io::ErrorKind::InvalidInput, e),
        }
    }
}

/// A UDP socket option of this module: its name, the typed call that sets it, that call's name
/// and the kernel that brings it.
struct UdpOption {
    name: &'static str,
    set: fn(std::os::fd::BorrowedFd<'_>, i32) -> std::io::Result<()>,
    call: &'static str,
    since: &'static str,
}

const SEGMENT_OPTION: UdpOption = UdpOption {
    name: "UDP_SEGMENT",
    set: sys::sockopt::set_udp_segment,
    call: "setsockopt(UDP_SEGMENT)",
    since: "Linux 4.18",
};

const GRO_OPTION: UdpOption = UdpOption {
    name: "UDP_GRO",
    set: |fd, on| sys::sockopt::set_udp_gro(fd, on != 0),
    call: "setsockopt(UDP_GRO)",
    since: "Linux 5.0",
};

/// That `fd` is a UDP socket, for the option `o`.
fn require_udp(fd: std::os::fd::BorrowedFd<'_>, o: &UdpOption) -> Result<(), GsoError> {
    sys::sockopt::check_protocol(fd, libc::IPPROTO_UDP, "not UDP").map_err(|source| {
        if source.kind() == std::io::ErrorKind::InvalidInput {
            GsoError::NotUdp(o.name)
        } else {
            GsoError::Io {
                call: "getsockopt(SO_PROTOCOL)",
                source,
            }
        }
    })
}

fn udp_option(socket: &impl AsFd, o: &UdpOption, value: i32) -> Result<(), GsoError> {
    let fd = socket.as_fd();
    require_udp(fd, o)?;
    (o.set)(fd, value).map_err(|source| {
        if source.raw_os_error() == Some(libc::ENOPROTOOPT) {
            GsoError::Unsupported {
                feature: o.name,
                reason: format!("{source}; needs {}", o.since),
            }
        } else {
            GsoError::Io {
                call: o.call,
                source,
            }
        }
    })
}

/// Whether `socket` can send trains of `segment`-byte datagrams, asked without changing it: a
/// UDP socket (`SO_PROTOCOL`) on a kernel with `UDP_SEGMENT` (`getsockopt`, Linux 4.18).
///
/// # Errors
/// [`GsoError::NotUdp`], [`GsoError::Unsupported`], [`GsoError::Io`].
pub(crate) fn check_segment(socket: &impl AsFd, _segment: Segment) -> Result<(), GsoError> {
    let fd = socket.as_fd();
    let o = &SEGMENT_OPTION;
    require_udp(fd, o)?;
    match sys::sockopt::udp_segment(fd) {
        Ok(_) => Ok(()),
        Err(source) if source.raw_os_error() == Some(libc::ENOPROTOOPT) => {
            Err(GsoError::Unsupported {
                feature: o.name,
                reason: format!("{source}; needs {}", o.since),
            })
        }
        Err(source) => Err(GsoError::Io {
            call: "getsockopt(UDP_SEGMENT)",
            source,
        }),
    }
}

/// `setsockopt(SOL_UDP, UDP_SEGMENT, size)`: every later send of more than `size` bytes on
/// `socket` is a train of `size`-byte datagrams (`None`: 0, sends are single datagrams again).
///
/// # Errors
/// [`GsoError::NotUdp`], [`GsoError::Unsupported`] before Linux 4.18, [`GsoError::Io`].
#[doc(alias = "UDP_SEGMENT")]
pub fn set_segment(socket: &impl AsFd, segment: Option<Segment>) -> Result<(), GsoError> {
    let size = segment.map_or(0, |s| i32::from(s.0.get()));
    udp_option(socket, &SEGMENT_OPTION, size)
}

/// `setsockopt(SOL_UDP, UDP_GRO, 1)`: the kernel may queue datagrams of one flow coalesced, a
/// train per read, with its segment size in a control message ([`recv_train`] reads both).
/// Without it a train that reaches the socket whole is cut up first.
///
/// # Errors
/// [`GsoError::NotUdp`], [`GsoError::Unsupported`] before Linux 5.0, [`GsoError::Io`].
#[doc(alias = "UDP_GRO")]
pub fn enable_gro(socket: &impl AsFd) -> Result<(), GsoError> {
    udp_option(socket, &GRO_OPTION, 1)
}

/// What one [`recv_train`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Train {
    /// Bytes read into the buffer.
    pub len: usize,
    /// The segment size of a coalesced train (the `UDP_GRO` control message), `None` for a
    /// single datagram.
    pub segment: Option<usize>,
    /// `MSG_TRUNC`: the buffer was too small and the rest of the train is lost; read trains
    /// into 64 KiB.
    pub truncated: bool,
}

impl Train {
    /// The datagrams of the train read into `buf`, in order (see [`datagrams`]).
    pub fn datagrams<'a>(&self, buf: &'a [u8]) -> std::slice::Chunks<'a, u8> {
        datagrams(&buf[..self.len.min(buf.len())], self.segment)
    }
}

/// The datagrams of a train of `segment`-byte segments (every one that size but the last), or
/// `data` whole when there is no segment size.
pub fn datagrams(data: &[u8], segment: Option<usize>) -> std::slice::Chunks<'_, u8> {
    let size = segment.filter(|&s| s > 0).unwrap_or(data.len()).max(1);
    data.chunks(size)
}

/// Reads one datagram or coalesced train from `socket` into `buf` (64 KiB holds any), as the
/// socket blocks; `flags` as for `recvmsg(2)` (`MSG_DONTWAIT`, ...).
///
/// # Errors
/// The `recvmsg` error; `InvalidData` for a control message that does not parse.
#[doc(alias = "UDP_GRO")]
pub fn recv_train(socket: &impl AsFd, buf: &mut [u8], flags: i32) -> io::Result<Train> {
    // Room for the UDP_GRO message and one more (a timestamp, say) the caller turned on.
    let mut control = [0u8; 128];
    let (len, clen, mflags) =
        sys::net::recv_with_control(socket.as_fd(), buf, &mut control, flags)?;
    let segment = parse_gro(&control[..clen.min(control.len())])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Train {
        len: len.min(buf.len()),
        segment,
        truncated: mflags & libc::MSG_TRUNC != 0,
    })
}

pub use crate::cmsg::ParseError;

/// The segment size in the `UDP_GRO` control message among `control` (an `int`; the kernel's
/// `udp_cmsg_recv`), if there is one.
///
/// # Errors
/// A `cmsghdr` that does not fit, or a `UDP_GRO` message without its `int`.
pub fn parse_gro(control: &[u8]) -> Result<Option<usize>, ParseError> {
    let mut found = None;
    cmsg::walk(control, |m| {
        if m.level == abi::SOL_UDP && m.ty == abi::UDP_GRO {
            if m.data.len() < 4 {
                return Err(m.truncated(control.len()));
            }
            found = usize::try_from(cmsg::read_u32(m.data, 0) as i32)
                .ok()
                .filter(|&s| s > 0);
        }
        Ok(())
    })?;
    Ok(found)
}

// ---------------------------------------------------------------------------------------------
// Support: checked for real on loopback, once per process.

/// What this kernel allows of UDP GSO and GRO: see [`support`].
#[derive(Clone, Debug)]
pub struct Support {
    /// `tx.udp_segment` (Linux 4.18): a train sent over loopback arrived as its datagrams.
    pub gso: Check,
    /// `rx.udp_gro` (Linux 5.0): the same train read whole, with its segment size.
    pub gro: Check,
}

impl Support {
    /// The checks, for a report.
    pub fn checks(&self) -> Vec<Check> {
        vec![self.gso.clone(), self.gro.clone()]
    }
}

/// Whether trains work here: a 2500-byte train of 1000-byte segments over IPv4 loopback, read
/// as three datagrams by a plain socket, then whole by a `UDP_GRO` socket. Once per process.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let gso = gso_check();
        let gro = if gso.status == Status::Available {
            gro_check()
        } else {
            let mut p = Probe::new(CheckId::RxUdpGro);
            p.step("not tried: UDP_SEGMENT does not work");
            p.done(
                Status::Skipped,
                "needs a working UDP_SEGMENT to make a train",
                None,
            )
        };
        Support { gso, gro }
    })
}

/// The probe's train: 2500 bytes in 1000-byte segments.
const PROBE_TRAIN: usize = 2500;
const PROBE_SEGMENT: usize = 1000;

/// A receiver on IPv4 loopback (with `UDP_GRO` when `gro`) and a sender connected to it with
/// the probe's segment size, or the step that failed.
fn probe_pair(gro: bool) -> Result<(UdpSocket, UdpSocket), (&'static str, GsoError)> {
    let io = |call| move |source| (call, GsoError::Io { call, source });
    let rx = UdpSocket::bind(loopback(false)).map_err(io("bind"))?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(io("setsockopt(SO_RCVTIMEO)"))?;
    if gro {
        enable_gro(&rx).map_err(|e| ("setsockopt(UDP_GRO)", e))?;
    }
    let tx = UdpSocket::bind(loopback(false)).map_err(io("bind"))?;
    tx.connect(rx.local_addr().map_err(io("getsockname"))?)
        .map_err(io("connect"))?;
    let seg = Segment::new(PROBE_SEGMENT).expect("in range");
    set_segment(&tx, Some(seg)).map_err(|e| ("setsockopt(UDP_SEGMENT)", e))?;
    Ok((tx, rx))
}

fn refused(p: Probe, call: &'static str, e: GsoError, what: &str) -> Check {
    match e {
        GsoError::Unsupported { reason, .. } => p.done(
            Status::Unavailable,
            format!("{what} refused: {reason}"),
            Some("ENOPROTOOPT"),
        ),
        GsoError::Io { source, .. } => p.failed(call, &source, what),
        other => p.failed(call, &io::Error::other(other.to_string()), what),
    }
}

/// Reads datagrams from `rx` until `want` bytes came or a read times out.
fn read_all(rx: &UdpSocket, want: usize) -> io::Result<Vec<Train>> {
    let mut buf = vec![0u8; 65536];
    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    let mut total = 0;
    while total < want && Instant::now() < deadline {
        match recv_train(rx, &mut buf, 0) {
            Ok(t) => {
                total += t.len;
                got.push(t);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Sends the probe's train on `tx`: `Ok(p)` to go on, else the check's verdict.
fn send_probe_train(p: Probe, tx: &UdpSocket) -> Result<Probe, Check> {
    let train = vec![0x5a_u8; PROBE_TRAIN];
    match tx.send(&train) {
        Ok(n) if n == PROBE_TRAIN => Ok(p),
        Ok(n) => Err(p.done(
            Status::Unavailable,
            format!("a {PROBE_TRAIN}-byte train was sent as {n} bytes"),
            None,
        )),
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::EIO) => "the route's device has no checksum offload (or IPsec)",
                Some(libc::EMSGSIZE) => "a segment exceeds the route's MTU",
                Some(libc::EINVAL) => "the kernel refused the train (UDP checksums off?)",
                _ => "the send failed",
            };
            Err(p.failed("send", &e, why))
        }
    }
}

fn gso_check() -> Check {
    let mut p = Probe::new(CheckId::TxUdpGso);
    p.step(&format!(
        "setsockopt(UDP_SEGMENT, {PROBE_SEGMENT}); send {PROBE_TRAIN} bytes over IPv4 loopback; \
         recv the datagrams"
    ));
    let (tx, rx) = match probe_pair(false) {
        Ok(pair) => pair,
        Err((call, e)) => return refused(p, call, e, "UDP_SEGMENT"),
    };
    let mut p = match send_probe_train(p, &tx) {
        Ok(p) => p,
        Err(c) => return c,
    };
    let got = match read_all(&rx, PROBE_TRAIN) {
        Ok(g) => g,
        Err(e) => return p.failed("recv", &e, "reading the train's datagrams"),
    };
    let sizes: Vec<usize> = got.iter().map(|t| t.len).collect();
    p.detail("datagrams", serde_json::json!(sizes));
    if sizes
        == [
            PROBE_SEGMENT,
            PROBE_SEGMENT,
            PROBE_TRAIN - 2 * PROBE_SEGMENT,
        ]
    {
        p.ok(format!(
            "a {PROBE_TRAIN}-byte train in {PROBE_SEGMENT}-byte segments arrived as its 3 datagrams"
        ))
    } else {
        p.done(
            Status::Unavailable,
            format!(
                "a {PROBE_TRAIN}-byte train in {PROBE_SEGMENT}-byte segments arrived as {sizes:?}"
            ),
            None,
        )
    }
}

fn gro_check() -> Check {
    let mut p = Probe::new(CheckId::RxUdpGro);
    p.step(&format!(
        "setsockopt(UDP_GRO, 1) on the receiver; a {PROBE_TRAIN}-byte train over IPv4 loopback; \
         recvmsg and its UDP_GRO control message"
    ));
    let (tx, rx) = match probe_pair(true) {
        Ok(pair) => pair,
        Err((call, e)) => return refused(p, call, e, "UDP_GRO"),
    };
    let mut p = match send_probe_train(p, &tx) {
        Ok(p) => p,
        Err(c) => return c,
    };
    let got = match read_all(&rx, PROBE_TRAIN) {
        Ok(g) => g,
        Err(e) => return p.failed("recvmsg", &e, "reading the train"),
    };
    let reads: Vec<(usize, Option<usize>)> = got.iter().map(|t| (t.len, t.segment)).collect();
    p.detail("reads", serde_json::json!(reads));
    match reads.as_slice() {
        [(PROBE_TRAIN, Some(PROBE_SEGMENT))] => p.ok(format!(
            "the {PROBE_TRAIN}-byte train was read whole, its segment size {PROBE_SEGMENT} in the \
             UDP_GRO control message"
        )),
        _ if reads.iter().map(|r| r.0).sum::<usize>() == PROBE_TRAIN => p.ok(format!(
            "UDP_GRO accepted; the train arrived in {} reads (coalescing is the kernel's choice)",
            reads.len()
        )),
        _ => p.done(
            Status::Unavailable,
            format!("a {PROBE_TRAIN}-byte train was read as {reads:?}"),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, ty: i32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(cmsg::CMSG_HDR + data.len()).to_ne_bytes());
        b.extend_from_slice(&level.to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(data);
        while b.len() % size_of::<usize>() != 0 {
            b.push(0);
        }
        b
    }

    #[test]
    fn gro_segment_is_read_among_other_messages() {
        let mut buf = cmsg(libc::SOL_SOCKET, 29, &[0; 16]);
        buf.extend(cmsg(abi::SOL_UDP, abi::UDP_GRO, &1472i32.to_ne_bytes()));
        assert_eq!(parse_gro(&buf), Ok(Some(1472)));
        assert_eq!(parse_gro(&buf[..0]), Ok(None));
        assert_eq!(
            parse_gro(&cmsg(abi::SOL_UDP, abi::UDP_SEGMENT, &[1, 0])),
            Ok(None)
        );
    }

    #[test]
    fn truncated_control_is_an_error_not_a_panic() {
        let buf = cmsg(abi::SOL_UDP, abi::UDP_GRO, &1200i32.to_ne_bytes());
        for cut in 1..buf.len() {
            let r = parse_gro(&buf[..cut]);
            match cut {
                // No whole header: nothing to read.
                c if c < cmsg::CMSG_HDR => assert_eq!(r, Ok(None), "cut {cut}"),
                // The header, but not all of the int it announces.
                c if c < cmsg::CMSG_HDR + 4 => assert!(r.is_err(), "cut {cut}: {r:?}"),
                // Only the alignment padding is missing.
                _ => assert_eq!(r, Ok(Some(1200)), "cut {cut}"),
            }
        }
        let mut short = cmsg(abi::SOL_UDP, abi::UDP_GRO, &[]);
        short.truncate(cmsg::CMSG_HDR);
        assert!(
            parse_gro(&short).is_err(),
            "a UDP_GRO message without its int"
        );
    }

    #[test]
    fn segments_and_train_limits() {
        assert!(Segment::new(0).is_err());
        assert!(Segment::new(MAX_SEGMENT + 1).is_err());
        let s = Segment::new(1472).unwrap();
        assert_eq!(s.segments(0), 1);
        assert_eq!(s.segments(1472), 1);
        assert_eq!(s.segments(1473), 2);
        assert_eq!(s.segments(1472 * 42), 42);
        assert!(s.check_train(1472 * 44).is_ok());
        let small = Segment::new(100).unwrap();
        assert!(small.check_train(6400).is_ok());
        let e = small.check_train(6401).unwrap_err();
        assert!(e.to_string().contains("65 datagrams"), "{e}");
    }

    #[test]
    fn datagrams_cut_a_train_at_its_segment_size() {
        let data: Vec<u8> = (0..250u8).collect();
        let parts: Vec<usize> = datagrams(&data, Some(100)).map(<[u8]>::len).collect();
        assert_eq!(parts, [100, 100, 50]);
        assert_eq!(datagrams(&data, None).count(), 1);
        assert_eq!(datagrams(&[], Some(100)).count(), 0);
    }
}
