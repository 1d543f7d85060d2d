//! `zcnet bench`: each bench in its own module, all sharing the flags and the report of
//! [`crate::measure`]. Without a name, the suite: every bench in a short mode, then one summary
//! table, a row per seed experiment.

pub mod async_serve;
pub mod file_tx;
pub mod heat;
pub mod packet;
pub mod packet_tx;
pub mod peek;
pub mod tcp_rx;
pub mod tx;
pub mod uring_tx;

use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
pub use heat::{Heat, PoolHeat};
use serde::Serialize;

use crate::measure::Report;
use crate::measure::{Metric, ResultSet};
use crate::output::Output;

/// Flags every bench takes (design.md section 4, "One shape for every benchmark").
#[derive(Clone, Debug, clap::Args)]
pub struct Common {
    /// Lab to run in (repeatable): loopback, veth, sink. Default: the labs the bench names.
    #[arg(long = "lab", value_name = "LAB")]
    pub labs: Vec<String>,
    /// Alternations per mode (A B A B ...).
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub runs: Option<usize>,
    /// Length of one run, in seconds.
    #[arg(long, value_name = "S", value_parser = crate::args::bench_seconds)]
    pub seconds: Option<f64>,
    /// Print one JSON document (the report schema of design.md) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The profile the `auto` modes use (`zcnet tune` writes it). Default: $ZCNET_PROFILE,
    /// else ~/.config/zcnet/profile.toml if it exists, else the built-in thresholds.
    #[arg(long, value_name = "PATH")]
    pub profile: Option<std::path::PathBuf>,
    /// Also draw the results as an HTML page of charts and tables (as `zcnet report` does).
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
    /// The `--report` file, opened before the bench measures: a path that cannot be written
    /// fails at once, not after minutes of runs. Kept open through the runs where it exists
    /// (a FIFO is opened once); a new page is made only when it is written.
    #[arg(skip)]
    page: Page,
    /// Run across two hosts: the far side is the `zcnet serve` at HOST:PORT (instead of a
    /// lab); the report carries both hosts' figures.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::args::host_port, conflicts_with = "labs")]
    pub remote: Option<std::net::SocketAddr>,
    /// With --remote: the shared token (the server's --token-file).
    #[arg(long, value_name = "PATH", requires = "remote")]
    pub token_file: Option<std::path::PathBuf>,
}

/// The opened `--report` file, shared by the copies of [`Common`] until the page is written.
#[derive(Clone, Debug, Default)]
struct Page(Arc<Mutex<Option<Output>>>);

impl Common {
    /// Opens the `--report` file, before the bench measures.
    ///
    /// A new page's temporary is not kept through the runs: a bench does not take over SIGINT
    /// and SIGTERM (the programs it starts, tcpdump among them, would inherit them blocked), so
    /// nothing would remove it if a signal ended the bench. Made and removed, it proved the
    /// path writable; the page is made again when it is written.
    ///
    /// # Errors
    /// One line naming the path and why it cannot be written.
    fn open_page(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.report {
            let out = crate::report::open_page(path)?;
            if !out.holds_temporary() {
                *self.page.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(out);
            }
        }
        Ok(())
    }

    /// Checks that labs can be built (`what` says which and why), unless `--remote` replaces
    /// them.
    ///
    /// # Errors
    /// No privilege for private network namespaces.
    pub fn needs_labs(&self, what: &'static str) -> anyhow::Result<()> {
        if self.remote.is_none() {
            netlab::check_privileges().context(what)?;
        }
        Ok(())
    }

    /// A session with the `--remote` server, if one is given.
    ///
    /// # Errors
    /// The server cannot be reached or refuses the session.
    pub fn remote(&self) -> anyhow::Result<Option<crate::remote::Remote>> {
        self.remote
            .map(|addr| crate::remote::Remote::connect(addr, self.token_file.as_deref()))
            .transpose()
    }

    /// Installs `--profile` for the `auto` modes.
    ///
    /// # Errors
    /// The profile cannot be read.
    pub fn use_profile(&self) -> anyhow::Result<()> {
        if let Some(p) = &self.profile {
            zcnet::auto::set_profile(zcnet::auto::Profile::load(p)?);
        }
        Ok(())
    }
}

/// Options of `zcnet bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Opt {
    #[command(subcommand)]
    name: Option<Name>,
    #[command(flatten)]
    common: Common,
}

