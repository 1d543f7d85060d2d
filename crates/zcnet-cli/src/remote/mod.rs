//! Benches across two hosts: `zcnet serve` runs the far side of each bench (a receiver, a
//! sender, a frame generator, HTTP clients) and `zcnet bench NAME --remote ADDR` drives it over
//! a small versioned control protocol ([`proto`]); the report carries both hosts' figures.
//!
//! The files: [`proto`] (the protocol), [`client`] (the bench's side), [`server`] (`zcnet
//! serve`), [`far`] (each role's far side), [`bounds`] (what bounds a far run and what it
//! reports), `fetch` (the HTTP clients of `async-serve`).

pub mod bounds;
pub mod client;
pub mod far;
mod fetch;
mod greeting;
pub mod proto;
pub mod server;

pub use client::Remote;
