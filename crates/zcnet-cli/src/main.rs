//! `zcnet`: probe, benchmark and use the Linux kernel's zero-copy socket paths.
#![forbid(unsafe_code)]

use zcnet_cli::cli::{Cli, Command};
use zcnet_cli::error_line::{chain, one_line};
use zcnet_cli::interrupt::{BROKEN_PIPE_EXIT, is_broken_pipe};
use zcnet_cli::{bench, capture, iperf3, probe, recv, relay, report, send, serve, torture, tune};

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

/// Runs the subcommand.
fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Probe(opt) => probe::run(opt),
        Command::Bench(opt) => bench::run(*opt),
        Command::Tune(opt) => tune::run(opt),
        Command::Recv(opt) => recv::run(opt),
        Command::Send(opt) => send::run(opt),
        Command::Relay(opt) => relay::run(opt),
        Command::Capture(opt) => capture::run(opt),
        Command::Report(opt) => report::run(opt),
        Command::Serve(opt) => serve::run(opt),
        Command::Iperf3(opt) => iperf3::run(opt),
        Command::Torture(opt) => torture::run(opt),
        Command::Completions { shell } => {
            // Rendered in memory first: clap_complete panics on a write error (a closed pipe).
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "zcnet", &mut text);
            write_stdout(&text)
        }
        Command::Man => {
            let mut text = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut text)
                .map_err(anyhow::Error::from)
                .and_then(|()| write_stdout(&text))
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe is an error, not a panic.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("writing to stdout: {e}"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                e.exit();
            }
            // Bad arguments: exit 2 (as clap does) with one line, not clap's usage block.
            let text = e.to_string();
            let mut lines = text.lines();
            let mut first = lines
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ")
                .to_owned();
            // "the following required arguments were not provided:" names them on the lines
            // after it: on the same line here.
            if first.ends_with(':') {
                let named: Vec<&str> = lines
                    .map(str::trim)
                    .take_while(|l| !l.is_empty() && !l.starts_with("Usage"))
                    .collect();
                first = format!("{first} {}", named.join(", "));
            }
            eprintln!("zcnet: {first}");
            return ExitCode::from(2);
        }
    };
    // Benches build private network namespaces. Without root, build them inside a user
    // namespace of this process's own (first thing: it must be single-threaded); where the
    // machine forbids that, each lab says so.
    let measures = match &cli.command {
        Command::Bench(b) => b.builds_labs(),
        Command::Tune(t) => !t.show,
        Command::Torture(_) => true,
        _ => false,
    };
    if measures && !nix::unistd::geteuid().is_root() {
        match netlab::enter_user_namespace() {
            Ok(()) => eprintln!(
                "zcnet: not root: the labs run in a user namespace of this process (RLIMIT_MEMLOCK \
                 still applies)"
            ),
            Err(e) => eprintln!("zcnet: {}", chain(&e)),
        }
    }
    // A reader that went away (`zcnet probe | head -1`): println! panics on EPIPE. Such a panic
    // ends the command quietly with the status a SIGPIPE death gives (128 + 13), as C tools end.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe(info.payload()) {
            default_hook(info);
        }
    }));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(cli)));
    let result = match run {
        Ok(r) => r,
        Err(payload) if is_broken_pipe(payload.as_ref()) => {
            return ExitCode::from(BROKEN_PIPE_EXIT);
        }
        Err(payload) => std::panic::resume_unwind(payload),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole cause chain, on one line: "cannot listen on [::1]:9000: Address in use".
            eprintln!("zcnet: error: {}", one_line(&e));
            // Something to install (libpcap for a filter expression) is a usage problem: 2.
            // So is a file `zcnet report` cannot read as a report.
            let missing = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<zcnet::packet::PacketError>(),
                    Some(zcnet::packet::PacketError::Unsupported { .. })
                ) || c.is::<report::BadInput>()
            });
            if missing {
                ExitCode::from(2)
            } else if e.chain().any(|c| c.is::<report::Regressed>()) {
                // `report --fail-on-regression`: a verdict for a CI job, not a failure to run.
                ExitCode::from(3)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
