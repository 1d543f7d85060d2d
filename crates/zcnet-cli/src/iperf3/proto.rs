//! iperf3's control protocol, as iperf3 3.12 speaks it (its `iperf_api.c`, `iperf_api.h`): a
//! 37-byte cookie (36 characters and a NUL) opens the control connection and each data stream;
//! the server moves the test along by single state bytes; parameters and results go as JSON
//! after a 4-byte big-endian length.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The port iperf3 listens on by default.
pub const PORT: u16 = 5201;

/// The cookie's length on the wire: 36 characters and a NUL.
pub const COOKIE_LEN: usize = 37;

/// The largest JSON document taken from a peer: iperf3's own are under a few KiB (with
/// `--get-server-output` a server's text can be longer); a length beyond this is garbage.
pub const MAX_JSON: u32 = 1 << 20;

/// iperf3's default block length for TCP (`DEFAULT_TCP_BLKSIZE`).
pub const TCP_BLOCK: usize = 128 * 1024;

/// The states the server sends (one signed byte each), and the client's own (`TEST_END`,
/// `IPERF_DONE`, `CLIENT_TERMINATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    /// The byte on the wire (`iperf_api.h`).
    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfStart => 15,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        v as u8
    }

    /// The state a byte names, if any.
    pub fn of(byte: u8) -> Option<State> {
        [
            State::TestStart,
            State::TestRunning,
            State::TestEnd,
            State::ParamExchange,
            State::CreateStreams,
            State::ServerTerminate,
            State::ClientTerminate,
            State::ExchangeResults,
            State::DisplayResults,
            State::IperfStart,
            State::IperfDone,
            State::AccessDenied,
            State::ServerError,
        ]
        .into_iter()
        .find(|s| s.byte() == byte)
    }
}

/// Writes state `s`.
pub fn send_state(w: &mut impl Write, s: State) -> io::Result<()> {
    w.write_all(&[s.byte()])
}

/// Reads one state byte: the state, or an error naming the byte.
pub fn read_state(r: &mut impl Read) -> io::Result<State> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    State::of(b[0]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("state byte {} is none of iperf3's", b[0] as i8),
        )
    })
}

/// A new cookie: 36 characters of iperf3's alphabet (`a`-`z`, `2`-`7`) and the NUL.
pub fn new_cookie() -> [u8; COOKIE_LEN] {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut random = [0u8; COOKIE_LEN - 1];
    // getrandom(2) through std's hasher seeds would be weak; /dev/urandom is there on Linux.
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random));
    if filled.is_err() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()) as u64
            ^ u64::from(std::process::id());
        let mut x = seed | 1;
        for b in &mut random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    let mut cookie = [0u8; COOKIE_LEN];
    for (c, r) in cookie.iter_mut().zip(random) {
        *c = ALPHABET[usize::from(r) % ALPHABET.len()];
    }
    cookie
}

/// Writes `doc` as iperf3 does: its length (4 bytes, big-endian), then the JSON.
pub fn send_json(w: &mut impl Write, doc: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_vec(doc)?;
    let len = u32::try_from(text.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "JSON over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + text.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&text);
    w.write_all(&frame)
}

/// Reads a length-prefixed JSON document into `T`.
pub fn read_json<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_JSON {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a JSON document of {len} bytes announced (at most {MAX_JSON})"),
        ));
    }
    let mut text = vec![0u8; len as usize];
    r.read_exact(&mut text)?;
    serde_json::from_slice(&text)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("the peer's JSON: {e}")))
}

/// The test's parameters, as the client sends them (`send_parameters`); iperf3 omits the ones
/// at their defaults, and a server takes what is missing as the default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    #[serde(default)]
    pub omit: u32,
    /// Seconds (0 with `num` or `blockcount`).
    #[serde(default)]
    pub time: u32,
    /// Bytes to send in all (`-n`), 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub blockcount: u64,
    #[serde(default = "one")]
    pub parallel: u32,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub reverse: bool,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub bidirectional: bool,
    /// Block length (`-l`).
    #[serde(default)]
    pub len: u64,
    /// Target rate in bit/s (`-b`), 0: unlimited.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bandwidth: u64,
    #[serde(default)]
    pub pacing_timer: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// What else the client asked for (iperf3 sends an option's key only when it is set:
    /// `udp_counters_64bit`, `window`, `MSS`, `congestion`, `TOS`, `get_server_output`, ...).
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// Options iperf3's client sends that this server serves beyond the fields above: `zerocopy`
/// (`-Z`: with `-R` the server sends by `sendfile`, as iperf3's does), `nodelay` (`-N`:
/// `TCP_NODELAY` on the server's streams too), and the payload's pattern and the texts, which
/// change nothing here.
pub const SERVED: [&str; 5] = [
    "zerocopy",
    "nodelay",
    "repeating_payload",
    "title",
    "extra_data",
];

