//! Value parsers shared by the subcommands: every number a user types is checked here, so that
//! `nan`, `inf`, a negative or an absurd value is a one-line usage error (exit 2), never a panic
//! deeper down (`Duration::from_secs_f64` panics on all of those).

/// The shortest duration any option accepts: 1 ms. Above 0 was not enough: `1e-320` is above 0,
/// and as a timeout it failed over at once, was refused by the kernel as a zero timeout, or was
/// printed with hundreds of digits.
pub const MIN_SECONDS: f64 = 0.001;

/// The longest duration any option accepts: one week, in seconds.
pub const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// A duration in seconds: finite, from [`MIN_SECONDS`] to [`MAX_SECONDS`].
pub fn seconds(s: &str) -> Result<f64, String> {
    let v = number_of_seconds(s)?;
    // NaN fails the comparisons and is refused with the infinities.
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&v) {
        return Err(format!(
            "{s} s: give {MIN_SECONDS} s (1 ms) to {MAX_SECONDS} s (one week)"
        ));
    }
    Ok(v)
}

/// The shortest benchmark run: 10 ms, enough for a run to measure something (a shorter one
/// ended with no work done, and a bench of empty runs exited 0).
pub const MIN_BENCH_SECONDS: f64 = 0.01;

/// The longest single benchmark run: one hour, in seconds.
pub const MAX_BENCH_SECONDS: f64 = 3600.0;

/// The smallest percentage an option takes: 0.01 %, in effect none (a bench option must
/// refuse every value of the tests' sweep of nonsense, 0 and `1e-10` among them, since any value
/// it accepts runs the bench).
pub const MIN_PERCENT: f64 = 0.01;

/// A percentage: finite, from [`MIN_PERCENT`] to 1000 (`--noise 5`, `--fail-on-regression 10`).
pub fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s}: give a percentage, such as 5"))?;
    if !(MIN_PERCENT..=1000.0).contains(&v) {
        return Err(format!("{s} %: give {MIN_PERCENT} to 1000"));
    }
    Ok(v)
}

/// A bench run's length: finite, from [`MIN_BENCH_SECONDS`] to [`MAX_BENCH_SECONDS`].
pub fn bench_seconds(s: &str) -> Result<f64, String> {
    let v = number_of_seconds(s)?;
    if !(MIN_BENCH_SECONDS..=MAX_BENCH_SECONDS).contains(&v) {
        return Err(format!(
            "{s} s: one run lasts {MIN_BENCH_SECONDS} s (10 ms) to {MAX_BENCH_SECONDS} s (one hour)"
        ));
    }
    Ok(v)
}

fn number_of_seconds(s: &str) -> Result<f64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))
}

/// Every address `HOST:PORT` names: an IP literal (`127.0.0.1:80`, `[::1]:80`), an IPv6 literal
/// with a zone (`[fe80::1%veth0]:80`, `[fe80::1%3]:80`: the interface by name or index, as
/// getaddrinfo(3) takes it), or a name (`localhost:80`) resolved by getaddrinfo.
///
/// # Errors
/// One line naming the address: no port, a zone that is no interface here, a name that does not
/// resolve.
pub fn resolve(s: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    use std::net::{SocketAddr, SocketAddrV6, ToSocketAddrs};
    let expected = "expected HOST:PORT, e.g. 127.0.0.1:9000, [::1]:9000 or localhost:9000";
    // std parses neither a zone by name nor one inside brackets for a lookup: do it here.
    if let Some((ip, zone, port)) = s
        .strip_prefix('[')
        .and_then(|rest| rest.split_once("]:"))
        .and_then(|(host, port)| host.split_once('%').map(|(ip, zone)| (ip, zone, port)))
    {
        let ip: std::net::Ipv6Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv6 address ({expected})"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{port:?} is not a port ({expected})"))?;
        let scope = match zone.parse::<u32>() {
            Ok(index) => index,
            Err(_) => nix::net::if_::if_nametoindex(zone)
                .map_err(|e| format!("zone {zone:?}: no such interface here ({e})"))?,
        };
        return Ok(vec![SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope))]);
    }
    let addrs: Vec<SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("{e} ({expected})"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("it resolves to no address ({expected})"));
    }
    // A link-local IPv6 address names no interface on its own: bind and connect would say
    // only "Invalid argument" (issue 62 item 10).
    if let Some(a) = addrs.iter().find(|a| match a {
        SocketAddr::V6(v6) => v6.scope_id() == 0 && (v6.ip().segments()[0] & 0xffc0) == 0xfe80,
        SocketAddr::V4(_) => false,
    }) {
        return Err(format!(
            "{} is link-local: name its interface, as [{}%IFACE]:{}",
            a.ip(),
            a.ip(),
            a.port()
        ));
    }
    Ok(addrs)
}

