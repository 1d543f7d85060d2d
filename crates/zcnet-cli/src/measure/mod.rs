//! The measurement core every benchmark shares: CPU accounting, run records, repetition with
//! A/B alternation, medians and spreads, ratio pairs, the JSON report and the human table.
//!
//! CPU comes from two places, as design.md section 4 asks: `getrusage(RUSAGE_THREAD)` of the
//! thread doing the work (user, sys, voluntary and involuntary context switches), and the
//! whole-machine deltas of `/proc/stat` (user, sys, softirq), because on loopback much of the
//! receive work is charged to the sender or to softirq. "MB" is 2^20 bytes, as the kernel's
//! reference program `tcp_mmap` counts it.
//!
//! Three parts: [`cpu`] measures (thread, machine and process CPU, one [`Run`] per run),
//! [`stats`] repeats and compares (A/B alternation, medians, typed [`Metric`]s, ratio pairs),
//! [`report`] presents (the JSON document and the human table).

pub mod cpu;
pub mod report;
pub mod stats;

pub use cpu::{
    MachineCpu, Meter, ProcessCpu, Run, ThreadCpu, Work, parse_pid_stat, parse_pid_status,
    parse_proc_stat, record,
};
pub use report::{HostInfo, OrderEffect, Progress, Report, render};
pub use stats::{
    Comparison, Metric, OrderedRuns, ResultSet, alternate, alternate_abba, median, order_effect,
    ratio_pairs, summarize,
};
