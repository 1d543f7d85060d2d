//! Every entry point called with NULL pointers, bad descriptors and bad lengths: a negative
//! errno and a message from `zcnet_last_error`, never a crash.
#![allow(clippy::undocumented_unsafe_blocks)] // each call here breaks the contract on purpose

use std::ptr::{null, null_mut};

mod common;
use common::last;
use common::zcnet::*;

/// `rc` is `-errno` and the message names `what`.
fn refused(rc: i32, errno: i32, what: &str) {
    assert_eq!(rc, -errno, "{}", last());
    assert!(last().contains(what), "{:?} does not name {what:?}", last());
}

#[test]
fn null_pointers_and_bad_arguments_are_refused() {
    unsafe {
        refused(zcnet_probe_json(null_mut()), libc::EINVAL, "out is NULL");
        zcnet_string_free(null_mut());

        // Senders.
        refused(
            zcnet_zc_sender_new(3, ZcnetMode::ZeroCopy.into(), null_mut()),
            libc::EINVAL,
            "out is NULL",
        );
        let mut s = null_mut();
        refused(
            zcnet_zc_sender_new(-1, ZcnetMode::ZeroCopy.into(), &mut s),
            libc::EBADF,
            "not a descriptor",
        );
        assert!(s.is_null());
        refused(
            zcnet_zc_send(null_mut(), null(), 0, 0),
            libc::EINVAL,
            "sender is NULL",
        );
        let mut n = 7usize;
        refused(
            zcnet_zc_reap(null_mut(), null_mut(), 0, &mut n),
            libc::EINVAL,
            "sender is NULL",
        );
        refused(
            zcnet_zc_drain(null_mut(), 0),
            libc::EINVAL,
            "sender is NULL",
        );
        refused(
            zcnet_zc_counters(null_mut(), null_mut()),
            libc::EINVAL,
            "sender is NULL",
        );
        zcnet_zc_sender_free(null_mut());

        // A real sender, then bad buffers.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(sock.local_addr().unwrap()).unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(
            zcnet_zc_sender_new(sock.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s),
            0,
            "{}",
            last()
        );
        refused(zcnet_zc_send(s, null(), 10, 1), libc::EINVAL, "ptr is NULL");
        let byte = [0u8; 1];
        refused(
            zcnet_zc_send(s, byte.as_ptr(), usize::MAX, 1),
            libc::EINVAL,
            "too large",
        );
        refused(
            zcnet_zc_reap(s, null_mut(), 4, &mut n),
            libc::EINVAL,
            "out is NULL",
        );
        refused(
            zcnet_zc_reap(s, null_mut(), 0, null_mut()),
            libc::EINVAL,
            "n is NULL",
        );
        // A zero-length send is fine, and comes back.
        assert_eq!(zcnet_zc_send(s, null(), 0, 42), 0, "{}", last());
        let mut done = [ZcnetCompletion::default(); 4];
        assert_eq!(zcnet_zc_drain(s, 1000), 0, "{}", last());
        assert_eq!(zcnet_zc_reap(s, done.as_mut_ptr(), 4, &mut n), 0);
        assert_eq!((n, done[0].user_data, done[0].sent), (1, 42, 0));
        zcnet_zc_sender_free(s);

        // Receivers.
        refused(
            zcnet_rx_new(3, ZcnetMode::ZeroCopy.into(), 0, null_mut()),
            libc::EINVAL,
            "out is NULL",
        );
        let mut rx = null_mut();
        refused(
            zcnet_rx_new(-5, ZcnetMode::ZeroCopy.into(), 0, &mut rx),
            libc::EBADF,
            "not a descriptor",
        );
        let mut p = null();
        let mut len = 0usize;
        refused(
            zcnet_rx_recv(null_mut(), &mut p, &mut len),
            libc::EINVAL,
            "receiver is NULL",
        );
        refused(
            zcnet_rx_counters(null_mut(), null_mut()),
            libc::EINVAL,
            "receiver is NULL",
        );
        zcnet_rx_free(null_mut());
        // A window over the library's 1 GiB maximum.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        refused(
            zcnet_rx_new(
                c.as_raw_fd(),
                ZcnetMode::ZeroCopy.into(),
                usize::MAX,
                &mut rx,
            ),
            libc::EINVAL,
            "window",
        );
        // A UDP socket is no TCP receiver (issue 62: -EOPNOTSUPP, the socket kind's errno).
        refused(
            zcnet_rx_new(sock.as_raw_fd(), ZcnetMode::ZeroCopy.into(), 0, &mut rx),
            libc::EOPNOTSUPP,
            "this one is UDP",
        );
        // Nor a peek cursor's, said once in one line (issue 35 item 17: "…needs a TCP socket
        // failed: not a TCP socket").
        let mut p = null_mut();
        assert_eq!(zcnet_peek_new(sock.as_raw_fd(), &mut p), -libc::EOPNOTSUPP);
        assert!(p.is_null());
        assert_eq!(
            last(),
            "the socket check (a peek cursor reads a connected TCP stream, IPv4 or IPv6) \
             failed: this one is UDP (SO_PROTOCOL)"
        );

        // Files.
        refused(
            zcnet_send_file(3, 4, 0, 1, ZcnetFileMode::Auto.into(), null_mut()),
            libc::EINVAL,
            "result is NULL",
        );
        let mut r = ZcnetFileResult::default();
        refused(
            zcnet_send_file(-1, 0, 0, 1, ZcnetFileMode::Auto.into(), &mut r),
            libc::EBADF,
            "sock_fd",
        );
        refused(
            zcnet_send_file(c.as_raw_fd(), -2, 0, 1, ZcnetFileMode::Auto.into(), &mut r),
            libc::EBADF,
            "file_fd",
        );
    }
}

/// Issue 62 item 4: a listening or never-connected TCP socket passed `zcnet_rx_new` (and
/// `zcnet_rx_recv` then waited in `poll` for ever), and a listener passed the senders'
/// constructors and `zcnet_peek_new`. Each is refused with the errno of what it is: a listener
/// `-EINVAL`, an unconnected socket `-ENOTCONN`, another family `-EOPNOTSUPP`.
#[test]
fn sockets_of_the_wrong_kind_are_refused_with_their_errno() {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fresh = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
    let zc = ZcnetMode::ZeroCopy.into();
    for (fd, errno, what) in [
        (listener.as_raw_fd(), libc::EINVAL, "listening"),
        (fresh.as_raw_fd(), libc::ENOTCONN, "not connected"),
        (unix.as_raw_fd(), libc::EOPNOTSUPP, "AF_UNIX"),
    ] {
        unsafe {
            let mut rx = null_mut();
            refused(zcnet_rx_new(fd, zc, 0, &mut rx), errno, what);
            assert!(rx.is_null());
            let mut p = null_mut();
            refused(zcnet_peek_new(fd, &mut p), errno, what);
            let mut s = null_mut();
            refused(zcnet_zc_sender_new(fd, zc, &mut s), errno, what);
            let mut u = null_mut();
            let rc = zcnet_uring_sender_new(fd, zc, &mut u);
            // A kernel without io_uring says so first.
            if rc != -libc::EOPNOTSUPP || what == "AF_UNIX" {
                refused(rc, errno, what);
            }
            assert!(s.is_null() && u.is_null() && p.is_null());
        }
    }
}
