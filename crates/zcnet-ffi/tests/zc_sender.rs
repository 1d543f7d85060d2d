//! The MSG_ZEROCOPY sender through the C ABI: a socket is one sender's alone.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::ffi::CStr;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;

// libzcnet is a cdylib and a staticlib only: its source is compiled into this test, calls and
// all, as the C ABI it exports.
#[allow(dead_code)]
#[path = "../src/lib.rs"]
mod zcnet;
use zcnet::*;

fn last() -> String {
    unsafe { CStr::from_ptr(zcnet_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// A second sender on another descriptor of the same socket (a `dup`) is `-EBUSY` with a
/// message, while the first lives and after it (the socket's ids went on from 0).
#[test]
fn a_second_sender_on_a_dup_is_busy() {
    let (client, _server) = tcp_pair();
    let dup = client.try_clone().unwrap();
    unsafe {
        let mut first = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy, &mut first),
            0,
            "{}",
            last()
        );
        for mode in [ZcnetMode::ZeroCopy, ZcnetMode::Copy, ZcnetMode::Auto] {
            let mut second = null_mut();
            let r = zcnet_zc_sender_new(dup.as_raw_fd(), mode, &mut second);
            assert_eq!(r, -libc::EBUSY, "{mode:?}");
            assert!(second.is_null());
            assert!(last().contains("another ZerocopySender"), "{}", last());
        }
        // The same descriptor twice is the same socket too.
        let mut again = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy, &mut again),
            -libc::EBUSY
        );
        zcnet_zc_sender_free(first);
        let mut later = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(dup.as_raw_fd(), ZcnetMode::ZeroCopy, &mut later),
            -libc::EBUSY
        );
        assert!(last().contains("SO_ZEROCOPY is on already"), "{}", last());
    }
}
