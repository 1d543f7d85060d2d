//! What went wrong ([`XdpError`]), and the errors of the calls underneath as one.

use std::io;

use crate::sys;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// No interface of that name here.
    #[error("no interface named {0:?} in this network namespace")]
    NoInterface(String),
    /// A parameter the kernel would refuse (a queue out of range, sizes).
    #[error("{0}")]
    Config(String),
    /// A privilege is missing.
    #[error("{what} needs {caps} (run as root)")]
    NoPrivilege {
        /// What was refused.
        what: &'static str,
        /// The capabilities it needs.
        caps: &'static str,
    },
    /// The UMEM is larger than `RLIMIT_MEMLOCK` allows.
    #[error(
        "the UMEM needs {need} bytes locked but RLIMIT_MEMLOCK is {limit}: raise it (ulimit -l \
         {need_kib}) or use fewer or smaller frames"
    )]
    Memlock {
        /// Bytes to lock.
        need: u64,
        /// The same in KiB, for `ulimit -l`.
        need_kib: u64,
        /// The limit.
        limit: u64,
    },
    /// Another XDP program is attached; zcnet does not replace it.
    #[error(
        "{iface} already has an XDP program: zcnet does not replace it (see `ip link show dev \
         {iface}`)"
    )]
    Busy {
        /// The interface.
        iface: String,
    },
    /// Another `AF_XDP` socket is bound to the queue.
    #[error("queue {queue} of {iface} already has an AF_XDP socket")]
    QueueBusy {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
    },
    /// The kernel lacks something this needs.
    #[error("{feature} is not available: {reason}")]
    Unsupported {
        /// The missing feature.
        feature: &'static str,
        /// Why.
        reason: String,
    },
    /// Loading or attaching the program failed.
    #[error("the XDP program: {0}")]
    Program(String),
    /// The interface was deleted (or moved to another namespace) under the socket, which the
    /// kernel then unbinds with `ENETDOWN`: it receives nothing more.
    #[error("the interface {iface} was deleted")]
    InterfaceGone {
        /// The interface.
        iface: String,
        /// The socket's error (`ENETDOWN`).
        source: io::Error,
    },
    /// A call failed.
    #[error("{call} failed")]
    Io {
        /// The call, named as in C.
        call: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
}

pub(super) fn sys_err(call: &'static str) -> impl FnOnce(io::Error) -> XdpError {
    move |source| XdpError::Io { call, source }
}

/// [`XdpError::Memlock`] for `need` bytes.
pub(super) fn memlock(need: u64) -> XdpError {
    XdpError::Memlock {
        need,
        need_kib: need.div_ceil(1024),
        limit: sys::process::memlock_limit()
            .ok()
            .and_then(|l| l.0)
            .unwrap_or(0),
    }
}
