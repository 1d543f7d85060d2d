//! The MSG_ZEROCOPY sender through the C ABI: the flags a C caller passes are checked, and a
//! socket is one sender's alone.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::io::Read;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;

mod common;
use common::zcnet::*;
use common::{last, tcp_pair};

/// Unknown bits, `MSG_ZEROCOPY` first among them, are an error code and a message naming
/// them, and nothing is sent or loaned; the allowed flags send, and the buffer comes back.
#[test]
fn flags_from_c_are_checked_not_passed_through() {
    let (client, mut server) = tcp_pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    let header = vec![1u8; 100];
    let payload = vec![2u8; 64 * 1024];
    unsafe {
        let mut s = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s),
            0,
            "{}",
            last()
        );
        for (bad, named) in [
            (libc::MSG_ZEROCOPY, "MSG_ZEROCOPY"),
            (libc::MSG_EOR | libc::MSG_ZEROCOPY, "MSG_ZEROCOPY"),
            (libc::MSG_DONTWAIT, "MSG_DONTWAIT"),
            (libc::MSG_OOB, "MSG_OOB"),
            (1 << 30, "0x40000000"),
            (-1, "not allowed"),
        ] {
            let r = zcnet_zc_send_flags(s, payload.as_ptr(), payload.len(), 9, bad);
            assert_eq!(r, -libc::EINVAL, "flags {bad:#x}");
            let message = last();
            assert!(message.contains(named), "{bad:#x}: {message}");
            assert!(message.contains("only MSG_EOR, MSG_MORE"), "{message}");
        }
        let mut c = ZcnetZcCounters::default();
        assert_eq!(zcnet_zc_counters(s, &mut c), 0);
        assert_eq!((c.loaned_calls, c.copy_calls), (0, 0), "nothing sent");
        // The allowed ones: a header ending a record, then its payload (loaned).
        let r = zcnet_zc_send_flags(s, header.as_ptr(), header.len(), 1, libc::MSG_EOR);
        assert_eq!(r, 0, "{}", last());
        let r = zcnet_zc_send_flags(s, payload.as_ptr(), payload.len(), 2, 0);
        assert_eq!(r, 0, "{}", last());
        assert_eq!(zcnet_zc_drain(s, 5000), 0, "{}", last());
        let mut done = [ZcnetCompletion::default(); 4];
        let mut n = 0;
        assert_eq!(zcnet_zc_reap(s, done.as_mut_ptr(), 4, &mut n), 0);
        let mut ids: Vec<u64> = done[..n].iter().map(|c| c.user_data).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            [1, 2],
            "each buffer back once, none for the refused sends"
        );
        assert!(done[..n].iter().all(|c| c.error == 0));
        // A NULL sender with good flags is still refused.
        assert_eq!(
            zcnet_zc_send_flags(null_mut(), header.as_ptr(), 1, 3, 0),
            -libc::EINVAL
        );
        zcnet_zc_sender_free(s);
    }
    drop(client);
    assert_eq!(reader.join().unwrap(), [header, payload].concat());
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
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut first),
            0,
            "{}",
            last()
        );
        for mode in [ZcnetMode::ZeroCopy, ZcnetMode::Copy, ZcnetMode::Auto] {
            let mut second = null_mut();
            let r = zcnet_zc_sender_new(dup.as_raw_fd(), mode.into(), &mut second);
            assert_eq!(r, -libc::EBUSY, "{mode:?}");
            assert!(second.is_null());
            assert!(last().contains("another zcnet sender"), "{}", last());
        }
        // The same descriptor twice is the same socket too.
        let mut again = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut again),
            -libc::EBUSY
        );
        zcnet_zc_sender_free(first);
        let mut later = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(dup.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut later),
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
            zcnet_send_file(sock, f, 0, 300_000, mode.into(), &mut r),
            0,
            "{}",
            last()
        );
        assert_eq!(r.sent, 300_000);
        assert_eq!(
            zcnet_send_file(sock, f, 0, 300_000, mode.into(), &mut r),
            -libc::EBUSY
        );
        assert!(last().contains("SO_ZEROCOPY is on already"), "{}", last());
        assert_eq!(r.sent, 0, "nothing of the second file went out");
        let mut s = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(sock, ZcnetMode::ZeroCopy.into(), &mut s),
            -libc::EBUSY
        );
    }
    drop(client);
    assert_eq!(reader.join().unwrap(), vec![5u8; 300_000]);
}

/// `zcnet_zc_auto` and `zcnet_uring_auto`: an auto sender says what it sent each way and what
/// it learned; a sender in another mode is `-EINVAL` with a message.
#[test]
fn auto_senders_say_what_they_learned() {
    // The built-in prior, whatever profile this machine's user has.
    zc::auto::set_profile(zc::auto::Profile::builtin());
    let (client, mut server) = tcp_pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got.len()
    });
    let payload = vec![3u8; 8000];
    unsafe {
        let mut s = null_mut();
        assert_eq!(
            zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::Auto.into(), &mut s),
            0,
            "{}",
            last()
        );
        let mut a = ZcnetAutoCounters::default();
        assert_eq!(zcnet_zc_auto(s, &mut a), 0, "{}", last());
        assert_eq!(a.learned_threshold, -2, "nothing sent yet");
        for i in 0..10 {
            assert_eq!(
                zcnet_zc_send(s, payload.as_ptr(), payload.len(), i),
                0,
                "{}",
                last()
            );
        }
        assert_eq!(zcnet_zc_drain(s, 5000), 0, "{}", last());
        assert_eq!(zcnet_zc_auto(s, &mut a), 0, "{}", last());
        // Loopback is a local route: the built-in prior copies, and its first round does.
        assert_eq!((a.zero_copy_calls, a.copy_calls), (0, 10), "{a:?}");
        assert_eq!(a.copy_bytes, 80_000);
        assert_eq!(a.learned_threshold, -1, "never, as the class goes");
        assert_eq!(zcnet_zc_auto(s, null_mut()), -libc::EINVAL);
        assert!(last().contains("out is NULL"), "{}", last());
        zcnet_zc_sender_free(s);
    }
    drop(client);
    assert_eq!(reader.join().unwrap(), 80_000);

    let (client, _server) = tcp_pair();
    unsafe {
        let mut s = null_mut();
        if zcnet_uring_sender_new(client.as_raw_fd(), ZcnetMode::Copy.into(), &mut s) != 0 {
            netlab::skip::skip(&format!("no io_uring sender here: {}", last()));
            return;
        }
        let mut a = ZcnetAutoCounters::default();
        assert_eq!(zcnet_uring_auto(s, &mut a), -libc::EINVAL);
        assert!(last().contains("not in ZCNET_MODE_AUTO"), "{}", last());
        zcnet_uring_sender_free(s);
    }
}

