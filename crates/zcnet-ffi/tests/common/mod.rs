//! What the tests of the C ABI share: libzcnet itself, the thread's last error, a TCP pair.
#![allow(dead_code)] // each test uses some of it

use std::ffi::CStr;
use std::net::{TcpListener, TcpStream};

// libzcnet is a cdylib and a staticlib only: its source is compiled into each test, calls and
// all, as the C ABI it exports.
#[allow(dead_code)]
#[path = "../../src/lib.rs"]
pub mod zcnet;

/// The message of the calling thread's last failure.
pub fn last() -> String {
    // SAFETY: zcnet_last_error returns a NUL-terminated string valid until this thread's next
    // failing call; it is copied at once.
    unsafe { CStr::from_ptr(zcnet::zcnet_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A connected TCP pair on 127.0.0.1: (client, server).
pub fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}