/// The benches.
#[derive(Debug, clap::Subcommand)]
enum Name {
    /// TCP zero-copy receive (TCP_ZEROCOPY_RECEIVE) vs recv into a 512 KiB buffer.
    TcpRx(tcp_rx::Opt),
    /// UDP MSG_ZEROCOPY sends vs plain sends (sink, veth, loopback labs).
    UdpTx(tx::Opt),
    /// TCP MSG_ZEROCOPY sends vs plain sends, with the adaptive policy (loopback, veth labs).
    TcpTx(tx::Opt),
    /// A file in page cache over loopback: sendfile, splice, mmap + MSG_ZEROCOPY vs read + send.
    FileTx(file_tx::Opt),
    /// io_uring SEND vs SEND_ZC vs SEND_ZC with registered buffers (UDP into the sink, TCP over
    /// loopback and veth).
    UringTx(uring_tx::Opt),
    /// The SO_PEEK_OFF relay against the discard-buffer fallback, rate-limited veth lab.
    Peek(peek::Opt),
    /// Packet capture in the veth lab: the TPACKET_V3 RX ring vs recvfrom per packet vs
    /// tcpdump, frames of 64, 512 and 1500 bytes.
    Packet(packet::Opt),
    /// Sending frames: sendmmsg vs the TPACKET_V3 TX ring (with and without the qdisc bypass)
    /// vs AF_XDP TX, frames of 64, 512 and 1500 bytes counted where they arrive, veth lab.
    PacketTx(packet_tx::Opt),
    /// An async (tokio) HTTP file server: zcnet's FileSender vs tokio::io::copy, 64 clients
    /// fetching 64 KiB and 16 MiB files across the veth lab.
    AsyncServe(async_serve::Opt),
}

/// One row of the suite's summary: a seed experiment, copy vs zero-copy.
#[derive(Clone, Debug, Serialize)]
pub struct SummaryRow {
    /// The experiment (`tcp-rx loopback ipv6 mtu 61512`, ...).
    pub experiment: String,
    /// The metric compared.
    pub metric: String,
    /// Copy-mode median.
    pub copy: f64,
    /// Zero-copy-mode median.
    pub zero_copy: f64,
    /// Median of the pairwise zc/copy ratios.
    pub ratio: f64,
    /// Share really zero-copied (median).
    pub zero_copy_share: Option<f64>,
    /// Whether the acceptance bound of the issue holds.
    pub verdict: String,
}

/// What one bench invocation measured: its report and its rows of the suite's summary.
pub struct Outcome {
    /// The JSON report.
    pub report: Report,
    /// Rows for the summary table.
    pub summary: Vec<SummaryRow>,
}

impl Outcome {
    /// Prints the report (see [`Outcome::print`]) and writes its page where `--report` asks.
    pub fn finish(&self, common: &Common) -> anyhow::Result<()> {
        self.print(common.json)?;
        if let Some(path) = &common.report {
            write_page(path, serde_json::to_value(&self.report)?, common)?;
        }
        Ok(())
    }

    /// Prints the report as JSON, or as the human table followed by the summary.
    pub fn print(&self, json: bool) -> anyhow::Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(&self.report)?);
        } else {
            println!("\n{}", crate::measure::render(&self.report));
            println!("{}", render_summary(&self.summary));
        }
        Ok(())
    }
}

/// What `zcnet bench --json` prints: the probe, every bench's report, and the summary.
#[derive(Debug, Serialize)]
struct Suite<'a> {
    probe: &'a zcnet::probe::Features,
    reports: Vec<Report>,
    summary: Vec<SummaryRow>,
}

impl Opt {
    /// Whether the bench builds labs (private namespaces): not with `--remote`, whose near side
    /// runs in this host's own namespace.
    pub fn builds_labs(&self) -> bool {
        self.common().remote.is_none()
    }

    fn common(&self) -> &Common {
        match &self.name {
            Some(Name::TcpRx(o)) => &o.common,
            Some(Name::UdpTx(o) | Name::TcpTx(o)) => &o.common,
            Some(Name::FileTx(o)) => &o.common,
            Some(Name::UringTx(o)) => &o.common,
            Some(Name::Peek(o)) => &o.common,
            Some(Name::Packet(o)) => &o.common,
            Some(Name::PacketTx(o)) => &o.common,
            Some(Name::AsyncServe(o)) => &o.common,
            None => &self.common,
        }
    }
}

