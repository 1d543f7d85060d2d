//! Control messages (`struct cmsghdr`, `cmsg(3)`) read as checked views: the walk over a
//! `recvmsg` control buffer that the error queue ([`crate::errqueue`]) and GRO receives
//! ([`crate::udp_gso`]) share. Each header's length is checked against the buffer before its
//! data is handed out, so a truncated buffer is an error, never a panic.
//!
//! # References
//! - `cmsg(3)`, `recvmsg(2)`

/// `struct cmsghdr` on this target: `size_t cmsg_len; int cmsg_level; int cmsg_type;`.
const CMSG_LEVEL: usize = size_of::<usize>();
const CMSG_TYPE: usize = CMSG_LEVEL + 4;
/// The header's length, and where the data starts (`CMSG_DATA`).
pub(crate) const CMSG_HDR: usize = CMSG_TYPE + 4;

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

/// One control message: its level, type and data.
pub(crate) struct Message<'a> {
    pub level: i32,
    pub ty: i32,
    pub data: &'a [u8],
    /// Where its header starts in the buffer, for an error about it.
    pub offset: usize,
}

impl Message<'_> {
    /// The error for this message's data being too short for what its type announces.
    pub fn truncated(&self, control_len: usize) -> ParseError {
        ParseError::Truncated {
            offset: self.offset,
            len: control_len,
        }
    }
}

/// `native-endian` `u32` at `at` (the caller checked the length).
pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Calls `each` for every control message of `control`, in order (`CMSG_FIRSTHDR`,
/// `CMSG_NXTHDR`); bytes too few for another header end the walk.
///
/// # Errors
/// [`ParseError::Truncated`] for a header whose length does not fit, or `each`'s error.
pub(crate) fn walk(
    control: &[u8],
    mut each: impl FnMut(Message<'_>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let word = size_of::<usize>();
    let mut off = 0;
    while off + CMSG_HDR <= control.len() {
        let len_bytes = &control[off..off + CMSG_LEVEL];
        let cmsg_len = usize::from_ne_bytes(len_bytes.try_into().expect("slice of usize size"));
        let end = off.checked_add(cmsg_len).filter(|&e| e <= control.len());
        let Some(end) = end.filter(|_| cmsg_len >= CMSG_HDR) else {
            return Err(ParseError::Truncated {
                offset: off,
                len: control.len(),
            });
        };
        each(Message {
            level: read_u32(control, off + CMSG_LEVEL) as i32,
            ty: read_u32(control, off + CMSG_TYPE) as i32,
            data: &control[off + CMSG_HDR..end],
            offset: off,
        })?;
        // The next header starts at the aligned end (at most one word past `end`, so no
        // overflow: `end <= control.len()`).
        off += cmsg_len.next_multiple_of(word);
    }
    Ok(())
}
