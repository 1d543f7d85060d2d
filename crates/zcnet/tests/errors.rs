//! Issue 22 item 5: one rule for every error of the library. `Display` says this layer's part
//! only; the cause is `source()`, which a printer of the chain (the CLI's `one_line`, anyhow's
//! `{:#}`) adds once. An error that printed its source too was printed "X: X" by the CLI.

use std::error::Error;
use std::io;

use zcnet::file::FileError;
use zcnet::loan::SendError;
use zcnet::msg_zerocopy::ZeroCopyError;
use zcnet::packet::PacketError;
use zcnet::peek::PeekError;
use zcnet::relay::RelayError;
use zcnet::tcp_rx::RxError;
use zcnet::uring::UringError;
use zcnet::xdp::XdpError;

/// A kernel error whose text is easy to find in a message.
fn cause() -> io::Error {
    io::Error::from_raw_os_error(libc::ECONNRESET)
}

/// `e` names its cause only through `source()`, and the chain holds that cause's text once.
fn check(e: &(dyn Error + 'static)) {
    let text = e.to_string();
    let source = e
        .source()
        .unwrap_or_else(|| panic!("{text:?} has no source"));
    let cause = source.to_string();
    assert!(
        !text.contains(&cause),
        "{text:?} prints its source {cause:?} itself"
    );
    assert!(!text.is_empty());
}

#[test]
fn every_error_with_a_cause_leaves_it_to_the_chain() {
    let errors: Vec<Box<dyn Error>> = vec![
        Box::new(RxError::Io {
            call: "recv",
            source: cause(),
        }),
        Box::new(RxError::Receive {
            received: 5,
            source: cause(),
        }),
        Box::new(RxError::Write(cause())),
        Box::new(SendError {
            error: cause(),
            sent: 0,
            buf: vec![0u8; 4],
        }),
        Box::new(FileError::Io {
            call: "sendfile",
            mode: "sendfile",
            sent: 23,
            source: cause(),
        }),
        Box::new(RelayError::Io {
            call: "accept",
            source: cause(),
        }),
        Box::new(RelayError::SourceReset {
            relayed: 23,
            source: cause(),
        }),
        Box::new(RelayError::Peek(PeekError::Io {
            call: "recv(MSG_PEEK)",
            source: cause(),
        })),
        Box::new(XdpError::Io {
            call: "bind(AF_XDP)",
            source: cause(),
        }),
        Box::new(PacketError::Io {
            call: "poll",
            source: cause(),
        }),
        Box::new(PacketError::InterfaceDown {
            interface: "veth-b".into(),
            deleted: true,
            source: cause(),
        }),
        Box::new(XdpError::InterfaceGone {
            iface: "veth-b".into(),
            source: cause(),
        }),
        Box::new(UringError::Io {
            call: "io_uring_enter",
            bytes: 64,
            source: cause(),
        }),
        Box::new(UringError::Eventfd {
            call: "eventfd",
            source: cause(),
        }),
        Box::new(ZeroCopyError::Io {
            call: "sendmsg(MSG_ZEROCOPY)",
            source: cause(),
        }),
    ];
    for e in &errors {
        check(e.as_ref());
        assert_says_nothing_twice(&chain(e.as_ref()));
    }
}

#[test]
fn a_file_error_names_its_mode_once() {
    let same = FileError::Io {
        call: "sendfile",
        mode: "sendfile",
        sent: 23,
        source: cause(),
    };
    assert_eq!(same.to_string(), "sendfile failed after 23 bytes");
    let other = FileError::Io {
        call: "read",
        mode: "copy",
        sent: 0,
        source: cause(),
    };
    assert_eq!(other.to_string(), "read failed after 0 bytes (copy)");
}

/// The whole chain as the CLI's `one_line` and libzcnet print it.
fn chain(e: &(dyn Error + 'static)) -> String {
    let parts: Vec<String> = std::iter::successors(Some(e), |&c| c.source())
        .map(ToString::to_string)
        .collect();
    parts.join(": ")
}

/// No run of three words is said twice in `line` ("…needs a TCP socket failed: not a TCP
/// socket" says "a TCP socket" twice): a stricter form of the CLI tests' `assert_no_repeat`,
/// which compares whole ": " segments.
fn assert_says_nothing_twice(line: &str) {
    let words: Vec<String> = line
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let runs: Vec<&[String]> = words.windows(3).collect();
    for (i, run) in runs.iter().enumerate() {
        assert!(
            !runs[i + 1..].contains(run),
            "{:?} is said twice in {line:?}",
            run.join(" ")
        );
    }
}

/// Issue 35 item 17: a peek cursor on a UDP socket is one clear line (it said "getsockopt(
/// SO_PROTOCOL): a peek cursor needs a TCP socket failed: not a TCP socket").
#[test]
fn a_peek_cursor_on_a_udp_socket_says_so_once() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = zcnet::peek::PeekCursor::new(&udp, Default::default()).unwrap_err();
    check(&e);
    let line = chain(&e);
    assert_says_nothing_twice(&line);
    assert!(line.ends_with("this one is UDP (SO_PROTOCOL)"), "{line}");
    assert!(line.contains("peek cursor"), "{line}");
}

/// Issue 62 item 4: sockets of the wrong kind passed the constructors (a listener the
/// `MSG_ZEROCOPY` sender's, failing at the first send; a Unix stream the io_uring sender's,
/// whose sends "completed" with nothing delivered; a listener or a never-connected socket the
/// receiver's, which then waited for ever). Every constructor now asks the kernel what the
/// socket is and refuses, in one line, saying what it needs and what it got.
#[test]
fn every_constructor_refuses_a_socket_of_the_wrong_kind_saying_what_it_is() {
    use std::os::fd::{AsFd, OwnedFd};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fresh = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let owned = |fd: std::os::fd::BorrowedFd<'_>| -> OwnedFd { fd.try_clone_to_owned().unwrap() };
    let cases: [(&str, std::os::fd::BorrowedFd<'_>, io::ErrorKind, &str); 4] = [
        (
            "listener",
            listener.as_fd(),
            io::ErrorKind::InvalidInput,
            "listening",
        ),
        (
            "unconnected TCP",
            fresh.as_fd(),
            io::ErrorKind::NotConnected,
            "not connected",
        ),
        (
            "Unix stream",
            unix.as_fd(),
            io::ErrorKind::Unsupported,
            "AF_UNIX",
        ),
        (
            "unconnected UDP",
            udp.as_fd(),
            io::ErrorKind::NotConnected,
            "not connected",
        ),
    ];
    let kind_of = |e: &(dyn Error + 'static)| {
        std::iter::successors(Some(e), |&c| c.source())
            .find_map(|c| c.downcast_ref::<io::Error>())
            .map(io::Error::kind)
    };
    for (name, fd, kind, what) in cases {
        let mut refusals: Vec<(&str, Box<dyn Error>)> = Vec::new();
        let udp = name == "unconnected UDP";
        if let Err(e) = zcnet::msg_zerocopy::ZeroCopySender::<OwnedFd, Vec<u8>>::new(
            owned(fd),
            Default::default(),
        ) {
            refusals.push(("MSG_ZEROCOPY sender", Box::new(e.error)));
        } else {
            panic!("{name}: the MSG_ZEROCOPY sender took it");
        }
        // The io_uring sender sends to any UDP socket (`send_to`); a kernel without io_uring
        // says so before the socket is looked at.
        match zcnet::uring::UringSender::<OwnedFd, Vec<u8>>::new(owned(fd), Default::default()) {
            Err(e) if matches!(e.error, UringError::Socket { .. }) => {
                refusals.push(("io_uring sender", Box::new(e.error)))
            }
            Err(e) => assert!(
                matches!(e.error, UringError::Unsupported { .. }),
                "{name}: {}",
                chain(&e.error)
            ),
            Ok(_) => assert!(udp, "{name}: the io_uring sender took it"),
        }
        if !udp {
            let rx = zcnet::tcp_rx::TcpZeroCopyReceiver::new(fd, Default::default());
            refusals.push((
                "receiver",
                Box::new(
                    rx.err()
                        .unwrap_or_else(|| panic!("{name}: the receiver took it")),
                ),
            ));
            let peek = zcnet::peek::PeekCursor::new(fd, Default::default());
            refusals.push((
                "peek cursor",
                Box::new(
                    peek.err()
                        .unwrap_or_else(|| panic!("{name}: the cursor took it")),
                ),
            ));
            let file = zcnet::file::FileSender::new(fd, Default::default());
            refusals.push((
                "file sender",
                Box::new(
                    file.err()
                        .unwrap_or_else(|| panic!("{name}: the file sender took it")),
                ),
            ));
        }
        for (who, e) in refusals {
            let line = chain(e.as_ref());
            assert!(line.contains(what), "{name}, {who}: {line}");
            assert_eq!(kind_of(e.as_ref()), Some(kind), "{name}, {who}: {line}");
            assert_says_nothing_twice(&line);
        }
    }
}
