//! Zero copy only where it pays: the profile behind every sending mechanism's `Mode::Auto`.
//!
//! Zero copy trades a copy for page pinning and a completion; below some message size the trade
//! loses, and on some routes the kernel copies anyway (a socket on this host: loopback, or a
//! veth into another namespace; `Documentation/networking/msg_zerocopy.rst`, "Loopback"). Where
//! the break-even lies depends on the path, the route and the machine, so it is measured:
//! `zcnet tune` alternates copy and zero-copy runs over a size sweep per path and route kind
//! and writes a [`Profile`]. `Mode::Auto` of [`msg_zerocopy`](crate::msg_zerocopy),
//! [`uring`](crate::uring) and [`file`](crate::file) then sends a message by zero copy when it
//! is at least the profile's threshold for the socket's [`Route`], by copy otherwise; after a
//! completion flagged "copied" it copies for a while ([`BACKOFF_SENDS`]) and then tries again.
//!
//! The profile in use ([`active`]) is the one installed by [`set_profile`], else the file named
//! by `$ZCNET_PROFILE`, else `$XDG_CONFIG_HOME/zcnet/profile.toml` (`~/.config/...`) when it
//! exists, else [`Profile::builtin`]: the kernel documents' figures (MSG_ZEROCOPY "is generally
//! only effective at writes over around 10 KB"; no zero copy to local sockets, which copy).
//! The files are read with the feature `profile` (the `toml` crate) only; without it, the
//! built-in thresholds are used and [`Profile::origin`] says no profile support was compiled in.
#![cfg_attr(
    all(feature = "msg_zerocopy", feature = "profile"),
    doc = r#"
# Example
```no_run
use std::net::UdpSocket;
use zcnet::msg_zerocopy::{Config, Mode, ZeroCopySender};

// The profile `zcnet tune --profile profile.toml` wrote (else ~/.config/zcnet/profile.toml,
// else the built-in thresholds).
zcnet::auto::set_profile(zcnet::auto::Profile::load("profile.toml".as_ref())?);
let sock = UdpSocket::bind("127.0.0.1:0")?;
sock.connect("127.0.0.1:9")?;
let config = Config { mode: Mode::Auto, ..Config::default() };
let mut tx = ZeroCopySender::<_, Vec<u8>>::new(sock, config)?;
// "auto: msg_zerocopy_udp on a local route: zero copy never (profile profile.toml, ...)"
println!("{}", tx.auto_choice().expect("auto mode"));
tx.send(vec![0u8; 64000]).map_err(|e| e.error)?;
tx.drain(std::time::Duration::from_secs(1))?;
let c = tx.counters().auto;
println!("{} sends by zero copy, {} by copy below the threshold", c.zero_copy_calls, c.small_calls);
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]

mod active;
mod date;
mod decider;
#[cfg(feature = "profile")]
mod load;
mod profile;
mod route;

pub use active::{active, set_profile};
pub use date::utc_now;
pub(crate) use decider::Decider;
pub use decider::{AutoCounters, BACKOFF_SENDS, Choice};
#[cfg(feature = "profile")]
pub use load::{MAX_PROFILE, ProfileError};
pub use profile::{Entry, Profile, SendPath, Threshold};
pub use route::Route;
