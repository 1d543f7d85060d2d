//! Value parsers shared by the subcommands: every number a user types is checked here, so that
//! `nan`, `inf`, a negative or an absurd value is a one-line usage error (exit 2), never a panic
//! deeper down (`Duration::from_secs_f64` panics on all of those).

/// The longest duration any option accepts: one week, in seconds.
pub const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// A duration in seconds: finite, above 0, at most [`MAX_SECONDS`].
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s} s: give a duration above 0"));
    }
    if v > MAX_SECONDS {
        return Err(format!("{s} s: at most {MAX_SECONDS} s (one week)"));
    }
    Ok(v)
}

/// The longest single benchmark run: one hour, in seconds.
pub const MAX_BENCH_SECONDS: f64 = 3600.0;

/// A bench run's length: as [`seconds`], at most [`MAX_BENCH_SECONDS`].
pub fn bench_seconds(s: &str) -> Result<f64, String> {
    let v = seconds(s)?;
    if v > MAX_BENCH_SECONDS {
        return Err(format!(
            "{s} s: one run lasts at most {MAX_BENCH_SECONDS} s"
        ));
    }
    Ok(v)
}

/// `HOST:PORT` (`127.0.0.1:80`, `[::1]:80`, `localhost:80`), resolved now to its first address.
pub fn host_port(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .map_err(|e| format!("{e} (expected HOST:PORT, e.g. 127.0.0.1:9000 or localhost:9000)"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_refuses_what_would_panic_later() {
        for bad in ["-1", "0", "nan", "NaN", "inf", "-inf", "1e30", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(0.5));
        assert_eq!(seconds("604800"), Ok(MAX_SECONDS));
    }

    #[test]
    fn host_port_takes_names_and_literals() {
        assert_eq!(host_port("localhost:9").unwrap().port(), 9);
        assert!(host_port("localhost:9").unwrap().ip().is_loopback());
        assert_eq!(host_port("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(host_port("127.0.0.1").is_err());
        assert!(host_port("127.0.0.1:99999").is_err());
    }
}
