//! A UMEM shared by sockets on several queues (`XDP_SHARED_UMEM`, `XDP_UMEM_REG`), and the
//! programs its sockets attached.

use std::sync::{Arc, Mutex, Weak};

use super::program::{Program, attach};
use super::{Config, XdpError, memlock, sys_err};
use crate::sys;

/// A UMEM: memory cut into frames that the kernel writes received frames into and reads sent frames
/// from, shared by the sockets opened on it
/// ([`XdpSocket::new_shared`](super::XdpSocket::new_shared)) on several queues of one interface or
/// of several (`XDP_SHARED_UMEM`; Linux 5.10 for another queue). Each socket takes a range of
/// frames of its own, given back when it drops (in copy mode: a zero-copy driver may use a closed
/// socket's frames until the kernel's deferred release, so those stay out of use until the UMEM
/// drops); the first registers the memory (`XDP_UMEM_REG`) and binds in the [`Mode`](super::Mode)
/// asked, the others share that registration and its mode. The sockets of one interface share its
/// redirect program, each in its queue's slot of the XSKMAP; the program is detached when the last
/// of them drops. A clone is the same UMEM.
#[derive(Clone, Debug)]
#[doc(alias("XDP_SHARED_UMEM", "XDP_UMEM_REG"))]
pub struct Umem {
    pub(super) memory: Arc<sys::xdp::Umem>,
    /// The programs its sockets attached, by interface index, while a socket uses one.
    programs: Arc<Mutex<Vec<Attached>>>,
}

/// A program one of a UMEM's sockets attached: the interface index, the program while a
/// socket holds it.
type Attached = (u32, Weak<Mutex<Program>>);

impl Umem {
    /// Maps `frame_count` frames of `frame_size` bytes (2048 or 4096), on 2 MiB boundaries with
    /// `MADV_HUGEPAGE`; locked (counted against `RLIMIT_MEMLOCK`) once a socket registers it.
    ///
    /// # Errors
    /// [`XdpError::Config`] for sizes the kernel refuses, [`XdpError::Memlock`] over the limit
    /// (without `CAP_IPC_LOCK`), [`XdpError::Io`] from `mmap`.
    pub fn new(frame_count: u32, frame_size: u32) -> Result<Umem, XdpError> {
        if !matches!(frame_size, 2048 | 4096) {
            return Err(XdpError::Config(format!(
                "frame size {frame_size}: 2048 or 4096"
            )));
        }
        if !(1..=1 << 20).contains(&frame_count) {
            return Err(XdpError::Config(format!(
                "{frame_count} frames: 1 to 1048576"
            )));
        }
        let need = u64::from(frame_count) * u64::from(frame_size);
        if !sys::process::has_cap_ipc_lock()
            && let Ok((Some(limit), _)) = sys::process::memlock_limit()
            && need > limit
        {
            return Err(memlock(need));
        }
        let memory = sys::xdp::Umem::new(frame_count, frame_size).map_err(sys_err("mmap(UMEM)"))?;
        Ok(Umem {
            memory: Arc::new(memory),
            programs: Arc::default(),
        })
    }

    /// Frames in all.
    pub fn frame_count(&self) -> u32 {
        self.memory.frame_count()
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.memory.frame_size()
    }

    /// Frames no socket holds.
    pub fn free_frames(&self) -> u32 {
        self.memory.free_frames()
    }

    /// The redirect program of `iface`: the one a socket on this UMEM attached, else a new one.
    pub(super) fn program(
        &self,
        iface: &str,
        ifindex: u32,
        config: &Config,
    ) -> Result<Arc<Mutex<Program>>, XdpError> {
        let mut programs = self
            .programs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        programs.retain(|(_, p)| p.strong_count() > 0);
        if let Some(p) = programs
            .iter()
            .find(|(i, _)| *i == ifindex)
            .and_then(|(_, p)| p.upgrade())
        {
            return Ok(p);
        }
        let p = Arc::new(Mutex::new(attach(iface, config)?));
        programs.push((ifindex, Arc::downgrade(&p)));
        Ok(p)
    }
}
