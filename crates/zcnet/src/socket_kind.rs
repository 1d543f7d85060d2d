//! The kind of socket each mechanism takes, checked in its constructor (issue 62 item 4: a
//! listening TCP socket passed the `MSG_ZEROCOPY` sender's constructor and failed at the first
//! send; a Unix stream socket passed the io_uring sender's, whose sends then "completed" with
//! nothing delivered; a listening or never-connected TCP socket made `zcnet_rx_recv` wait for
//! ever).
//!
//! One check, four questions asked of the kernel, in this order: `SO_DOMAIN` (IPv4 or IPv6),
//! `SO_PROTOCOL` (TCP, UDP), `SO_ACCEPTCONN` (not a listener), and whether it is connected where
//! it must be (`getpeername(2)`; a TCP socket still connecting, `SYN_SENT`, counts, and so does
//! one whose peer has reset it after data flowed, whose queued bytes are still to be read). The
//! error names what was found and the `io::ErrorKind` C turns into its errno:
//!
//! | found | kind | C |
//! |---|---|---|
//! | not a socket | the kernel's | `-ENOTSOCK` |
//! | another family (`AF_UNIX`, ...) or protocol | `Unsupported` | `-EOPNOTSUPP` |
//! | a listening socket | `InvalidInput` | `-EINVAL` |
//! | not connected where it must be | `NotConnected` | `-ENOTCONN` |

use std::io;
use std::os::fd::BorrowedFd;

use crate::sys;

/// What a mechanism takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Need {
    /// A TCP stream, connected (or connecting).
    pub(crate) tcp: bool,
    /// A UDP socket.
    pub(crate) udp: bool,
    /// A UDP socket must be connected (its sends name no destination).
    pub(crate) udp_connected: bool,
}

// Each feature uses some of these.
#[allow(dead_code)]
impl Need {
    /// A connected TCP stream.
    pub(crate) const TCP: Need = Need {
        tcp: true,
        udp: false,
        udp_connected: false,
    };
    /// A connected TCP stream or a connected UDP socket.
    pub(crate) const CONNECTED: Need = Need {
        tcp: true,
        udp: true,
        udp_connected: true,
    };
    /// A connected TCP stream or any UDP socket.
    pub(crate) const TCP_OR_UDP: Need = Need {
        tcp: true,
        udp: true,
        udp_connected: false,
    };
}

/// Checks that `fd` is a socket of the kind `need` says.
///
/// # Errors
/// What was found, as the module's table says.
pub(crate) fn check(fd: BorrowedFd<'_>, need: Need) -> io::Result<()> {
    let unsupported = |found: String| io::Error::new(io::ErrorKind::Unsupported, found);
    let domain = sys::sockopt::domain(fd)?;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        let family = match domain {
            libc::AF_UNIX => "AF_UNIX".to_owned(),
            libc::AF_PACKET => "AF_PACKET".to_owned(),
            libc::AF_NETLINK => "AF_NETLINK".to_owned(),
            n => format!("family {n}"),
        };
        return Err(unsupported(format!(
            "this one is an {family} socket (SO_DOMAIN)"
        )));
    }
    let protocol = sys::sockopt::protocol(fd)?;
    let tcp = match protocol {
        libc::IPPROTO_TCP if need.tcp => true,
        libc::IPPROTO_UDP if need.udp => false,
        libc::IPPROTO_TCP => return Err(unsupported("this one is TCP (SO_PROTOCOL)".into())),
        libc::IPPROTO_UDP => return Err(unsupported("this one is UDP (SO_PROTOCOL)".into())),
        n => {
            return Err(unsupported(format!(
                "this one's protocol is {n}, neither TCP nor UDP (SO_PROTOCOL)"
            )));
        }
    };
    if tcp && sys::sockopt::accepts_connections(fd)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "this one is listening (SO_ACCEPTCONN): pass a connection it accepted",
        ));
    }
    if (tcp || need.udp_connected) && sys::net::peer_addr(fd)?.is_none() && !was_connected(fd, tcp)
    {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "this one is not connected (getpeername: ENOTCONN): connect it first",
        ));
    }
    Ok(())
}

/// Whether a TCP socket without a peer address is connecting (`SYN_SENT`) or was connected
/// (reset or closed after it had a peer: its queued bytes are still the receiver's).
fn was_connected(fd: BorrowedFd<'_>, tcp: bool) -> bool {
    if !tcp {
        return false;
    }
    let Ok(info) = crate::tcp_info::tcp_info(&fd) else {
        return false;
    };
    use crate::tcp_info::TcpState;
    match info.state {
        TcpState::SynSent => true,
        TcpState::Close => {
            info.bytes_acked.unwrap_or(0) > 0 || info.bytes_received.unwrap_or(0) > 0
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsFd;

    fn kind(fd: BorrowedFd<'_>, need: Need) -> Option<io::ErrorKind> {
        check(fd, need).err().map(|e| e.kind())
    }

    #[test]
    fn each_kind_is_told_apart() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        assert_eq!(kind(c.as_fd(), Need::TCP), None);
        assert_eq!(kind(a.as_fd(), Need::CONNECTED), None);
        assert_eq!(
            kind(l.as_fd(), Need::TCP),
            Some(io::ErrorKind::InvalidInput)
        );
        let fresh = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None);
        if let Ok(fresh) = fresh {
            assert_eq!(
                kind(fresh.as_fd(), Need::TCP),
                Some(io::ErrorKind::NotConnected)
            );
        }
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(kind(u.as_fd(), Need::TCP_OR_UDP), None);
        assert_eq!(
            kind(u.as_fd(), Need::CONNECTED),
            Some(io::ErrorKind::NotConnected)
        );
        assert_eq!(kind(u.as_fd(), Need::TCP), Some(io::ErrorKind::Unsupported));
        u.connect(u.local_addr().unwrap()).unwrap();
        assert_eq!(kind(u.as_fd(), Need::CONNECTED), None);
        assert_eq!(
            kind(
                c.as_fd(),
                Need {
                    tcp: false,
                    ..Need::CONNECTED
                }
            ),
            Some(io::ErrorKind::Unsupported)
        );
        let (x, _y) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = check(x.as_fd(), Need::TCP_OR_UDP).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("AF_UNIX"), "{e}");
        let file = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            check(file.as_fd(), Need::TCP).unwrap_err().raw_os_error(),
            Some(libc::ENOTSOCK)
        );
    }
}
