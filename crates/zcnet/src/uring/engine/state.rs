//! The completion state of one io_uring send request, without the ring: which CQEs it still
//! waits for, and what a CQE means for it. Pure logic, tested on fabricated CQEs.
//!
//! A zero-copy request gets a result CQE (bytes or `-errno`; `IORING_CQE_F_MORE` when a
//! notification will follow) and a notification CQE (`IORING_CQE_F_NOTIF`), in either order;
//! only when both were seen is the buffer free. A stream send cut short is submitted again for
//! the rest (one more result, maybe one more notification). A kernel before 6.2 refuses
//! `IORING_SEND_ZC_REPORT_USAGE` with `EINVAL`: the request is sent again without it. A
//! zero-copy request refused for locked memory (`ENOMEM`, `ENOBUFS`: the pages a zero-copy send
//! pins count against `RLIMIT_MEMLOCK`, `ulimit -l`) is sent again by copy, as `MSG_ZEROCOPY`
//! does on `ENOBUFS`: never a lost send for want of a limit.

use std::num::NonZeroI32;

use crate::sys::abi;

/// `EIO`, for an errno of 0 where one is due (never from the kernel).
pub(super) const EIO: NonZeroI32 = NonZeroI32::new(libc::EIO).unwrap();

/// What to do with a request after a CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// More CQEs are due: keep the buffer in the ring.
    Wait,
    /// Submit the unsent rest (or the same request without usage reports); one more result CQE
    /// is now due.
    Resubmit,
    /// Every CQE was seen: the buffer is free.
    Done,
}

/// The request-level facts a CQE is interpreted with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    /// Bytes of the buffer.
    pub len: usize,
    /// Sent with a zero-copy opcode.
    pub zero_copy: bool,
    /// `IORING_SEND_ZC_REPORT_USAGE` asked for.
    pub report_usage: bool,
    /// Linked in an [`Order`] chain: `-ECANCELED` means "the chain broke before this request"
    /// and the request is sent again.
    pub linked: bool,
}

/// One request's progress.
///
/// Each submission of the request has a generation, carried in the SQE's `user_data` beside the
/// ring's key, so that every CQE names the submission it is for. That matters for
/// notifications: a zero-copy request cancelled by its broken link (`-ECANCELED`) gets a result
/// without `F_MORE` and yet a notification after it (seen on Linux 6.18: the notification made
/// at prep time is flushed when the cancelled request is freed). Such a notification must not
/// count for the next submission of the same buffer, nor for the next buffer in the same slot:
/// it would stand in for that submission's own notification, and the buffer would come back
/// while the kernel still held its pages. A cancelled request never ran, so the kernel never
/// read its buffer; its stray notification is ignored.
///
/// Laid out (`repr(C)`) with what a push writes and a CQE or the finish of the common case reads
/// in the first 24 bytes (which end the slot's first cache line, see [`super::request::Held`]),
/// and the list of older owed notifications, nearly always empty and then not read, after them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct State {
    /// The generation of the current submission.
    generation: u32,
    /// Bytes the kernel accepted so far (a request's buffer is at most 4 GiB).
    sent: u32,
    /// The first error (a positive errno).
    error: Option<NonZeroI32>,
    /// Not sent (or not all of it) because an earlier request of its stream failed: that
    /// request's errno.
    abandoned: Option<NonZeroI32>,
    /// Whether the current submission's result CQE is still to come.
    result_due: bool,
    /// The current submission's result announced a notification (`F_MORE`) not yet seen.
    owed: bool,
    /// Sent again without `REPORT_USAGE` after the kernel refused it.
    usage_retry: bool,
    /// Sent again by copy after the kernel refused to pin its pages (`ENOMEM`/`ENOBUFS`).
    copy_retry: bool,
    /// Whether `owed_old` holds any generation (kept by [`State::owe_old`] and
    /// [`State::take_old`]): read instead of it, which lies beyond the first cache line of a
    /// slot.
    owes_old: bool,
    /// The current submission's notification came before its result: what it said (copied).
    early: Option<bool>,
    /// What the notifications said about copying (`None`: no report).
    copied: Option<bool>,
    /// Earlier submissions (cut short, sent again) whose announced notifications are still to
    /// come.
    owed_old: Vec<u32>,
}

