//! The door of `zcnet serve`: connections that have not yet said a valid hello (with the token,
//! where the server wants one). They cost the server a descriptor and a few bytes each, for a
//! short, bounded time, and nothing else: no thread, no place in the queue of clients waiting
//! for the one test slot, never the slot itself (issue 62 item 1: silent connections, 50 a
//! second, each held the slot for its 10 s hello wait, and the holder of the token heard `busy`).
//!
//! The accept loop reads every door connection without blocking, on its own epoll set; a
//! connection becomes a client only once its whole hello has come and passed the version and
//! token checks. Its bounds, as sshd's `LoginGraceTime` and `MaxStartups` are for a login:
//! - the first byte within [`FIRST_BYTE`] of the accept, the whole hello within [`HELLO_WAIT`];
//! - a hello of at most [`MAX_HELLO`] bytes (a token file holds at most 4 KiB);
//! - at most [`MAX_AT_DOOR`] at once: a newcomer past that closes the door connection that came
//!   first. A real client sends its hello as soon as it is connected and leaves the door within
//!   a round trip; a crowd would have to open more than [`MAX_AT_DOOR`] connections within that
//!   round trip to push it out.

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::proto::{self, Message, ProtoError, VERSION};

/// How long after the accept a client's first byte may come.
pub const FIRST_BYTE: Duration = Duration::from_secs(1);

/// How long after the accept the whole hello may take (docs/remote.md).
pub const HELLO_WAIT: Duration = Duration::from_secs(3);

/// The longest hello, length prefix included: the version and a token of at most 4 KiB.
pub const MAX_HELLO: usize = 8 * 1024;

/// Most connections at the door at once.
pub const MAX_AT_DOOR: usize = 256;

/// What a connection pushed out of a full door hears: `busy`, which a bench tries again on.
const PUSHED_OUT: &str = "busy: too many connections without a hello at once (the door of this \
                          server is full); try again";

/// A connection at the door.
struct Knock {
    conn: TcpStream,
    peer: SocketAddr,
    since: Instant,
    got: Vec<u8>,
}

impl Knock {
    /// When it is cut: a second after the accept until its first byte, then at its hello wait.
    fn deadline(&self) -> Instant {
        self.since
            + if self.got.is_empty() {
                FIRST_BYTE
            } else {
                HELLO_WAIT
            }
    }
}

/// What became of a door connection.
#[derive(Debug)]
pub enum Outcome {
    /// A valid hello: a client, to queue for its turn.
    Client(TcpStream, SocketAddr),
    /// Not (yet) a client: nothing to do.
    Pending,
}

/// The connections at the door, by their epoll key.
pub struct Door {
    at: HashMap<u64, Knock>,
    next: u64,
    token: Option<String>,
    /// Door connections closed without a valid hello (or pushed out), since the server started.
    pub turned_away: u64,
}

impl Door {
    /// An empty door for a server wanting `token`; keys from `first_key` up.
    pub fn new(token: Option<String>, first_key: u64) -> Door {
        Door {
            at: HashMap::new(),
            next: first_key,
            token,
            turned_away: 0,
        }
    }

    /// How many connections are at the door.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Takes a new connection (non-blocking) to the door: its key, for the caller's epoll set.
    /// A full door first closes the connection that came first (which leaves the epoll set as
    /// its descriptor closes).
    pub fn admit(&mut self, conn: TcpStream, peer: SocketAddr) -> (u64, &TcpStream) {
        if self.at.len() >= MAX_AT_DOOR
            && let Some((&oldest, _)) = self.at.iter().min_by_key(|(_, k)| k.since)
        {
            let k = self.at.remove(&oldest).expect("a present key");
            // Said as `busy`: a client pushed out before its hello was read tries again.
            self.turn_away(k, Some(PUSHED_OUT));
        }
        let key = self.next;
        self.next += 1;
        let knock = Knock {
            conn,
            peer,
            since: Instant::now(),
            got: Vec::new(),
        };
        let conn = &self.at.entry(key).or_insert(knock).conn;
        (key, conn)
    }

    /// Reads what `key`'s connection sent. A whole, valid hello makes it a client (removed from
    /// the door); a bad one is answered with an `error` naming what was wrong, and closed.
    pub fn readable(&mut self, key: u64) -> Outcome {
        let Some(knock) = self.at.get_mut(&key) else {
            return Outcome::Pending;
        };
        let Some(hello) = read_some(knock) else {
            return Outcome::Pending;
        };
        let k = self.at.remove(&key).expect("a present key");
        match hello.and_then(|m| self.check(m)) {
            Ok(()) => match k.conn.set_nonblocking(false) {
                Ok(()) => Outcome::Client(k.conn, k.peer),
                Err(e) => {
                    self.turn_away(k, Some(&format!("hello: {e}")));
                    Outcome::Pending
                }
            },
            Err(why) => {
                self.turn_away(k, Some(&why));
                Outcome::Pending
            }
        }
    }

