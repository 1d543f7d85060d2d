//! Issue 63: `zcnet_uring_resend`, the C form of `UringSender::resend_returned`: each buffer
//! goes again as it comes back, as the callback says, and every buffer comes back once at the
//! end through `zcnet_uring_reap`.
#![allow(clippy::undocumented_unsafe_blocks)] // the C contract, kept by each call below

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::time::Duration;

mod common;
use common::last;
use common::zcnet::*;

/// What the callback counts: sends left, and each buffer's offers.
struct Left {
    sends: u64,
    offered: Vec<u64>,
}

unsafe extern "C" fn again(
    ctx: *mut c_void,
    user_data: u64,
    ptr: *const u8,
    len: *mut usize,
) -> i32 {
    let left = unsafe { &mut *ctx.cast::<Left>() };
    left.offered.push(user_data);
    // The memory is the caller's again: its bytes are what was sent.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, *len) };
    assert!(
        bytes.iter().all(|&b| b == user_data as u8),
        "buffer {user_data}"
    );
    if left.sends == 0 {
        return 0;
    }
    left.sends -= 1;
    1
}

#[test]
fn resend_sends_each_buffer_again_as_the_callback_says() {
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Short: a datagram the loopback dropped under load is not waited for long.
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(rx.local_addr().unwrap()).unwrap();
    let buffers: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 1000]).collect();
    let (first, again_sends) = (buffers.len() as u64, 60u64);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        while n < first + again_sends && rx.recv(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    unsafe {
        let mut s = null_mut();
        if zcnet_uring_sender_new(sock.as_raw_fd(), ZcnetMode::Copy.into(), &mut s) != 0 {
            return netlab::skip::skip(&format!("no io_uring sender here: {}", last()));
        }
        for (i, b) in buffers.iter().enumerate() {
            assert_eq!(
                zcnet_uring_send(s, b.as_ptr(), b.len(), i as u64),
                0,
                "{}",
                last()
            );
        }
        let mut left = Left {
            sends: again_sends,
            offered: Vec::new(),
        };
        let ctx = (&mut left as *mut Left).cast::<c_void>();
        let start = std::time::Instant::now();
        let mut sent_again = 0;
        while sent_again < again_sends {
            let mut resent = 0;
            let rc = zcnet_uring_resend(s, 1000, Some(again), ctx, &mut resent);
            assert_eq!(rc, 0, "{}", last());
            sent_again += resent as u64;
            assert!(start.elapsed() < Duration::from_secs(20), "stalled");
        }
        assert_eq!(left.sends, 0);
        assert_eq!(zcnet_uring_drain(s, 10_000), 0, "{}", last());
        let mut done = [ZcnetCompletion::default(); 8];
        let mut n = 0;
        assert_eq!(zcnet_uring_reap(s, done.as_mut_ptr(), 8, &mut n), 0);
        let mut back: Vec<u64> = done[..n].iter().map(|c| c.user_data).collect();
        back.sort_unstable();
        assert_eq!(back, [0, 1, 2, 3], "every buffer back once");
        let mut c = ZcnetUringCounters::default();
        assert_eq!(zcnet_uring_counters(s, &mut c), 0);
        assert_eq!(c.requests, first + again_sends);
        // A NULL callback is refused.
        let mut resent = 0;
        assert_eq!(
            zcnet_uring_resend(s, 0, None, null_mut(), &mut resent),
            -libc::EINVAL
        );
        zcnet_uring_sender_free(s);
    }
    // Loopback datagrams may be dropped under load; none are made up.
    assert!(reader.join().unwrap() <= first + again_sends);
}
