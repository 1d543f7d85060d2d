//! zcnet's kernel ABI and raw system calls, and no policy: no state machine, no retry rule, no
//! cache. A crate of its own below the library (`zcnet` names it `sys`), so that nothing here can
//! reach the policy above it: the compiler checks that layer, no test has to.
//!
//! Every function here is a thin wrapper over one C call (`uring::queue` over the ring's mapped
//! queues; `uring::send_zc_once`, the probe's one send, over the calls of one request), safe except
//! where misuse could corrupt memory: the two socket options whose value holds an address the
//! kernel writes through (`sockopt::tcp_zerocopy_receive`, `sockopt::register_umem`), the `ethtool`
//! ioctl (`netdev::ethtool`), the io_uring queue's `push` and the buffer registration, the one
//! mapping of a packet ring (`packet::Ring::map`), and a `MSG_ZEROCOPY` send, whose buffer the
//! kernel reads after the call returns (`net::sendto_zerocopy`; the safe `net::sendto` refuses
//! the flag), each an `unsafe fn` with its contract stated.
//! They return [`std::io::Result`] with the `errno` intact and leave `EINTR` and retry policy to
//! the caller, as socket2 and mio do. Every `unsafe` block says why it is sound. Above this, in
//! zcnet, `unsafe` is allowed only where a contract is kept: `loan/contract.rs` and
//! `msg_zerocopy/borrowed.rs` (the promises a caller makes), `uring/engine` (when a loaned buffer
//! is free), the `MSG_ZEROCOPY` sends of `msg_zerocopy` (a loan until its completion) and the
//! packet rings' one mapping. One file per area: see the modules below.
#![allow(unsafe_code)]
// An area only some mechanisms use leaves helpers without a user in a build without them.
#![cfg_attr(
    not(all(
        feature = "tcp_rx",
        feature = "uring",
        feature = "packet",
        feature = "xdp",
        feature = "tokio"
    )),
    allow(dead_code)
)]

pub mod abi;
pub mod netdev;
#[cfg(feature = "packet")]
pub mod packet;
#[cfg(feature = "tokio")]
pub mod reactor;
pub mod stable;
#[cfg(feature = "tcp_rx")]
pub mod tcp_zerocopy;
#[cfg(feature = "uring")]
pub mod uring;
#[cfg(feature = "xdp")]
pub mod xdp;

pub mod event;
pub mod file;
pub mod mm;
pub mod net;
pub mod netlink;
pub mod process;
pub mod sockopt;

use std::io;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}