    /// The version and token checks of a hello.
    fn check(&self, m: Message) -> Result<(), String> {
        match m {
            Message::Hello { version, token } => {
                if version != VERSION {
                    return Err(format!(
                        "protocol version {version}: this server speaks {VERSION} (zcnet {}); \
                         run the same zcnet release on both hosts",
                        env!("CARGO_PKG_VERSION")
                    ));
                }
                if let Some(want) = &self.token
                    && !token.is_some_and(|t| proto::same_token(t.trim(), want))
                {
                    return Err("wrong or missing token (the server's --token-file)".to_owned());
                }
                Ok(())
            }
            other => Err(format!("expected hello, got {}", other.name())),
        }
    }

    /// Closes every door connection past its deadline, telling it so.
    pub fn expire(&mut self, now: Instant) -> Vec<u64> {
        let late: Vec<u64> = self
            .at
            .iter()
            .filter(|(_, k)| k.deadline() <= now)
            .map(|(&key, _)| key)
            .collect();
        for key in &late {
            let k = self.at.remove(key).expect("a present key");
            let why = if k.got.is_empty() {
                format!(
                    "hello: no message in time (nothing within {} s of connecting)",
                    FIRST_BYTE.as_secs()
                )
            } else {
                format!(
                    "hello: no message in time (no whole hello within {} s)",
                    HELLO_WAIT.as_secs()
                )
            };
            self.turn_away(k, Some(&why));
        }
        late
    }

    /// The earliest deadline at the door.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.at.values().map(Knock::deadline).min()
    }

    /// Every door connection, closed with `why` (the server ends).
    pub fn close_all(&mut self, why: &str) {
        for (_, k) in std::mem::take(&mut self.at) {
            self.turn_away(k, Some(why));
        }
    }

    /// Tells `k` why it is closed (without waiting on it), and counts it. Logged only now and
    /// then: a crowd of strangers must not fill the server's log nor spend its time there.
    fn turn_away(&mut self, k: Knock, why: Option<&str>) {
        if let Some(why) = why {
            proto::refuse(k.conn, why);
        }
        self.turned_away += 1;
        let n = self.turned_away;
        // The first ten, then at each power of ten: a line for each order of magnitude.
        if n <= 10 || is_power_of_ten(n) {
            eprintln!(
                "zcnet serve: [{}] turned away at the door: {} ({n} so far)",
                k.peer,
                why.unwrap_or("closed")
            );
        }
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n % 10 == 0 {
        n /= 10;
    }
    n == 1
}

/// Reads what is there without blocking. `None`: the hello is not whole yet; `Some(Ok)`: a
/// whole message; `Some(Err)`: the connection ended or failed, or its bytes are no message (the
/// reason, as the client is told it).
fn read_some(k: &mut Knock) -> Option<Result<Message, String>> {
    let mut buf = [0u8; 2048];
    loop {
        // Never more than the frame needs: bytes past the hello are the session's.
        let want = match frame_len(&k.got) {
            Ok(Some(n)) => n - k.got.len(),
            Ok(None) => 4 - k.got.len(),
            Err(why) => return Some(Err(why)),
        };
        if want == 0 {
            break;
        }
        let take = want.min(buf.len());
        match k.conn.read(&mut buf[..take]) {
            Ok(0) if k.got.is_empty() => {
                return Some(Err(format!("hello: {}", ProtoError::Closed)));
            }
            Ok(0) => {
                let e = ProtoError::Truncated {
                    expected: frame_len(&k.got).ok().flatten().unwrap_or(4),
                    got: k.got.len(),
                };
                return Some(Err(format!("hello: {e}")));
            }
            Ok(n) => k.got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(e) => return Some(Err(format!("hello: {e}"))),
        }
    }
    Some(proto::read(&mut k.got.as_slice()).map_err(|e| format!("hello: {e}")))
}

/// The whole frame's length once its prefix is in; past [`MAX_HELLO`], the reason it is refused.
fn frame_len(got: &[u8]) -> Result<Option<usize>, String> {
    let Some(head) = got.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*head);
    if len as usize > MAX_HELLO - 4 {
        return Err(format!(
            "hello: a control message of {len} bytes (a hello is at most {MAX_HELLO}): not a \
             zcnet client"
        ));
    }
    Ok(Some(4 + len as usize))
}