// What a CQE of the common case reads and a push writes in the first 24 bytes, the list of
// older owed notifications after them (see `Held`, whose first cache line holds the rest).
const _: () = assert!(std::mem::offset_of!(State, owed_old) == 24);

impl State {
    /// A request about to be submitted as generation `generation`: one result CQE due.
    pub fn new(generation: u32) -> State {
        State {
            sent: 0,
            generation,
            result_due: true,
            owed: false,
            early: None,
            owes_old: false,
            owed_old: Vec::new(),
            error: None,
            copied: None,
            usage_retry: false,
            copy_retry: false,
            abandoned: None,
        }
    }

    /// Bytes the kernel accepted so far.
    /// The generation of the current submission.
    #[inline(always)]
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Sent again without `REPORT_USAGE` after the kernel refused it.
    #[inline(always)]
    pub fn usage_retry(&self) -> bool {
        self.usage_retry
    }

    /// Sent again by copy after the kernel refused to pin its pages (`ENOMEM`/`ENOBUFS`).
    #[inline(always)]
    pub fn copy_retry(&self) -> bool {
        self.copy_retry
    }

    /// What the notifications said about copying (`None`: no report).
    #[inline(always)]
    pub fn copied(&self) -> Option<bool> {
        self.copied
    }

    pub fn sent(&self) -> usize {
        self.sent as usize
    }

    /// The first error (a positive errno).
    pub fn error(&self) -> Option<i32> {
        self.error.map(NonZeroI32::get)
    }

    /// The errno of the earlier request of its stream that failed, when this one was not sent
    /// (or not all of it) for it.
    pub fn abandoned(&self) -> Option<i32> {
        self.abandoned.map(NonZeroI32::get)
    }

    /// Owes the notification of the earlier submission `generation`.
    fn owe_old(&mut self, generation: u32) {
        self.owed_old.push(generation);
        self.owes_old = true;
    }

    /// Takes the notification of the earlier submission `generation` off what is owed;
    /// whether it was owed.
    fn take_old(&mut self, generation: u32) -> bool {
        let Some(i) = self.owed_old.iter().position(|&g| g == generation) else {
            return false;
        };
        self.owed_old.swap_remove(i);
        self.owes_old = !self.owed_old.is_empty();
        true
    }

    /// Records `errno` as the error, unless one came first.
    pub fn fail(&mut self, errno: i32) {
        if self.error.is_none() {
            self.error = Some(NonZeroI32::new(errno).unwrap_or(EIO));
        }
    }

    /// Makes this the state of a new request about to be submitted as generation `generation`,
    /// as [`State::new`] would, in place: the list of owed notifications keeps its allocation.
    #[inline(always)]
    pub fn reset(&mut self, generation: u32) {
        if self.owes_old {
            self.owed_old.clear();
            self.owes_old = false;
        }
        self.sent = 0;
        self.generation = generation;
        self.result_due = true;
        self.owed = false;
        self.early = None;
        self.error = None;
        self.copied = None;
        self.usage_retry = false;
        self.copy_retry = false;
        self.abandoned = None;
    }

    /// The two CQEs nearly every request gets, decided without the general machine: its
    /// current submission's result when it completes the buffer (announcing a notification
    /// with `F_MORE`, or ending a copy), and the notification so announced. `None` for every
    /// other CQE, which [`State::on_cqe`] decides; where this answers, the step and the state
    /// after it are `on_cqe`'s (held to that by a proptest below). `usage_refused` is only
    /// read: a request that could learn it (sent again without usage reports) goes the
    /// general way.
    #[inline(always)]
    pub fn on_cqe_common(
        &mut self,
        req: Request,
        generation: u32,
        res: i32,
        flags: u32,
        usage_refused: bool,
    ) -> Option<Step> {
        if generation != self.generation || self.owes_old {
            return None;
        }
        // A linked request's result also tells its stream's order: the caller sends those the
        // general way (notifications say nothing about the order).
        debug_assert!(
            !req.linked || flags & abi::IORING_CQE_F_NOTIF != 0,
            "a stream's result goes the general way"
        );
        if flags & abi::IORING_CQE_F_NOTIF != 0 {
            // `owed` is set only with the result in (and no early notification): the request
            // is settled once its notification is.
            if !self.owed {
                return None;
            }
            self.owed = false;
            let copied = res as u32 & abi::IORING_NOTIF_USAGE_ZC_COPIED != 0;
            self.notified(req, copied, usage_refused);
            return Some(Step::Done);
        }
        if !self.result_due
            || self.early.is_some()
            || self.usage_retry
            || res <= 0
            || (self.sent as usize + res as usize) < req.len
        {
            return None;
        }
        self.result_due = false;
        self.sent = self.sent.saturating_add(res as u32);
        self.owed = flags & abi::IORING_CQE_F_MORE != 0;
        Some(if self.owed { Step::Wait } else { Step::Done })
    }

