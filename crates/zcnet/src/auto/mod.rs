//! Zero copy only where it pays: the learner behind every sending mechanism's `Mode::Auto`.
//!
//! Zero copy trades a copy for page pinning and a completion; below some message size the trade
//! loses, and on some routes the kernel copies anyway (a socket on this host: loopback, or a veth
//! into another namespace; `Documentation/networking/msg_zerocopy.rst`, "Loopback"). Where the
//! break-even lies depends on the path, the route, the machine and the load, so each `Mode::Auto`
//! sender of [`msg_zerocopy`](crate::msg_zerocopy), [`uring`](crate::uring) and
//! [`file`](crate::file) (and their tokio twins and libzcnet) measures it on its own socket and
//! traffic, while it sends:
//!
//! - **Per size class** (below 1 KiB, then one per power of two up to 1 MiB and more), sends go in
//!   *rounds* of one way, about [`ROUND_BYTES`](Learning::round_bytes) each within 16 to 1024
//!   sends. A round's cost is the sending thread's CPU time over its bytes
//!   (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, one read per round): the send calls, the
//!   completions reaped meanwhile, and whatever else the thread did. At the edges of the rounds a
//!   pair uses, a sender first submits what it queued (io_uring) and takes the completions already
//!   there, so that a round's work counts in it rather than in a neighbour of the other way.
//! - **Exploring.** Now and then a round goes the way not chosen; its cost over the mean of the
//!   rounds just before and after it is one *pair*, so that a drift of the machine's load cancels;
//!   a pair whose two neighbours differ by more than [`DRIFT_MAX`](Learning::drift_max) saw the
//!   load step and is dropped. A class measures [`FIRST_PAIRS`](Learning::first_pairs) pairs back
//!   to back when it first sends, then explores one round in `every`, chosen so that exploring
//!   costs about [`EXPLORE_COST`](Learning::explore_cost) of the sending CPU: the other way costs
//!   `gap` more per byte, so `every = gap / EXPLORE_COST`, within `EVERY_MIN..=EVERY_MAX`
//!   ([`Learning::explore_every`]) rounds (at most `gap / 1024` where the gap is above 2.56,
//!   `EXPLORE_COST` otherwise).
//! - **Deciding.** The median of the last [`PAIRS_KEPT`](Learning::pairs_kept) pairs, zero copy's
//!   CPU per byte over copy's, picks zero copy below `1 - HYSTERESIS`, copy above `1 + HYSTERESIS`,
//!   and keeps the current way in between. A class follows a change of conditions after 4 or 5 new
//!   pairs.
//! - **The prior.** A class that never sent starts from what the same class of an earlier sender of
//!   this process learned on the same path and [`Route`] (its way and pairs, already decided:
//!   [`SizeClass::resumed`]; [`forget`] clears that memory), else from the [`Profile`]'s threshold
//!   for the socket's path and route, applied to the class's first message, unless a neighbour
//!   class has learned already (zero copy that pays for smaller messages pays for larger ones; copy
//!   that wins for larger ones wins for smaller ones). A message size seen before is sent the way
//!   its class learned, at once.
//! - **Copies.** After a completion flagged "copied" every class copies for
//!   [`BACKOFF_SENDS`](Learning::backoff_sends) sends; each back-off in a row doubles, up to
//!   [`BACKOFF_MAX`](Learning::backoff_sends), and a completion not flagged copied starts the count
//!   over; where the profile says the route copies (every local route in the built-in one) the
//!   first back-off is the longest at once. So a route where the kernel copies (loopback delivery)
//!   is probed at most once per back-off, never explored beyond that.
//!
//! [`Choice`] (`auto_choice()` of each sender) says where a sender started and what each class
//! learned: its way, the median ratio and its spread, the pairs, the sends before it learned;
//! [`AutoCounters`] (`counters().auto`) counts the sends each way, the exploring, the switches and
//! the back-offs.
//!
//! The profile in use ([`active`]) is the one installed by [`set_profile`], else the file named by
//! `$ZCNET_PROFILE`, else `$XDG_CONFIG_HOME/zcnet/profile.toml` (`~/.config/...`) when it exists,
//! else [`Profile::builtin`]: the kernel documents' figures (MSG_ZEROCOPY "is generally only
//! effective at writes over around 10 KB"; no zero copy to local sockets, which copy). `zcnet tune`
//! measures one for a machine; it is worth running to seed a fleet, or where a sender's life is too
//! short to learn (a class learns in its first `2 * FIRST_PAIRS + 1` rounds, up to 7 MiB of traffic
//! per class), not to make `Mode::Auto` right. The files are read with the feature `profile` (the
//! `toml` crate) only; without it, the built-in thresholds are the prior and [`Profile::origin`]
//! says no profile support was compiled in.
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
for _ in 0..1000 {
    tx.send(vec![0u8; 64000]).map_err(|e| e.error)?;
}
tx.drain(std::time::Duration::from_secs(1))?;
// "msg_zerocopy_udp on a local route: zero copy never (profile profile.toml, ...);
// learned: 32-64 KiB copy (zc/copy CPU per byte 1.31, 1.20-1.40 in 3 pairs)"
println!("{}", tx.auto_choice().expect("auto mode"));
let c = tx.counters().auto;
println!(
    "{} sends by zero copy, {} by copy, {:.1} % exploring, {} back-offs",
    c.zero_copy_calls,
    c.copy_calls,
    100.0 * c.explore_share().unwrap_or(0.0),
    c.backoffs
);
# Ok::<(), Box<dyn std::error::Error>>(())
```
"#
)]

mod active;
mod decider;
mod learn;
mod learning;
#[cfg(feature = "profile")]
mod load;
mod profile;
mod route;

pub use active::active;
pub(crate) use decider::Decider;
pub use decider::{AutoCounters, Choice, forget};
pub use learn::SizeClass;
pub use learning::{LEARNING, Learning};
#[cfg(feature = "profile")]
pub use load::{MAX_PROFILE, ProfileError};
pub use profile::{Entry, Profile, SendPath, Threshold};
pub use route::{Route, Segmentation, Trains};

/// Makes `profile` the one `Mode::Auto` senders created from now on use. What earlier senders
/// learned is forgotten ([`forget`]): a new prior starts the learning over.
pub fn set_profile(profile: Profile) {
    active::install(profile);
    forget();
}
