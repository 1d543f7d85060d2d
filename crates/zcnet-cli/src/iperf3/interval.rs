//! A test's intervals, as either side keeps them: each `-i` seconds every stream's bytes (UDP:
//! its datagrams; a TCP sender: its `TCP_INFO`, iperf3's `Retr`, `Cwnd` and round-trip times),
//! printed as iperf3 prints them unless the output is `-J`.

use std::time::Duration;

use super::proto;
use super::streams::Stream;
use super::units::{bps, percent, rate, transfer};

/// One interval of a test: each stream's bytes in it.
pub struct Interval {
    pub start: f64,
    pub end: f64,
    pub bytes: Vec<u64>,
    /// UDP: each stream's datagrams in it.
    pub packets: Option<Vec<u64>>,
    /// A TCP sender: each stream's `TCP_INFO` at its end.
    pub tcp: Option<Vec<TcpSample>>,
    /// A UDP receiver: each stream's losses in it and its jitter at its end.
    pub udp_rx: Option<Vec<UdpSample>>,
}

/// A UDP receiver's stream over an interval, in iperf3's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UdpSample {
    /// Datagrams lost in the interval; less than 0 where late ones came that an interval
    /// before counted lost (as iperf3's `interval_cnt_error`).
    pub lost: i64,
    /// The jitter at its end, seconds.
    pub jitter: f64,
}

impl UdpSample {
    /// Lost over the interval's datagrams (`packets`), in percent.
    pub fn lost_percent(lost: i64, packets: u64) -> f64 {
        if packets > 0 {
            100.0 * lost as f64 / packets as f64
        } else {
            0.0
        }
    }
}

impl Interval {
    /// A UDP receiver's stream `k` (or, `None`, the sum) in this interval: its jitter in
    /// seconds (the streams' mean), datagrams lost and datagrams in all, as iperf3 counts them.
    pub fn losses(&self, k: Option<usize>) -> Option<(f64, i64, u64)> {
        let (rx, p) = (self.udp_rx.as_ref()?, self.packets.as_ref()?);
        Some(match k {
            Some(k) => (rx.get(k)?.jitter, rx.get(k)?.lost, *p.get(k)?),
            None => (
                rx.iter().map(|x| x.jitter).sum::<f64>() / rx.len().max(1) as f64,
                rx.iter().map(|x| x.lost).sum(),
                p.iter().sum(),
            ),
        })
    }
}

/// A TCP sender's stream at an interval's end, in iperf3's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSample {
    /// Segments retransmitted in the interval (`tcpi_total_retrans`'s growth).
    pub retransmits: u64,
    /// The congestion window in bytes (`tcpi_snd_cwnd * tcpi_snd_mss`).
    pub snd_cwnd: u64,
    /// The peer's receive window in bytes (`tcpi_snd_wnd`; 0 before Linux 5.4).
    pub snd_wnd: u64,
    /// Smoothed round-trip time and its variation, µs (`tcpi_rtt`, `tcpi_rttvar`).
    pub rtt: u64,
    pub rttvar: u64,
    /// `tcpi_pmtu`.
    pub pmtu: u64,
}

/// What a TCP sender's stream reports at the end (iperf3's `max_snd_cwnd`, `max_snd_wnd`,
/// `max_rtt`, `min_rtt`, `mean_rtt`), over its interval samples as iperf3 keeps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSummary {
    pub max_snd_cwnd: u64,
    pub max_snd_wnd: u64,
    pub max_rtt: u64,
    pub min_rtt: u64,
    pub mean_rtt: u64,
}

impl TcpSummary {
    /// Stream `k`'s summary over `intervals` (zeros where it has no samples).
    pub fn of(intervals: &[Interval], k: usize) -> TcpSummary {
        // A sample whose TCP_INFO call failed has no window: not a sample.
        let samples: Vec<TcpSample> = intervals
            .iter()
            .filter_map(|iv| iv.tcp.as_ref()?.get(k).copied())
            .filter(|s| s.snd_cwnd > 0)
            .collect();
        let Some(n) = u64::try_from(samples.len()).ok().filter(|&n| n > 0) else {
            return TcpSummary::default();
        };
        let max = |f: fn(&TcpSample) -> u64| samples.iter().map(f).max().unwrap_or(0);
        TcpSummary {
            max_snd_cwnd: max(|s| s.snd_cwnd),
            max_snd_wnd: max(|s| s.snd_wnd),
            max_rtt: max(|s| s.rtt),
            min_rtt: samples.iter().map(|s| s.rtt).min().unwrap_or(0),
            mean_rtt: samples.iter().map(|s| s.rtt).sum::<u64>() / n,
        }
    }
}

