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

use crate::sys::{self, abi};

/// Byte offsets of the structures read here.
mod field {
    /// `struct cmsghdr` on this target: `size_t cmsg_len; int cmsg_level; int cmsg_type;`.
    pub const CMSG_LEN: usize = 0;
    pub const CMSG_LEVEL: usize = size_of::<usize>();
    pub const CMSG_TYPE: usize = CMSG_LEVEL + 4;
    pub const CMSG_HDR: usize = CMSG_TYPE + 4;
    /// `struct sock_extended_err`.
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

/// A malformed control buffer: the kernel never produces one, so this indicates a caller bug
/// (a truncated buffer) or memory that is not what it claims.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// A `cmsghdr` or its data does not fit in the buffer.
    #[error("control message truncated at byte {offset} of {len}")]
    Truncated {
        /// Where the bad message starts.
        offset: usize,
        /// Length of the control buffer.
        len: usize,
    },
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn align(len: usize) -> usize {
    let a = size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// Parses the control bytes of one error-queue `recvmsg`, returning its extended errors.
///
/// Control messages other than `IP_RECVERR`/`IPV6_RECVERR` are skipped.
pub fn parse(control: &[u8]) -> Result<Vec<Entry>, ParseError> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + field::CMSG_HDR <= control.len() {
        let len_bytes = &control[off + field::CMSG_LEN..off + field::CMSG_LEVEL];
        let cmsg_len = usize::from_ne_bytes(len_bytes.try_into().expect("slice of usize size"));
        let truncated = ParseError::Truncated {
            offset: off,
            len: control.len(),
        };
        let end = off.checked_add(cmsg_len).filter(|&e| e <= control.len());
        let Some(end) = end.filter(|_| cmsg_len >= field::CMSG_HDR) else {
            return Err(truncated);
        };
        let level = read_u32(control, off + field::CMSG_LEVEL) as i32;
        let ty = read_u32(control, off + field::CMSG_TYPE) as i32;
        let data = &control[off + field::CMSG_HDR..end];
        let is_recverr = (level == abi::SOL_IP && ty == abi::IP_RECVERR)
            || (level == abi::SOL_IPV6 && ty == abi::IPV6_RECVERR);
        if is_recverr {
            if data.len() < field::EE_LEN {
                return Err(truncated);
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
        }
        // The next header starts at the aligned end (at most one word past `end`, so no
        // overflow: `end <= control.len()`).
        off += align(cmsg_len);
    }
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
    while let Some((len, _truncated)) = sys::recv_errqueue(socket.as_fd(), &mut control)? {
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
        b.extend_from_slice(&(field::CMSG_HDR + field::EE_LEN + 16).to_ne_bytes());
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
