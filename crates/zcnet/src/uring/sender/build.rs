//! How a sender is built: everything that can fail first, the socket changed last; the ring it
//! opens and the socket it checks.

use super::ring::{Ring, open_ring};
use super::*;

impl<S: ExclusiveSocket, B: OwnedBuf> UringSender<S, B> {
    /// Everything that can fail first, the socket changed last (`UDP_SEGMENT`), the sender made
    /// when nothing can fail any more: a refusal hands the socket back as it was given.
    pub(super) fn build(
        socket: S,
        config: Config,
        pool: Option<&Pool>,
    ) -> Result<Self, NewError<S, UringError>> {
        macro_rules! refuse {
            ($e:expr) => {
                return Err(NewError { error: $e, socket })
            };
        }
        if config.window == 0 || config.window > config.entries as usize {
            refuse!(UringError::Window {
                window: config.window,
                entries: config.entries,
            });
        }
        if let Err(e) = check_socket(socket.as_fd(), config.segment.is_some()) {
            refuse!(e);
        }
        let claim = match Claim::take(socket.as_fd()) {
            Ok(c) => c,
            Err(None) => refuse!(UringError::SocketInUse {
                reason: crate::loan::IN_USE,
            }),
            Err(Some(e)) => refuse!(UringError::Fstat(e)),
        };
        let mut ring = match open_ring(config.entries, config.setup) {
            Ok(r) => r,
            Err(e) => refuse!(e),
        };
        ring.register_file(socket.as_fd());
        let ty = sys::sockopt::socket_type(socket.as_fd()).unwrap_or(0);
        let (mode, fallback) = mode_on(&mut ring, config.mode);
        let mut auto = (mode == Mode::Auto).then(|| {
            Box::new(Decider::new(Choice::for_socket(
                SendPath::UringZc,
                &socket,
                config.segment.map(crate::udp_gso::Segment::get),
            )))
        });
        let mut fixed = mode == Mode::ZeroCopyFixed;
        if let Some(pool) = pool {
            match register_pool(&mut ring, pool, mode) {
                // Auto sends from the pool by zero copy where it could register it.
                Ok(true) if mode == Mode::Auto => {
                    fixed = true;
                    // The route and its device as found above, for the registered path.
                    auto = auto.map(|d| {
                        Box::new(Decider::new(d.choice().for_path(SendPath::UringZcFixed)))
                    });
                }
                Ok(_) => {}
                Err(e) => refuse!(e),
            }
        }
        let stream = ty == libc::SOCK_STREAM;
        if stream {
            ring.keep_order();
        }
        // The only change to the socket, and the last step that can fail: a sender refused
        // earlier (no io_uring, say) leaves the caller's socket sending single datagrams as
        // before.
        if let Some(segment) = config.segment
            && let Err(e) = crate::udp_gso::set_segment(&socket, Some(segment))
        {
            refuse!(UringError::Unsupported {
                feature: "UDP_SEGMENT",
                reason: e.reason(),
            });
        }
        Ok(UringSender {
            fd: socket.as_fd().as_raw_fd(),
            fixed,
            auto,
            ring,
            socket,
            config,
            mode,
            fallback,
            stream,
            queued: 0,
            closed: false,
            elsewhere: Vec::new(),
            returned: VecDeque::new(),
            spare: VecDeque::new(),
            sent_to: false,
            counters: Counters::default(),
            kick: crate::loan::DeferredKick::default(),
            _claim: Some(claim),
        })
    }
}

/// The mode `asked` for where the ring's kernel has its operations (`IORING_REGISTER_PROBE`),
/// else copy; and why it fell back, if it did.
fn mode_on<B: OwnedBuf>(ring: &mut Ring<B>, asked: Mode) -> (Mode, Option<String>) {
    match asked {
        Mode::Copy => (Mode::Copy, None),
        m => match ring.probe() {
            Ok(ops) if ops.send_zc && ops.sendmsg_zc => (m, None),
            Ok(ops) if ops.send_zc => (
                m,
                Some("IORING_OP_SENDMSG_ZC is missing (Linux 6.1): send_to copies".to_owned()),
            ),
            Ok(_) => (
                Mode::Copy,
                Some(
                    "IORING_OP_SEND_ZC is missing (needs Linux 6.0): sending by copy \
                     (IORING_OP_SEND)"
                        .to_owned(),
                ),
            ),
            Err(e) => (
                Mode::Copy,
                Some(format!(
                    "IORING_REGISTER_PROBE failed ({e}; needs Linux 5.6): sending by copy"
                )),
            ),
        },
    }
}

/// Registers `pool` with the ring where `mode` sends from it: [`Mode::ZeroCopyFixed`] must
/// (a limit that refuses it is the error, naming the `ulimit -l` that would do),
/// [`Mode::Auto`] does where `RLIMIT_MEMLOCK` allows. Whether the pool is registered.
fn register_pool<B: OwnedBuf>(
    ring: &mut Ring<B>,
    pool: &Pool,
    mode: Mode,
) -> Result<bool, UringError> {
    let need = pool.region_len() as u64;
    match mode {
        Mode::Auto => Ok(memlock_check(need).is_ok() && ring.register(&pool.0).is_ok()),
        Mode::ZeroCopyFixed => {
            memlock_check(need)?;
            ring.register(&pool.0)
                .map_err(|source| match source.raw_os_error() {
                    Some(libc::ENOMEM) => memlock_check_failed(need),
                    _ => UringError::Io {
                        call: "io_uring_register(IORING_REGISTER_BUFFERS)",
                        bytes: pool.region_len(),
                        source,
                    },
                })?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// What a socket must be for a sender: a connected TCP stream or a UDP socket (connected for
/// `send`, any for `send_to`), IPv4 or IPv6; UDP where it is to send GSO trains.
fn check_socket(fd: BorrowedFd<'_>, trains: bool) -> Result<(), UringError> {
    let (need, what) = match trains {
        true => (
            crate::socket_kind::Need {
                tcp: false,
                ..crate::socket_kind::Need::TCP_OR_UDP
            },
            "not a UDP socket: GSO trains (Config::segment) are UDP's",
        ),
        false => (
            crate::socket_kind::Need::TCP_OR_UDP,
            "the io_uring sender needs a connected TCP stream or a UDP socket, IPv4 or IPv6",
        ),
    };
    crate::socket_kind::check(fd, need).map_err(|source| UringError::Socket { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsFd;

    #[test]
    fn a_sender_takes_tcp_streams_and_udp_sockets_and_trains_only_on_udp() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (unix, _) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(check_socket(stream.as_fd(), false).is_ok());
        assert!(check_socket(udp.as_fd(), false).is_ok());
        assert!(check_socket(udp.as_fd(), true).is_ok());
        for (fd, trains, says) in [
            (stream.as_fd(), true, "GSO trains"),
            (listener.as_fd(), false, "connected TCP stream"),
            (unix.as_fd(), false, "connected TCP stream"),
        ] {
            match check_socket(fd, trains) {
                Err(UringError::Socket { what, .. }) => assert!(what.contains(says), "{what}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
