//! What `zcnet iperf3` prints: iperf3's lines (interval lines, the sender and receiver summary,
//! `iperf Done.`) and its `-J` document, with one zcnet line (or object) added.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::opt::Opt;
use super::proto::{self, Params, Results, StreamResult};
use super::streams::Stream;

/// What a client test measured, for the text and `-J`.
pub struct Outcome {
    pub server: SocketAddr,
    pub params: Params,
    pub ours: Results,
    pub theirs: Results,
    pub seconds: f64,
    /// (local, remote) of each stream.
    pub streams: Vec<(SocketAddr, SocketAddr)>,
    pub intervals: Vec<Interval>,
}

/// One interval of the client's test: each stream's bytes in it.
pub struct Interval {
    pub start: f64,
    pub end: f64,
    pub bytes: Vec<u64>,
}

impl Interval {
    pub fn new(from: Duration, to: Duration, before: &[u64], now: &[u64]) -> Interval {
        Interval {
            start: from.as_secs_f64(),
            end: to.as_secs_f64(),
            bytes: now.iter().zip(before).map(|(n, b)| n - b).collect(),
        }
    }
}

/// Bytes as iperf3 shows a transfer: powers of 1024, three significant digits.
pub fn transfer(bytes: f64) -> String {
    let (v, unit) = scaled(
        bytes,
        1024.0,
        ["Bytes", "KBytes", "MBytes", "GBytes", "TBytes"],
    );
    format!("{} {unit}", digits(v))
}

/// Bits per second as iperf3 shows a rate: powers of 1000.
pub fn rate(bits_per_second: f64) -> String {
    let units = [
        "bits/sec",
        "Kbits/sec",
        "Mbits/sec",
        "Gbits/sec",
        "Tbits/sec",
    ];
    let (v, unit) = scaled(bits_per_second, 1000.0, units);
    format!("{} {unit}", digits(v))
}

