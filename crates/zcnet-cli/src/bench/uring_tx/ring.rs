//! The ring of every `uring-tx` run: the settings asked for ([`CONFIG`]) and what this kernel
//! grants them ([`granted_setup`]).

use std::time::Duration;

use zcnet::uring::{Config, Mode, UringSender};

/// Ring settings of every run: 256 entries, at most 128 requests in flight, 16 per submission.
pub const CONFIG: Config = Config {
    mode: Mode::Copy,
    entries: 256,
    window: 128,
    batch: 16,
    stall_timeout: Duration::from_secs(10),
    // Each run's sender stays on its thread: set up as liburing's send-zerocopy.c does.
    setup: zcnet::uring::RingSetup::ONE_THREAD,
    segment: None,
};

/// The ring set-up this kernel grants to [`CONFIG`] (flags and registrations), from a sender
/// that submits nothing; `null` where io_uring cannot be set up.
pub(super) fn granted_setup() -> serde_json::Value {
    let Ok(sock) = std::net::UdpSocket::bind("127.0.0.1:0") else {
        return serde_json::Value::Null;
    };
    let config = Config {
        mode: Mode::Copy,
        ..CONFIG
    };
    match UringSender::<_, Vec<u8>>::new(sock, config) {
        Ok(mut tx) => {
            // The first (empty) submission enables the ring and registers its fd.
            let _ = tx.flush();
            serde_json::json!(tx.setup())
        }
        Err(_) => serde_json::Value::Null,
    }
}
