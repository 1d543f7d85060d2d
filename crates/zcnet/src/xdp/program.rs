//! The redirect program (`bpf/xdp_redirect.c`, libxdp's default program): loaded and attached
//! to an interface with `aya` through a BPF link, each socket put in its XSKMAP; detached when
//! dropped.

use std::io;

use super::{Attach, Config, XdpError};
use crate::sys;

/// 8-byte alignment for the embedded object: the ELF parser reads its headers in place.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!("../../bpf/xdp_redirect.o"));

/// The redirect program's object (built by `bpf/build.sh` from `bpf/xdp_redirect.c`), 8-aligned.
pub(crate) const PROGRAM_OBJECT: &[u8] = &OBJECT.0;
/// The program's name in the object.
const PROGRAM: &str = "zcnet_xsk_redirect";
/// The XSKMAP's name in the object.
const MAP: &str = "xsks_map";

/// Entries of the XSKMAP: the queues a program can serve.
pub const MAX_QUEUES: u32 = 64;

/// The redirect program attached to an interface; detached (its link closed) on drop. The
/// kernel detaches it when the link file's last reference goes: a child this process forks at
/// that moment holds a copy until its `exec` closes it (the descriptor is `O_CLOEXEC`), so the
/// program may outlive the drop by that long.
pub(super) struct Program {
    // Dropping the Ebpf object drops the program, which detaches its links.
    ebpf: aya::Ebpf,
    pub(super) native: bool,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("native", &self.native)
            .finish()
    }
}

/// `e` and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut c = e.source();
    while let Some(x) = c {
        s.push_str(": ");
        s.push_str(&x.to_string());
        c = x.source();
    }
    s
}

impl Program {
    /// Puts the socket in the program's XSKMAP at `queue`: from now on the queue's frames go to
    /// it.
    pub(super) fn serve(&mut self, queue: u32, xsk: &sys::xdp::Xsk) -> Result<(), XdpError> {
        let mut map: aya::maps::XskMap<_> = self
            .ebpf
            .map_mut(MAP)
            .ok_or_else(|| XdpError::Program(format!("no map {MAP} in the object")))?
            .try_into()
            .map_err(|e| XdpError::Program(chain(&e)))?;
        map.set(queue, xsk.fd(), 0)
            .map_err(|e| XdpError::Program(format!("the XSKMAP: {}", chain(&e))))
    }
}

/// The errno of the first `io::Error` in `e`'s chain.
fn errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut c = Some(e);
    while let Some(x) = c {
        if let Some(io) = x.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        c = x.source();
    }
    None
}

/// Loads the redirect program and attaches it to `iface`.
pub(super) fn attach(iface: &str, config: &Config) -> Result<Program, XdpError> {
    use aya::programs::{Xdp, XdpFlags};
    // What the kernel said, wherever in aya's error chain its io::Error sits.
    let perm = |e: &(dyn std::error::Error + 'static)| {
        matches!(errno(e), Some(libc::EPERM | libc::EACCES)).then_some(XdpError::NoPrivilege {
            what: "loading an XDP program",
            caps: "CAP_BPF and CAP_NET_ADMIN",
        })
    };
    let mut ebpf = aya::Ebpf::load(PROGRAM_OBJECT).map_err(|e| {
        perm(&e).unwrap_or_else(|| XdpError::Program(format!("loading: {}", chain(&e))))
    })?;
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| XdpError::Program(format!("no program {PROGRAM} in the object")))?
        .try_into()
        .map_err(|e| XdpError::Program(chain(&e)))?;
    prog.load().map_err(|e| {
        perm(&e).unwrap_or_else(|| XdpError::Program(format!("verifier: {}", chain(&e))))
    })?;
    let tries: &[(XdpFlags, bool)] = match config.attach {
        Attach::Native => &[(XdpFlags::DRV_MODE, true)],
        Attach::Generic => &[(XdpFlags::SKB_MODE, false)],
        Attach::NativeOrGeneric => &[(XdpFlags::DRV_MODE, true), (XdpFlags::SKB_MODE, false)],
    };
    let mut native = None;
    let mut last = String::new();
    for &(flags, is_native) in tries {
        match prog.attach(iface, flags) {
            Ok(_) => {
                native = Some(is_native);
                break;
            }
            Err(e) => {
                if matches!(errno(&e), Some(libc::EBUSY | libc::EEXIST)) {
                    return Err(XdpError::Busy {
                        iface: iface.into(),
                    });
                }
                if let Some(p) = perm(&e) {
                    return Err(p);
                }
                last = chain(&e);
            }
        }
    }
    let Some(native) = native else {
        return Err(XdpError::Program(format!("attaching to {iface}: {last}")));
    };
    Ok(Program { ebpf, native })
}
