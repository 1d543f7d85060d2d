//! The `zcnet` command's parts, as a library so that the binary, the benches and the tests share
//! them: the measurement core ([`measure`]), the benches ([`mod@bench`]) and the probe report
//! ([`probe`]). Each subcommand is a module with its `Opt` and `run(opt) -> anyhow::Result<()>`.
#![forbid(unsafe_code)]

pub mod args;
pub mod bench;
pub mod capped;
pub mod capture;
pub mod cli;
pub mod date;
pub mod error_line;
pub mod file_server;
pub mod interrupt;
pub mod iperf3;
pub mod measure;
pub mod output;
pub mod probe;
pub mod recv;
pub mod relay;
pub mod remote;
pub mod report;
pub mod send;
pub mod serve;
pub mod torture;
pub mod tune;
