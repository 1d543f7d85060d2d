//! What a sender does with each buffer the ring hands back.

use std::collections::VecDeque;

use crate::auto::Decider;
use crate::loan::Returned;
use crate::uring::config::Counters;
#[cfg(test)]
use crate::uring::engine::SendOp;
use crate::uring::engine::{Finish, Finished, Resent, Way};

/// What a sender does with each buffer the ring hands back: counts it, tells the decider what its
/// notification said, and queues it for [`UringSender::returned`](super::UringSender::returned), or
/// has the ring send it again from its slot where `again` says so
/// ([`UringSender::resend_returned`](super::UringSender::resend_returned)).
///
/// The counts every buffer adds one to (`returned`, and `requests` for one sent again) are `taken`
/// and `resent`, added to the counters once, when the collection ends (also should `again` panic).
pub(super) struct Collect<'a, B, F> {
    pub(super) counters: &'a mut Counters,
    pub(super) auto: Option<&'a mut Decider>,
    pub(super) returned: &'a mut VecDeque<Returned<B>>,
    /// Buffers `again` kept that [`Finish::way`] sent elsewhere (an edge of
    /// [`Mode::Auto`](crate::uring::Mode::Auto)'s rounds):
    /// [`UringSender::resend_returned`](super::UringSender::resend_returned) sends them through
    /// [`UringSender::send`](super::UringSender::send).
    pub(super) elsewhere: &'a mut Vec<Returned<B>>,
    /// The next finished buffer is one of those.
    pub(super) defer_next: bool,
    /// Whether a buffer may go elsewhere: not for a sender that used `send_to`, whose `send`
    /// would not know where it goes (its rounds' edges are then judged with the completions
    /// of the collection not yet read).
    pub(super) can_defer: bool,
    /// Zero-copy sends use the registered pool.
    pub(super) fixed: bool,
    pub(super) again: F,
    /// How many went again from their slots.
    pub(super) resent: usize,
    /// How many came back (went again or not), and how many this collection takes at most.
    pub(super) taken: usize,
    pub(super) limit: usize,
}

impl<B, F> Drop for Collect<'_, B, F> {
    fn drop(&mut self) {
        self.counters.returned += self.taken as u64;
        self.counters.requests += self.resent as u64;
        self.counters.resent_in_place += self.resent as u64;
    }
}

impl<B, F: FnMut(&mut B) -> bool> Finish<B> for Collect<'_, B, F> {
    #[inline(always)]
    fn finish(&mut self, f: Finished<B>) {
        let (sent, copied) = (f.sent, f.copied);
        let (failed, memlock) = (f.error.is_some(), f.memlock_fallback);
        let r = Returned {
            buf: f.buf,
            sent,
            error: f.error,
            zero_copy: f.zero_copy,
            copied,
        };
        if self.defer_next {
            self.defer_next = false;
            self.elsewhere.push(r);
        } else {
            // The buffer goes into its slot first, before the calls below (the decider's)
            // would have it kept on the stack across them.
            push_back_in_place(self.returned, r);
        }
        self.count(sent, failed, memlock, copied);
    }

    /// [`Mode::Auto`](crate::uring::Mode::Auto) decides per buffer, as
    /// [`UringSender::send`](super::UringSender::send) does, from the same slot; at the edge of a
    /// round that a pair measures, the buffer goes through `send` instead, which takes the
    /// completions queued first so that their cost counts in the round that chose their way (issue
    /// 63: the in-place resend was off in `Mode::Auto`, which fell to 0.51-0.76 of zc-fixed while
    /// choosing zero copy 99 % of the time).
    #[inline(always)]
    fn way(&mut self, len: usize) -> Way {
        let Some(d) = self.auto.as_deref_mut() else {
            return Way::AsBefore;
        };
        if self.can_defer && d.edge_is_measured(len) {
            self.defer_next = true;
            return Way::Elsewhere;
        }
        if d.zero_copy(len) {
            Way::ZeroCopy { fixed: self.fixed }
        } else {
            Way::Copy
        }
    }

    #[inline(always)]
    fn full(&self) -> bool {
        self.taken >= self.limit
    }

    #[inline(always)]
    fn again(&mut self, buf: &mut B) -> bool {
        (self.again)(buf)
    }

    #[inline(always)]
    fn resent(&mut self, r: Resent) {
        self.count(r.sent, false, r.memlock_fallback, r.copied);
        let c = &mut *self.counters;
        c.zero_copy_requests += u64::from(r.op.zero_copy());
        c.fixed_requests += u64::from(r.fixed);
        self.resent += 1;
    }
}

impl<B, F> Collect<'_, B, F> {
    /// Counts a buffer back: `sent` bytes, whether it `failed`, went by copy after a refused
    /// pin (`memlock`), and what the kernel said of copying.
    #[inline(always)]
    fn count(&mut self, sent: usize, failed: bool, memlock: bool, copied: Option<bool>) {
        self.taken += 1;
        let c = &mut *self.counters;
        c.bytes += sent as u64;
        c.errors += u64::from(failed);
        c.memlock_fallbacks += u64::from(memlock);
        match copied {
            Some(true) => {
                c.copied += 1;
                if let Some(d) = &mut self.auto {
                    d.copied();
                }
            }
            Some(false) => {
                c.not_copied += 1;
                c.not_copied_bytes += sent as u64;
                if let Some(d) = &mut self.auto {
                    d.not_copied();
                }
            }
            None => {}
        }
    }
}