/// Runs one bench, or the suite.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let common = opt.common();
    common.use_profile()?;
    common.open_page()?;
    match opt.name {
        Some(Name::TcpRx(o)) => tcp_rx::run(o),
        Some(Name::UdpTx(o)) => tx::run(tx::Proto::Udp, o),
        Some(Name::TcpTx(o)) => tx::run(tx::Proto::Tcp, o),
        Some(Name::FileTx(o)) => file_tx::run(o),
        Some(Name::UringTx(o)) => uring_tx::run(o),
        Some(Name::Peek(o)) => peek::run(o),
        Some(Name::Packet(o)) => packet::run(o),
        Some(Name::PacketTx(o)) => packet_tx::run(o),
        Some(Name::AsyncServe(o)) => async_serve::run(o),
        None => suite(opt.common),
    }
}

/// The main job: every bench in a short mode, then one summary table.
fn suite(common: Common) -> anyhow::Result<()> {
    if common.remote.is_some() {
        anyhow::bail!(
            "the suite runs in this machine's labs: with --remote, name a bench (tcp-rx, udp-tx, \
             tcp-tx, file-tx, uring-tx, peek, packet, async-serve)"
        );
    }
    let probe = zcnet::probe::features();
    if !common.json {
        print!("{}", crate::probe::render(probe));
    }
    let runs = common.runs.unwrap_or(3);
    let seconds = common.seconds.unwrap_or(1.5);
    let quiet = common.json;
    let mut reports = Vec::new();
    let mut summary = Vec::new();
    match netlab::check_privileges() {
        Err(e) => eprintln!(
            "zcnet bench: benches skipped: {}",
            crate::error_line::chain(&e)
        ),
        Ok(()) => {
            for (name, step) in suite_steps(runs, seconds, quiet) {
                if !quiet {
                    println!("\n== {name}, {runs} alternations per mode");
                }
                let out = step().with_context(|| format!("bench {name}"))?;
                if !quiet {
                    println!("\n{}", crate::measure::render(&out.report));
                }
                reports.push(out.report);
                summary.extend(out.summary);
            }
        }
    }
    if !common.json {
        println!("{}", render_summary(&summary));
    }
    let suite = Suite {
        probe,
        reports,
        summary,
    };
    if common.json {
        println!("{}", serde_json::to_string_pretty(&suite)?);
    }
    if let Some(path) = &common.report {
        write_page(path, serde_json::to_value(&suite)?, &common)?;
    }
    Ok(())
}

/// Draws `document` (a report or the suite, as `--json` prints it) as the page of
/// `zcnet report` at `path`.
fn write_page(
    path: &std::path::Path,
    document: serde_json::Value,
    common: &Common,
) -> anyhow::Result<()> {
    let mut input = crate::report::input::parse_value(document)
        .map_err(|e| anyhow::anyhow!("drawing the report: {e}"))?;
    if input.label.is_empty() {
        input.label = "this machine".into();
    }
    // The break-even marks: the profile the auto modes used, where it was measured.
    let profile = match &common.profile {
        Some(p) => zcnet::auto::Profile::load(p).ok(),
        None => crate::report::tuned_profile(),
    };
    let page = crate::report::page_with(&[input], profile.as_ref())?;
    let opened = common
        .page
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let out = match opened {
        Some(out) => out,
        None => crate::report::open_page(path)?,
    };
    crate::report::write(out, path, &page)?;
    eprintln!("zcnet bench: the page is {}", path.display());
    Ok(())
}

/// One bench of the suite, run in its short mode.
type Step = Box<dyn FnOnce() -> anyhow::Result<Outcome>>;

/// UDP MSG_ZEROCOPY into the sink: copy, zc and auto at `sizes` from a `pool_mib` pool.
fn udp_sink(
    sizes: &[usize],
    pool_mib: usize,
    runs: usize,
    seconds: f64,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let modes = [tx::Mode::Copy, tx::Mode::Zc, tx::Mode::Auto];
    let lab = ["sink"];
    tx::bench(
        tx::Proto::Udp,
        &lab,
        netlab::Family::V4,
        sizes,
        &modes,
        runs,
        seconds,
        pool_mib,
        quiet,
        None,
    )
}

