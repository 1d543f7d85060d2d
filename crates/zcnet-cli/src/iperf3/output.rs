//! What `zcnet iperf3` prints besides the interval lines ([`super::interval`]): iperf3's banner
//! and stream lines, the sender and receiver summary, `iperf Done.`, and its `-J` document,
//! with one zcnet line (or object) added.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::interval::{Interval, TcpSummary, UdpSample, separator};
use super::proto::{self, Params, Results, StreamResult};
use super::streams::{Stream, Tally};
use super::units::{bps, percent, rate, transfer};

/// What a test measured, for the text and `-J`: a client's, or (`client` false) a server's.
pub struct Outcome {
    /// Whether this side is the test's client.
    pub client: bool,
    pub server: SocketAddr,
    pub params: Params,
    pub ours: Results,
    pub theirs: Results,
    pub seconds: f64,
    /// What each of our streams did.
    pub tallies: Vec<Tally>,
    /// (local, remote) of each stream.
    pub streams: Vec<(SocketAddr, SocketAddr)>,
    pub intervals: Vec<Interval>,
}

/// The server's banner before its test number `test` (from 1), as iperf3 prints it first and
/// after each test.
pub fn server_listening(port: u16, test: usize) {
    println!("-----------------------------------------------------------");
    println!("Server listening on {port} (test #{test})");
    println!("-----------------------------------------------------------");
}

/// A data stream's line: `[ ID] local A port P connected to B port Q`.
pub fn connected(k: usize, local: SocketAddr, remote: SocketAddr) {
    println!(
        "[{:>3}] local {} port {} connected to {} port {}",
        proto::stream_id(k),
        local.ip().to_canonical(),
        local.port(),
        remote.ip().to_canonical(),
        remote.port()
    );
}

/// The sender's and the receiver's results of a client test.
fn sides(o: &Outcome) -> (&Results, &Results) {
    if o.params.reverse == o.client {
        (&o.theirs, &o.ours)
    } else {
        (&o.ours, &o.theirs)
    }
}

/// The client's summary: sender and receiver lines per stream (and `[SUM]`), `iperf Done.`, then
/// zcnet's line.
pub fn client_summary(o: &Outcome) {
    let (sent, received) = sides(o);
    let udp = o.params.udp;
    separator();
    if udp {
        println!(
            "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams"
        );
    } else if sent.sender_has_retransmits == 1 {
        println!("[ ID] Interval           Transfer     Bitrate         Retr");
    } else {
        println!("[ ID] Interval           Transfer     Bitrate");
    }
    // iperf3's `Retr` column, where the sender counted them.
    let retr = sent.sender_has_retransmits == 1;
    let pair = |id: &str, s: &StreamResult, r: &StreamResult| {
        let (st, rt) = if udp {
            (udp_tail(s, s.packets, false), udp_tail(r, s.packets, true))
        } else if retr {
            (
                format!("  {:>3}           ", s.retransmits.max(0)),
                " ".repeat(16),
            )
        } else {
            let pad = " ".repeat(16);
            (pad.clone(), pad)
        };
        summary_line(id, s, &st, "sender");
        summary_line(id, r, &rt, "receiver");
    };
    for (k, (s, r)) in sent.streams.iter().zip(&received.streams).enumerate() {
        pair(&proto::stream_id(k).to_string(), s, r);
    }
    if sent.streams.len() > 1 {
        pair("SUM", &summed(sent), &summed(received));
    }
    println!();
    println!("iperf Done.");
    let bytes = summed(&o.ours).count();
    println!(
        "{}",
        zcnet_line(
            &o.tallies,
            !o.params.reverse,
            udp,
            o.ours.cpu_util_total,
            o.seconds,
            bytes
        )
    );
    let theirs = summed(&o.theirs).count();
    println!(
        "zcnet: the server's CPU: {}",
        cpu_per_mb(o.theirs.cpu_util_total, o.seconds, theirs)
    );
}

/// A summary line: stream `id`'s transfer and rate over its time, `tail` (retransmits, UDP's
/// losses, or blanks) and whose side it is.
fn summary_line(id: &str, r: &StreamResult, tail: &str, who: &str) {
    let secs = r.end_time - r.start_time;
    println!(
        "[{id:>3}] {:>6.2}-{:<6.2} sec  {}  {}{tail}  {who}",
        0.0,
        secs,
        transfer(r.count() as f64),
        rate(bps(r.count(), secs))
    );
}

