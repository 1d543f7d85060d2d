//! The socket error queue: completions of `MSG_ZEROCOPY` sends and other queued errors.
//!
//! `recvmsg(fd, MSG_ERRQUEUE)` returns no payload for zero-copy completions, only a control
//! message `IP_RECVERR`/`IPV6_RECVERR` whose data is a `struct sock_extended_err`. This module
//! reads those bytes as a checked view, in the manner of smoltcp's `wire` module: lengths are
//! validated once in [`parse`], after which nothing panics.
//!
//! # References
//! - `recvmsg(2)`, `ip(7)` (`IP_RECVERR`), `ipv6(7)`
//! - the kernel's `Documentation/networking/msg_zerocopy.rst`, section "Notification Reception"

use std::io;
use std::os::fd::AsFd;

use crate::cmsg::{self, read_u32};
use crate::sys::{self, abi};

/// Byte offsets of `struct sock_extended_err`.
mod field {
    pub const EE_ERRNO: usize = 0;
    pub const EE_ORIGIN: usize = 4;
    pub const EE_CODE: usize = 6;
    pub const EE_INFO: usize = 8;
    pub const EE_DATA: usize = 12;
    pub const EE_LEN: usize = 16;
}

/// One `struct sock_extended_err` from the error queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A `MSG_ZEROCOPY` completion (`SO_EE_ORIGIN_ZEROCOPY`).
    #[doc(alias = "SO_EE_ORIGIN_ZEROCOPY")]
    Zerocopy(Completion),
    /// Any other queued error (ICMP and the like), with its origin and errno.
    Other {
        /// `ee_origin`.
        origin: u8,
        /// `ee_errno`.
        errno: u32,
    },
}

/// A range of completed `MSG_ZEROCOPY` send ids, `first..=last` (it may wrap past `u32::MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "SO_EE_ORIGIN_ZEROCOPY")]
pub struct Completion {
    /// First completed id (`ee_info`).
    pub first: u32,
    /// Last completed id, inclusive (`ee_data`).
    pub last: u32,
    /// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data after all. This is data about
    /// the send, not an error: the buffer is free all the same.
    #[doc(alias = "SO_EE_CODE_ZEROCOPY_COPIED")]
    pub copied: bool,
}

impl Completion {
    /// Number of send calls this range completes, wrap-around included.
    pub fn count(&self) -> u64 {
        u64::from(self.last.wrapping_sub(self.first)) + 1
    }

    /// Whether `id` lies in this (possibly wrapping) range.
    pub fn contains(&self, id: u32) -> bool {
        id.wrapping_sub(self.first) <= self.last.wrapping_sub(self.first)
    }
}

pub use crate::cmsg::ParseError;

/// Parses the control bytes of one error-queue `recvmsg`, returning its extended errors.
///
/// Control messages other than `IP_RECVERR`/`IPV6_RECVERR` are skipped.
///
/// # Errors
/// [`ParseError::Truncated`] for a message that does not fit, or a `sock_extended_err` cut
/// short.
pub fn parse(control: &[u8]) -> Result<Vec<Entry>, ParseError> {
    let mut out = Vec::new();
    cmsg::walk(control, |m| {
        let is_recverr = (m.level == abi::SOL_IP && m.ty == abi::IP_RECVERR)
            || (m.level == abi::SOL_IPV6 && m.ty == abi::IPV6_RECVERR);
        if !is_recverr {
            return Ok(());
        }
        let data = m.data;
        if data.len() < field::EE_LEN {
            return Err(m.truncated(control.len()));
        }
        let origin = data[field::EE_ORIGIN];
        out.push(if origin == abi::SO_EE_ORIGIN_ZEROCOPY {
            Entry::Zerocopy(Completion {
                first: read_u32(data, field::EE_INFO),
                last: read_u32(data, field::EE_DATA),
                copied: data[field::EE_CODE] & abi::SO_EE_CODE_ZEROCOPY_COPIED != 0,
            })
        } else {
            Entry::Other {
                origin,
                errno: read_u32(data, field::EE_ERRNO),
            }
        });
        Ok(())
    })?;
    Ok(out)
}

