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

/// A share in percent as iperf3 prints its losses: C's `%.2g` (two significant digits,
/// trailing zeros dropped, an exponent below 1e-4 and from 100 on: `0.5`, `2`, `12`, `1e+02`).
pub fn percent(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 {
            "0".to_owned()
        } else {
            v.to_string()
        };
    }
    // Rounded to two significant digits first: the exponent is the rounded value's.
    let sci = format!("{v:.1e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..2).contains(&exp) {
        let decimals = usize::try_from(1 - exp).unwrap_or(0);
        trim_zeros(&format!("{v:.decimals$}"))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exp.abs())
    }
}

/// `1.50` -> `1.5`, `2.0` -> `2`, `20` -> `20`.
fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s.to_owned()
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
        // C's %.2g, as iperf3 prints a loss.
        for (v, printed) in [
            (0.0, "0"),
            (0.5, "0.5"),
            (2.0, "2"),
            (12.34, "12"),
            (9.96, "10"),
            (99.96, "1e+02"),
            (100.0, "1e+02"),
            (0.000_01, "1e-05"),
            (0.000_123, "0.00012"),
            (-20.0, "-20"),
        ] {
            assert_eq!(percent(v), printed, "{v}");
        }
    }
}