/// A UDP summary line's tail: the receiver's jitter and losses against the sender's `total`
/// datagrams (a sender's: none).
fn udp_tail(r: &StreamResult, total: i64, receiver: bool) -> String {
    let (lost, jitter) = if receiver {
        (r.errors.max(0), r.jitter)
    } else {
        (0, 0.0)
    };
    let pct = UdpSample::lost_percent(lost, total.unsigned_abs());
    format!(
        "  {:.3} ms  {lost}/{total} ({}%)",
        jitter * 1000.0,
        percent(pct)
    )
}

/// A side's streams as one: bytes, losses, datagrams and retransmits summed, the jitter their
/// mean, the longest time.
fn summed(r: &Results) -> StreamResult {
    // The peer's numbers: summed without overflow, whatever they are.
    let sum = |f: fn(&StreamResult) -> i64| {
        r.streams
            .iter()
            .fold(0i64, |a, x| a.saturating_add(f(x).max(0)))
    };
    StreamResult {
        bytes: sum(|x| x.bytes),
        errors: sum(|x| x.errors),
        packets: sum(|x| x.packets),
        retransmits: sum(|x| x.retransmits),
        jitter: r.streams.iter().map(|x| x.jitter).sum::<f64>() / r.streams.len().max(1) as f64,
        start_time: 0.0,
        end_time: r
            .streams
            .iter()
            .map(|x| x.end_time - x.start_time)
            .fold(0.0, f64::max),
        ..StreamResult::default()
    }
}

/// CPU as a share of the test's time, and per MB moved.
fn cpu_per_mb(pct: f64, seconds: f64, bytes: u64) -> String {
    let us = pct / 100.0 * seconds * 1e6;
    if bytes == 0 {
        return format!("{pct:.1} %");
    }
    format!("{pct:.1} %, {:.1} µs per MB", us / (bytes as f64 / 1e6))
}

/// zcnet's line about this side: the path its streams took, the share the kernel really moved
/// without a copy, why not where it asked for zero copy, and the CPU per MB.
pub fn zcnet_line(
    tallies: &[Tally],
    sending: bool,
    udp: bool,
    cpu_pct: f64,
    seconds: f64,
    bytes: u64,
) -> String {
    let path = tallies.first().map_or("none", |t| t.path);
    let zc: u64 = tallies.iter().map(|t| t.zero_copy_bytes).sum();
    let copied: u64 = tallies.iter().map(|t| t.copied_bytes).sum();
    let share = if zc + copied > 0 {
        100.0 * zc as f64 / (zc + copied) as f64
    } else {
        0.0
    };
    let mut why: Vec<&str> = tallies
        .iter()
        .filter_map(|t| t.fallback.as_deref())
        .collect();
    why.dedup();
    let why = match (why.first(), tallies.len()) {
        (Some(w), 1) => format!("; copied because {w}"),
        (Some(w), _) => format!("; copied because (its first stream) {w}"),
        (None, _) => String::new(),
    };
    format!(
        "zcnet: {} {} by {path} on this side: {share:.1} % without a copy ({zc} of {} bytes){why}; CPU {}",
        if udp { "UDP" } else { "TCP" },
        if sending { "sent" } else { "received" },
        zc + copied,
        cpu_per_mb(cpu_pct, seconds, bytes)
    )
}

/// The server's summary of a test, as iperf3's server prints it: its own side of each stream
/// (the receiver's, or with `-R` the sender's with its retransmits), `[SUM]` with several, then
/// the zcnet line.
pub fn server_summary(streams: &[Stream], ours: &Results, seconds: f64, params: &Params) {
    let sending = params.reverse;
    let tcp_sender = sending && !params.udp;
    separator();
    println!(
        "[ ID] Interval           Transfer     Bitrate{}",
        if params.udp {
            "         Jitter    Lost/Total Datagrams"
        } else if tcp_sender {
            "         Retr"
        } else {
            ""
        }
    );
    let who = if sending { "sender" } else { "receiver" };
    let line = |id: &str, r: &StreamResult| {
        let tail = if params.udp {
            udp_tail(r, r.packets, !sending)
        } else if tcp_sender {
            format!("  {:>3}           ", r.retransmits.max(0))
        } else {
            " ".repeat(16)
        };
        summary_line(id, r, &tail, who);
    };
    for (k, r) in ours.streams.iter().enumerate() {
        line(&proto::stream_id(k).to_string(), r);
    }
    if ours.streams.len() > 1 {
        line("SUM", &summed(ours));
    }
    let tallies: Vec<Tally> = streams.iter().map(Stream::tally).collect();
    let bytes = summed(ours).count();
    println!(
        "{}",
        zcnet_line(
            &tallies,
            sending,
            params.udp,
            ours.cpu_util_total,
            seconds,
            bytes
        )
    );
}