impl Params {
    /// Whether the client set option `key` (a key of [`SERVED`]).
    pub fn asks(&self, key: &str) -> bool {
        self.other.get(key).is_some_and(|v| {
            v.as_bool()
                .unwrap_or_else(|| v.as_i64().is_some_and(|n| n != 0))
        })
    }
}

/// Streams a test may have (iperf3's `-P` takes at most 128).
pub const MAX_STREAMS: u32 = 128;

/// The largest TCP block (iperf3's `MAX_BLOCKSIZE`, 1 MiB).
pub const MAX_TCP_BLOCK: u64 = 1 << 20;

impl Params {
    /// What of these parameters this server does not serve, named as iperf3's client spells
    /// it: a bidirectional test, `-O`, `-k`, a stream count or block length out of iperf3's
    /// range, and any other option the client set. `None`: all of it is served.
    pub fn unserved(&self) -> Option<String> {
        let set = |v: &serde_json::Value| match v {
            serde_json::Value::Null => false,
            serde_json::Value::Bool(b) => *b,
            serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
            serde_json::Value::String(s) => !s.is_empty(),
            _ => true,
        };
        let max_len = if self.udp {
            super::udp::MAX_DATAGRAM as u64
        } else {
            MAX_TCP_BLOCK
        };
        if self.bidirectional {
            Some("a bidirectional test (--bidir)".into())
        } else if self.omit > 0 {
            Some(format!("{} s omitted at the start (-O)", self.omit))
        } else if self.blockcount > 0 {
            Some(format!("{} blocks (-k)", self.blockcount))
        } else if !(1..=MAX_STREAMS).contains(&self.parallel) {
            Some(format!("{} streams (1 to {MAX_STREAMS})", self.parallel))
        } else if self.len > max_len || (self.udp && self.len > 0 && self.len < 12) {
            Some(format!("blocks of {} bytes", self.len))
        } else if self.udp == self.tcp {
            Some("a protocol other than TCP or UDP".into())
        } else {
            let mut keys: Vec<&str> = self
                .other
                .iter()
                .filter(|(k, v)| set(v) && !SERVED.contains(&k.as_str()))
                .map(|(k, _)| k.as_str())
                .collect();
            keys.sort_unstable();
            (!keys.is_empty()).then(|| format!("{} (not served)", keys.join(", ")))
        }
    }
}

fn one() -> u32 {
    1
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// iperf3 sends its flags as `true` (`cJSON_AddTrueToObject`); older ones as 1.
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(match v {
        serde_json::Value::Bool(b) => b,
        serde_json::Value::Number(n) => n.as_i64().is_some_and(|n| n != 0),
        _ => false,
    })
}

/// A whole number as cJSON writes one: a signed or unsigned integer (an unsigned one past
/// `i64::MAX` wraps, as C's conversion of -1 to an unsigned type made it), or a float.
fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(v) = n.as_i64() {
        return Ok(v);
    }
    if let Some(v) = n.as_u64() {
        return Ok(v as i64);
    }
    Ok(n.as_f64().unwrap_or(0.0) as i64)
}

/// One stream's line of the results exchange (`send_results`): `id` in iperf3's numbering (1,
/// then 3, 4, ...: the second stream takes 3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    #[serde(deserialize_with = "whole")]
    pub id: i64,
    #[serde(deserialize_with = "whole")]
    pub bytes: i64,
    /// -1: not counted (iperf3 3.12's server writes it as 2^64 - 1, read here as -1).
    #[serde(deserialize_with = "whole")]
    pub retransmits: i64,
    pub jitter: f64,
    #[serde(deserialize_with = "whole")]
    pub errors: i64,
    #[serde(deserialize_with = "whole")]
    pub packets: i64,
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
}

impl StreamResult {
    /// Its bytes (a negative count read as none).
    pub fn count(&self) -> u64 {
        u64::try_from(self.bytes).unwrap_or(0)
    }
}

/// One side's results (`send_results`): its CPU use in percent, whether its streams' sender
/// counted retransmits, and each stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1, 0, or -1 (iperf3's receiving server: 2^64 - 1 on the wire).
    #[serde(deserialize_with = "whole")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
}

