//! `tcp-rx` across two hosts: with `--remote`, the far side a `zcnet serve`; with `--listen`
//! and `--connect`, a receiver and a sender started by hand on each.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use netlab::Family;
use serde_json::json;

use super::lab::{connect, listen};
use super::local::tcp_mmap_line;
use super::stream::{Mode, Settings, receive, send_for};
use crate::bench::engine::sets_of;
use crate::bench::outcome::Outcome;
use crate::measure::{self, Comparison, Metric, Pinned, Progress, Report, Run, pin};
use crate::remote::proto::Role;

/// The report of a two-host run: a set per mode, lab `remote`.
pub(super) fn two_host_report(
    modes: &[Mode],
    per_mode: Vec<Vec<Run>>,
    family: Family,
    mss: Option<i32>,
    s: &Settings,
) -> anyhow::Result<Report> {
    let mut report = Report::new("tcp-rx");
    report.settings = s.json()?;
    let condition = ("remote", family.name(), None);
    let sets = sets_of(modes, Mode::name, per_mode, condition, &json!({"mss": mss}));
    for other in sets.iter().skip(1) {
        for metric in [Metric::CpuUsPerMb, Metric::Gbit] {
            report
                .comparisons
                .extend(Comparison::new(other, &sets[0], metric));
        }
    }
    report.results = sets;
    Ok(report)
}

/// `--remote`: this host receives, the `zcnet serve` there sends (`MSG_ZEROCOPY`, so that a
/// loopback or veth receiver can map pages too): one connection per run, a discarded warm-up
/// run per mode, then mirrored rounds.
pub(super) fn with_server(
    mut remote: crate::remote::Remote,
    mss: Option<i32>,
    s: &Settings,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let modes = &s.modes;
    let role = Role::Send {
        zerocopy: true,
        mss,
    };
    let mut one = |mode: Mode| -> anyhow::Result<Run> {
        let settings = s.clone();
        let ((run, stats), far) = remote.run_with(role.clone(), s.seconds, move |dest| {
            pin(1);
            let s = connect(dest.addr, mss)?;
            dest.introduce(&s)?;
            receive(s, mode, &settings)
        })?;
        if far.bytes != stats.bytes() {
            bail!(
                "the far side sent {} bytes but {} arrived",
                far.bytes,
                stats.bytes()
            );
        }
        Ok(run.with_far(&far))
    };
    for &mode in modes {
        one(mode).with_context(|| format!("{} warm-up run", mode.name()))?;
    }
    let progress = Progress::new(
        "tcp-rx",
        (s.runs * modes.len()) as u64,
        Duration::from_secs_f64(s.seconds * (s.runs * modes.len()) as f64),
    );
    let (per_mode, _) = measure::alternate_abba(modes, s.runs, &progress, |mode, i| {
        let run = one(mode).with_context(|| format!("{} run {}", mode.name(), i + 1))?;
        if !quiet {
            println!("[remote] {:<4} {}", mode.name(), tcp_mmap_line(&run));
        }
        anyhow::Ok(run)
    })?;
    let family = Family::of(remote.addr().ip());
    let mut report = two_host_report(modes, per_mode, family, mss, s)?;
    crate::bench::labs::remote_lab(&mut report, Some(&remote), "remote");
    Ok(Outcome::new(report, Vec::new()))
}

/// `--connect`: the sender of a two-host run, one connection per run and mode (`2 × runs`
/// of them); with `--json`, one JSON line per connection on stdout (`{"bytes": N, ...}`).
/// `paced` (a lab's sender, started by the receiver): each connection waits for a line on
/// stdin, and the sender stops at its end.
pub(super) fn remote_sender(
    addr: SocketAddr,
    mss: Option<i32>,
    runs: usize,
    seconds: f64,
    (json, paced): (bool, bool),
) -> anyhow::Result<()> {
    pin(0);
    let mut go = std::io::stdin().lines();
    for i in 0..runs * 2 {
        if paced && !matches!(go.next(), Some(Ok(_))) {
            return Ok(());
        }
        let c = send_for(connect(addr, mss)?, seconds)
            .with_context(|| format!("connection {}", i + 1))?;
        let bytes = c.loaned_bytes + c.copy_bytes;
        if json {
            println!(
                "{}",
                json!({"bytes": bytes, "loaned_calls": c.loaned_calls, "completed_calls": c.completed_calls,
                       "copied_calls": c.copied_calls, "enobufs_fallbacks": c.enobufs_fallbacks})
            );
        } else {
            eprintln!(
                "sent {:.0} MB, {} MSG_ZEROCOPY calls, {} completed ({} flagged copied)",
                bytes as f64 / (1u64 << 20) as f64,
                c.loaned_calls,
                c.completed_calls,
                c.copied_calls
            );
        }
    }
    Ok(())
}

/// `--listen`: the receiver of a two-host run, alternating copy and zc per connection.
pub(super) fn remote_receiver(
    addr: SocketAddr,
    mss: Option<i32>,
    s: &Settings,
    json: bool,
) -> anyhow::Result<()> {
    let _pinned = Pinned::to(1);
    let listener = listen(addr, mss)?;
    let modes = &s.modes;
    let (per_mode, _) = measure::alternate_abba(modes, s.runs, &Progress::hidden(), |mode, _| {
        let (conn, peer) = listener.accept().context("accept")?;
        let (run, _) = receive(conn, mode, s)?;
        if !json {
            println!("[{peer}] {:<4} {}", mode.name(), tcp_mmap_line(&run));
        }
        anyhow::Ok(run)
    })?;
    let report = two_host_report(modes, per_mode, Family::of(addr.ip()), mss, s)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("\n{}", measure::render(&report));
    }
    Ok(())
}