/// `q.push_back(x)`, storing `x` straight into its slot when `q` has room. `push_back` may grow,
/// which is a call: the compiler keeps the value in a stack slot across it, written field by
/// field, and copies it into place with loads wider than those stores, which the CPU cannot
/// forward (a store-forwarding stall per buffer; `perf annotate` of the sender's `finish` put
/// 58 % of its samples on one such load, issue 51). Growing is out of line.
#[inline(always)]
fn push_back_in_place<T>(q: &mut VecDeque<T>, x: T) {
    #[cold]
    #[inline(never)]
    fn grow<T>(q: &mut VecDeque<T>, x: T) {
        q.push_back(x);
    }
    if q.len() < q.capacity() {
        q.push_back(x);
    } else {
        grow(q, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn finished(buf: u32, sent: usize, error: bool, copied: Option<bool>) -> Finished<u32> {
        Finished {
            buf,
            sent,
            error: error.then(|| io::Error::from_raw_os_error(libc::ECONNRESET)),
            zero_copy: copied.is_some(),
            memlock_fallback: false,
            copied,
        }
    }

    /// A collection of at most `limit` buffers into `returned`, keeping none to send again.
    fn collect<'a>(
        counters: &'a mut Counters,
        returned: &'a mut VecDeque<Returned<u32>>,
        elsewhere: &'a mut Vec<Returned<u32>>,
        limit: usize,
    ) -> Collect<'a, u32, impl FnMut(&mut u32) -> bool> {
        Collect {
            counters,
            auto: None,
            returned,
            elsewhere,
            defer_next: false,
            can_defer: true,
            fixed: false,
            again: |_: &mut u32| false,
            resent: 0,
            taken: 0,
            limit,
        }
    }

    #[test]
    fn push_back_in_place_keeps_the_order_with_and_without_room() {
        let mut q = VecDeque::with_capacity(2);
        for i in 0..9 {
            push_back_in_place(&mut q, i);
        }
        assert_eq!(
            q.into_iter().collect::<Vec<_>>(),
            (0..9).collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_buffer_back_is_counted_once_and_queued_in_order() {
        let (mut counters, mut returned, mut elsewhere) =
            (Counters::default(), VecDeque::new(), Vec::new());
        let mut c = collect(&mut counters, &mut returned, &mut elsewhere, usize::MAX);
        c.finish(finished(1, 100, false, Some(false)));
        c.finish(finished(2, 40, true, None));
        c.finish(finished(3, 200, false, Some(true)));
        c.resent(Resent {
            sent: 300,
            memlock_fallback: true,
            copied: Some(false),
            op: SendOp::SendZc,
            fixed: true,
        });
        drop(c);
        let order: Vec<u32> = returned.iter().map(|r| r.buf).collect();
        assert_eq!(order, [1, 2, 3]);
        assert!(returned[1].error.is_some() && returned[1].sent == 40);
        assert!(elsewhere.is_empty());
        // Four came back, one of them went again from its slot: one more request.
        assert_eq!(counters.returned, 4);
        assert_eq!(counters.requests, 1);
        assert_eq!(counters.resent_in_place, 1);
        assert_eq!(
            (counters.zero_copy_requests, counters.fixed_requests),
            (1, 1)
        );
        assert_eq!(counters.bytes, 100 + 40 + 200 + 300);
        assert_eq!(counters.errors, 1);
        assert_eq!(counters.memlock_fallbacks, 1);
        assert_eq!((counters.copied, counters.not_copied), (1, 2));
        assert_eq!(counters.not_copied_bytes, 100 + 300);
    }

    #[test]
    fn a_collection_is_full_at_its_limit_and_counts_even_if_it_ends_early() {
        let (mut counters, mut returned, mut elsewhere) =
            (Counters::default(), VecDeque::new(), Vec::new());
        {
            let mut c = collect(&mut counters, &mut returned, &mut elsewhere, 2);
            c.finish(finished(1, 10, false, None));
            assert!(!c.full());
            c.finish(finished(2, 10, false, None));
            assert!(c.full());
            // Dropped here, as a panic in `again` would drop it: its counts go in.
        }
        assert_eq!(counters.returned, 2);
        assert_eq!(returned.len(), 2);
    }

    #[test]
    fn without_auto_a_buffer_goes_again_as_it_went() {
        let (mut counters, mut returned, mut elsewhere) =
            (Counters::default(), VecDeque::new(), Vec::new());
        let mut c = collect(&mut counters, &mut returned, &mut elsewhere, usize::MAX);
        assert_eq!(c.way(8000), Way::AsBefore);
        let mut buf = 7;
        assert!(!c.again(&mut buf), "this collection keeps none");
    }
}
