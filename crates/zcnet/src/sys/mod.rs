//! Kernel ABI and raw system calls: the only module of the crate with `unsafe` code.
//!
//! Every function here is a thin wrapper over one C call, safe except the two socket options
//! whose value holds an address the kernel writes through (`sockopt::tcp_zerocopy_receive`,
//! `sockopt::register_umem`: `unsafe fn`, their contract stated). They return
//! [`std::io::Result`] with the `errno` intact and leave `EINTR` and retry policy to the caller,
//! as socket2 and mio do. Every `unsafe` block says why it is sound. One file per area: see the
//! modules below.
#![allow(unsafe_code)]

pub mod abi;
pub mod defer;
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
