//! Issue 35 item 6: C may pass any `int` where the header names an enum (`zcnet_send_file` with
//! a file mode of 5 crashed; the senders and the receiver took 99 and returned 0). Every entry
//! point that takes a mode, found in `include/zcnet.h`, refuses the values no constant has with
//! `-EINVAL` and a message naming the constants, making nothing and sending nothing; each
//! constant the header defines is taken.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::collections::BTreeMap;
use std::io::Read;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;

mod common;
use common::zcnet::*;
use common::{last, tcp_pair};

fn header() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/zcnet.h")).unwrap()
}

/// The constants of `typedef enum NAME { ... } NAME;` in the header, by value.
fn constants(name: &str) -> BTreeMap<i32, String> {
    let text = header();
    let body = text
        .split(&format!("typedef enum {name} {{"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("}} {name};")).next())
        .unwrap_or_else(|| panic!("no enum {name} in zcnet.h"));
    body.lines()
        .filter_map(|l| l.trim().strip_suffix(',')?.split_once(" = "))
        .map(|(c, v)| (v.parse().unwrap(), c.to_owned()))
        .collect()
}

/// Values no constant of `name` has: the first past the end, far past, negative, the extremes.
fn outside(name: &str) -> Vec<i32> {
    let known = constants(name);
    let past = known.keys().max().unwrap() + 1;
    let mut v = vec![past, 99, -1, i32::MIN, i32::MAX];
    v.retain(|x| !known.contains_key(x));
    v
}

/// `rc` is `-EINVAL` with a message naming `value` and every constant of `name`.
fn refused(rc: i32, value: i32, name: &str) {
    let message = last();
    assert_eq!(rc, -libc::EINVAL, "{name} {value}: {message}");
    assert!(
        message.starts_with(&format!("mode {value} is not a {name}: give one of ")),
        "{message}"
    );
    for (v, c) in constants(name) {
        assert!(message.contains(&format!("{c} ({v})")), "{message}");
    }
}

/// Every prototype of the header that has a `mode` parameter takes it as `int`, and they are
/// the four tested below; no prototype takes an enum by type (a Rust enum parameter would
/// receive whatever C passes).
#[test]
fn the_header_takes_every_mode_as_int() {
    let text = header();
    let mut with_mode = Vec::new();
    for decl in text.split(';').map(str::trim) {
        let Some(proto) = decl.lines().find(|l| l.starts_with("int zcnet_")) else {
            continue;
        };
        let start = decl.find(proto).unwrap();
        let params = &decl[start..];
        assert!(!params.contains("enum "), "{params}");
        if params.contains("int mode") {
            let name = params["int ".len()..].split('(').next().unwrap();
            with_mode.push(name.to_owned());
        }
    }
    with_mode.sort();
    assert_eq!(
        with_mode,
        [
            "zcnet_rx_new",
            "zcnet_send_file",
            "zcnet_uring_sender_new",
            "zcnet_uring_sender_new_gso",
            "zcnet_zc_sender_new",
            "zcnet_zc_sender_new_gso"
        ]
    );
    // The conversion knows each constant by its header value.
    for (v, c) in constants("ZcnetMode") {
        let mode = ZcnetMode::try_from(v).unwrap_or_else(|_| panic!("{c}"));
        assert_eq!(i32::from(mode), v);
    }
    for (v, c) in constants("ZcnetFileMode") {
        let mode = ZcnetFileMode::try_from(v).unwrap_or_else(|_| panic!("{c}"));
        assert_eq!(i32::from(mode), v);
    }
}