/// Reads every message now on `socket`'s error queue without blocking
/// (`recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)` until `EAGAIN`).
///
/// # Errors
/// The `recvmsg` error, or `InvalidData` if a control message cannot be parsed.
#[doc(alias = "MSG_ERRQUEUE")]
pub fn read_all(socket: &impl AsFd) -> io::Result<Vec<Entry>> {
    let mut control = [0u8; 256];
    let mut out = Vec::new();
    while let Some((len, _truncated)) = sys::net::recv_errqueue(socket.as_fd(), &mut control)? {
        out.extend(
            parse(&control[..len]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds the control bytes the kernel would write for one extended error.
    pub(crate) fn cmsg(
        level: i32,
        ty: i32,
        errno: u32,
        origin: u8,
        code: u8,
        info: u32,
        data: u32,
    ) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(cmsg::CMSG_HDR + field::EE_LEN + 16).to_ne_bytes());
        b.extend_from_slice(&level.to_ne_bytes());
        b.extend_from_slice(&ty.to_ne_bytes());
        b.extend_from_slice(&errno.to_ne_bytes());
        b.extend_from_slice(&[origin, 0, code, 0]);
        b.extend_from_slice(&info.to_ne_bytes());
        b.extend_from_slice(&data.to_ne_bytes());
        // The kernel appends the offender sockaddr (16 bytes of zeros for zero-copy).
        b.extend_from_slice(&[0; 16]);
        b
    }

    #[test]
    fn zerocopy_completion_ipv4_and_ipv6() {
        let mut buf = cmsg(
            abi::SOL_IP,
            abi::IP_RECVERR,
            0,
            abi::SO_EE_ORIGIN_ZEROCOPY,
            0,
            3,
            7,
        );
        buf.extend(cmsg(
            abi::SOL_IPV6,
            abi::IPV6_RECVERR,
            0,
            abi::SO_EE_ORIGIN_ZEROCOPY,
            1,
            8,
            8,
        ));
        let got = parse(&buf).unwrap();
        assert_eq!(
            got,
            vec![
                Entry::Zerocopy(Completion {
                    first: 3,
                    last: 7,
                    copied: false
                }),
                Entry::Zerocopy(Completion {
                    first: 8,
                    last: 8,
                    copied: true
                }),
            ]
        );
    }

    #[test]
    fn wrapping_range_counts_and_contains() {
        let c = Completion {
            first: u32::MAX - 1,
            last: 1,
            copied: false,
        };
        assert_eq!(c.count(), 4);
        for id in [u32::MAX - 1, u32::MAX, 0, 1] {
            assert!(c.contains(id), "{id}");
        }
        assert!(!c.contains(2));
        assert!(!c.contains(u32::MAX - 2));
    }

    #[test]
    fn icmp_error_is_other() {
        let buf = cmsg(
            abi::SOL_IP,
            abi::IP_RECVERR,
            111,
            abi::SO_EE_ORIGIN_ICMP,
            3,
            0,
            0,
        );
        assert_eq!(
            parse(&buf).unwrap(),
            vec![Entry::Other {
                origin: abi::SO_EE_ORIGIN_ICMP,
                errno: 111
            }]
        );
    }

    #[test]
    fn truncated_buffers_are_errors_not_panics() {
        let buf = cmsg(
            abi::SOL_IP,
            abi::IP_RECVERR,
            0,
            abi::SO_EE_ORIGIN_ZEROCOPY,
            0,
            1,
            1,
        );
        for cut in 1..buf.len() {
            // Any prefix either parses to nothing (too short for a header) or is an error.
            match parse(&buf[..cut]) {
                Ok(v) => assert!(v.is_empty(), "cut {cut}"),
                Err(ParseError::Truncated { .. }) => {}
            }
        }
        // A header claiming a length shorter than itself.
        let mut bad = buf.clone();
        bad[..size_of::<usize>()].copy_from_slice(&4usize.to_ne_bytes());
        assert!(parse(&bad).is_err());
    }

    #[test]
    fn other_control_messages_are_skipped() {
        let mut buf = cmsg(1, 29, 0, 0, 0, 0, 0); // SOL_SOCKET/SO_TIMESTAMPING-like
        buf.extend(cmsg(
            abi::SOL_IP,
            abi::IP_RECVERR,
            0,
            abi::SO_EE_ORIGIN_ZEROCOPY,
            0,
            0,
            0,
        ));
        assert_eq!(parse(&buf).unwrap().len(), 1);
    }
}
