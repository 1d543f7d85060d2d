//! The measurement core every benchmark shares: CPU accounting, run records, repetition with
//! A/B alternation, medians and spreads, ratio pairs, the JSON report and the human table.
//!
//! CPU comes from two places, as docs/measuring.md asks: `getrusage(RUSAGE_THREAD)` of the
//! thread doing the work (user, sys, voluntary and involuntary context switches), and the
//! whole-machine deltas of `/proc/stat` (user, sys, softirq), because on loopback much of the
//! receive work is charged to the sender or to softirq. "MB" is 2^20 bytes, as the kernel's
//! reference program `tcp_mmap` counts it.
//!
//! Three parts: [`cpu`] measures (thread, machine and process CPU, one [`Run`] per run, the far
//! side's [`Far`]), [`stats`] repeats and compares (A/B alternation, medians, typed [`Metric`]s,
//! ratio pairs), [`interval`] says how sure a figure is (bootstrap intervals), [`report`]
//! presents (the JSON document and the human table). Beside them,
//! [`affinity`] pins the ends of a run and [`progress`] draws the bar of a bench's runs.

pub mod affinity;
pub mod copy_cost;
pub mod cpu;
pub mod interval;
pub mod machine;
pub mod progress;
pub mod report;
pub mod stats;

pub use affinity::{Pinned, pin};
pub use cpu::{
    Far, MachineCpu, Meter, ProcessCpu, Run, ThreadCpu, Work, parse_pid_stat, parse_pid_status,
    parse_proc_stat, record,
};
pub use progress::Progress;
pub use report::{HostInfo, OrderEffect, Report, render};
pub use stats::{
    Comparison, Metric, OrderedRuns, ResultSet, alternate, alternate_abba, median, order_effect,
    ratio_pairs, summarize,
};
