//! `zcnet`: probe, benchmark and use the Linux kernel's zero-copy socket paths.
#![forbid(unsafe_code)]

use zcnet_cli::{bench, capture, probe, recv, relay, send};

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Probe, benchmark and use the Linux kernel's zero-copy socket paths.
#[derive(Debug, Parser)]
#[command(name = "zcnet", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report which zero-copy paths this kernel, these limits and these privileges allow.
    Probe(probe::Opt),
    /// Benchmark zero-copy paths against their copying twins (no name: the whole suite).
    Bench(Box<bench::Opt>),
    /// Receive one TCP stream on the zero-copy path into a file or stdout (netcat-like).
    Recv(recv::Opt),
    /// Send a file (or stdin) over TCP by sendfile, splice or an mmap + MSG_ZEROCOPY window.
    Send(send::Opt),
    /// Relay TCP, keeping unacknowledged bytes in the kernel's queue (SO_PEEK_OFF) and failing
    /// over to another destination without losing them.
    Relay(relay::Opt),
    /// Capture packets through TPACKET_V3 rings into a pcap file (tcpdump-like).
    Capture(capture::Opt),
}

fn main() -> ExitCode {
    // clap exits with status 2 on bad arguments.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe(opt) => probe::run(opt),
        Command::Bench(opt) => bench::run(*opt),
        Command::Recv(opt) => recv::run(opt),
        Command::Send(opt) => send::run(opt),
        Command::Relay(opt) => relay::run(opt),
        Command::Capture(opt) => capture::run(opt),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole cause chain, on one line: "cannot listen on [::1]:9000: Address in use".
            eprintln!("zcnet: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
