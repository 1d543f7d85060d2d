//! The bench side of the control protocol: a session with `zcnet serve`, one `start`/`finish`
//! pair per run.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::bounds::GRACE;
use super::proto::{self, Key, Limits, Message, ProtoError, Role, VERSION};
use crate::measure::Far;

/// How long a busy server is retried before giving up.
const BUSY_WAIT: Duration = Duration::from_secs(15);

/// A session with a `zcnet serve`.
#[derive(Debug)]
pub struct Remote {
    conn: TcpStream,
    addr: SocketAddr,
    /// The server's machine (a report's `host`).
    pub host: serde_json::Value,
    /// The server's limits.
    pub limits: Limits,
    /// Seconds of the run started, while one is.
    running: Option<f64>,
}

impl Remote {
    /// Connects to the server at `addr` and says hello, with the token in `token_file`. A busy
    /// server is asked again for up to 15 s.
    ///
    /// # Errors
    /// The server cannot be reached, refuses the token or the version, or is not a zcnet
    /// server.
    pub fn connect(addr: SocketAddr, token_file: Option<&Path>) -> anyhow::Result<Remote> {
        let token = token_file.map(proto::read_token).transpose()?;
        let since = Instant::now();
        loop {
            match Remote::hello(addr, token.clone()) {
                Err(Hello::Busy(_)) if since.elapsed() < BUSY_WAIT => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(Hello::Busy(why)) => bail!("zcnet serve at {addr}: {why}"),
                Err(Hello::Failed(e)) => {
                    return Err(e.context(format!("zcnet serve at {addr}")));
                }
                Ok(r) => return Ok(r),
            }
        }
    }

    fn hello(addr: SocketAddr, token: Option<String>) -> Result<Remote, Hello> {
        // A connect that times out is tried again as `busy` is: a flood of connections fills the
        // server's listen queue and the kernel drops the SYNs (issue 62, the second adversarial
        // pass); a refused one says at once that nothing listens.
        let mut conn = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Hello::Busy(format!("connecting: {e}")));
            }
            Err(e) => return Err(Hello::Failed(anyhow::Error::new(e).context("connecting"))),
        };
        let _ = conn.set_nodelay(true);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
        let hello = Message::Hello {
            version: VERSION,
            token,
        };
        match proto::write(&mut conn, &hello) {
            Ok(()) => {}
            Err(ProtoError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return Err(Hello::Busy(format!("hello: {e}")));
            }
            Err(e) => return Err(Hello::Failed(anyhow::Error::new(e).context("hello"))),
        }
        match proto::read(&mut conn) {
            Ok(Message::Welcome {
                version: VERSION,
                host,
                limits,
            }) => Ok(Remote {
                conn,
                addr,
                host,
                limits,
                running: None,
            }),
            Ok(Message::Error { message }) if message.starts_with("busy") => {
                Err(Hello::Busy(message))
            }
            // A server of another release: say both versions and what to do.
            Ok(Message::Error { message }) if message.starts_with("protocol version") => {
                Err(Hello::Failed(anyhow::anyhow!(
                    "{message} (this zcnet speaks {VERSION}); run the same zcnet release on \
                     both hosts"
                )))
            }
            Ok(Message::Error { message }) => Err(Hello::Failed(anyhow::anyhow!("{message}"))),
            Ok(other) => Err(Hello::Failed(anyhow::anyhow!(
                "answered hello with {other:?}: not a zcnet serve of protocol {VERSION}"
            ))),
            // A server under a flood of connections may close a client before it read its
            // hello (it says `busy` first where it can): tried again, as `busy` is.
            Err(e @ (ProtoError::Closed | ProtoError::Truncated { .. })) => {
                Err(Hello::Busy(format!("hello: {e}")))
            }
            Err(ProtoError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                Err(Hello::Busy(format!("hello: {e}")))
            }
            Err(e) => Err(Hello::Failed(anyhow::Error::new(e).context("hello"))),
        }
    }

    /// The server's control address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This machine's address on the way to the server (where the server sends and connects).
    ///
    /// # Errors
    /// The socket has no address (closed).
    pub fn local_ip(&self) -> anyhow::Result<IpAddr> {
        Ok(self.conn.local_addr()?.ip())
    }

    /// Asks the server to start its side of a run; returns its data port (the server's
    /// address with the port it opened, port 0 where it connects out, and the run's key).
    ///
    /// # Errors
    /// The server refuses the run (its limits) or the connection fails.
    pub fn start(&mut self, role: Role, seconds: f64) -> anyhow::Result<DataPort> {
        if seconds > self.limits.max_seconds {
            bail!(
                "runs of {seconds} s, but zcnet serve at {} runs at most {} s (its --max-seconds)",
                self.addr,
                self.limits.max_seconds
            );
        }
        let _ = self.conn.set_read_timeout(Some(Duration::from_secs(30)));
        let at = self.addr;
        let ctx = || format!("zcnet serve at {at}: start");
        proto::write(&mut self.conn, &Message::Start { role, seconds }).with_context(ctx)?;
        match proto::read(&mut self.conn).with_context(ctx)? {
            Message::Ready { port, key } => {
                self.running = Some(seconds);
                Ok(DataPort {
                    addr: SocketAddr::new(self.addr.ip(), port),
                    key,
                })
            }
            Message::Error { message } => {
                bail!("zcnet serve at {} refused the run: {message}", self.addr)
            }
            other => bail!("zcnet serve answered start with {other:?}"),
        }
    }

    /// Says this side of the run is over and returns the far side's figures.
    ///
    /// # Errors
    /// The far side failed (its reason), or the connection did.
    pub fn finish(&mut self) -> anyhow::Result<Far> {
        let seconds = self
            .running
            .take()
            .context("finish without a started run")?;
        let wait = Duration::from_secs_f64(seconds) + GRACE + Duration::from_secs(10);
        let _ = self.conn.set_read_timeout(Some(wait));
        let at = self.addr;
        let ctx = || format!("zcnet serve at {at}: waiting for the run's figures");
        proto::write(&mut self.conn, &Message::Finish).with_context(ctx)?;
        match proto::read(&mut self.conn).with_context(ctx)? {
            Message::Done(far) => Ok(far),
            Message::Error { message } => {
                bail!("zcnet serve at {}: {message}", self.addr)
            }
            other => bail!("zcnet serve answered finish with {other:?}"),
        }
    }
}

