//! Numbers as iperf3 prints them: a transfer in powers of 1024, a rate in powers of 1000, a
//! share in percent.

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

pub fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// A share in percent as iperf3 prints its losses (`%.2g`).
pub fn percent(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{:.1e}", v)
    }
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
        assert_eq!(percent(0.0), "0");
        assert_eq!(percent(12.34), "12");
        assert_eq!(percent(1.25), "1.2");
    }
}
