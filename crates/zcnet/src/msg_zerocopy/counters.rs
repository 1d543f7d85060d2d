//! What a [`ZeroCopySender`](super::ZeroCopySender) has done so far ([`Counters`]).

/// What a [`ZeroCopySender`](super::ZeroCopySender) has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Send calls made with `MSG_ZEROCOPY` (each takes one completion id).
    pub loaned_calls: u64,
    /// Bytes sent by those calls.
    pub loaned_bytes: u64,
    /// Send calls made by copy (below the threshold, zero-copy off, or after `ENOBUFS`).
    pub copy_calls: u64,
    /// Bytes sent by copy.
    pub copy_bytes: u64,
    /// Zero-copy calls whose completion has arrived.
    pub completed_calls: u64,
    /// Completed calls the kernel flagged as copied (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied_calls: u64,
    /// `ENOBUFS` answers (optmem or locked-memory limit) that fell back to a copying send.
    pub enobufs_fallbacks: u64,
    /// Times the copied policy switched zero-copy off.
    pub policy_disables: u64,
    /// Other errors read from the error queue (ICMP errors for UDP, ...).
    pub queued_errors: u64,
    /// Times a wait for completions stalled and ran every CPU's deferred frees
    /// ([`crate::loan::kick_deferred_frees`]).
    pub deferred_kicks: u64,
    /// [`Mode::Auto`](super::Mode::Auto): the sends each way and why (zeros in the other modes).
    pub auto: crate::auto::AutoCounters,
}

impl Counters {
    /// Completed zero-copy calls not flagged copied, as a fraction of completed calls.
    pub fn not_copied_share(&self) -> Option<f64> {
        (self.completed_calls > 0).then(|| {
            (self.completed_calls - self.copied_calls) as f64 / self.completed_calls as f64
        })
    }
}

impl crate::ZeroCopyCounters for Counters {
    /// Bytes sent with `MSG_ZEROCOPY` whose completions were not flagged copied (estimated per
    /// call: calls flagged copied count their share of the zero-copy bytes; none before the
    /// first completion).
    fn zero_copy_bytes(&self) -> u64 {
        let share = self.not_copied_share().unwrap_or(0.0);
        (self.loaned_bytes as f64 * share) as u64
    }
    /// Bytes sent by copy, plus zero-copy bytes the kernel copied.
    fn copied_bytes(&self) -> u64 {
        self.copy_bytes + self.loaned_bytes - self.zero_copy_bytes()
    }
    /// `ENOBUFS` fallbacks and copied-policy switches.
    fn fallbacks(&self) -> u64 {
        self.enobufs_fallbacks + self.policy_disables
    }
}