/// iperf3's id of the `k`-th stream (from 0): 1, 3, 4, 5, ... (`iperf_add_stream`).
pub fn stream_id(k: usize) -> i64 {
    match k {
        0 => 1,
        k => i64::try_from(k + 2).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_byte_reads_back_as_its_state() {
        for b in 0..=255u8 {
            if let Some(s) = State::of(b) {
                assert_eq!(s.byte(), b);
            }
        }
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert_eq!(State::of(9), Some(State::ParamExchange));
        assert_eq!(State::of(3), None);
    }

    #[test]
    fn results_as_iperf3_writes_them_parse() {
        // iperf3 3.12's server, a receiver: retransmits -1 as an unsigned 64-bit number.
        let text = r#"{"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":5551161344,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":2.000182}]}"#;
        let r: Results = serde_json::from_str(text).unwrap();
        assert_eq!(
            (r.sender_has_retransmits, r.streams[0].retransmits),
            (-1, -1)
        );
        assert_eq!(r.streams[0].bytes, 5_551_161_344);
    }

    #[test]
    fn parameters_as_iperf3_sends_them_parse() {
        // What iperf3 3.12's client sent for `-c H -t 3 -P 4 -R`.
        let text = br#"{"tcp":true,"omit":0,"time":3,"num":0,"blockcount":0,"parallel":4,"reverse":true,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#;
        let mut frame = (text.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(text);
        let p: Params = read_json(&mut &frame[..]).unwrap();
        assert!(p.tcp && !p.udp && p.reverse && !p.bidirectional);
        assert_eq!((p.time, p.parallel, p.len, p.num), (3, 4, 131072, 0));
        // Missing: the defaults (one stream).
        let p: Params = serde_json::from_str(r#"{"tcp":true,"time":10}"#).unwrap();
        assert_eq!(p.parallel, 1);
        let p: Params = serde_json::from_str(r#"{"tcp":true,"reverse":1}"#).unwrap();
        assert!(p.reverse);
    }

    #[test]
    fn what_this_server_does_not_serve_is_named() {
        let p = |t: &str| serde_json::from_str::<Params>(t).unwrap().unserved();
        assert_eq!(p(r#"{"tcp":true,"parallel":4,"len":131072}"#), None);
        assert_eq!(p(r#"{"udp":true,"len":1460,"bandwidth":1048576}"#), None);
        // Options iperf3 sends only when set; set to their defaults they are no request.
        assert_eq!(p(r#"{"tcp":true,"MSS":0,"congestion":""}"#), None);
        // What iperf3's -Z, -N, --repeating-payload and -T send.
        assert_eq!(
            p(r#"{"tcp":true,"zerocopy":true,"nodelay":true,"repeating_payload":1,"title":"x"}"#),
            None
        );
        for (text, needle) in [
            (r#"{"tcp":true,"bidirectional":true}"#, "--bidir"),
            (r#"{"tcp":true,"omit":1}"#, "-O"),
            (r#"{"tcp":true,"blockcount":10}"#, "-k"),
            (r#"{"tcp":true,"parallel":0}"#, "0 streams"),
            (r#"{"tcp":true,"parallel":1000000}"#, "1000000 streams"),
            (r#"{"tcp":true,"len":2000000000}"#, "2000000000 bytes"),
            (r#"{"udp":true,"len":5}"#, "5 bytes"),
            (
                r#"{"udp":true,"udp_counters_64bit":1}"#,
                "udp_counters_64bit",
            ),
            (r#"{"tcp":true,"window":1048576,"MSS":1000}"#, "MSS, window"),
            (r#"{"sctp":true}"#, "other than TCP or UDP"),
        ] {
            let why = p(text).unwrap_or_else(|| panic!("{text} served"));
            assert!(why.contains(needle), "{text}: {why}");
        }
    }

    #[test]
    fn json_frames_round_trip_and_garbage_is_an_error() {
        let r = Results {
            cpu_util_total: 1.5,
            streams: vec![StreamResult {
                id: 1,
                bytes: 42,
                retransmits: -1,
                ..StreamResult::default()
            }],
            ..Results::default()
        };
        let mut wire = Vec::new();
        send_json(&mut wire, &r).unwrap();
        assert_eq!(
            u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize,
            wire.len() - 4
        );
        let back: Results = read_json(&mut &wire[..]).unwrap();
        assert_eq!(back, r);
        // Not JSON; a length past the bound; a frame cut short.
        let mut bad = 5u32.to_be_bytes().to_vec();
        bad.extend_from_slice(b"{nope");
        assert!(read_json::<Params>(&mut &bad[..]).is_err());
        let huge = (MAX_JSON + 1).to_be_bytes();
        assert!(read_json::<Params>(&mut &huge[..]).is_err());
        assert!(read_json::<Params>(&mut &wire[..10]).is_err());
    }

    #[test]
    fn cookies_are_36_characters_of_the_alphabet_and_a_nul() {
        let c = new_cookie();
        assert_eq!(c[36], 0);
        assert!(
            c[..36]
                .iter()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b))
        );
        assert_ne!(new_cookie(), c);
    }

    #[test]
    fn stream_ids_skip_two_as_iperf3s_do() {
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), [1, 3, 4, 5]);
    }
}
