//! The io_uring sender, the packet ring and the peek cursor through the C ABI, on real sockets.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;

mod common;
use common::last;
use common::zcnet::*;

#[test]
fn uring_sender_returns_each_loan_with_its_user_data() {
    if zc_uring_unavailable() {
        return;
    }
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let bufs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 1000 + i as usize]).collect();
    unsafe {
        let mut s = null_mut();
        assert_eq!(
            zcnet_uring_sender_new(tx.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s),
            0,
            "{}",
            last()
        );
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(zcnet_uring_send(s, b.as_ptr(), b.len(), 100 + i as u64), 0);
        }
        assert_eq!(zcnet_uring_drain(s, 5000), 0, "{}", last());
        let mut done = [ZcnetCompletion::default(); 8];
        let mut n = 0;
        assert_eq!(zcnet_uring_reap(s, done.as_mut_ptr(), 8, &mut n), 0);
        let mut ids: Vec<u64> = done[..n].iter().map(|c| c.user_data).collect();
        ids.sort_unstable();
        assert_eq!(ids, [100, 101, 102]);
        for c in &done[..n] {
            assert_eq!((c.error, c.zero_copy), (0, 1));
            assert_eq!(c.sent, 1000 + (c.user_data - 100) as usize);
            // Loopback delivers to a socket: the kernel copies and says so (or cannot say).
            assert!(c.copied == 1 || c.copied == -1, "{c:?}");
        }
        let mut counters = ZcnetUringCounters::default();
        assert_eq!(zcnet_uring_counters(s, &mut counters), 0);
        assert_eq!((counters.requests, counters.returned), (3, 3));
        zcnet_uring_sender_free(s);
        // Null and bad arguments.
        assert_eq!(
            zcnet_uring_send(null_mut(), null_mut(), 0, 0),
            -libc::EINVAL
        );
        assert!(last().contains("sender is NULL"));
        assert_eq!(
            zcnet_uring_sender_new(-1, ZcnetMode::Copy.into(), &mut s),
            -libc::EBADF
        );
    }
    let mut got = vec![0u8; 2000];
    for _ in 0..3 {
        let n = rx.recv(&mut got).unwrap();
        assert!(got[..n].iter().all(|&b| b == got[0]));
    }
}

/// Records a skip where io_uring cannot be set up (no io_uring, `kernel.io_uring_disabled`).
fn zc_uring_unavailable() -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = null_mut();
    let rc = unsafe { zcnet_uring_sender_new(sock.as_raw_fd(), ZcnetMode::Copy.into(), &mut s) };
    unsafe { zcnet_uring_sender_free(s) };
    if rc != 0 {
        netlab::skip::skip(&format!("io_uring cannot be set up here: {}", last()));
        return true;
    }
    false
}

#[test]
fn peek_cursor_reads_without_taking_and_rewinds() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server, _) = l.accept().unwrap();
    c.write_all(b"hello world").unwrap();
    drop(c);
    unsafe {
        let mut p = null_mut();
        assert_eq!(zcnet_peek_new(server.as_raw_fd(), &mut p), 0, "{}", last());
        let mut buf = [0u8; 5];
        let mut n = 0;
        let mut peek = |p| {
            assert_eq!(
                zcnet_peek_read(p, buf.as_mut_ptr(), 5, &mut n),
                0,
                "{}",
                last()
            );
            buf[..n].to_vec()
        };
        // Issue 62 item 8: a second cursor on the socket (here through another descriptor of
        // it) would share its one SO_PEEK_OFF: refused while the first lives.
        let dup = server.try_clone().unwrap();
        let mut second = null_mut();
        assert_eq!(zcnet_peek_new(dup.as_raw_fd(), &mut second), -libc::EBUSY);
        assert!(last().contains("one cursor a socket"), "{}", last());
        assert!(second.is_null());
        assert_eq!(peek(p), b"hello");
        assert_eq!(peek(p), b" worl");
        assert_eq!(zcnet_peek_consume(p, 5), 0, "{}", last());
        assert_eq!(zcnet_peek_rewind(p, 5), 0, "{}", last());
        assert_eq!(peek(p), b" worl");
        // Consuming more than was peeked is refused.
        assert_eq!(zcnet_peek_consume(p, 100), -libc::EINVAL);
        assert!(last().contains("only"), "{}", last());
        assert_eq!(zcnet_peek_read(p, null_mut(), 5, &mut n), -libc::EINVAL);
        zcnet_peek_free(p);
    }
    // What was not consumed is still in the socket.
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut &server, &mut rest).unwrap();
    assert_eq!(rest, b" world");
}

/// Counts frames whose UDP payload is 7 bytes of 0x5a.
unsafe extern "C" fn count(ctx: *mut libc::c_void, frame: *const ZcnetFrame) -> libc::c_int {
    let (counter, f) = unsafe { (&mut *(ctx as *mut usize), &*frame) };
    let data = unsafe { std::slice::from_raw_parts(f.data, f.caplen) };
    if data.ends_with(&[0x5a; 7]) && f.ts_ns > 0 && f.wire_len as usize >= f.caplen {
        *counter += 1;
    }
    0
}

#[test]
fn ring_hands_each_frame_to_the_callback() {
    netlab::require_lab!();
    let lab = netlab::LoopbackLab::new(None).unwrap();
    let ip = lab.addr(netlab::Family::V4);
    let (seen, rc) = lab
        .ns
        .run(move || unsafe {
            let mut ring = null_mut();
            let rc = zcnet_ring_open(c"lo".as_ptr(), 0, 4, &mut ring);
            if rc != 0 {
                return (0, rc);
            }
            let rx = UdpSocket::bind((ip, 0)).unwrap();
            let tx = UdpSocket::bind((ip, 0)).unwrap();
            for _ in 0..10 {
                tx.send_to(&[0x5a; 7], rx.local_addr().unwrap()).unwrap();
            }
            let mut seen = 0usize;
            let mut frames = 0;
            for _ in 0..50 {
                let ctx = (&mut seen as *mut usize).cast();
                assert_eq!(zcnet_ring_next(ring, 100, Some(count), ctx, &mut frames), 0);
                if seen >= 10 {
                    break;
                }
            }
            zcnet_ring_free(ring);
            (seen, 0)
        })
        .unwrap();
    assert_eq!(rc, 0, "{}", last());
    // lo carries each datagram out and in: the ring sees each at least once.
    assert!(seen >= 10, "{seen}");
    unsafe {
        let mut ring = null_mut();
        assert_eq!(
            zcnet_ring_open(c"zcnet-none0".as_ptr(), 0, 0, &mut ring),
            -libc::ENODEV
        );
        assert_eq!(
            zcnet_ring_open(std::ptr::null(), 0, 0, &mut ring),
            -libc::EINVAL
        );
        let mut frames = 0;
        assert_eq!(
            zcnet_ring_next(null_mut(), 0, None, null_mut(), &mut frames),
            -libc::EINVAL
        );
    }
}