#[test]
fn zc_sender_new_refuses_a_mode_outside_the_enum() {
    let (client, _server) = tcp_pair();
    unsafe {
        for v in outside("ZcnetMode") {
            let mut s = null_mut();
            refused(
                zcnet_zc_sender_new(client.as_raw_fd(), v, &mut s),
                v,
                "ZcnetMode",
            );
            assert!(s.is_null());
        }
        // Nothing was done to the socket (SO_ZEROCOPY is still off): a sender takes it.
        let mut s = null_mut();
        let zero_copy = ZcnetMode::ZeroCopy.into();
        let rc = zcnet_zc_sender_new(client.as_raw_fd(), zero_copy, &mut s);
        assert_eq!(rc, 0, "{}", last());
        zcnet_zc_sender_free(s);
        // Each constant makes a sender (on a socket of its own: a socket is one sender's).
        for v in constants("ZcnetMode").into_keys() {
            let (client, _server) = tcp_pair();
            let mut s = null_mut();
            let rc = zcnet_zc_sender_new(client.as_raw_fd(), v, &mut s);
            assert_eq!(rc, 0, "{v}: {}", last());
            zcnet_zc_sender_free(s);
        }
    }
}

#[test]
fn rx_new_refuses_a_mode_outside_the_enum() {
    let (_client, server) = tcp_pair();
    unsafe {
        for v in outside("ZcnetMode") {
            let mut rx = null_mut();
            refused(
                zcnet_rx_new(server.as_raw_fd(), v, 0, &mut rx),
                v,
                "ZcnetMode",
            );
            assert!(rx.is_null());
        }
        for v in constants("ZcnetMode").into_keys() {
            let mut rx = null_mut();
            assert_eq!(
                zcnet_rx_new(server.as_raw_fd(), v, 0, &mut rx),
                0,
                "{v}: {}",
                last()
            );
            zcnet_rx_free(rx);
        }
    }
}

#[test]
fn uring_sender_new_refuses_a_mode_outside_the_enum() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(sock.local_addr().unwrap()).unwrap();
    unsafe {
        // The mode is checked before io_uring is set up: this holds where it cannot be too.
        for v in outside("ZcnetMode") {
            let mut s = null_mut();
            refused(
                zcnet_uring_sender_new(sock.as_raw_fd(), v, &mut s),
                v,
                "ZcnetMode",
            );
            assert!(s.is_null());
        }
        for v in constants("ZcnetMode").into_keys() {
            let mut s = null_mut();
            let rc = zcnet_uring_sender_new(sock.as_raw_fd(), v, &mut s);
            if rc != 0 && v == 0 {
                return netlab::skip::skip(&format!("io_uring cannot be set up here: {}", last()));
            }
            assert_eq!(rc, 0, "{v}: {}", last());
            zcnet_uring_sender_free(s);
        }
    }
}

#[test]
fn send_file_refuses_a_mode_outside_the_enum_and_sends_nothing() {
    let dir = std::env::temp_dir().join(format!("zcnet-ffi-enums-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("file");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let len = data.len() as u64;
    let (client, mut server) = tcp_pair();
    unsafe {
        for v in outside("ZcnetFileMode") {
            let mut r = ZcnetFileResult {
                sent: 7,
                zero_copy_bytes: 7,
            };
            refused(
                zcnet_send_file(client.as_raw_fd(), file.as_raw_fd(), 0, len, v, &mut r),
                v,
                "ZcnetFileMode",
            );
            assert_eq!((r.sent, r.zero_copy_bytes), (0, 0));
        }
    }
    drop(client);
    let mut got = Vec::new();
    server.read_to_end(&mut got).unwrap();
    assert!(got.is_empty(), "{} bytes went out", got.len());
    // Each constant sends the file, whole.
    for v in constants("ZcnetFileMode").into_keys() {
        let (client, mut server) = tcp_pair();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            server.read_to_end(&mut got).map(|_| got)
        });
        let mut r = ZcnetFileResult::default();
        let rc =
            unsafe { zcnet_send_file(client.as_raw_fd(), file.as_raw_fd(), 0, len, v, &mut r) };
        assert_eq!((rc, r.sent), (0, len), "{v}: {}", last());
        drop(client);
        assert!(reader.join().unwrap().unwrap() == data, "mode {v}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
