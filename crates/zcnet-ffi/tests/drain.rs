//! Issue 35 item 12: `zcnet_zc_drain` and `zcnet_uring_drain` with a buffer still loaned when
//! the time runs out are `-ETIMEDOUT`, as zcnet.h says (they were `-EINVAL`: the library's
//! timeout carries no kernel errno, and every error without one became `-EINVAL`).
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::io::Read;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::time::Duration;

mod common;
use common::last;
use common::zcnet::*;

/// A sender's functions, MSG_ZEROCOPY's or io_uring's: the same contract (zcnet.h).
struct Api<S> {
    new: unsafe extern "C" fn(i32, i32, *mut *mut S) -> i32,
    send: unsafe extern "C" fn(*mut S, *const u8, usize, u64) -> i32,
    drain: unsafe extern "C" fn(*mut S, u32) -> i32,
    reap: unsafe extern "C" fn(*mut S, *mut ZcnetCompletion, usize, *mut usize) -> i32,
    free: unsafe extern "C" fn(*mut S),
}

/// 256 KiB loaned over TCP to a peer that reads nothing and has a receive buffer of 16 KiB (a
/// fixed one: no autotuning): most of it stays queued, so the loan cannot end and the drain
/// runs out of time. Once the peer reads everything, the drain ends and the buffer comes back
/// whole.
fn a_drain_with_a_buffer_still_loaned_times_out<S>(api: Api<S>) {
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // Inherited by the accepted socket. (Much smaller, the window falls below a segment and
    // the transfer crawls once the peer reads.)
    listener.set_recv_buffer_size(16 << 10).unwrap();
    listener
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    listener.listen(1).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let client = std::net::TcpStream::connect(addr).unwrap();
    // Room for the whole buffer in the send queue, so that the send itself does not block;
    // should it, it fails after 10 s instead of hanging the test.
    let sock = socket2::SockRef::from(&client);
    sock.set_send_buffer_size(4 << 20).unwrap();
    sock.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    let mut server: std::net::TcpStream = server.into();
    let buf: Vec<u8> = (0..256u32 << 10).map(|i| (i % 253) as u8).collect();
    unsafe {
        let mut s = null_mut();
        let rc = (api.new)(client.as_raw_fd(), ZcnetMode::ZeroCopy.into(), &mut s);
        if rc != 0 {
            return netlab::skip::skip(&format!("no sender here: {}", last()));
        }
        assert_eq!((api.send)(s, buf.as_ptr(), buf.len(), 7), 0, "{}", last());
        assert_eq!((api.drain)(s, 200), -libc::ETIMEDOUT, "{}", last());
        assert!(last().contains("still loaned"), "{}", last());
        // The peer reads; the loan ends.
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 256 << 10];
            server.read_exact(&mut got).map(|()| got)
        });
        assert_eq!((api.drain)(s, 10_000), 0, "{}", last());
        let mut done = [ZcnetCompletion::default(); 2];
        let mut n = 0;
        assert_eq!((api.reap)(s, done.as_mut_ptr(), 2, &mut n), 0, "{}", last());
        assert_eq!(n, 1);
        assert_eq!(
            (done[0].user_data, done[0].sent, done[0].error),
            (7, buf.len(), 0)
        );
        (api.free)(s);
        assert!(reader.join().unwrap().unwrap() == buf);
    }
}

#[test]
fn zc_drain_with_a_buffer_still_loaned_is_etimedout() {
    a_drain_with_a_buffer_still_loaned_times_out(Api {
        new: zcnet_zc_sender_new,
        send: zcnet_zc_send,
        drain: zcnet_zc_drain,
        reap: zcnet_zc_reap,
        free: zcnet_zc_sender_free,
    });
}

#[test]
fn uring_drain_with_a_buffer_still_loaned_is_etimedout() {
    a_drain_with_a_buffer_still_loaned_times_out(Api {
        new: zcnet_uring_sender_new,
        send: zcnet_uring_send,
        drain: zcnet_uring_drain,
        reap: zcnet_uring_reap,
        free: zcnet_uring_sender_free,
    });
}
