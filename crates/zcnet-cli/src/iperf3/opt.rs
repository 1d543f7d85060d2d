//! `zcnet iperf3`'s options, with iperf3's names, and their parsers.

use std::net::IpAddr;

use super::proto;

/// `zcnet iperf3`. Options as iperf3 spells them; a client-only option with `-s` (or `-1` with
/// `-c`) is refused, as iperf3 refuses it. `-V` is not zcnet's version here: iperf3's `-V` is
/// `--verbose`, which zcnet does not have, so it is refused by name rather than taken for
/// something else.
#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("role").required(true).args(["client", "server"])),
    disable_version_flag = true
)]
pub struct Opt {
    /// Run a test against the iperf3 server at HOST (`-c`).
    #[arg(short = 'c', long, value_name = "HOST")]
    pub client: Option<String>,
    /// Serve tests, one at a time, as `iperf3 -s` does.
    #[arg(short = 's', long)]
    pub server: bool,
    /// The server's port.
    #[arg(short = 'p', long, default_value_t = proto::PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Seconds to send (client).
    #[arg(short = 't', long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=86_400), conflicts_with = "server", allow_negative_numbers = true)]
    pub time: u32,
    /// Bytes to send in all instead of `-t` (K, M, G: powers of 1024, as iperf3's).
    #[arg(short = 'n', long, value_name = "BYTES", value_parser = bytes_arg, conflicts_with = "server", allow_negative_numbers = true)]
    pub bytes: Option<u64>,
    /// Block length of each write (K, M: powers of 1024), at most 1 MiB as iperf3's. Default: 128
    /// KiB; UDP: the control connection's MSS.
    #[arg(short = 'l', long = "length", value_name = "LENGTH", value_parser = length_arg, conflicts_with = "server", allow_negative_numbers = true)]
    pub length: Option<usize>,
    /// Parallel streams (client).
    #[arg(short = 'P', long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128), conflicts_with = "server", allow_negative_numbers = true)]
    pub parallel: u32,
    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "server")]
    pub reverse: bool,
    /// Seconds between interval lines (either side's); 0: one interval, the whole test.
    #[arg(short = 'i', long, value_name = "SECONDS", default_value_t = 1.0, value_parser = interval_arg, allow_negative_numbers = true)]
    pub interval: f64,
    /// Print iperf3's JSON (`start`, `intervals`, `end`) with a `zcnet` object added.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Serve one test, then exit (server).
    #[arg(short = '1', long = "one-off", conflicts_with = "client")]
    pub one_off: bool,
    /// The address to listen on (server) or to send from (client).
    #[arg(short = 'B', long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// IPv4 only.
    #[arg(short = '4', long = "version4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "version6")]
    pub ipv6: bool,
    /// UDP instead of TCP.
    #[arg(short = 'u', long, conflicts_with = "server")]
    pub udp: bool,
    /// Target rate of each stream in bits per second (K, M, G: powers of 1000, as iperf3's);
    /// UDP's default is 1 Mibit/s, TCP's no limit.
    #[arg(short = 'b', long = "bitrate", value_name = "RATE", value_parser = rate_arg, conflicts_with = "server", allow_negative_numbers = true)]
    pub bitrate: Option<u64>,
    /// Send with `sendfile` from a file of one block, as iperf3's `-Z` does (TCP).
    #[arg(short = 'Z', long = "zerocopy", conflicts_with_all = ["mode", "server"])]
    pub sendfile: bool,
    /// zcnet's path on this side. Sending TCP: `copy` (write), `zc` (MSG_ZEROCOPY on every
    /// block), `zc-fixed` (io_uring SEND_ZC from registered buffers), `auto` (MSG_ZEROCOPY where
    /// it pays: not to a receiver on this host, where the kernel copies). Receiving TCP:
    /// TCP_ZEROCOPY_RECEIVE unless `copy`. UDP goes by copy.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// `write` and `read`, as iperf3.
    Copy,
    /// `MSG_ZEROCOPY` on every block; receiving, `TCP_ZEROCOPY_RECEIVE`.
    Zc,
    /// io_uring `SEND_ZC` from registered buffers; receiving, `TCP_ZEROCOPY_RECEIVE`.
    ZcFixed,
    /// `MSG_ZEROCOPY` where the library's `Mode::Auto` finds it pays; receiving,
    /// `TCP_ZEROCOPY_RECEIVE`.
    #[default]
    Auto,
}

/// How a TCP stream of this side sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Send {
    Write,
    MsgZeroCopy { auto: bool },
    UringFixed,
    Sendfile,
}

