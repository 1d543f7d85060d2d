//! Private network namespaces for zcnet's tests and benchmarks.
//!
//! A [`Netns`] is a named network namespace (`ip netns add zcnet-<pid>-<n>`) deleted when the
//! value drops, on success, error and panic alike. Devices live inside namespaces only: the
//! host's interfaces and sysctls are never touched. The labs of the design build on it:
//!
//! - [`LoopbackLab`]: a fresh namespace's `lo`, with the MTU asked for;
//! - [`VethLab`]: two namespaces joined by a veth pair, IPv4 and IPv6 on both ends;
//! - [`SinkLab`]: a namespace whose route leads into an `ifb` device, which drops every locally
//!   generated packet in its transmit routine (counted as RX-dropped), so that UDP zero-copy
//!   sends complete without a copy.
//!
//! Every lab sets TCP congestion control to `reno` inside its namespaces: the host default here
//! is BBR, which distorts loopback and veth figures (docs/measuring.md).
//!
//! `setns(2)` is per thread: [`Netns::spawn`] and [`Netns::run`] run a closure on a new thread
//! inside the namespace. Sockets keep the namespace they were created in, so a socket made there
//! can be used from any thread afterwards.
//!
//! Addresses come from the benchmarking ranges (198.18.0.0/15, RFC 2544; 2001:2::/48, RFC 5180),
//! which exist only inside these namespaces.
//!
//! A process killed before its labs drop leaves named namespaces behind; the next
//! [`Netns::new`] in any process removes namespaces named after a pid that no longer runs.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod family;
pub mod frame;
mod ip;
mod loopback;
mod netns;
pub mod pattern;
mod privilege;
mod reaper;
mod sink;
pub mod skip;
mod stats;
mod veth;

pub use error::LabError;
use error::io_err;
pub use family::Family;
pub use ip::ip;
pub use loopback::{CONGESTION, LoopbackLab};
pub use netns::Netns;
pub use privilege::{check_privileges, enter_user_namespace};
pub use reaper::{namespaces_of_this_process, remove_namespaces_of_this_process};
pub use sink::SinkLab;
pub use stats::LinkStats;
pub use veth::{Side, VethLab};
