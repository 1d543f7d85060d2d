//! The command line: [`Cli`] (clap derive, one module per subcommand). Here rather than in
//! `main.rs` so that tests can walk every option of every subcommand.

use crate::{bench, capture, iperf3, probe, recv, relay, report, send, serve, torture, tune};

use clap::{Parser, Subcommand};

/// Probe, benchmark and use the Linux kernel's zero-copy socket paths.
#[derive(Debug, Parser)]
#[command(name = "zcnet", version, about, propagate_version = true)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, one module each.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report which zero-copy paths this kernel, these limits and these privileges allow.
    Probe(probe::Opt),
    /// Benchmark zero-copy paths against their copying twins (no name: the whole suite).
    Bench(Box<bench::Opt>),
    /// Measure where zero copy starts to pay on this machine, per sending path and route, and
    /// write the profile `Mode::Auto` uses.
    Tune(tune::Opt),
    /// Receive one TCP stream on the zero-copy path into a file or stdout (netcat-like).
    Recv(recv::Opt),
    /// Send a file (or stdin) over TCP by sendfile, splice or an mmap + MSG_ZEROCOPY window.
    Send(send::Opt),
    /// Relay TCP, keeping unacknowledged bytes in the kernel's queue (SO_PEEK_OFF) and failing
    /// over to another destination without losing them.
    Relay(relay::Opt),
    /// Capture packets through TPACKET_V3 rings into a pcap file (tcpdump-like).
    Capture(capture::Opt),
    /// Draw bench JSON (`zcnet bench --json`) as one self-contained HTML page of charts and
    /// tables; several files side by side, labelled by host.
    Report(report::Opt),
    /// Drive every sender and receiver with random sizes and injected faults, check every byte
    /// and every loan, and print one summary line.
    Torture(torture::Opt),
    /// Run the far side of every bench for `zcnet bench NAME --remote ADDR` on another host.
    Serve(serve::Opt),
    /// Test against any iperf3 server (`-c HOST`), or serve iperf3's clients (`-s`): iperf3's
    /// protocol (3.12), options, text and `-J`.
    Iperf3(iperf3::Opt),
    /// Print shell completions on stdout (`zcnet completions bash > /etc/bash_completion.d/zcnet`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout (`zcnet man > zcnet.1; man ./zcnet.1`).
    Man,
}