    /// Gives up the send that is due (never submitted, or a resubmission that will not be made)
    /// because an earlier request of the stream failed with `errno`; the buffer is free once the
    /// notifications already announced have come.
    pub fn abandon(&mut self, errno: i32) -> Step {
        self.result_due = false;
        self.early = None;
        self.abandoned = Some(NonZeroI32::new(errno).unwrap_or(EIO));
        self.status()
    }

    /// The resubmission [`State::on_cqe`] asked for could not be queued (the submission
    /// failed with `errno`): the result it was due will not come, and the request ends with
    /// that error once the notifications already announced have come.
    pub fn not_resubmitted(&mut self, errno: i32) -> Step {
        self.result_due = false;
        self.early = None;
        self.fail(errno);
        self.status()
    }

    /// Whether every CQE announced so far was seen (nothing of this request is in the kernel).
    pub fn settled(&self) -> bool {
        debug_assert_eq!(self.owes_old, !self.owed_old.is_empty());
        !self.result_due && !self.owed && self.early.is_none() && !self.owes_old
    }

    fn status(&self) -> Step {
        if self.settled() {
            Step::Done
        } else {
            Step::Wait
        }
    }

    #[inline(always)]
    fn notified(&mut self, req: Request, copied: bool, usage_refused: bool) {
        if req.report_usage && !usage_refused {
            self.copied = Some(self.copied.unwrap_or(false) | copied);
        }
    }

