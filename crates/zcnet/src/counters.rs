//! What every mechanism's `Counters` says in the same words.

/// The counters of one mechanism instance (a receiver, a sender, a cursor, a ring): every
/// mechanism's `counters()` returns a `Copy` struct implementing this, so that a report can ask
/// any of them how much really went without a copy.
pub trait ZeroCopyCounters: Copy {
    /// Bytes that really went zero-copy: mapped on receive, sent with completions not flagged
    /// copied, peeked without re-reading, taken from a ring without a copy.
    fn zero_copy_bytes(&self) -> u64;
    /// Bytes that were copied: by the copying path (copy mode, a threshold, a fallback) or by
    /// the kernel after all (completions flagged copied).
    fn copied_bytes(&self) -> u64;
    /// Calls or requests that fell back from zero-copy to copying (unmappable bytes read by
    /// `recv`, `ENOBUFS`, a copied-policy switch, a missing opcode).
    fn fallbacks(&self) -> u64;

    /// Share of the bytes accounted for that went zero-copy; `None` before any byte.
    fn zero_copy_share(&self) -> Option<f64> {
        let total = self.zero_copy_bytes() + self.copied_bytes();
        (total > 0).then(|| self.zero_copy_bytes() as f64 / total as f64)
    }
}