/// io_uring into the sink: every mode at `sizes` from a `pool_mib` pool.
fn uring_sink(
    sizes: &[usize],
    pool_mib: usize,
    runs: usize,
    seconds: f64,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    use zcnet::uring::Mode;
    let modes = [Mode::Copy, Mode::ZeroCopy, Mode::ZeroCopyFixed, Mode::Auto];
    let (lab, family) = (["sink"], netlab::Family::V4);
    uring_tx::bench(
        &lab, family, sizes, &modes, runs, seconds, pool_mib, quiet, None,
    )
}

/// The suite: each bench in the conditions its issue's acceptance names.
fn suite_steps(runs: usize, seconds: f64, quiet: bool) -> Vec<(&'static str, Step)> {
    use netlab::Family;
    vec![
        (
            // The two loopback conditions of the RX acceptance, IPv6.
            "tcp-rx (loopback, IPv6)",
            Box::new(move || {
                let conds: Vec<_> = tcp_rx::conditions()
                    .into_iter()
                    .filter(|c| c.lab == "loopback" && c.family == Family::V6)
                    .collect();
                let settings = tcp_rx::Settings {
                    runs,
                    seconds,
                    verify: true,
                    modes: vec![tcp_rx::Mode::Copy, tcp_rx::Mode::Zc],
                    window: zcnet::tcp_rx::DEFAULT_WINDOW,
                };
                tcp_rx::bench(&conds, &settings, quiet)
            }),
        ),
        (
            // The sink, where zero-copy is real: the seed's largest size and a mid size.
            "udp-tx (sink)",
            Box::new(move || udp_sink(&[8000, 64000], 256, runs, seconds, quiet)),
        ),
        (
            // The same with a small pool (2 MiB), meant to be hot: copy at its cheapest, as the
            // kernel's msg_zerocopy.c measures it. Its report says whether it measured hot.
            "udp-tx (sink, 2 MiB pool)",
            Box::new(move || udp_sink(&[64000], 2, runs, seconds, quiet)),
        ),
        (
            // Loopback copies: the adaptive policy must cost nothing against copy.
            "tcp-tx (loopback)",
            Box::new(move || {
                let modes = [
                    tx::Mode::Copy,
                    tx::Mode::Zc,
                    tx::Mode::ZcAdaptive,
                    tx::Mode::Auto,
                ];
                tx::bench(
                    tx::Proto::Tcp,
                    &["loopback"],
                    Family::V4,
                    &[65536],
                    &modes,
                    runs,
                    seconds,
                    256,
                    quiet,
                    None,
                )
            }),
        ),
        (
            // 256 MiB in page cache, each strategy.
            "file-tx (loopback)",
            Box::new(move || {
                use zcnet::file::Mode as Strategy;
                let strategies = [
                    Strategy::Copy,
                    Strategy::Sendfile,
                    Strategy::Splice,
                    Strategy::MmapZerocopy,
                    Strategy::Auto,
                ];
                let modes = file_tx::Mode::list(&strategies, &file_tx::COPY_BUFFERS_KIB);
                file_tx::bench(256, &modes, runs, quiet, None)
            }),
        ),
        (
            // io_uring into the sink: the sizes of the acceptance and the smallest of the table.
            "uring-tx (sink)",
            Box::new(move || uring_sink(&[600, 8000, 64000], 256, runs, seconds, quiet)),
        ),
        (
            // A small pool (2 MiB asked; at least 256 buffers, 16 MB at 64000 B), meant to be hot
            // as liburing's send-zerocopy.c sends one hot buffer; its report says if it was.
            "uring-tx (sink, 2 MiB pool)",
            Box::new(move || uring_sink(&[64000], 2, runs, seconds, quiet)),
        ),
        (
            // The relay holding 64 KiB, 1 MiB and 4 MiB unacknowledged, rate-limited veth.
            "peek (veth)",
            Box::new(move || peek::bench(&peek::CONDITIONS, runs, seconds, quiet, None)),
        ),
        (
            // The async file server, zcnet vs plain tokio: the sizes of issue 19's goal.
            "async-serve (veth)",
            Box::new(move || {
                async_serve::bench(&async_serve::SIZES, 64, runs, seconds, quiet, None)
            }),
        ),
        (
            // Capture of 64-byte frames, the size of the RING acceptance, by every method, with
            // receive processing on the generator's CPU and on the capture's.
            "packet (veth)",
            Box::new(move || {
                let modes = packet::available_modes(&[]);
                packet::bench(
                    &packet::CONDITIONS,
                    &[64],
                    &modes,
                    runs,
                    seconds,
                    quiet,
                    None,
                )
            }),
        ),
        (
            // Sending frames at 64 B, where per-packet costs show most: issue 18's acceptance,
            // judged in the sink (the sending paths alone), veth beside it.
            "packet-tx (sink, veth)",
            Box::new(move || {
                let mut modes = packet_tx::MODES.to_vec();
                if zcnet::probe::features().privileges.user_namespace {
                    modes.retain(|&m| m != packet_tx::Mode::Xdp);
                }
                packet_tx::bench(&packet_tx::LABS, &[64], &modes, runs, seconds, quiet)
            }),
        ),
    ]
}

