//! Where a measured thread runs. Benches, `zcnet tune` and the far side of `zcnet serve` pin the
//! two ends of a run to different CPUs (docs/measuring.md, "Pin the two ends": loopback
//! backlogs are per CPU, and unpinned ends on two CPUs reorder segments and retransmit).

/// Pins the calling thread to `cpu` when the machine has more than one.
pub fn pin(cpu: usize) {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    if zcnet::probe::features().host.cpus > 1 && set.set(cpu).is_ok() {
        let _ = sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// Pins the calling thread to one CPU for its lifetime and restores the old mask on drop.
pub struct Pinned(Option<nix::sched::CpuSet>);

impl Pinned {
    /// Pins the calling thread to `cpu` until the guard drops.
    pub fn to(cpu: usize) -> Pinned {
        use nix::sched::sched_getaffinity;
        let me = nix::unistd::Pid::from_raw(0);
        let old = sched_getaffinity(me).ok();
        pin(cpu);
        Pinned(old)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), old);
        }
    }
}
