//! The MSG_ZEROCOPY sender and the mmap-zc file send through the C ABI: a socket is one
//! sender's alone.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::ffi::CStr;
use std::io::Read;
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

/// `zcnet_send_file` in mmap-zc mode counts the socket's completions from its first: a second
/// call on the same socket is `-EBUSY` (its ids would have restarted at 0 while the kernel's
/// went on), and so is a socket a MSG_ZEROCOPY sender holds.
#[test]
fn mmap_zc_file_sends_take_the_socket_once() {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!("zcnet-ffi-mmap-{}", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&vec![5u8; 300_000])
        .unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (client, mut server) = tcp_pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    unsafe {
        let mut r = ZcnetFileResult::default();
        let mode = ZcnetFileMode::MmapZerocopy;
        let (sock, f) = (client.as_raw_fd(), file.as_raw_fd());
        assert_eq!(
            zcnet_send_file(sock, f, 0, 300_000, mode, &mut r),
            0,
            "{}",
            last()
        );
        assert_eq!(r.sent, 300_000);
        assert_eq!(
            zcnet_send_file(sock, f, 0, 300_000, mode, &mut r),
            -libc::EBUSY
        );
        assert!(last().contains("SO_ZEROCOPY is on already"), "{}", last());
        assert_eq!(r.sent, 0, "nothing of the second file went out");
        let mut s = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(sock, ZcnetMode::ZeroCopy, &mut s),
            -libc::EBUSY
        );
    }
    drop(client);
    assert_eq!(reader.join().unwrap(), vec![5u8; 300_000]);
}