/// A peer's `HOST:PORT`, as [`resolve`] reads it, whose port is not 0: a connection to port 0
/// says only "Connection refused" (issue 62 item 10).
///
/// # Errors
/// As [`resolve`], and port 0.
pub fn peer(s: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    let addrs = resolve(s)?;
    if addrs.iter().any(|a| a.port() == 0) {
        return Err("port 0 is no peer's port: give the port the receiver listens on".into());
    }
    Ok(addrs)
}

/// [`peer`]'s first address: for an option that takes one peer.
///
/// # Errors
/// As [`peer`].
pub fn peer_port(s: &str) -> Result<std::net::SocketAddr, String> {
    Ok(peer(s)?[0])
}

/// `HOST:PORT` as [`resolve`] takes it, resolved now to its first address.
pub fn host_port(s: &str) -> Result<std::net::SocketAddr, String> {
    Ok(resolve(s)?[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 62 item 10: `recv --listen [fe80::1]:P` said only "Invalid argument", `send x
    /// 127.0.0.1:0` "Connection refused".
    #[test]
    fn a_link_local_address_needs_its_zone_and_a_peer_a_port() {
        let e = resolve("[fe80::1]:9000").unwrap_err();
        assert!(
            e.contains("link-local") && e.contains("[fe80::1%IFACE]:9000"),
            "{e}"
        );
        assert!(resolve("[fe80::1%1]:9000").is_ok());
        assert!(resolve("[::1]:9000").is_ok());
        assert!(
            resolve("127.0.0.1:0").is_ok(),
            "a listener may take any port"
        );
        let e = peer("127.0.0.1:0").unwrap_err();
        assert!(e.contains("port 0"), "{e}");
        assert_eq!(peer_port("127.0.0.1:9").unwrap().port(), 9);
    }

    #[test]
    fn percent_takes_what_a_user_types_and_refuses_the_rest() {
        assert_eq!(percent("5"), Ok(5.0));
        assert_eq!(percent("7.5%"), Ok(7.5));
        assert_eq!(percent("0.01"), Ok(0.01));
        for bad in ["-1", "0", "1e-10", "5e-324", "nan", "inf", "1e9", "x", ""] {
            assert!(percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_refuses_what_would_panic_later() {
        for bad in ["-1", "0", "nan", "NaN", "inf", "-inf", "1e30", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(0.5));
        assert_eq!(seconds("604800"), Ok(MAX_SECONDS));
    }

    /// Issue 35 item 15: tiny durations, subnormals included, are outside every range, whose
    /// ends are taken.
    #[test]
    fn durations_have_a_floor_and_the_message_gives_the_range() {
        for tiny in [
            "1e-320", "5e-324", "4.9e-324", "2.2e-308", "1e-10", "0.0009", "-0",
        ] {
            let e = seconds(tiny).unwrap_err();
            assert_eq!(
                e,
                format!("{tiny} s: give 0.001 s (1 ms) to 604800 s (one week)")
            );
            let e = bench_seconds(tiny).unwrap_err();
            assert!(
                e.ends_with("one run lasts 0.01 s (10 ms) to 3600 s (one hour)"),
                "{e}"
            );
        }
        assert_eq!(seconds("0.001"), Ok(MIN_SECONDS));
        assert!(bench_seconds("0.009").is_err());
        assert_eq!(bench_seconds("0.01"), Ok(MIN_BENCH_SECONDS));
        assert_eq!(bench_seconds("3600"), Ok(MAX_BENCH_SECONDS));
        assert!(bench_seconds("3600.001").is_err());
    }

    #[test]
    fn host_port_takes_names_and_literals() {
        assert_eq!(host_port("localhost:9").unwrap().port(), 9);
        assert!(host_port("localhost:9").unwrap().ip().is_loopback());
        assert_eq!(host_port("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(host_port("127.0.0.1").is_err());
        assert!(host_port("127.0.0.1:99999").is_err());
    }

    /// Issue 22 item 7: zones as the kernel takes them, by name or index.
    #[test]
    fn ipv6_zones_by_name_and_index() {
        let lo = nix::net::if_::if_nametoindex("lo").unwrap();
        let a = host_port("[::1%lo]:80").unwrap();
        let std::net::SocketAddr::V6(v6) = a else {
            panic!("{a}")
        };
        assert_eq!((v6.scope_id(), v6.port()), (lo, 80));
        assert!(v6.ip().is_loopback());
        let b = host_port(&format!("[fe80::1%{lo}]:9")).unwrap();
        let std::net::SocketAddr::V6(v6) = b else {
            panic!("{b}")
        };
        assert_eq!(v6.scope_id(), lo);
        for bad in [
            "[::1%zcnet-none0]:80",
            "[::1%lo]:x",
            "[zz%lo]:80",
            "[::1%lo]",
        ] {
            let e = host_port(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
    }
}
