//! The file sender's mmap window (`Mode::MmapZeroCopy`) against real sockets.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zcnet::file::{Config, FileSender, Mode};

/// A file of `len` bytes whose every byte says where it is (`i % 251`) and which file (`seed`).
fn file(len: usize, seed: u8) -> (std::fs::File, Vec<u8>) {
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ seed).collect();
    let path = std::env::temp_dir().join(format!("zcnet-file-{}-{seed}", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    (f, bytes)
}

/// Each mmap-zc send is a new set of MSG_ZEROCOPY sends on the same socket: the second file's
/// completions continue the socket's ids where the first file's ended (they restarted at 0
/// before, and a file's windows waited 30 s for completions that had come under other ids).
#[test]
fn several_mmap_zc_files_on_one_socket_each_come_back_and_arrive_intact() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        l.accept().unwrap().0.read_to_end(&mut got).unwrap();
        got
    });
    let config = Config {
        mode: Mode::MmapZeroCopy,
        window: 1 << 20,
        ..Config::default()
    };
    let mut tx = FileSender::new(&socket, config).unwrap();
    let mut expected = Vec::new();
    let start = Instant::now();
    for seed in 0..4u8 {
        let (f, bytes) = file(3 << 20, seed);
        assert_eq!(
            tx.send_file(&f, 0, bytes.len() as u64).unwrap(),
            bytes.len() as u64
        );
        expected.extend(bytes);
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "no file waited for completions: {:?}",
        start.elapsed()
    );
    drop(tx);
    socket.shutdown(std::net::Shutdown::Write).unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "every byte of every file, in order");
}

/// A socket that is not TCP is refused by the constructor, before a datagram is sent (issue 49
/// item 6).
#[test]
fn a_udp_socket_is_refused_as_not_tcp() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    match FileSender::new(&udp, Config::default()) {
        Err(e) => {
            // What it needs, then (issue 62) what it got.
            assert!(e.to_string().contains("connected TCP stream"), "{e}");
            let cause = std::error::Error::source(&e).map(ToString::to_string);
            assert_eq!(
                cause.as_deref(),
                Some("this one is UDP (SO_PROTOCOL)"),
                "{e}"
            );
            assert_eq!(e.sent(), 0);
        }
        Ok(_) => panic!("a UDP socket was taken"),
    }
}