fn scaled(mut v: f64, step: f64, units: [&'static str; 5]) -> (f64, &'static str) {
    let mut k = 0;
    while v >= step && k + 1 < units.len() {
        v /= step;
        k += 1;
    }
    (v, units[k])
}

fn digits(v: f64) -> String {
    if v < 9.995 {
        format!("{v:4.2}")
    } else if v < 99.95 {
        format!("{v:4.1}")
    } else {
        format!("{v:4.0}")
    }
}

fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// The server's first lines.
pub fn server_listening(opt: &Opt, local: SocketAddr) {
    if !opt.json {
        println!("-----------------------------------------------------------");
        println!("Server listening on {}", local.port());
        println!("-----------------------------------------------------------");
    }
}

/// A data stream's line: `[ ID] local A port P connected to B port Q`.
pub fn connected(k: usize, local: SocketAddr, remote: SocketAddr) {
    println!(
        "[{:>3}] local {} port {} connected to {} port {}",
        proto::stream_id(k),
        local.ip(),
        local.port(),
        remote.ip(),
        remote.port()
    );
}

/// An interval line per stream, and `[SUM]` with several.
pub fn interval_line(iv: &Interval) {
    let secs = iv.end - iv.start;
    for (k, &b) in iv.bytes.iter().enumerate() {
        println!(
            "[{:>3}] {:>6.2}-{:<6.2} sec  {}  {}",
            proto::stream_id(k),
            iv.start,
            iv.end,
            transfer(b as f64),
            rate(bps(b, secs))
        );
    }
    if iv.bytes.len() > 1 {
        let sum: u64 = iv.bytes.iter().sum();
        println!(
            "[SUM] {:>6.2}-{:<6.2} sec  {}  {}",
            iv.start,
            iv.end,
            transfer(sum as f64),
            rate(bps(sum, secs))
        );
    }
}

/// (seconds, bytes) of each stream of `r`, by iperf3's stream order.
fn per_stream(r: &Results) -> Vec<(f64, u64)> {
    r.streams
        .iter()
        .map(|s| (s.end_time - s.start_time, s.count()))
        .collect()
}

/// The sender's and the receiver's results of a client test.
fn sides(o: &Outcome) -> (&Results, &Results) {
    if o.params.reverse {
        (&o.theirs, &o.ours)
    } else {
        (&o.ours, &o.theirs)
    }
}

/// The client's summary: sender and receiver lines per stream (and `[SUM]`), `iperf Done.`, then
/// zcnet's line.
pub fn client_summary(o: &Outcome) {
    let (sent, received) = sides(o);
    println!("- - - - - - - - - - - - - - - - - - - - - - - - -");
    println!("[ ID] Interval           Transfer     Bitrate");
    let line = |id: &str, secs: f64, bytes: u64, who: &str| {
        println!(
            "[{id:>3}] {:>6.2}-{:<6.2} sec  {}  {}                  {who}",
            0.0,
            secs,
            transfer(bytes as f64),
            rate(bps(bytes, secs))
        );
    };
    let (s, r) = (per_stream(sent), per_stream(received));
    for (k, ((ss, sb), (rs, rb))) in s.iter().zip(&r).enumerate() {
        let id = proto::stream_id(k).to_string();
        line(&id, *ss, *sb, "sender");
        line(&id, *rs, *rb, "receiver");
    }
    if s.len() > 1 {
        let total = |v: &[(f64, u64)]| {
            let secs = v.iter().map(|x| x.0).fold(0.0, f64::max);
            (secs, v.iter().map(|x| x.1).sum::<u64>())
        };
        let ((ss, sb), (rs, rb)) = (total(&s), total(&r));
        line("SUM", ss, sb, "sender");
        line("SUM", rs, rb, "receiver");
    }
    println!();
    println!("iperf Done.");
    println!(
        "zcnet: TCP by copy on this side (write and read: 0 % zero-copied, no fallback: none \
         tried); CPU {:.1} % here, {:.1} % at the server",
        o.ours.cpu_util_total, o.theirs.cpu_util_total
    );
}

/// The server's summary of a test.
pub fn server_summary(streams: &[Stream], theirs: &Results, seconds: f64, reverse: bool) {
    let ours: u64 = streams.iter().map(Stream::count).sum();
    let theirs_b: u64 = theirs.streams.iter().map(StreamResult::count).sum();
    let (sent, received) = if reverse {
        (ours, theirs_b)
    } else {
        (theirs_b, ours)
    };
    println!("- - - - - - - - - - - - - - - - - - - - - - - - -");
    println!(
        "[SUM]   0.00-{seconds:<6.2} sec  {}  {}                  sender",
        transfer(sent as f64),
        rate(bps(sent, seconds))
    );
    println!(
        "[SUM]   0.00-{seconds:<6.2} sec  {}  {}                  receiver",
        transfer(received as f64),
        rate(bps(received, seconds))
    );
    println!("zcnet: TCP by copy on this side (0 % zero-copied)");
}

/// iperf3's `-J` document of a client test, and a `zcnet` object.
pub fn json(opt: &Opt, host: &str, o: &Outcome) -> Value {
    let (sent, received) = sides(o);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let connected: Vec<Value> = o
        .streams
        .iter()
        .enumerate()
        .map(|(k, (l, r))| {
            json!({"socket": proto::stream_id(k), "local_host": l.ip().to_string(),
                   "local_port": l.port(), "remote_host": r.ip().to_string(),
                   "remote_port": r.port()})
        })
        .collect();
    let sender = !o.params.reverse;
    let intervals: Vec<Value> = o
        .intervals
        .iter()
        .filter(|iv| iv.end > iv.start)
        .map(|iv| {
            let secs = iv.end - iv.start;
            let streams: Vec<Value> = iv
                .bytes
                .iter()
                .enumerate()
                .map(|(k, &b)| {
                    json!({"socket": proto::stream_id(k), "start": iv.start, "end": iv.end,
                           "seconds": secs, "bytes": b, "bits_per_second": bps(b, secs),
                           "omitted": false, "sender": sender})
                })
                .collect();
            let sum: u64 = iv.bytes.iter().sum();
            json!({"streams": streams, "sum": {"start": iv.start, "end": iv.end,
                   "seconds": secs, "bytes": sum, "bits_per_second": bps(sum, secs),
                   "omitted": false, "sender": sender}})
        })
        .collect();
    let part = |k: usize, r: &Results, is_sender: bool| {
        let s = &r.streams[k];
        let secs = s.end_time - s.start_time;
        json!({"socket": proto::stream_id(k), "start": 0, "end": secs, "seconds": secs,
               "bytes": s.count(), "bits_per_second": bps(s.count(), secs), "sender": is_sender})
    };
    let n = sent.streams.len().min(received.streams.len());
    let end_streams: Vec<Value> = (0..n)
        .map(|k| json!({"sender": part(k, sent, true), "receiver": part(k, received, false)}))
        .collect();
    let sum = |r: &Results, is_sender: bool| {
        let secs = r
            .streams
            .iter()
            .map(|s| s.end_time - s.start_time)
            .fold(0.0, f64::max);
        let bytes: u64 = r.streams.iter().map(StreamResult::count).sum();
        json!({"start": 0, "end": secs, "seconds": secs, "bytes": bytes,
               "bits_per_second": bps(bytes, secs), "sender": is_sender})
    };
    json!({
        "start": {
            "connected": connected,
            "version": format!("zcnet {} (iperf 3.12's protocol)", env!("CARGO_PKG_VERSION")),
            "system_info": "Linux",
            "timestamp": {"timesecs": now},
            "connecting_to": {"host": host, "port": opt.port},
            "cookie": "",
            "test_start": {"protocol": "TCP", "num_streams": opt.parallel,
                           "blksize": o.params.len, "omit": 0, "duration": o.params.time,
                           "bytes": o.params.num, "blocks": 0,
                           "reverse": i32::from(o.params.reverse), "tos": 0},
        },
        "intervals": intervals,
        "end": {
            "streams": end_streams,
            "sum_sent": sum(sent, true),
            "sum_received": sum(received, false),
            "cpu_utilization_percent": {
                "host_total": o.ours.cpu_util_total, "host_user": o.ours.cpu_util_user,
                "host_system": o.ours.cpu_util_system,
                "remote_total": o.theirs.cpu_util_total, "remote_user": o.theirs.cpu_util_user,
                "remote_system": o.theirs.cpu_util_system,
            },
        },
        "zcnet": {"send_path": "copy", "receive_path": "copy", "zero_copy_share": 0.0,
                  "fallbacks": [], "server": o.server.to_string(), "seconds": o.seconds},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_as_iperf3_prints_them() {
        assert_eq!(transfer(3.5 * 1024.0 * 1024.0 * 1024.0), "3.50 GBytes");
        assert_eq!(transfer(512.0 * 1024.0), " 512 KBytes");
        assert_eq!(rate(28.1e9), "28.1 Gbits/sec");
        assert_eq!(rate(0.0), "0.00 bits/sec");
    }
}
