//! Pushes on the per-request path that store the value straight into its slot.
//!
//! `Vec::push` and `VecDeque::push_back` may grow, which is a call: the compiler keeps the value
//! being pushed in a stack slot across it, written field by field, and copies it into place with
//! loads wider than the stores that wrote it, which the CPU cannot forward (a store-forwarding
//! stall per push; `perf annotate` of the io_uring sender's `finish` put 58 % of its samples on
//! one such load, issue 51). With room checked first, the push in the common branch cannot grow,
//! and the value goes from registers into its slot; growing is out of line.

use std::collections::VecDeque;

/// `v.push(x)`, storing `x` in place when `v` has room.
#[inline(always)]
pub fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() < v.capacity() {
        v.push(x);
    } else {
        grow_push(v, x);
    }
}

/// `q.push_back(x)`, storing `x` in place when `q` has room.
#[inline(always)]
pub fn push_back<T>(q: &mut VecDeque<T>, x: T) {
    if q.len() < q.capacity() {
        q.push_back(x);
    } else {
        grow_push_back(q, x);
    }
}

#[cold]
#[inline(never)]
fn grow_push<T>(v: &mut Vec<T>, x: T) {
    v.push(x);
}

#[cold]
#[inline(never)]
fn grow_push_back<T>(q: &mut VecDeque<T>, x: T) {
    q.push_back(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_keep_order_through_growth() {
        let (mut v, mut q) = (Vec::new(), VecDeque::new());
        for i in 0..1000u32 {
            push(&mut v, i);
            push_back(&mut q, i);
            if i % 7 == 0 {
                q.pop_front();
            }
        }
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
        assert_eq!(q.len(), 1000 - 143);
        assert!(q.iter().copied().eq((0..1000).filter(|i| *i >= 143)));
    }
}