/// A GSO sender on a TCP socket is `-EOPNOTSUPP` saying why, and leaves the socket as it was:
/// a plain sender takes it after (issue 49 item 1; it was `-EBUSY`, SO_ZEROCOPY left on).
#[test]
fn a_refused_constructor_leaves_the_socket_as_it_was() {
    let (client, _server) = tcp_pair();
    unsafe {
        let mut s = null_mut();
        let r =
            zcnet_zc_sender_new_gso(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), 1200, &mut s);
        assert_eq!(r, -libc::EOPNOTSUPP);
        assert!(last().contains("not a UDP socket"), "{}", last());
        assert!(s.is_null());
        let r = zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s);
        assert_eq!(r, 0, "{}", last());
        zcnet_zc_sender_free(s);
    }
}

/// `zcnet_zc_sender_close` lists what came back and was not reaped, refuses to drop
/// completions it has no room for, and says how many buffers the kernel still holds (issue 49
/// item 5).
#[test]
fn close_lists_what_came_back_and_counts_what_is_held() {
    let (client, mut server) = tcp_pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    let bufs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 64 * 1024]).collect();
    unsafe {
        let mut s = null_mut();
        let r = zcnet_zc_sender_new(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s);
        assert_eq!(r, 0, "{}", last());
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(
                zcnet_zc_send(s, b.as_ptr(), b.len(), i as u64 + 1),
                0,
                "{}",
                last()
            );
        }
        let mut out = [ZcnetCompletion::default(); 8];
        let mut n = 99;
        // Room for one of three: refused, the sender still open.
        let r = zcnet_zc_sender_close(s, 5000, out.as_mut_ptr(), 1, &mut n);
        assert_eq!(r, -libc::ENOBUFS, "{}", last());
        assert_eq!(n, 0);
        let r = zcnet_zc_sender_close(s, 5000, out.as_mut_ptr(), out.len(), &mut n);
        assert_eq!(r, 0, "none still loaned: {}", last());
        let mut ids: Vec<u64> = out[..n].iter().map(|c| c.user_data).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3], "each buffer listed once");
        assert_eq!(
            zcnet_zc_sender_close(null_mut::<ZcnetZcSender>(), 0, out.as_mut_ptr(), 8, &mut n),
            -libc::EINVAL
        );
    }
    drop(client);
    assert_eq!(reader.join().unwrap(), bufs.concat());
}

/// Issue 62 item 2, in C: `zcnet_zc_send` to a peer that does not read blocked in `poll` for
/// ever. A non-blocking socket now answers `-EAGAIN` (nothing loaned, the buffer the caller's
/// again at once); a blocking one `-ETIMEDOUT` after `zcnet_zc_set_stall_timeout`.
#[test]
fn a_peer_that_does_not_read_never_holds_a_send_for_ever() {
    // Loaned memory must outlive the kernel's hold on it: kept for the process's life.
    let byte: &'static [u8] = Box::leak(Box::new([7u8]));
    for nonblocking in [true, false] {
        // The kernel's smallest buffers; one-byte sends, taken whole or not at all.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        c.set_send_buffer_size(4096).unwrap();
        c.set_recv_buffer_size(4096).unwrap();
        c.connect(&l.local_addr().unwrap().into()).unwrap();
        let (server, _) = l.accept().unwrap();
        socket2::SockRef::from(&server)
            .set_recv_buffer_size(4096)
            .unwrap();
        c.set_nonblocking(nonblocking).unwrap();
        unsafe {
            let mut s = null_mut();
            let mode = ZcnetMode::ZeroCopy.into();
            assert_eq!(zcnet_zc_sender_new(c.as_raw_fd(), mode, &mut s), 0);
            assert_eq!(zcnet_zc_set_stall_timeout(s, 300), 0);
            let start = std::time::Instant::now();
            let r = loop {
                let r = zcnet_zc_send(s, byte.as_ptr(), 1, 0);
                if r != 0 {
                    break r;
                }
                let mut done = [ZcnetCompletion::default(); 64];
                let mut n = 0;
                assert_eq!(zcnet_zc_reap(s, done.as_mut_ptr(), 64, &mut n), 0);
                assert!(start.elapsed().as_secs() < 20, "never refused");
            };
            let want = if nonblocking {
                -libc::EAGAIN
            } else {
                -libc::ETIMEDOUT
            };
            assert_eq!(r, want, "nonblocking {nonblocking}: {}", last());
            zcnet_zc_sender_free(s);
        }
        drop(server);
    }
}
