//! The `send(2)` flags a [`ZeroCopySender`](super::ZeroCopySender) lets its caller add.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// Extra `send(2)` flags for [`ZeroCopySender::send_with`](super::ZeroCopySender::send_with)
/// and its tokio twin: only those that leave the sender's bookkeeping intact.
///
/// The sender adds `MSG_ZEROCOPY` itself, to the calls it decided to loan and counted, and
/// `MSG_NOSIGNAL` to every call. A flag that would break that is not in this type, as rustix's
/// `SendFlags` holds only the flags that make sense for its call:
/// - `MSG_ZEROCOPY` from the caller would loan a buffer the sender sends by copy (below the
///   threshold) and gives back at once while the kernel still holds its pages, and it takes a
///   completion id the sender never counted, so every later completion frees the wrong buffer;
/// - `MSG_DONTWAIT` belongs to the socket's mode (the sender waits or returns to the event loop
///   as the socket is blocking or not);
/// - `MSG_OOB` sends urgent data, one byte out of the stream the buffers make.
///
/// The field is private and there is no unchecked constructor: a `SendFlags` holds named
/// flags only. [`SendFlags::from_bits`] checks a raw value (from C, say) and refuses any other
/// bit.
///
/// ```
/// use zcnet::msg_zerocopy::SendFlags;
/// let flags = SendFlags::EOR | SendFlags::MORE;
/// assert!(flags.contains(SendFlags::EOR));
/// assert_eq!(SendFlags::from_bits(libc::MSG_EOR), Some(SendFlags::EOR));
/// assert_eq!(SendFlags::from_bits(libc::MSG_ZEROCOPY), None);
/// assert_eq!(format!("{flags:?}"), "SendFlags(EOR | MORE)");
/// ```
/// A raw `int` does not become flags:
/// ```compile_fail,E0423
/// let flags = zcnet::msg_zerocopy::SendFlags(libc::MSG_ZEROCOPY);
/// ```
/// nor does an unchecked conversion exist:
/// ```compile_fail,E0599
/// let flags = zcnet::msg_zerocopy::SendFlags::from_bits_retain(libc::MSG_ZEROCOPY);
/// ```
///
/// # References
/// `send(2)`; the kernel's `Documentation/networking/msg_zerocopy.rst`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(i32);

/// The named flags, for `Debug` and [`SendFlags::from_bits`].
const NAMED: [(SendFlags, &str); 3] = [
    (SendFlags::EOR, "EOR"),
    (SendFlags::MORE, "MORE"),
    (SendFlags::CONFIRM, "CONFIRM"),
];

impl SendFlags {
    /// `MSG_EOR`: this buffer ends a record. Over TCP, the next buffer starts a new segment, so
    /// that a small header does not share segments with the page-aligned payload after it and a
    /// zero-copy receiver can map that payload.
    #[doc(alias = "MSG_EOR")]
    pub const EOR: SendFlags = SendFlags(libc::MSG_EOR);
    /// `MSG_MORE`: more data follows (TCP: like `TCP_CORK` for this call; UDP: the next sends
    /// join this datagram). A zero-copy buffer sent so comes back when the kernel has sent it,
    /// after the call that ends the cork.
    #[doc(alias = "MSG_MORE")]
    pub const MORE: SendFlags = SendFlags(libc::MSG_MORE);
    /// `MSG_CONFIRM`: the peer answered, its neighbour entry is still reachable (UDP, raw).
    #[doc(alias = "MSG_CONFIRM")]
    pub const CONFIRM: SendFlags = SendFlags(libc::MSG_CONFIRM);

    /// No flags.
    pub const fn empty() -> SendFlags {
        SendFlags(0)
    }

    /// Every flag this type has.
    pub const fn all() -> SendFlags {
        SendFlags(Self::EOR.0 | Self::MORE.0 | Self::CONFIRM.0)
    }

    /// The `send(2)` flag bits.
    pub const fn bits(self) -> i32 {
        self.0
    }

    /// The flags of `bits` if every bit set is one of this type's flags, else `None` (for
    /// `MSG_ZEROCOPY`, `MSG_DONTWAIT`, `MSG_OOB` or any other bit).
    pub const fn from_bits(bits: i32) -> Option<SendFlags> {
        if bits & !Self::all().0 == 0 {
            Some(SendFlags(bits))
        } else {
            None
        }
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of both.
    pub const fn union(self, other: SendFlags) -> SendFlags {
        SendFlags(self.0 | other.0)
    }
}

impl BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        self.union(rhs)
    }
}

impl BitOrAssign for SendFlags {
    fn bitor_assign(&mut self, rhs: SendFlags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for SendFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendFlags(")?;
        if self.is_empty() {
            f.write_str("empty")?;
        }
        let set = NAMED.iter().filter(|(flag, _)| self.contains(*flag));
        for (i, (_, name)) in set.enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            f.write_str(name)?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_bits_come_in() {
        assert_eq!(SendFlags::from_bits(0), Some(SendFlags::empty()));
        assert_eq!(
            SendFlags::from_bits(libc::MSG_EOR | libc::MSG_MORE),
            Some(SendFlags::EOR | SendFlags::MORE)
        );
        for bad in [
            libc::MSG_ZEROCOPY,
            libc::MSG_DONTWAIT,
            libc::MSG_OOB,
            libc::MSG_NOSIGNAL,
            libc::MSG_EOR | libc::MSG_ZEROCOPY,
            1 << 30,
            -1,
        ] {
            assert_eq!(SendFlags::from_bits(bad), None, "{bad:#x}");
        }
        assert!(!SendFlags::all().contains(SendFlags(libc::MSG_ZEROCOPY)));
    }

    #[test]
    fn debug_names_each_flag() {
        assert_eq!(format!("{:?}", SendFlags::empty()), "SendFlags(empty)");
        assert_eq!(
            format!("{:?}", SendFlags::all()),
            "SendFlags(EOR | MORE | CONFIRM)"
        );
        let mut f = SendFlags::CONFIRM;
        f |= SendFlags::EOR;
        assert_eq!(format!("{f:?}"), "SendFlags(EOR | CONFIRM)");
    }
}
