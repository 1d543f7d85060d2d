//! The control protocol of `zcnet serve` and `zcnet bench ... --remote`: one TCP connection,
//! each message a 4-byte big-endian length and that many bytes of JSON (at most
//! [`MAX_MESSAGE`]). The client speaks first:
//!
//! ```text
//! client                                   server
//! hello {version, token}          ->
//!                                 <-       welcome {version, host, limits} | error
//! start {role, seconds}           ->       (checks the limits, opens its data socket)
//!                                 <-       ready {port, key} | error
//!            ... the run's data, on its own connection or datagrams ...
//! finish                          ->
//!                                 <-       done {far side's figures} | error
//! start ... (more runs)  |  bye
//! ```
//!
//! An `error` ends the session; the server goes on accepting.
//!
//! A run's data belongs to its session (version 2; version 1 let any peer that reached the port
//! first take the run): the server takes data only from the control connection's peer address,
//! and only once it shows the run's [`Key`], sent in `ready` on the control connection. A TCP
//! data connection's first bytes are the key, whichever way the data then flows; a UDP sender's
//! socket sends the key as a datagram until the server echoes it, and the server then takes
//! datagrams from that socket alone. `generate` and `fetch` send or connect only to the control
//! connection's peer.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};

use serde::{Deserialize, Serialize};

use crate::measure::Far;

/// The protocol version this build speaks; `hello` with another is refused.
pub const VERSION: u32 = 2;

/// The longest control message, in bytes of JSON.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// A control message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Client: the version it speaks and the shared token, if the server wants one.
    Hello {
        /// [`VERSION`].
        version: u32,
        /// Contents of the client's token file.
        token: Option<String>,
    },
    /// Server: accepted; its machine and limits.
    Welcome {
        /// [`VERSION`].
        version: u32,
        /// The server's machine, as a report's `host`.
        host: serde_json::Value,
        /// What it will run.
        limits: Limits,
    },
    /// Client: run the far side of one run.
    Start {
        /// What the server does.
        role: Role,
        /// Length of the run; the server refuses more than its limit.
        seconds: f64,
    },
    /// Server: set up; the data port on the server's address (0 where the server connects).
    Ready {
        /// Port of the data socket.
        port: u16,
        /// What makes a data connection or socket this run's own.
        key: Key,
    },
    /// Client: its side of the run is over.
    Finish,
    /// Server: the far side's figures for the run.
    Done(Far),
    /// Either side: the session ends, with this reason.
    Error {
        /// One line.
        message: String,
    },
    /// Client: no more runs.
    Bye,
}

impl Message {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Welcome { .. } => "welcome",
            Message::Start { .. } => "start",
            Message::Ready { .. } => "ready",
            Message::Finish => "finish",
            Message::Done(_) => "done",
            Message::Error { .. } => "error",
            Message::Bye => "bye",
        }
    }
}

/// Tells a peer why it is not served, as an `error`, without waiting on it: a message this
/// short fits a fresh socket's buffer, and one that does not is not worth the server's time.
pub fn refuse(mut conn: std::net::TcpStream, why: &str) {
    let _ = conn.set_nonblocking(true);
    let _ = write(
        &mut conn,
        &Message::Error {
            message: why.to_owned(),
        },
    );
}

/// What the server runs: the far side of a bench.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Role {
    /// Receive on a port of the server's address: one TCP connection to its end, or UDP
    /// datagrams until the client's `finish` and a quiet moment.
    Receive {
        /// TCP or UDP.
        proto: Proto,
        /// What the received stream must be.
        check: Check,
        /// Read no faster than this many bits per second (TCP): a slow destination.
        rate_bps: Option<u64>,
    },
    /// Accept one TCP connection and stream the pattern to it for the run's seconds.
    Send {
        /// Send with `MSG_ZEROCOPY` (what lets a loopback receiver map pages).
        zerocopy: bool,
        /// `TCP_MAXSEG` of the listening socket.
        mss: Option<i32>,
    },
    /// Send UDP datagrams making `frame`-byte Ethernet frames to the client's address and
    /// `port`, as fast as the socket takes them, for the run's seconds.
    Generate {
        /// Bytes per frame on the wire (Ethernet, IPv4 and UDP headers included).
        frame: usize,
        /// Destination port on the client.
        port: u16,
    },
    /// Fetch `/f` over HTTP/1.1 from the client's `port` on `clients` connections for the
    /// run's seconds; every body must be `size` bytes of the pattern.
    Fetch {
        /// Port of the client's HTTP server.
        port: u16,
        /// Connections, each fetching one file after another.
        clients: usize,
        /// Length of the file.
        size: u64,
    },
}

impl Role {
    /// A TCP receiver checking the stream against the pattern from offset 0, reading no faster
    /// than `rate_bps` where given.
    pub fn pattern_sink(rate_bps: Option<u64>) -> Role {
        Role::Receive {
            proto: Proto::Tcp,
            check: Check::Pattern,
            rate_bps,
        }
    }
}

