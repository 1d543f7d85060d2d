//! GSO trains through the C ABI: `zcnet_zc_sender_new_gso` and `zcnet_uring_sender_new_gso`
//! send each buffer as datagrams of the segment size, refuse a train of more than 64 before the
//! kernel sees it, and refuse a segment of 0 or a socket that is not UDP, saying why.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::time::Duration;

mod common;
use common::zcnet::*;
use common::{last, tcp_pair};

/// A UDP socket connected to a receiver on loopback: (sender, receiver).
fn udp_pair() -> (UdpSocket, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    (tx, rx)
}

/// The datagram sizes `rx` reads until `total` bytes came.
fn sizes(rx: &UdpSocket, total: usize) -> Vec<usize> {
    let mut buf = [0u8; 65536];
    let mut got = Vec::new();
    while got.iter().sum::<usize>() < total {
        got.push(rx.recv(&mut buf).unwrap());
    }
    got
}

#[test]
fn msg_zerocopy_trains_from_c() {
    let (tx, rx) = udp_pair();
    let train = vec![5u8; 250];
    let long = vec![5u8; 6401];
    unsafe {
        let mut s = null_mut();
        let rc = zcnet_zc_sender_new_gso(tx.as_raw_fd(), ZcnetMode::ZeroCopy.into(), 100, &mut s);
        assert_eq!(rc, 0, "{}", last());
        assert_eq!(
            zcnet_zc_send(s, train.as_ptr(), train.len(), 1),
            0,
            "{}",
            last()
        );
        assert_eq!(sizes(&rx, 250), [100, 100, 50]);
        // 65 datagrams: refused before the kernel, nothing loaned.
        assert_eq!(
            zcnet_zc_send(s, long.as_ptr(), long.len(), 2),
            -libc::EINVAL
        );
        assert!(last().contains("65 datagrams"), "{}", last());
        assert_eq!(zcnet_zc_drain(s, 5000), 0, "{}", last());
        zcnet_zc_sender_free(s);
    }
}

#[test]
fn uring_trains_from_c() {
    let (tx, rx) = udp_pair();
    let train = vec![5u8; 250];
    unsafe {
        let mut s = null_mut();
        let rc =
            zcnet_uring_sender_new_gso(tx.as_raw_fd(), ZcnetMode::ZeroCopy.into(), 100, &mut s);
        if rc != 0 {
            let why = last();
            assert!(why.contains("io_uring"), "{why}");
            return netlab::skip::skip(&format!("no io_uring here: {why}"));
        }
        assert_eq!(
            zcnet_uring_send(s, train.as_ptr(), train.len(), 1),
            0,
            "{}",
            last()
        );
        assert_eq!(zcnet_uring_drain(s, 5000), 0, "{}", last());
        assert_eq!(sizes(&rx, 250), [100, 100, 50]);
        zcnet_uring_sender_free(s);
    }
}

#[test]
fn a_zero_segment_or_a_tcp_socket_is_refused_saying_why() {
    let (udp, _rx) = udp_pair();
    let (tcp, _server) = tcp_pair();
    let mode = ZcnetMode::Copy.into();
    unsafe {
        let mut s = null_mut();
        assert_eq!(
            zcnet_zc_sender_new_gso(udp.as_raw_fd(), mode, 0, &mut s),
            -libc::EINVAL
        );
        assert!(last().contains("segment 0"), "{}", last());
        assert!(s.is_null());
        let rc = zcnet_zc_sender_new_gso(tcp.as_raw_fd(), mode, 1200, &mut s);
        assert_eq!(rc, -libc::EOPNOTSUPP, "{}", last());
        assert!(last().contains("not a UDP socket"), "{}", last());
        assert!(s.is_null());
        let mut u = null_mut();
        assert_eq!(
            zcnet_uring_sender_new_gso(udp.as_raw_fd(), mode, 0, &mut u),
            -libc::EINVAL
        );
        assert!(u.is_null());
    }
}

/// `UDP_SEGMENT` of `fd` (0: single datagrams).
fn segment_of(fd: i32) -> i32 {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_UDP,
            103,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    v
}

/// A sender refused (here: `SO_ZEROCOPY` on already, so its completion ids would not be its
/// own) leaves the caller's socket as it was: a C program that falls back to `send` sends
/// whole datagrams, not trains it never asked for.
#[test]
fn a_refused_sender_leaves_the_socket_sending_single_datagrams() {
    let (tx, _rx) = udp_pair();
    let one: libc::c_int = 1;
    let rc = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    unsafe {
        let mut s = null_mut();
        let rc = zcnet_zc_sender_new_gso(tx.as_raw_fd(), ZcnetMode::ZeroCopy.into(), 1200, &mut s);
        assert_eq!(rc, -libc::EBUSY, "{}", last());
        assert!(s.is_null());
    }
    assert_eq!(segment_of(tx.as_raw_fd()), 0, "UDP_SEGMENT left unset");
}
