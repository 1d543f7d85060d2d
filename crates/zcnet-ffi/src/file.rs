//! `zcnet_send_file`: a file range sent on a connected TCP socket without user copies
//! (`sendfile`, `splice`, an mmap window with MSG_ZEROCOPY) or by copy.

use std::ffi::c_int;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;

use zc::ZeroCopyCounters as _;
use zc::msg_zerocopy::ZeroCopyError;

use super::error::{Fail, guard};
use super::handle::{arg, c_enum, fd};

/// How `zcnet_send_file` sends. It takes it as an `int`: any other value is `-EINVAL`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZcnetFileMode {
    /// The best available: sendfile, else splice, else copy.
    Auto = 0,
    /// `sendfile(2)`.
    Sendfile = 1,
    /// `splice(2)` through a pipe.
    Splice = 2,
    /// An mmap window sent with `MSG_ZEROCOPY`, unmapped after its completions.
    // Spelled as the C constant it becomes (`ZCNET_FILE_MODE_MMAP_ZEROCOPY`, cbindgen), which
    // stays as C callers know it.
    MmapZerocopy = 3,
    /// `read(2)` + `send(2)`.
    Copy = 4,
}

c_enum!(ZcnetFileMode {
    Auto = "ZCNET_FILE_MODE_AUTO",
    Sendfile = "ZCNET_FILE_MODE_SENDFILE",
    Splice = "ZCNET_FILE_MODE_SPLICE",
    MmapZerocopy = "ZCNET_FILE_MODE_MMAP_ZEROCOPY",
    Copy = "ZCNET_FILE_MODE_COPY",
});

/// What `zcnet_send_file` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ZcnetFileResult {
    /// Bytes sent.
    pub sent: u64,
    /// Of those, without a user-space copy.
    pub zero_copy_bytes: u64,
}

/// Sends `len` bytes of the file `file_fd` from `offset` on the connected TCP socket `sock_fd`
/// (`sendfile(2)`, `splice(2)`), as `mode`, a `ZcnetFileMode`, says (another value is `-EINVAL`
/// and nothing is sent). On an error `*result` still says what went out before it.
///
/// `ZCNET_FILE_MODE_MMAP_ZEROCOPY` counts the socket's MSG_ZEROCOPY completions itself, from
/// the socket's first: once per socket. A socket on which `SO_ZEROCOPY` is on already (an
/// earlier mmap-zc call, a `ZcnetZcSender`) is refused with `-EBUSY`.
///
/// # Safety
/// `result` is writable; both descriptors are open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcnet_send_file(
    sock_fd: c_int,
    file_fd: c_int,
    offset: u64,
    len: u64,
    mode: c_int,
    result: *mut ZcnetFileResult,
) -> c_int {
    guard(|| {
        use zc::file::{self, FileSender, Mode};
        // SAFETY: the caller's contract; NULL refused.
        let result = unsafe { arg(result, "result") }?;
        *result = ZcnetFileResult::default();
        let mode = ZcnetFileMode::try_from(mode)?;
        let sock = fd(sock_fd, "sock_fd")?;
        fd(file_fd, "file_fd")?;
        // SAFETY: `file_fd` is an open descriptor the caller keeps; ManuallyDrop never closes it.
        let f = ManuallyDrop::new(unsafe { File::from_raw_fd(file_fd) });
        let mode = match mode {
            ZcnetFileMode::Auto => Mode::Auto,
            ZcnetFileMode::Sendfile => Mode::Sendfile,
            ZcnetFileMode::Splice => Mode::Splice,
            ZcnetFileMode::MmapZerocopy => Mode::MmapZeroCopy,
            ZcnetFileMode::Copy => Mode::Copy,
        };
        let mut tx = FileSender::new(
            sock,
            file::Config {
                mode,
                ..Default::default()
            },
        )
        .map_err(|e| Fail::from_error(&e))?;
        let sent = tx.send_file(&f, offset, len);
        let c = tx.counters();
        *result = ZcnetFileResult {
            sent: c.bytes,
            zero_copy_bytes: c.zero_copy_bytes(),
        };
        sent.map(drop).map_err(|e| {
            let mut fail = Fail::from_error(&e);
            let in_use = match &e {
                file::FileError::Io { source, .. } => source
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<ZeroCopyError>())
                    .is_some_and(|z| matches!(z, ZeroCopyError::SocketInUse { .. })),
                _ => false,
            };
            if in_use {
                fail.errno = libc::EBUSY;
            }
            fail
        })
    })
}