    /// Applies one CQE (`res`, `flags`) of submission `generation`. `usage_refused` is the ring's
    /// knowledge that the kernel refuses usage reports; a request that learns it sets it.
    pub fn on_cqe(
        &mut self,
        req: Request,
        generation: u32,
        res: i32,
        flags: u32,
        usage_refused: &mut bool,
    ) -> Step {
        if flags & abi::IORING_CQE_F_NOTIF != 0 {
            let copied = res as u32 & abi::IORING_NOTIF_USAGE_ZC_COPIED != 0;
            if generation == self.generation && self.owed {
                self.owed = false;
                self.notified(req, copied, *usage_refused);
            } else if generation == self.generation && self.result_due && self.early.is_none() {
                // Before its result: the result says whether it was announced.
                self.early = Some(copied);
            } else if self.owes_old && self.take_old(generation) {
                self.notified(req, copied, *usage_refused);
            }
            // Else a notification nothing announced (a cancelled request's): ignored.
            return self.status();
        }
        if generation != self.generation || !self.result_due {
            // A result for no submission in flight: a kernel or bookkeeping bug; nothing in it
            // can be trusted, and nothing is freed by it.
            return self.status();
        }
        self.result_due = false;
        match (flags & abi::IORING_CQE_F_MORE != 0, self.early.take()) {
            (true, Some(copied)) => self.notified(req, copied, *usage_refused),
            (true, None) => self.owed = true,
            // Not announced: a notification that came first was a stray.
            (false, _) => {}
        }
        let resubmit = if res == -libc::ECANCELED && req.linked {
            // The chain broke before this request ran: it goes again, in its place.
            true
        } else if res == -libc::EINVAL
            && req.zero_copy
            && req.report_usage
            && !*usage_refused
            && self.sent == 0
        {
            // Kernels before 6.2 refuse IORING_SEND_ZC_REPORT_USAGE: send again without it.
            self.usage_retry = true;
            true
        } else if (res == -libc::ENOMEM || res == -libc::ENOBUFS)
            && req.zero_copy
            && !self.copy_retry
            && self.sent == 0
        {
            // The pages could not be pinned (RLIMIT_MEMLOCK): send the same bytes by copy.
            self.copy_retry = true;
            true
        } else if res < 0 {
            // `wrapping_neg`: a result of `i32::MIN` (no errno, but not a count either) must not
            // panic the completion path.
            self.fail(res.wrapping_neg());
            false
        } else {
            self.sent = self.sent.saturating_add(res as u32);
            if self.usage_retry {
                *usage_refused = true;
            }
            // A stream send cut short (a signal, or no MSG_WAITALL): send the rest.
            res > 0 && (self.sent as usize) < req.len
        };
        if resubmit {
            if self.owed {
                self.owe_old(self.generation);
                self.owed = false;
            }
            self.generation = self.generation.wrapping_add(1);
            self.result_due = true;
            Step::Resubmit
        } else {
            self.status()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MORE: u32 = abi::IORING_CQE_F_MORE;
    const NOTIF: u32 = abi::IORING_CQE_F_NOTIF;
    const ZC: Request = Request {
        len: 1000,
        zero_copy: true,
        report_usage: true,
        linked: false,
    };

    /// Applies `(generation, res, flags)` CQEs to a request first submitted as generation 0.
    fn run_as(req: Request, cqes: &[(u32, i32, u32)]) -> (Vec<Step>, State, bool) {
        let mut s = State::new(0);
        let mut refused = false;
        let steps = cqes
            .iter()
            .map(|&(generation, res, flags)| s.on_cqe(req, generation, res, flags, &mut refused))
            .collect();
        (steps, s, refused)
    }

    fn run(cqes: &[(u32, i32, u32)]) -> (Vec<Step>, State, bool) {
        run_as(ZC, cqes)
    }

    #[test]
    fn result_then_notification_and_the_reverse_both_free_once() {
        let copied = abi::IORING_NOTIF_USAGE_ZC_COPIED as i32;
        let (steps, s, _) = run(&[(0, 1000, MORE), (0, copied, NOTIF)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!((s.sent(), s.copied, s.error()), (1000, Some(true), None));
        let (steps, s, _) = run(&[(0, 0, NOTIF), (0, 1000, MORE)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!(s.copied, Some(false));
    }

    #[test]
    fn a_resubmission_that_could_not_be_queued_ends_with_its_error_after_owed_notifications() {
        // Refused for locked memory after its result announced a notification: sent again by
        // copy, but the submission fails. The owed notification still holds the buffer.
        let (steps, mut s, _) = run(&[(0, -libc::ENOBUFS, MORE)]);
        assert_eq!(steps, [Step::Resubmit]);
        assert_eq!(s.not_resubmitted(libc::EBADF), Step::Wait);
        let mut refused = false;
        assert_eq!(s.on_cqe(ZC, 0, 0, NOTIF, &mut refused), Step::Done);
        assert_eq!((s.sent(), s.error()), (0, Some(libc::EBADF)));
        // Without a notification owed, the buffer is free at once, with the error.
        let (steps, mut s, _) = run(&[(0, -libc::ENOBUFS, 0)]);
        assert_eq!(steps, [Step::Resubmit]);
        assert_eq!(s.not_resubmitted(libc::EBADF), Step::Done);
        assert_eq!(s.error(), Some(libc::EBADF));
        // A result for the submission that never went in is not taken for anything.
        assert_eq!(s.on_cqe(ZC, 1, 1000, 0, &mut refused), Step::Done);
        assert_eq!(s.sent(), 0);
    }

    #[test]
    fn a_failed_request_with_f_more_waits_for_its_notification() {
        let (steps, s, _) = run(&[(0, -libc::ECONNREFUSED, MORE), (0, 0, NOTIF)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!((s.sent(), s.error()), (0, Some(libc::ECONNREFUSED)));
        let (steps, s, _) = run(&[(0, -libc::EPIPE, 0)]);
        assert_eq!(steps, [Step::Done]);
        assert_eq!(s.copied, None);
    }

    #[test]
    fn a_short_stream_send_is_resubmitted_until_whole() {
        // The first submission's notification may come after the second's result.
        let (steps, s, _) = run(&[(0, 400, MORE), (1, 600, MORE), (0, 0, NOTIF), (1, 0, NOTIF)]);
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Wait, Step::Done]);
        assert_eq!((s.sent(), s.generation), (1000, 1));
        // Nor is the buffer free when the second's notification came and the first's has not.
        let (steps, _, _) = run(&[(0, 400, MORE), (1, 600, MORE), (1, 0, NOTIF), (0, 0, NOTIF)]);
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Wait, Step::Done]);
    }

    #[test]
    fn refused_usage_reports_are_retried_without_them_and_remembered() {
        let (steps, s, refused) = run(&[(0, -libc::EINVAL, 0), (1, 1000, MORE), (1, 0, NOTIF)]);
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Done]);
        assert!(refused && s.usage_retry);
        assert_eq!((s.sent(), s.copied, s.error()), (1000, None, None));
    }

    #[test]
    fn a_request_refused_for_locked_memory_is_sent_again_by_copy() {
        let (steps, s, _) = run(&[(0, -libc::ENOMEM, 0), (1, 1000, 0)]);
        assert_eq!(steps, [Step::Resubmit, Step::Done]);
        assert!(s.copy_retry);
        assert_eq!((s.sent(), s.error(), s.copied), (1000, None, None));
        // Refused again by copy: the error stands, no loop.
        let (steps, s, _) = run(&[(0, -libc::ENOBUFS, 0), (1, -libc::ENOBUFS, 0)]);
        assert_eq!(steps, [Step::Resubmit, Step::Done]);
        assert_eq!(s.error(), Some(libc::ENOBUFS));
    }

    #[test]
    fn a_copy_request_is_done_at_its_result() {
        let req = Request {
            zero_copy: false,
            report_usage: false,
            ..ZC
        };
        let (steps, s, _) = run_as(req, &[(0, 1000, 0)]);
        assert_eq!(steps, [Step::Done]);
        assert_eq!(s.copied, None);
    }

    #[test]
    fn a_cancelled_requests_stray_notification_frees_nothing() {
        let linked = Request { linked: true, ..ZC };
        let copied = abi::IORING_NOTIF_USAGE_ZC_COPIED as i32;
        // Cancelled (no F_MORE), its notification after; sent again, the second submission's
        // result comes: the buffer waits for the second submission's own notification.
        let (steps, s, _) = run_as(
            linked,
            &[
                (0, -libc::ECANCELED, 0),
                (0, copied, NOTIF),
                (1, 1000, MORE),
                (1, 0, NOTIF),
            ],
        );
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Wait, Step::Done]);
        // The stray said "copied"; the real one did not.
        assert_eq!(s.copied, Some(false));
        // The stray before the cancellation's result, then the same.
        let (steps, _, _) = run_as(
            linked,
            &[
                (0, copied, NOTIF),
                (0, -libc::ECANCELED, 0),
                (1, 1000, MORE),
                (1, 0, NOTIF),
            ],
        );
        assert_eq!(steps, [Step::Wait, Step::Resubmit, Step::Wait, Step::Done]);
        // Older kernels announce the cancelled request's notification with F_MORE.
        let (steps, _, _) = run_as(
            linked,
            &[
                (0, -libc::ECANCELED, MORE),
                (1, 1000, MORE),
                (1, 0, NOTIF),
                (0, 0, NOTIF),
            ],
        );
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Wait, Step::Done]);
    }

    #[test]
    fn a_result_or_notification_of_no_submission_in_flight_changes_nothing() {
        let (steps, s, _) = run(&[
            (0, 1000, MORE),
            (0, 1000, MORE),
            (7, 0, NOTIF),
            (0, 0, NOTIF),
        ]);
        assert_eq!(steps, [Step::Wait, Step::Wait, Step::Wait, Step::Done]);
        assert_eq!(s.sent(), 1000);
    }

    /// A CQE for the proptest below: its submission (of the few a request has), result and
    /// flags, drawn so that the common cases and their near misses both come up.
    fn cqe() -> impl proptest::strategy::Strategy<Value = (u32, i32, u32)> {
        use proptest::prelude::*;
        let res = prop_oneof![
            4 => Just(1000),
            2 => 0i32..1200,
            1 => Just(-libc::ECANCELED),
            1 => Just(-libc::EINVAL),
            1 => Just(-libc::ENOBUFS),
            1 => Just(-libc::EPIPE),
            1 => Just(abi::IORING_NOTIF_USAGE_ZC_COPIED as i32),
        ];
        let flags = prop_oneof![Just(0), Just(MORE), Just(NOTIF)];
        (0u32..3, res, flags)
    }

    /// What happens to a request next in the proptest below: a CQE, or the ring giving up its
    /// due send (its stream broke) or failing to resubmit it.
    #[derive(Clone, Copy, Debug)]
    enum Event {
        Cqe(u32, i32, u32),
        Abandon,
        NotResubmitted,
    }

    fn event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![
            10 => cqe().prop_map(|(g, res, flags)| Event::Cqe(g, res, flags)),
            1 => Just(Event::Abandon),
            1 => Just(Event::NotResubmitted),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Wherever the common path answers, it answers as the general machine does: the same
        /// step and the same state after it, and the ring's usage knowledge untouched. And a
        /// state reset in place is a new one, whatever came before.
        #[test]
        fn the_common_path_decides_as_the_general_machine(
            zero_copy in proptest::prelude::any::<bool>(),
            report_usage in proptest::prelude::any::<bool>(),
            linked in proptest::prelude::any::<bool>(),
            refused in proptest::prelude::any::<bool>(),
            events in proptest::collection::vec(event(), 1..14),
        ) {
            use proptest::prop_assert_eq;
            let req = Request { len: 1000, zero_copy, report_usage, linked };
            let mut s = State::new(0);
            let mut usage_refused = refused;
            for event in events {
                let (generation, res, flags) = match event {
                    Event::Cqe(generation, res, flags) => (generation, res, flags),
                    Event::Abandon => {
                        s.abandon(libc::ECONNRESET);
                        continue;
                    }
                    Event::NotResubmitted => {
                        s.not_resubmitted(libc::EBADF);
                        continue;
                    }
                };
                let mut common = s.clone();
                let known = usage_refused;
                // A stream's results go the general way (the ring's caller sees to it).
                let got = if linked && flags & NOTIF == 0 {
                    None
                } else {
                    common.on_cqe_common(req, generation, res, flags, known)
                };
                let step = s.on_cqe(req, generation, res, flags, &mut usage_refused);
                if let Some(got) = got {
                    prop_assert_eq!(got, step);
                    prop_assert_eq!(&common, &s);
                    prop_assert_eq!(known, usage_refused);
                }
            }
            let mut reset = s.clone();
            reset.reset(5);
            prop_assert_eq!(reset, State::new(5));
        }
    }

    #[test]
    fn the_common_path_takes_the_usual_pair_and_leaves_the_rest() {
        let mut refused = false;
        // Result then notification: both on the common path.
        let mut s = State::new(0);
        assert_eq!(s.on_cqe_common(ZC, 0, 1000, MORE, false), Some(Step::Wait));
        assert_eq!(s.on_cqe_common(ZC, 0, 0, NOTIF, false), Some(Step::Done));
        assert_eq!((s.sent(), s.copied), (1000, Some(false)));
        // A copy's whole result ends it.
        let copy = Request {
            zero_copy: false,
            ..ZC
        };
        let mut s = State::new(0);
        assert_eq!(s.on_cqe_common(copy, 0, 1000, 0, false), Some(Step::Done));
        // A short result, an error, an early notification, another generation: the general way.
        let mut s = State::new(0);
        assert_eq!(s.on_cqe_common(ZC, 0, 400, MORE, false), None);
        assert_eq!(s.on_cqe_common(ZC, 0, -libc::EPIPE, MORE, false), None);
        assert_eq!(s.on_cqe_common(ZC, 0, 0, NOTIF, false), None);
        assert_eq!(s.on_cqe_common(ZC, 1, 1000, MORE, false), None);
        assert_eq!(s, State::new(0));
        // After a resubmission the old notification is owed: the general way until it came.
        assert_eq!(s.on_cqe(ZC, 0, 400, MORE, &mut refused), Step::Resubmit);
        assert_eq!(s.on_cqe_common(ZC, 1, 600, MORE, false), None);
    }
}