/// How a TCP stream of this side receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receive {
    /// `TCP_ZEROCOPY_RECEIVE` where the kernel can map pages.
    Map,
    Read,
}

impl Opt {
    /// The sending path `-Z` and `--mode` ask for.
    pub fn send(&self) -> Send {
        if self.sendfile {
            return Send::Sendfile;
        }
        match self.mode.unwrap_or_default() {
            Mode::Copy => Send::Write,
            Mode::Zc => Send::MsgZeroCopy { auto: false },
            Mode::ZcFixed => Send::UringFixed,
            Mode::Auto => Send::MsgZeroCopy { auto: true },
        }
    }

    /// The receiving path `--mode` asks for.
    pub fn receive(&self) -> Receive {
        match self.mode {
            Some(Mode::Copy) => Receive::Read,
            _ => Receive::Map,
        }
    }
}

/// `-b`: a rate as iperf3 reads one (`unit_atof_rate`): digits, with K, M, G or T for powers of
/// 1000; at least 1 bit/s.
fn rate_arg(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                _ => return Err(format!("{s}: give bits per second, with K, M, G or T")),
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    let v: f64 = digits
        .parse()
        .map_err(|_| format!("{s}: give bits per second, such as 100M"))?;
    let bits = v * mult;
    if !bits.is_finite() || !(1.0..=1e15).contains(&bits) {
        return Err(format!("{s}: give 1 bit/s to 1000T"));
    }
    Ok(bits as u64)
}

/// `-n`: at least one byte, at most 1 PiB.
fn bytes_arg(s: &str) -> Result<u64, String> {
    size(s, 1 << 50)
}

/// `-l`: at least one byte, at most 1 MiB (iperf3's `MAX_BLOCKSIZE`).
fn length_arg(s: &str) -> Result<usize, String> {
    size(s, proto::MAX_TCP_BLOCK).map(|v| v as usize)
}

/// A size as iperf3 reads one: digits with K, M, G or T (powers of 1024).
fn size(s: &str, max: u64) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_uppercase()),
        _ => (t, ' '),
    };
    let shift = match unit {
        ' ' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        'T' => 40,
        _ => {
            return Err(format!(
                "{s}: give bytes, with K, M, G or T (powers of 1024)"
            ));
        }
    };
    let v: u64 = digits
        .parse()
        .map_err(|_| format!("{s}: give a whole number of bytes, with K, M, G or T"))?;
    let v = v.checked_shl(shift).filter(|&b| b >> shift == v);
    match v {
        Some(b) if (1..=max).contains(&b) => Ok(b),
        _ => Err(format!("{s}: give 1 byte to {max} bytes")),
    }
}

/// `-i`: 0.1 s to 60 s.
fn interval_arg(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s}: give seconds, such as 1"))?;
    if v != 0.0 && !(0.1..=60.0).contains(&v) {
        return Err(format!(
            "{s} s: give 0.1 s to 60 s, or 0 for one line over the test"
        ));
    }
    // -0 is 0.
    Ok(v.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_iperf3_reads_them() {
        assert_eq!(size("1000", 1 << 50), Ok(1000));
        assert_eq!(size("128K", 1 << 50), Ok(128 << 10));
        assert_eq!(size("1m", 1 << 50), Ok(1 << 20));
        assert_eq!(size("2G", 1 << 50), Ok(2 << 30));
        for bad in [
            "",
            "0",
            "-1",
            "1.5M",
            "1X",
            "nan",
            "18446744073709551615T",
            "2048T",
        ] {
            assert!(size(bad, 1 << 50).is_err(), "{bad}");
        }
    }

    #[test]
    fn intervals_read_as_iperf3_reads_them() {
        assert_eq!(interval_arg("1"), Ok(1.0));
        assert_eq!(interval_arg("0.5"), Ok(0.5));
        assert_eq!(interval_arg("0"), Ok(0.0), "one interval over the test");
        assert_eq!(interval_arg("-0"), Ok(0.0));
        for bad in ["", "0.05", "61", "-1", "nan", "inf", "1s"] {
            assert!(interval_arg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_read_as_iperf3_reads_them() {
        assert_eq!(rate_arg("100M"), Ok(100_000_000));
        assert_eq!(rate_arg("1.5k"), Ok(1500));
        assert_eq!(rate_arg("2G"), Ok(2_000_000_000));
        for bad in ["", "0", "-1", "1X", "nan", "inf", "1e30", "100M/10"] {
            assert!(rate_arg(bad).is_err(), "{bad}");
        }
    }
}