/// Transport of a [`Role::Receive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// One TCP connection.
    Tcp,
    /// Datagrams.
    Udp,
}

/// What a received TCP stream must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// Anything: bytes are counted only.
    Count,
    /// The pattern (`netlab::pattern`) from offset 0.
    Pattern,
    /// Sends of `size` bytes, the `k`-th the pattern from offset `(k * size) % span`: the
    /// benches' buffer pools, sent in order and wrapping.
    Pool {
        /// Bytes per send.
        size: u64,
        /// Pool length less one send.
        span: u64,
    },
    /// Whole buffers of `size` bytes of a pool of `count`, in any order, buffer `k` the
    /// pattern from offset `k * size`: the io_uring bench's pool, whose buffers go out again in
    /// the order they come back.
    Buffers {
        /// Bytes per buffer.
        size: u64,
        /// Buffers in the pool.
        count: u64,
    },
}

/// A run's secret: 32 hex digits from the kernel's random source, new for every run. It is
/// sent in the clear, as the token is: it keeps other peers from taking a run, it is no secret
/// from whoever reads the network between the hosts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Key(String);

impl Key {
    /// Bytes of a key on the wire.
    pub const LEN: usize = 32;

    /// A new key.
    ///
    /// # Errors
    /// `/dev/urandom` cannot be read.
    pub fn new() -> std::io::Result<Key> {
        let mut random = [0u8; Key::LEN / 2];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        Ok(Key(random.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The bytes a data connection or introducing datagram carries.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Whether `bytes` are this key, in time independent of where they differ.
    pub fn is(&self, bytes: &[u8]) -> bool {
        same_bytes(self.as_bytes(), bytes)
    }
}

// Never printed whole: logs and errors may be read by others than the client.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl TryFrom<String> for Key {
    type Error = String;

    fn try_from(s: String) -> Result<Key, String> {
        if s.len() == Key::LEN && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Key(s))
        } else {
            Err(format!("a run's key is {} hex digits", Key::LEN))
        }
    }
}

impl From<Key> for String {
    fn from(k: Key) -> String {
        k.0
    }
}

/// The server's limits, told in `welcome`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Longest run.
    pub max_seconds: f64,
    /// Most bytes one run may move.
    pub max_bytes: u64,
    /// Most connections of a fetch.
    pub max_clients: usize,
}

/// A control message that could not be read or written.
#[derive(Debug)]
pub enum ProtoError {
    /// The connection ended between messages.
    Closed,
    /// The connection ended inside a message.
    Truncated {
        /// Bytes the message should have had (header included).
        expected: usize,
        /// Bytes that came.
        got: usize,
    },
    /// The length prefix asks for more than [`MAX_MESSAGE`].
    TooLong(u32),
    /// Not a message of this protocol.
    Json(serde_json::Error),
    /// The socket failed (a timeout included).
    Io(std::io::Error),
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtoError::Closed => f.write_str("the connection closed"),
            ProtoError::Truncated { expected, got } => write!(
                f,
                "the connection closed inside a message ({got} of {expected} bytes)"
            ),
            ProtoError::TooLong(n) => write!(
                f,
                "a control message of {n} bytes (at most {MAX_MESSAGE}): not a zcnet client or \
                 server"
            ),
            ProtoError::Json(e) => write!(f, "not a zcnet control message: {e}"),
            ProtoError::Io(e) if is_timeout(e) => f.write_str("no message in time"),
            ProtoError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ProtoError {}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Writes `m` as one message.
///
/// # Errors
/// The socket fails.
pub fn write(w: &mut impl Write, m: &Message) -> Result<(), ProtoError> {
    let body = serde_json::to_vec(m).map_err(ProtoError::Json)?;
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    if len as usize > MAX_MESSAGE {
        return Err(ProtoError::TooLong(len));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).map_err(ProtoError::Io)?;
    w.flush().map_err(ProtoError::Io)
}

/// Reads one message.
///
/// # Errors
/// [`ProtoError`]: the connection closed or timed out, the length is over [`MAX_MESSAGE`], the
/// body is not a message.
pub fn read(r: &mut impl Read) -> Result<Message, ProtoError> {
    let mut head = [0u8; 4];
    let got = fill(r, &mut head)?;
    match got {
        0 => return Err(ProtoError::Closed),
        4 => {}
        _ => {
            return Err(ProtoError::Truncated { expected: 4, got });
        }
    }
    let len = u32::from_be_bytes(head);
    if len as usize > MAX_MESSAGE {
        return Err(ProtoError::TooLong(len));
    }
    let mut body = vec![0u8; len as usize];
    let got = fill(r, &mut body)?;
    if got < body.len() {
        return Err(ProtoError::Truncated {
            expected: 4 + body.len(),
            got: 4 + got,
        });
    }
    serde_json::from_slice(&body).map_err(ProtoError::Json)
}

/// Reads until `buf` is full or the stream ends; the count read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, ProtoError> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(&mut buf[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProtoError::Io(e)),
        }
    }
    Ok(at)
}

