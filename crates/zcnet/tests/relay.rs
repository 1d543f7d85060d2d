//! The relay as a library (issue 35): the blocking `relay::relay` and, with the `tokio` feature,
//! `zcnet::tokio::relay`, each with both peek methods. A healthy destination, idle or with its
//! window closed, keeps its one connection. Loopback only; each relay, peer and wait is bounded.

mod relay_peers;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use netlab::pattern::random_bytes;
use relay_peers::{Behaviour, Destination, End, only, peek_methods, read_quietly, send_all};
use zcnet::peek::Mode;
use zcnet::relay::{Config, RelayError, Report};

/// Which relay runs a connection.
#[derive(Clone, Copy, Debug)]
enum Driver {
    /// `relay::relay` on a thread of its own.
    Blocking,
    /// `zcnet::tokio::relay` on a current-thread runtime.
    #[cfg(feature = "tokio")]
    Tokio,
}

const DRIVERS: &[Driver] = &[
    Driver::Blocking,
    #[cfg(feature = "tokio")]
    Driver::Tokio,
];

/// Every driver with every peek method this kernel has.
fn relays() -> Vec<(Driver, Mode)> {
    let methods = peek_methods();
    DRIVERS
        .iter()
        .flat_map(|&d| methods.iter().map(move |&m| (d, m)))
        .collect()
}

/// An acknowledgement timeout short enough for the tests to wait several of them.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// One connection relayed from a new listener.
struct Relay {
    addr: SocketAddr,
    outcome: Option<JoinHandle<Result<Report, RelayError>>>,
    /// The tokio relay's runtime. Its copy from destination back to source is a task that
    /// outlives the relay's future (which ends once the source's stream is acknowledged), as the
    /// blocking relay's thread does: the runtime lives as long as the scenario.
    #[cfg(feature = "tokio")]
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Relay {
    /// Relays one connection accepted on a new listener to `targets`.
    fn start(driver: Driver, mode: Mode, targets: Vec<SocketAddr>) -> Relay {
        let config = Config {
            mode,
            ack_timeout: ACK_TIMEOUT,
            ..Config::new(targets)
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        match driver {
            Driver::Blocking => Relay {
                addr,
                outcome: Some(std::thread::spawn(move || {
                    let (src, _) = listener.accept().unwrap();
                    zcnet::relay::relay(src, &config)
                })),
                #[cfg(feature = "tokio")]
                _runtime: None,
            },
            #[cfg(feature = "tokio")]
            Driver::Tokio => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                listener.set_nonblocking(true).unwrap();
                let task = rt.spawn(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    let (src, _) = listener.accept().await.unwrap();
                    zcnet::tokio::relay(src, &config).await
                });
                let handle = rt.handle().clone();
                Relay {
                    addr,
                    outcome: Some(std::thread::spawn(move || handle.block_on(task).unwrap())),
                    _runtime: Some(rt),
                }
            }
        }
    }

    /// Waits for the relay's end.
    fn outcome(&mut self) -> Result<Report, RelayError> {
        self.outcome.take().unwrap().join().unwrap()
    }
}

/// Runs `scenario` for every driver and method at once (each waits on purpose), naming the
/// pair in its failure.
fn each_relay(scenario: impl Fn(Driver, Mode, &str) + Sync) {
    let scenario = &scenario;
    std::thread::scope(|s| {
        for (driver, mode) in relays() {
            s.spawn(move || scenario(driver, mode, &format!("{driver:?}, {}", mode.name())));
        }
    });
}

/// Item 3: a client that only reads a greeting, silent for 3.5 acknowledgement timeouts with
/// nothing outstanding, keeps its one destination connection (each timeout failed over and
/// reconnected: BANNER-0, BANNER-1, BANNER-2).
#[test]
fn an_idle_client_keeps_its_one_destination_connection() {
    each_relay(|driver, mode, what| {
        let dest = Destination::start(Behaviour {
            greeting: true,
            ..Behaviour::default()
        });
        let mut relay = Relay::start(driver, mode, vec![dest.addr]);
        let got = read_quietly(relay.addr, ACK_TIMEOUT * 7 / 2);
        let report = relay.outcome();
        assert_eq!(String::from_utf8_lossy(&got), "BANNER-0\n", "{what}");
        only(&dest.finish(), what).check(&[], End::Fin, what);
        let report = report.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(report.failovers.is_empty(), "{what}: {report:?}");
    });
}

/// Item 4: a destination that stops reading for three acknowledgement timeouts after 1 MiB (its
/// window closes, its TCP answers the window probes) keeps its connection and gets every byte
/// of 8 MiB on it, in order; the fallback is never called.
#[test]
fn a_destination_that_stops_reading_keeps_its_connection() {
    let data = Arc::new(random_bytes(8 << 20, 35));
    each_relay(|driver, mode, what| {
        let dest = Destination::start(Behaviour {
            pause: Some((1 << 20, ACK_TIMEOUT * 3)),
            rcvbuf: Some(64 << 10),
            ..Behaviour::default()
        });
        let fallback = Destination::start(Behaviour::default());
        let mut relay = Relay::start(driver, mode, vec![dest.addr, fallback.addr]);
        send_all(relay.addr, data.to_vec()).join().unwrap();
        let report = relay.outcome();
        only(&dest.finish(), what).check_whole_across_a_closed_window(&data, what);
        fallback.check_unused(what);
        let report = report.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(report.failovers.is_empty(), "{what}: {report:?}");
        assert_eq!(report.bytes, data.len() as u64, "{what}");
    });
}