/// Takes a test's intervals from its streams on their schedule, printing each.
pub struct Sampler {
    /// `None` (`-i 0`): one interval, the whole test.
    every: Option<Duration>,
    /// Print the lines (not `-J`).
    print: bool,
    udp: bool,
    /// This side sends TCP: each interval samples `TCP_INFO`.
    tcp_sender: bool,
    /// This side receives UDP: each interval takes losses and jitter.
    udp_receiver: bool,
    /// The last interval's end, and each stream's bytes, datagrams, retransmits and losses
    /// then.
    last: Duration,
    bytes: Vec<u64>,
    packets: Vec<u64>,
    retransmits: Vec<u64>,
    lost: Vec<u64>,
    intervals: Vec<Interval>,
}

impl Sampler {
    /// A sampler of `streams` every `every` (0: once, at the test's end), from the test's
    /// start.
    pub fn new(streams: usize, every: Duration, print: bool, udp: bool, sending: bool) -> Sampler {
        Sampler {
            every: (!every.is_zero()).then(|| every.max(Duration::from_millis(100))),
            print,
            udp,
            tcp_sender: sending && !udp,
            udp_receiver: !sending && udp,
            last: Duration::ZERO,
            bytes: vec![0; streams],
            packets: vec![0; streams],
            retransmits: vec![0; streams],
            lost: vec![0; streams],
            intervals: Vec::new(),
        }
    }

    /// When the next interval ends, since the test's start (`Duration::MAX`: at its end).
    pub fn next(&self) -> Duration {
        self.every.map_or(Duration::MAX, |e| self.last + e)
    }

    /// At `now` (since the test's start), takes the interval if it is due or the test is
    /// `done`. An interval ends on its schedule (as iperf3's timer ends it) unless this call
    /// came late by half an interval or the test is over.
    pub fn tick(&mut self, now: Duration, done: bool, streams: &[Stream]) {
        if now < self.next() && !done {
            return;
        }
        let due = self.next();
        let end = match self.every {
            Some(e) if !done && now.saturating_sub(due) < e / 2 => due,
            _ => now,
        };
        let bytes: Vec<u64> = streams.iter().map(Stream::count).collect();
        let mut iv = Interval {
            start: self.last.as_secs_f64(),
            end: end.as_secs_f64(),
            bytes: delta(&bytes, &self.bytes),
            packets: None,
            tcp: None,
            udp_rx: None,
        };
        if self.udp_receiver {
            // As iperf3's receiver: the datagrams by their numbers (lost ones included).
            let live: Vec<_> = streams.iter().map(Stream::udp_live).collect();
            let packets: Vec<u64> = live.iter().map(|l| l.highest).collect();
            iv.packets = Some(delta(&packets, &self.packets));
            let lost: Vec<u64> = live.iter().map(|l| l.lost).collect();
            let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            iv.udp_rx = Some(
                lost.iter()
                    .zip(&self.lost)
                    .zip(&live)
                    .map(|((now, before), l)| UdpSample {
                        lost: signed(*now) - signed(*before),
                        jitter: l.jitter,
                    })
                    .collect(),
            );
            (self.packets, self.lost) = (packets, lost);
        } else if self.udp {
            let packets: Vec<u64> = streams.iter().map(Stream::packets).collect();
            iv.packets = Some(delta(&packets, &self.packets));
            self.packets = packets;
        }
        if self.tcp_sender {
            let samples = streams
                .iter()
                .zip(&mut self.retransmits)
                .map(|(s, before)| {
                    let Some(i) = s.tcp_info() else {
                        return TcpSample::default();
                    };
                    let total = u64::from(i.total_retrans);
                    let grew = total.saturating_sub(*before);
                    *before = total;
                    TcpSample {
                        retransmits: grew,
                        snd_cwnd: i.cwnd_bytes(),
                        snd_wnd: i.snd_wnd.map_or(0, u64::from),
                        rtt: u64::from(i.rtt_us),
                        rttvar: u64::from(i.rttvar_us),
                        pmtu: u64::from(i.pmtu),
                    }
                })
                .collect();
            iv.tcp = Some(samples);
        }
        // As iperf3: a last interval under a tenth of `-i` that moved nothing is no interval.
        let short = self
            .every
            .is_some_and(|e| end.saturating_sub(self.last) < e / 10);
        if done && short && iv.bytes.iter().all(|&b| b == 0) {
            self.last = end;
            self.bytes = bytes;
            return;
        }
        if self.print && end > self.last {
            if self.intervals.is_empty() {
                interval_header(self.udp, self.tcp_sender, self.udp_receiver);
            } else if streams.len() > 1 {
                // iperf3 parts the groups of several streams' lines.
                separator();
            }
            interval_line(&iv);
        }
        self.intervals.push(iv);
        self.last = end;
        self.bytes = bytes;
    }