/// iperf3's `-J` document of a test (a client's, or a server's: then `host` is the client's
/// address), and a `zcnet` object.
pub fn json(port: u16, host: &str, o: &Outcome) -> Value {
    let (sent, received) = sides(o);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let connected: Vec<Value> = o
        .streams
        .iter()
        .enumerate()
        .map(|(k, (l, r))| {
            json!({"socket": proto::stream_id(k), "local_host": l.ip().to_canonical().to_string(),
                   "local_port": l.port(), "remote_host": r.ip().to_canonical().to_string(),
                   "remote_port": r.port()})
        })
        .collect();
    // Whether this side sent.
    let sender = o.params.reverse != o.client;
    let udp = o.params.udp;
    let intervals: Vec<Value> = o
        .intervals
        .iter()
        .filter(|iv| iv.end > iv.start)
        .map(|iv| {
            let secs = iv.end - iv.start;
            let packets = |k: Option<usize>| match (&iv.packets, k) {
                (Some(p), Some(k)) => json!(p[k]),
                (Some(p), None) => json!(p.iter().sum::<u64>()),
                (None, _) => Value::Null,
            };
            let one = |socket: Option<i64>, b: u64, k: Option<usize>| {
                let mut v = json!({"start": iv.start, "end": iv.end, "seconds": secs,
                                   "bytes": b, "bits_per_second": bps(b, secs),
                                   "omitted": false, "sender": sender});
                if let Some(id) = socket {
                    v["socket"] = json!(id);
                }
                if udp {
                    v["packets"] = packets(k);
                }
                // A UDP receiver's jitter and losses, as iperf3's interval streams carry them.
                if let Some((jitter, lost, total)) = iv.losses(k) {
                    v["jitter_ms"] = json!(jitter * 1000.0);
                    v["lost_packets"] = json!(lost);
                    v["lost_percent"] = json!(UdpSample::lost_percent(lost, total));
                }
                // A TCP sender's TCP_INFO, as iperf3's interval streams carry it.
                match (&iv.tcp, k) {
                    (Some(t), Some(k)) => {
                        let t = t[k];
                        v["retransmits"] = json!(t.retransmits);
                        v["snd_cwnd"] = json!(t.snd_cwnd);
                        v["snd_wnd"] = json!(t.snd_wnd);
                        v["rtt"] = json!(t.rtt);
                        v["rttvar"] = json!(t.rttvar);
                        v["pmtu"] = json!(t.pmtu);
                    }
                    (Some(t), None) => {
                        v["retransmits"] = json!(t.iter().map(|x| x.retransmits).sum::<u64>());
                    }
                    (None, _) => {}
                }
                v
            };
            let streams: Vec<Value> = iv
                .bytes
                .iter()
                .enumerate()
                .map(|(k, &b)| one(Some(proto::stream_id(k)), b, Some(k)))
                .collect();
            json!({"streams": streams, "sum": one(None, iv.bytes.iter().sum(), None)})
        })
        .collect();
    // A sender's retransmits and TCP_INFO extremes are in every document but a receiving
    // server's, as iperf3's.
    let counts_retransmits = o.client || sender;
    // One stream's (or a sum's) line of `end`, UDP's fields with the receiver's counts
    // against the sender's datagrams.
    let part = |s: &StreamResult, sent: &StreamResult, is_sender: bool| {
        let secs = s.end_time - s.start_time;
        let mut v = json!({"start": 0, "end": secs, "seconds": secs, "bytes": s.count(),
                           "bits_per_second": bps(s.count(), secs), "sender": is_sender});
        if udp {
            let lost = if is_sender { 0 } else { s.errors.max(0) };
            let total = sent.packets.max(0);
            v["jitter_ms"] = json!(if is_sender { 0.0 } else { s.jitter * 1000.0 });
            v["lost_packets"] = json!(lost);
            v["packets"] = json!(total);
            v["lost_percent"] = json!(if total > 0 {
                100.0 * lost as f64 / total as f64
            } else {
                0.0
            });
        } else if is_sender && counts_retransmits {
            v["retransmits"] = json!(s.retransmits.max(0));
        }
        v
    };
    let end_streams: Vec<Value> = sent
        .streams
        .iter()
        .zip(&received.streams)
        .enumerate()
        .map(|(k, (s, r))| {
            let (mut a, mut b) = (part(s, s, true), part(r, s, false));
            a["socket"] = json!(proto::stream_id(k));
            b["socket"] = json!(proto::stream_id(k));
            if !udp && counts_retransmits {
                // The sender's TCP_INFO over its intervals: ours where this side sent, zeros
                // where the far side did (its results carry none), as iperf3's.
                let t = if sender {
                    TcpSummary::of(&o.intervals, k)
                } else {
                    TcpSummary::default()
                };
                a["max_snd_cwnd"] = json!(t.max_snd_cwnd);
                a["max_snd_wnd"] = json!(t.max_snd_wnd);
                a["max_rtt"] = json!(t.max_rtt);
                a["min_rtt"] = json!(t.min_rtt);
                a["mean_rtt"] = json!(t.mean_rtt);
            }
            if udp {
                // iperf3's UDP stream: the receiver's counts, under `udp`; out of order as
                // this side counted them (none where it sent).
                b["sender"] = json!(sender);
                let ooo = o.tallies.get(k).filter(|_| !sender);
                b["out_of_order"] = json!(ooo.map_or(0, |t| t.udp.out_of_order));
                json!({"udp": b})
            } else {
                json!({"sender": a, "receiver": b})
            }
        })
        .collect();
    let (ts, tr) = (summed(sent), summed(received));
    let mut end = json!({
        "streams": end_streams,
        "sum_sent": part(&ts, &ts, true),
        "sum_received": part(&tr, &ts, false),
        "cpu_utilization_percent": {
            "host_total": o.ours.cpu_util_total, "host_user": o.ours.cpu_util_user,
            "host_system": o.ours.cpu_util_system,
            "remote_total": o.theirs.cpu_util_total, "remote_user": o.theirs.cpu_util_user,
            "remote_system": o.theirs.cpu_util_system,
        },
    });
    if !udp {
        // The congestion control of each side iperf3 names: both on the client, the server's
        // own on the server.
        let (mine, far) = (&o.ours.congestion_used, &o.theirs.congestion_used);
        let (snd, rcv) = if sender { (mine, far) } else { (far, mine) };
        if let Some(c) = snd.as_ref().filter(|_| o.client || sender) {
            end["sender_tcp_congestion"] = json!(c);
        }
        if let Some(c) = rcv.as_ref().filter(|_| o.client || !sender) {
            end["receiver_tcp_congestion"] = json!(c);
        }
    }
    if udp {
        // iperf3's UDP `sum`: the bytes sent, over the receiver's time, with its losses.
        let mut sum = part(&tr, &ts, false);
        sum["bytes"] = json!(ts.count());
        sum["sender"] = json!(sender);
        end["sum"] = sum;
    }
    let zc: u64 = o.tallies.iter().map(|t| t.zero_copy_bytes).sum();
    let copied: u64 = o.tallies.iter().map(|t| t.copied_bytes).sum();
    let mut fallbacks: Vec<&str> = o
        .tallies
        .iter()
        .filter_map(|t| t.fallback.as_deref())
        .collect();
    fallbacks.dedup();
    let mut test_start = json!({"protocol": if udp { "UDP" } else { "TCP" },
        "num_streams": o.params.parallel, "blksize": o.params.len, "omit": 0,
        "duration": o.params.time, "bytes": o.params.num, "blocks": 0,
        "reverse": i32::from(o.params.reverse), "tos": 0});
    if o.params.bandwidth > 0 {
        test_start["target_bitrate"] = json!(o.params.bandwidth);
    }
    json!({
        "start": {
            "connected": connected,
            "version": format!("zcnet {} (iperf 3.12's protocol)", env!("CARGO_PKG_VERSION")),
            "system_info": "Linux",
            "timestamp": {"timesecs": now},
            "connecting_to": {"host": host, "port": port},
            "cookie": "",
            "test_start": test_start,
        },
        "intervals": intervals,
        "end": end,
        "zcnet": {
            "role": if o.client { "client" } else { "server" },
            "side": if sender { "sender" } else { "receiver" },
            "path": o.tallies.first().map_or("none", |t| t.path),
            "zero_copy_bytes": zc, "copied_bytes": copied,
            "zero_copy_share": if zc + copied > 0 { zc as f64 / (zc + copied) as f64 } else { 0.0 },
            "fallbacks": fallbacks, "server": o.server.to_string(), "seconds": o.seconds,
        },
    })
}