/// The verdict of an `auto` result set (issue 17): its median throughput against the best median
/// of the other modes in the same alternation; it must reach 0.97 of it.
pub fn auto_verdict(auto: &ResultSet, sets: &[ResultSet]) -> String {
    let med = |s: &ResultSet| s.median_of(Metric::RequestsPerS);
    let best = sets
        .iter()
        .filter(|s| s.mode != "auto" && s.mode != "zc-adaptive")
        .filter_map(|s| Some((med(s)?, s.mode.as_str())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match (med(auto), best) {
        (Some(a), Some((b, mode))) if b > 0.0 => {
            let r = a / b;
            let verdict = if r >= 0.97 { "ok" } else { "MISS" };
            // Without a profile of this machine auto uses the kernel documents' thresholds.
            let hint = if zcnet::auto::active().source.is_none() {
                "; built-in thresholds: `zcnet tune` measures this machine's"
            } else {
                ""
            };
            format!("{verdict} ({r:.3} of {mode}, needs >= 0.97{hint})")
        }
        _ => "info".into(),
    }
}

/// The suite's closing table.
pub fn render_summary(rows: &[SummaryRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("summary (copy vs zero-copy, medians of alternating runs)\n");
    let _ = writeln!(
        out,
        "{:<52} {:<16} {:>10} {:>10} {:>7} {:>7}  verdict",
        "experiment", "metric", "copy", "zc", "ratio", "zc %"
    );
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "(no benchmark is built yet: the probe above is the whole suite)"
        );
    }
    for r in rows {
        let _ = writeln!(
            out,
            "{:<52} {:<16} {:>10.1} {:>10.1} {:>7.3} {:>7}  {}",
            r.experiment,
            r.metric,
            r.copy,
            r.zero_copy,
            r.ratio,
            r.zero_copy_share
                .map_or_else(|| "-".into(), |s| format!("{:.2}", s * 100.0)),
            r.verdict
        );
    }
    out
}

/// With a `--remote` session: records the far host and address in `report` and returns the
/// remote's family and the one lab, `remote`; else `family` and `labs` as given.
pub(crate) fn remote_labs<'a>(
    report: &mut Report,
    remote: Option<&crate::remote::Remote>,
    family: netlab::Family,
    labs: &[&'a str],
) -> (netlab::Family, Vec<&'a str>) {
    match remote {
        None => (family, labs.to_vec()),
        Some(r) => {
            report.remote_host = Some(r.host.clone());
            if let serde_json::Value::Object(m) = &mut report.settings {
                m.insert("remote".into(), r.addr().to_string().into());
            }
            (netlab::Family::of(r.addr().ip()), vec!["remote"])
        }
    }
}

/// The TCP congestion control of `lab`: the labs set [`netlab::CONGESTION`]; a `--remote` run
/// uses this host's default (`net.ipv4.tcp_congestion_control`), which is not ours to change.
pub(crate) fn congestion(lab: &str) -> Option<String> {
    if lab != "remote" {
        return Some(netlab::CONGESTION.to_owned());
    }
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|c| c.trim().to_owned())
}

/// [`remote_labs`] for a bench of one lab: its name in the results, `remote` with a session.
pub(crate) fn remote_lab<'a>(
    report: &mut Report,
    remote: Option<&crate::remote::Remote>,
    lab: &'a str,
) -> &'a str {
    remote_labs(report, remote, netlab::Family::V4, &[lab]).1[0]
}

/// Starts `f` on a new thread inside `ns`, or in this namespace where `ns` is `None` (the
/// near side of a `--remote` run).
///
/// # Errors
/// The thread cannot enter `ns`.
pub(crate) fn spawn_in<T, F>(
    ns: Option<&netlab::Netns>,
    f: F,
) -> anyhow::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Ok(match ns {
        Some(ns) => ns.spawn(f)?,
        None => std::thread::spawn(f),
    })
}