    /// The intervals taken.
    pub fn finish(self) -> Vec<Interval> {
        self.intervals
    }
}

/// iperf3's line between groups of interval lines, and before the summary.
pub fn separator() {
    println!("- - - - - - - - - - - - - - - - - - - - - - - - -");
}

/// The header of the interval lines (`cwnd`: a TCP sender's, with `Retr` and `Cwnd`;
/// `losses`: a UDP receiver's, with its jitter and losses).
pub fn interval_header(udp: bool, cwnd: bool, losses: bool) {
    let tail = if losses {
        "         Jitter    Lost/Total Datagrams"
    } else if udp {
        "         Total Datagrams"
    } else if cwnd {
        "         Retr  Cwnd"
    } else {
        ""
    };
    println!("[ ID] Interval           Transfer     Bitrate{tail}");
}

/// An interval line per stream, and `[SUM]` with several, in iperf3's layout: a UDP sender's
/// datagrams, a TCP sender's retransmits and congestion window, blanks where iperf3 has them.
pub fn interval_line(iv: &Interval) {
    let secs = iv.end - iv.start;
    // A UDP receiver's jitter (the streams' mean for the sum) and losses.
    let losses = |k: Option<usize>| {
        let (jitter, lost, total) = iv.losses(k)?;
        Some(format!(
            "  {:.3} ms  {lost}/{total} ({}%)  ",
            jitter * 1000.0,
            percent(UdpSample::lost_percent(lost, total))
        ))
    };
    let datagrams = |k: Option<usize>| match (&iv.packets, &iv.tcp, k) {
        _ if iv.udp_rx.is_some() => losses(k).unwrap_or_default(),
        (Some(p), _, Some(k)) => format!("  {}  ", p[k]),
        (Some(p), _, None) => format!("  {}  ", p.iter().sum::<u64>()),
        (None, Some(t), Some(k)) => format!(
            "  {:>3}   {}       ",
            t[k].retransmits,
            transfer(t[k].snd_cwnd as f64)
        ),
        (None, Some(t), None) => format!(
            "  {:>3}             ",
            t.iter().map(|x| x.retransmits).sum::<u64>()
        ),
        (None, None, _) => " ".repeat(18),
    };
    for (k, &b) in iv.bytes.iter().enumerate() {
        println!(
            "[{:>3}] {:>6.2}-{:<6.2} sec  {}  {}{}",
            proto::stream_id(k),
            iv.start,
            iv.end,
            transfer(b as f64),
            rate(bps(b, secs)),
            datagrams(Some(k))
        );
    }
    if iv.bytes.len() > 1 {
        let sum: u64 = iv.bytes.iter().sum();
        println!(
            "[SUM] {:>6.2}-{:<6.2} sec  {}  {}{}",
            iv.start,
            iv.end,
            transfer(sum as f64),
            rate(bps(sum, secs)),
            datagrams(None)
        );
    }
}

/// Each count's growth since `before` (a count that went back, none).
fn delta(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter()
        .zip(before)
        .map(|(n, b)| n.saturating_sub(*b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_rtts(rtts: &[u64]) -> Vec<Interval> {
        rtts.iter()
            .enumerate()
            .map(|(k, &rtt)| Interval {
                start: k as f64,
                end: k as f64 + 1.0,
                bytes: vec![1],
                packets: None,
                udp_rx: None,
                tcp: Some(vec![TcpSample {
                    rtt,
                    snd_cwnd: 1000 * rtt,
                    ..TcpSample::default()
                }]),
            })
            .collect()
    }

    #[test]
    fn a_senders_summary_is_over_its_interval_samples() {
        let s = TcpSummary::of(&with_rtts(&[30, 10, 20]), 0);
        assert_eq!(
            (s.max_rtt, s.min_rtt, s.mean_rtt, s.max_snd_cwnd),
            (30, 10, 20, 30_000)
        );
        assert_eq!(TcpSummary::of(&with_rtts(&[]), 0), TcpSummary::default());
        assert_eq!(
            TcpSummary::of(&with_rtts(&[5]), 1),
            TcpSummary::default(),
            "no such stream"
        );
    }
}