/// The most a token file may hold: a token is a line, not a document (`--token-file
/// /dev/zero` was read whole, 2 GB in 3 s).
pub const MAX_TOKEN_FILE: u64 = 4096;

/// The token in the file at `path`, trimmed: what `serve --token-file` wants and `bench
/// --token-file` sends.
///
/// # Errors
/// One line naming the file: it cannot be read, is larger than [`MAX_TOKEN_FILE`], is not
/// text, or holds only white space.
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = crate::capped::read_to_string(path, MAX_TOKEN_FILE, "a token file")
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_owned())
}

/// Whether two tokens are equal, in time independent of where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn messages_read_back_as_written() {
        let all = [
            Message::Hello {
                version: VERSION,
                token: Some("s3cret".into()),
            },
            Message::Start {
                role: Role::Receive {
                    proto: Proto::Tcp,
                    check: Check::Pool {
                        size: 64000,
                        span: 268_371_456,
                    },
                    rate_bps: None,
                },
                seconds: 1.5,
            },
            Message::Start {
                role: Role::Fetch {
                    port: 8080,
                    clients: 64,
                    size: 1 << 24,
                },
                seconds: 2.0,
            },
            Message::Ready {
                port: 40000,
                key: Key::new().unwrap(),
            },
            Message::Finish,
            Message::Done(Far {
                bytes: 7,
                verified: Some(true),
                ..Far::default()
            }),
            Message::Bye,
        ];
        for m in all {
            let mut buf = Vec::new();
            write(&mut buf, &m).unwrap();
            assert_eq!(read(&mut buf.as_slice()).unwrap(), m);
        }
    }

    #[test]
    fn the_wire_form_is_length_and_json() {
        let bytes = frame(br#"{"ready":{"port":5201,"key":"00112233445566778899aabbccddeeff"}}"#);
        assert_eq!(
            read(&mut bytes.as_slice()).unwrap(),
            Message::Ready {
                port: 5201,
                key: Key("00112233445566778899aabbccddeeff".into())
            }
        );
        let bytes = frame(br#""finish""#);
        assert_eq!(read(&mut bytes.as_slice()).unwrap(), Message::Finish);
        let bytes =
            frame(br#"{"start":{"role":{"kind":"generate","frame":64,"port":9},"seconds":1}}"#);
        assert!(matches!(
            read(&mut bytes.as_slice()).unwrap(),
            Message::Start {
                role: Role::Generate { frame: 64, port: 9 },
                ..
            }
        ));
    }

    #[test]
    fn bad_input_is_an_error_of_its_kind() {
        assert!(matches!(read(&mut &b""[..]), Err(ProtoError::Closed)));
        assert!(matches!(
            read(&mut &b"\0\0"[..]),
            Err(ProtoError::Truncated {
                expected: 4,
                got: 2
            })
        ));
        let mut cut = frame(br#"{"ready":{"port":1,"key":"00"}}"#);
        cut.truncate(10);
        assert!(matches!(
            read(&mut cut.as_slice()),
            Err(ProtoError::Truncated { got: 10, .. })
        ));
        assert!(matches!(
            read(&mut &b"\xff\xff\xff\xff"[..]),
            Err(ProtoError::TooLong(u32::MAX))
        ));
        // HTTP, say: "GET " is a length of 1.2 GB.
        assert!(matches!(
            read(&mut &b"GET / HTTP/1.1\r\n\r\n"[..]),
            Err(ProtoError::TooLong(_))
        ));
        for body in [
            &br#"{"ready":{"port":70000}}"#[..],
            br#"{"ready":{"port":1,"extra":2}}"#,
            // Version 1's ready, and keys not of the form.
            br#"{"ready":{"port":1}}"#,
            br#"{"ready":{"port":1,"key":"0011"}}"#,
            br#"{"ready":{"port":1,"key":"00112233445566778899aabbccddeeZZ"}}"#,
            br#"{"launch":{}}"#,
            b"\x00\x01\x02",
        ] {
            let f = frame(body);
            assert!(
                matches!(read(&mut f.as_slice()), Err(ProtoError::Json(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn keys_are_new_each_time_and_compare_whole() {
        let (a, b) = (Key::new().unwrap(), Key::new().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.as_bytes().len(), Key::LEN);
        assert!(a.is(a.as_bytes()));
        assert!(!a.is(b.as_bytes()));
        assert!(!a.is(&a.as_bytes()[1..]));
        assert_eq!(format!("{a:?}"), "Key(..)");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
        assert!(!same_token("", "a"));
    }
}
