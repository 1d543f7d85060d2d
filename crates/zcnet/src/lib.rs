//! zcnet: the Linux kernel's zero-copy socket paths, made safe and measurable.
//!
//! # Layers
//! - A private `sys` module holds the kernel ABI the `libc` crate lacks and every raw call; it is
//!   the only module with `unsafe` code, each block carrying a `SAFETY:` line. Nothing public
//!   lets safe code hand the kernel an address that did not come from a live borrow or an owned
//!   loan ([`loan`]).
//! - One module per mechanism, named as the kernel names it: [`msg_zerocopy`] (with
//!   [`errqueue`], where its completions arrive), [`tcp_rx`], [`file`], [`uring`], [`peek`] and
//!   [`packet`] (TPACKET_V3 rings).
//! - [`probe`] decides at run time, by trying each operation, what this kernel, these limits
//!   and these privileges allow, and says why not where it says no.
//!
//! # Example
//! ```
//! use zcnet::probe::{self, CheckId};
//!
//! let f = probe::features();
//! let rx = f.check(CheckId::RxTcpZerocopyReceive);
//! println!("{}: {:?} ({})", rx.id.name(), rx.status, rx.reason);
//! assert!(!f.host.kernel.is_empty());
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub use counters::ZeroCopyCounters;

pub mod counters;
pub mod errqueue;
pub mod file;
pub mod loan;
pub mod msg_zerocopy;
pub mod packet;
pub mod peek;
pub mod probe;
pub mod relay;
pub mod support;
mod sys;
pub mod tcp_info;
pub mod tcp_rx;
pub mod uring;
