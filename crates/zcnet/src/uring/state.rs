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

use crate::sys::abi;

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
}

/// One request's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State {
    /// Bytes the kernel accepted so far.
    pub sent: usize,
    /// Result CQEs still to come.
    results: u32,
    /// Notifications announced by `F_MORE` minus notifications seen: a notification that
    /// arrives before its result makes this -1 for a while.
    notifs: i32,
    /// The first error (a positive errno).
    pub error: Option<i32>,
    /// What the notifications said about copying (`None`: no report).
    pub copied: Option<bool>,
    /// Sent again without `REPORT_USAGE` after the kernel refused it.
    pub usage_retry: bool,
    /// Sent again by copy after the kernel refused to pin its pages (`ENOMEM`/`ENOBUFS`).
    pub copy_retry: bool,
}

impl State {
    /// A request just submitted: one result CQE due.
    pub fn new() -> State {
        State {
            sent: 0,
            results: 1,
            notifs: 0,
            error: None,
            copied: None,
            usage_retry: false,
            copy_retry: false,
        }
    }

    /// Applies one CQE (`res`, `flags`). `usage_refused` is the ring's knowledge that the
    /// kernel refuses usage reports; a request that learns it sets it.
    pub fn on_cqe(&mut self, req: Request, res: i32, flags: u32, usage_refused: &mut bool) -> Step {
        let mut resubmit = false;
        if flags & abi::IORING_CQE_F_NOTIF != 0 {
            self.notifs -= 1;
            if req.report_usage && !*usage_refused {
                let copied = res as u32 & abi::IORING_NOTIF_USAGE_ZC_COPIED != 0;
                self.copied = Some(self.copied.unwrap_or(false) | copied);
            }
        } else {
            self.results = self.results.saturating_sub(1);
            if flags & abi::IORING_CQE_F_MORE != 0 {
                self.notifs += 1;
            }
            if res == -libc::EINVAL
                && req.zero_copy
                && req.report_usage
                && !*usage_refused
                && self.sent == 0
            {
                // Kernels before 6.2 refuse IORING_SEND_ZC_REPORT_USAGE: send again without it.
                self.usage_retry = true;
                resubmit = true;
            } else if matches!(-res, libc::ENOMEM | libc::ENOBUFS)
                && req.zero_copy
                && !self.copy_retry
                && self.sent == 0
            {
                // The pages could not be pinned (RLIMIT_MEMLOCK): send the same bytes by copy.
                self.copy_retry = true;
                resubmit = true;
            } else if res < 0 {
                self.error.get_or_insert(-res);
            } else {
                self.sent += res as usize;
                if self.usage_retry {
                    *usage_refused = true;
                }
                // A stream send cut short (a signal, or no MSG_WAITALL): send the rest.
                resubmit = res > 0 && self.sent < req.len;
            }
        }
        if resubmit {
            self.results += 1;
            Step::Resubmit
        } else if self.results == 0 && self.notifs == 0 {
            Step::Done
        } else {
            Step::Wait
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
    };

    fn run(cqes: &[(i32, u32)]) -> (Vec<Step>, State, bool) {
        let mut s = State::new();
        let mut refused = false;
        let steps = cqes
            .iter()
            .map(|&(res, flags)| s.on_cqe(ZC, res, flags, &mut refused))
            .collect();
        (steps, s, refused)
    }

    #[test]
    fn result_then_notification_and_the_reverse_both_free_once() {
        let copied = abi::IORING_NOTIF_USAGE_ZC_COPIED as i32;
        let (steps, s, _) = run(&[(1000, MORE), (copied, NOTIF)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!((s.sent, s.copied, s.error), (1000, Some(true), None));
        let (steps, s, _) = run(&[(0, NOTIF), (1000, MORE)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!(s.copied, Some(false));
    }

    #[test]
    fn a_failed_request_with_f_more_waits_for_its_notification() {
        let (steps, s, _) = run(&[(-libc::ECONNREFUSED, MORE), (0, NOTIF)]);
        assert_eq!(steps, [Step::Wait, Step::Done]);
        assert_eq!((s.sent, s.error), (0, Some(libc::ECONNREFUSED)));
        let (steps, s, _) = run(&[(-libc::EPIPE, 0)]);
        assert_eq!(steps, [Step::Done]);
        assert_eq!(s.copied, None);
    }

    #[test]
    fn a_short_stream_send_is_resubmitted_until_whole() {
        let (steps, s, _) = run(&[(400, MORE), (0, NOTIF), (600, MORE), (0, NOTIF)]);
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Wait, Step::Done]);
        assert_eq!(s.sent, 1000);
    }

    #[test]
    fn refused_usage_reports_are_retried_without_them_and_remembered() {
        let (steps, s, refused) = run(&[(-libc::EINVAL, 0), (1000, MORE), (0, NOTIF)]);
        assert_eq!(steps, [Step::Resubmit, Step::Wait, Step::Done]);
        assert!(refused && s.usage_retry);
        assert_eq!((s.sent, s.copied, s.error), (1000, None, None));
    }

    #[test]
    fn a_request_refused_for_locked_memory_is_sent_again_by_copy() {
        let (steps, s, _) = run(&[(-libc::ENOMEM, 0), (1000, 0)]);
        assert_eq!(steps, [Step::Resubmit, Step::Done]);
        assert!(s.copy_retry);
        assert_eq!((s.sent, s.error, s.copied), (1000, None, None));
        // Refused again by copy: the error stands, no loop.
        let (steps, s, _) = run(&[(-libc::ENOBUFS, 0), (-libc::ENOBUFS, 0)]);
        assert_eq!(steps, [Step::Resubmit, Step::Done]);
        assert_eq!(s.error, Some(libc::ENOBUFS));
    }

    #[test]
    fn a_copy_request_is_done_at_its_result() {
        let mut s = State::new();
        let req = Request {
            zero_copy: false,
            report_usage: false,
            ..ZC
        };
        assert_eq!(s.on_cqe(req, 1000, 0, &mut false), Step::Done);
        assert_eq!(s.copied, None);
    }
}