impl Remote {
    /// One run: the far side started in `role`, then `local` on a thread of its own with the
    /// far side's data port, then `finish`. Where both sides fail, the far side's reason
    /// comes first (a limit it enforced resets our connection).
    ///
    /// # Errors
    /// Either side failed.
    pub fn run_with<T, F>(&mut self, role: Role, seconds: f64, local: F) -> anyhow::Result<(T, Far)>
    where
        T: Send + 'static,
        F: FnOnce(DataPort) -> anyhow::Result<T> + Send + 'static,
    {
        let data = self.start(role, seconds)?;
        // A thread, as in the labs: an io_uring sender's ring lets its socket go only once the
        // thread that submitted to it has ended.
        let ours = std::thread::spawn(move || local(data))
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the run's thread panicked")));
        match (ours, self.finish()) {
            (Ok(t), Ok(far)) => Ok((t, far)),
            (_, Err(far)) => Err(far),
            (Err(ours), Ok(_)) => Err(ours),
        }
    }
}

/// The far side's data port of one run, and the key that makes a connection or a socket the
/// run's own: the server takes data only from this host's address and only after the key
/// ([`proto`]'s module docs), so every data connection or socket of a run is made here.
#[derive(Clone, Debug)]
pub struct DataPort {
    /// The server's address and the port it opened (0 where it connects out).
    pub addr: SocketAddr,
    key: Key,
}

/// How many times, 100 ms apart, a UDP socket introduces itself before giving up.
const INTRODUCTIONS: u32 = 30;

impl DataPort {
    /// A TCP connection to the far side, introduced.
    ///
    /// # Errors
    /// The connection fails.
    pub fn connect(&self) -> anyhow::Result<TcpStream> {
        let s = TcpStream::connect(self.addr)
            .with_context(|| format!("connecting to the far side at {}", self.addr))?;
        self.introduce(&s)?;
        Ok(s)
    }

    /// Introduces a connection made with options of the caller's own: sends the key, which
    /// must be the first bytes the far side gets.
    ///
    /// # Errors
    /// The connection fails.
    pub fn introduce(&self, mut s: &TcpStream) -> anyhow::Result<()> {
        s.write_all(self.key())
            .with_context(|| format!("introducing the data connection to {}", self.addr))
    }

    /// The key, for a stream that reaches the far side another way (through a relay): its
    /// first bytes.
    pub fn key(&self) -> &[u8] {
        self.key.as_bytes()
    }

    /// A UDP socket connected to the far side, introduced: it sends the key until the far side
    /// echoes it, after which the far side takes this socket's datagrams and no others.
    ///
    /// # Errors
    /// The socket fails, or the far side does not answer for 3 s.
    pub fn udp(&self) -> anyhow::Result<UdpSocket> {
        let any: IpAddr = match self.addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        };
        let s = UdpSocket::bind(SocketAddr::new(any, 0))?;
        s.connect(self.addr)?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut echo = [0u8; Key::LEN + 1];
        for _ in 0..INTRODUCTIONS {
            s.send(self.key())
                .with_context(|| format!("introducing a UDP socket to {}", self.addr))?;
            match s.recv(&mut echo) {
                Ok(n) if self.key.is(&echo[..n]) => {
                    s.set_read_timeout(None)?;
                    return Ok(s);
                }
                // Anything else, or nothing yet (a datagram may be lost): again.
                Ok(_) => {}
                Err(e) if super::far::timed_out(&e) => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("introducing a UDP socket to {}", self.addr));
                }
            }
        }
        bail!(
            "the far side at {} did not answer this UDP socket's introduction within 3 s",
            self.addr
        )
    }
}

/// Checks what a receiving far side got against the `sent` bytes: all of a TCP stream (of
/// datagrams, no more than were sent), and each byte as the role's check expects.
///
/// # Errors
/// Bytes missing, extra or different.
pub fn received_all(role: &Role, sent: u64, far: &Far) -> anyhow::Result<()> {
    if let Some(at) = far.first_bad {
        bail!("the far side received different bytes than sent, from stream offset {at}");
    }
    let stream = matches!(
        role,
        Role::Receive {
            proto: super::proto::Proto::Tcp,
            ..
        }
    );
    if (stream && far.bytes != sent) || far.bytes > sent {
        bail!("sent {sent} bytes but the far side got {}", far.bytes);
    }
    Ok(())
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.running.is_none() {
            let _ = proto::write(&mut self.conn, &Message::Bye);
        }
    }
}

/// Why a hello did not lead to a session.
enum Hello {
    /// The server serves another client.
    Busy(String),
    /// Anything else.
    Failed(anyhow::Error),
}
