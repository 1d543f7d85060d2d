//! Filters: tcpdump expressions compiled by libpcap, loaded at run time.

use std::os::fd::BorrowedFd;

use super::{PacketError, sys_err};
use crate::sys::{abi, packet as ring};

/// Whether libpcap can be loaded (what [`Filter::compile`] needs), and if not, why: the names
/// tried and the loader's message.
///
/// # Errors
/// The one-line reason, naming the Debian package that provides it.
pub fn libpcap_available() -> Result<(), String> {
    ring::libpcap_loaded().map_err(|m| libpcap_missing(&m))
}

/// The one line saying libpcap is missing: the names tried, the loader's word, the package.
fn libpcap_missing(m: &ring::LibpcapMissing) -> String {
    format!(
        "libpcap could not be loaded (tried {}: {}); install it (Debian: apt install libpcap0.8)",
        m.tried.join(", "),
        m.message
    )
}

/// A classic BPF program for Ethernet frames.
#[derive(Clone, Debug, PartialEq, Eq)]
#[doc(alias("SO_ATTACH_FILTER", "pcap_compile"))]
pub struct Filter {
    program: Vec<abi::SockFilter>,
}

impl Filter {
    /// Compiles a tcpdump expression (`pcap-filter(7)`); the empty expression accepts every
    /// frame. The program returns at most `snaplen` bytes of each frame, so it also cuts the
    /// captured length, in the kernel.
    ///
    /// # Errors
    /// [`PacketError::Filter`] with libpcap's message; [`PacketError::Unsupported`] when
    /// libpcap cannot be loaded. libpcap is loaded at run time (`libpcap.so.1`, then
    /// `libpcap.so.0.8`, or the name in `ZCNET_LIBPCAP`), on the first compile: nothing else
    /// in zcnet needs it.
    pub fn compile(expr: &str, snaplen: u32) -> Result<Filter, PacketError> {
        match ring::compile_filter(expr, snaplen) {
            Ok(program) => Ok(Filter { program }),
            Err(ring::CompileError::Expression(message)) => Err(PacketError::Filter {
                expr: expr.to_owned(),
                message,
            }),
            Err(ring::CompileError::Missing(m)) => Err(PacketError::Unsupported {
                feature: "filter expressions (libpcap)",
                reason: libpcap_missing(&m),
            }),
        }
    }

    /// Instructions in the program.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// True for an empty program (never produced by [`Filter::compile`]).
    pub fn is_empty(&self) -> bool {
        self.program.is_empty()
    }

    /// Attaches the program to the packet socket `fd` (`SO_ATTACH_FILTER`).
    pub(super) fn attach(&self, fd: BorrowedFd<'_>) -> Result<(), PacketError> {
        crate::sys::sockopt::attach_filter(fd, &self.program)
            .map_err(sys_err("setsockopt(SO_ATTACH_FILTER)"))
    }
}
