//! Benches across two hosts: `zcnet serve` runs the far side of each bench (a receiver, a
//! sender, a frame generator, HTTP clients) and `zcnet bench NAME --remote ADDR` drives it over
//! a small versioned control protocol ([`proto`]); the report carries both hosts' figures.

pub mod client;
pub mod far;
pub mod proto;
pub mod server;

pub use client::Remote;
