//! libzcnet: zcnet's C ABI. The header is `include/zcnet.h`, generated from this file by
//! cbindgen (the test `header_is_current` fails when it is stale; `ZCNET_BLESS=1` rewrites it).
//!
//! Every function returns 0 or a negative errno (`-EINVAL` for a NULL pointer, a bad length or a
//! mode none of its enum's constants has, the kernel's errno otherwise); `zcnet_last_error()` gives the message of the calling thread's
//! last failure. No Rust panic crosses the boundary: one is caught and becomes `-EFAULT` with its
//! message. Descriptors are borrowed: the caller keeps each one open while a handle uses it and
//! closes it afterwards.
//!
//! The loan contract of the senders: memory passed to `zcnet_zc_send` stays valid and unmodified
//! until `zcnet_zc_reap` returns its `user_data`; the kernel may read it until then. A
//! MSG_ZEROCOPY sender's socket is its own while it lives (the kernel numbers completions per
//! socket): `zcnet_zc_sender_new` refuses a socket another sender holds or on which
//! `SO_ZEROCOPY` is on already (`-EBUSY`), and the caller promises the rest.
//!
//! A module per mechanism, as the header groups its functions, beside the parts they share (the
//! list below). All the `unsafe` of the C boundary is in them, each block with its reason.
//! Modules name each other by `super::`, never `crate::`: the tests and `zcnet-torture-ffi`
//! compile this file as a module of their own crates.

// cbindgen reads the modules in this order and writes the header in it: keep it so.
// Shared: the errno returned and the thread's last error, no panic across.
mod error;
// Shared: arguments checked as they cross, handles made and freed, `ZcnetMode`.
mod handle;
// `zcnet_probe_json`, `zcnet_string_free`.
mod probe;
// Shared by the senders: the loaned buffers, their completions, send, reap and drain.
mod loan;
// `zcnet_zc_*`: the MSG_ZEROCOPY sender.
mod msg_zerocopy;
// `zcnet_rx_*`: the TCP zero-copy receiver.
mod tcp_rx;
// `zcnet_send_file`.
mod file;
// `zcnet_uring_*`: the io_uring `SEND_ZC` sender.
mod uring;
// `zcnet_ring_*`: the `TPACKET_V3` receive ring.
mod packet;
// `zcnet_peek_*`: the `SO_PEEK_OFF` cursor.
mod peek;

// The C functions and types at the root, as the header names them. The tests and
// `zcnet-torture-ffi` compile this file as a module of theirs and use a part of it.
#[allow(unused_imports)]
pub use {
    error::*, file::*, handle::*, loan::*, msg_zerocopy::*, packet::*, peek::*, probe::*,
    tcp_rx::*, uring::*,
};
