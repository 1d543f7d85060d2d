//! CPU accounting and the record of one run: `getrusage(RUSAGE_THREAD)` of the working
//! thread, whole-machine deltas of `/proc/stat`, another process's CPU from `/proc/PID`.

use std::time::Instant;

use nix::sys::resource::{UsageWho, getrusage};
use serde::{Deserialize, Serialize};

const MB: f64 = (1u64 << 20) as f64;

/// Process `pid`'s open descriptors and resident memory (KiB, `VmRSS`), from `/proc`: 0 for
/// what cannot be read (a process gone).
pub fn footprint(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (fds, rss)
}

/// CPU time and context switches of the calling thread (`getrusage(RUSAGE_THREAD)`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadCpu {
    /// User time, seconds.
    pub user_s: f64,
    /// System time, seconds.
    pub sys_s: f64,
    /// Voluntary context switches.
    pub voluntary: i64,
    /// Involuntary context switches.
    pub involuntary: i64,
}

impl ThreadCpu {
    /// Reads the calling thread's counters.
    pub fn now() -> ThreadCpu {
        // getrusage(RUSAGE_THREAD) cannot fail for the calling thread on Linux 2.6.26+.
        ThreadCpu::of(UsageWho::RUSAGE_THREAD)
    }

    /// The counters of this process's children that were waited for, so far
    /// (`getrusage(RUSAGE_CHILDREN)`): across one child's `wait`, that child's.
    pub fn children() -> ThreadCpu {
        ThreadCpu::of(UsageWho::RUSAGE_CHILDREN)
    }

    fn of(who: UsageWho) -> ThreadCpu {
        match getrusage(who) {
            Ok(u) => {
                let secs =
                    |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
                ThreadCpu {
                    user_s: secs(u.user_time()),
                    sys_s: secs(u.system_time()),
                    voluntary: u.voluntary_context_switches(),
                    involuntary: u.involuntary_context_switches(),
                }
            }
            Err(_) => ThreadCpu::default(),
        }
    }

    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &ThreadCpu) -> ThreadCpu {
        ThreadCpu {
            user_s: self.user_s - earlier.user_s,
            sys_s: self.sys_s - earlier.sys_s,
            voluntary: self.voluntary - earlier.voluntary,
            involuntary: self.involuntary - earlier.involuntary,
        }
    }
}

/// The aggregate `cpu` line of `/proc/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// user + nice.
    pub user: u64,
    /// system.
    pub system: u64,
    /// irq.
    pub irq: u64,
    /// softirq.
    pub softirq: u64,
    /// idle + iowait.
    pub idle: u64,
    /// steal.
    pub steal: u64,
}

/// Parses the first (`cpu `) line of `/proc/stat`.
pub fn parse_proc_stat(s: &str) -> Option<MachineCpu> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    if v.len() < 8 {
        return None;
    }
    Some(MachineCpu {
        user: v[0] + v[1],
        system: v[2],
        idle: v[3] + v[4],
        irq: v[5],
        softirq: v[6],
        steal: v[7],
    })
}

impl MachineCpu {
    /// Reads `/proc/stat` now; `None` where it cannot be read.
    pub fn now() -> Option<MachineCpu> {
        parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// (user, sys incl. irq, softirq) seconds since `earlier`, all CPUs summed.
    pub fn since(&self, earlier: &MachineCpu, ticks_per_s: f64) -> (f64, f64, f64) {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / ticks_per_s;
        (
            d(self.user, earlier.user),
            d(self.system + self.irq, earlier.system + earlier.irq),
            d(self.softirq, earlier.softirq),
        )
    }

    /// (user, sys incl. irq, softirq) seconds from `earlier` until now; `None` where
    /// `/proc/stat` could not be read at either end.
    pub fn elapsed(earlier: Option<MachineCpu>) -> Option<(f64, f64, f64)> {
        Some(MachineCpu::now()?.since(&earlier?, ticks_per_second()))
    }
}

/// CPU counters of another process (a real peer such as tcpdump, single-threaded): its run
/// time in ns from `/proc/PID/schedstat`, its user and system ticks from `/proc/PID/stat`, its
/// context switches from `/proc/PID/status` (`proc(5)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCpu {
    /// Time on a CPU, ns (`sum_exec_runtime`, what getrusage's user + system add up to).
    pub run_ns: u64,
    /// User ticks (`utime`).
    pub utime: u64,
    /// System ticks (`stime`).
    pub stime: u64,
    /// Voluntary context switches.
    pub voluntary: i64,
    /// Involuntary context switches.
    pub involuntary: i64,
}

/// `utime` and `stime` (fields 14 and 15) of a `/proc/PID/stat` line; the command name in
/// parentheses may hold spaces and parentheses, so fields count from the last `)`.
pub fn parse_pid_stat(s: &str) -> Option<(u64, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// The voluntary and involuntary context switches of a `/proc/PID/status` text.
pub fn parse_pid_status(s: &str) -> Option<(i64, i64)> {
    let field = |name: &str| -> Option<i64> {
        s.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse()
            .ok()
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

impl ProcessCpu {
    /// Reads process `pid`'s counters; `None` when it is gone or a file does not parse.
    pub fn read(pid: u32) -> Option<ProcessCpu> {
        let file = |name: &str| std::fs::read_to_string(format!("/proc/{pid}/{name}")).ok();
        let run_ns = file("schedstat")?.split_whitespace().next()?.parse().ok()?;
        let (utime, stime) = parse_pid_stat(&file("stat")?)?;
        let (voluntary, involuntary) = parse_pid_status(&file("status")?)?;
        Some(ProcessCpu {
            run_ns,
            utime,
            stime,
            voluntary,
            involuntary,
        })
    }

    /// The CPU used since `earlier`: the run time, split into user and system in the
    /// proportion of the ticks, as the kernel splits it for getrusage (`cputime_adjust`: all
    /// user when no system tick was sampled, all system when no user tick was).
    pub fn since(&self, earlier: &ProcessCpu) -> ThreadCpu {
        let run = self.run_ns.saturating_sub(earlier.run_ns) as f64 / 1e9;
        let u = self.utime.saturating_sub(earlier.utime) as f64;
        let s = self.stime.saturating_sub(earlier.stime) as f64;
        let user_s = if s == 0.0 {
            run
        } else if u == 0.0 {
            0.0
        } else {
            run * u / (u + s)
        };
        ThreadCpu {
            user_s,
            sys_s: run - user_s,
            voluntary: self.voluntary - earlier.voluntary,
            involuntary: self.involuntary - earlier.involuntary,
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/stat` and `/proc/PID/stat` times.
pub fn ticks_per_second() -> f64 {
    use nix::unistd::{SysconfVar, sysconf};
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

/// One measured run: the field names are the JSON schema of docs/measuring.md.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Run {
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Payload rate in Gbit/s (10^9 bits).
    pub gbit: f64,
    /// Send calls or packets per second, where that is the unit of work.
    pub requests_per_s: Option<f64>,
    /// User CPU of the measured thread.
    pub cpu_user_s: f64,
    /// System CPU of the measured thread.
    pub cpu_sys_s: f64,
    /// Measured thread's CPU µs per MB (2^20 bytes).
    pub cpu_us_per_mb: f64,
    /// Measured thread's CPU ns per request (send call or packet), where requests are counted.
    pub cpu_ns_per_request: Option<f64>,
    /// Whole-machine busy CPU µs per MB (user + sys + irq + softirq, all CPUs).
    pub machine_cpu_us_per_mb: Option<f64>,
    /// Whole-machine user seconds.
    pub machine_user_s: Option<f64>,
    /// Whole-machine system (incl. hard irq) seconds.
    pub machine_sys_s: Option<f64>,
    /// Whole-machine softirq seconds.
    pub machine_softirq_s: Option<f64>,
    /// Voluntary + involuntary context switches of the measured thread.
    pub ctx_switches: i64,
    /// Voluntary context switches.
    pub voluntary_ctx_switches: i64,
    /// Involuntary context switches.
    pub involuntary_ctx_switches: i64,
    /// Fraction of bytes that really went zero-copy; `None` where it does not apply.
    pub zero_copy_share: Option<f64>,
    /// Whether the receiver checked every byte; `None` when verification was off.
    pub verified: Option<bool>,
    /// Packets offered to a capture (sent by its generator); `None` outside capture benches.
    pub packets_offered: Option<u64>,
    /// Packets the kernel dropped before the capture read them (`PACKET_STATISTICS`);
    /// `None` outside capture benches.
    pub packets_dropped: Option<u64>,
    /// Packets captured / packets offered; `None` outside capture benches.
    pub capture_share: Option<f64>,
    /// Datagrams a checking receiver got / datagrams sent (`udp-gso` over veth: UDP may lose
    /// some, and what arrived was checked); `None` where nothing counts them.
    pub received_share: Option<f64>,
    /// With `--remote`: the far host's CPU µs per MB of what it moved (its measured thread).
    pub remote_cpu_us_per_mb: Option<f64>,
    /// With `--remote`: the far host's user seconds.
    pub remote_cpu_user_s: Option<f64>,
    /// With `--remote`: the far host's system seconds.
    pub remote_cpu_sys_s: Option<f64>,
    /// With `--remote`: the far host's context switches.
    pub remote_ctx_switches: Option<i64>,
    /// With `--remote`: bytes the far host received, sent or fetched.
    pub remote_bytes: Option<u64>,
    /// `Mode::Auto`: the share of sends spent exploring the way not chosen; `None` in other
    /// modes.
    pub auto_explore_share: Option<f64>,
    /// `Mode::Auto`: what exploring cost, as a share of the sending CPU its rounds measured
    /// (the exploring rounds' CPU beyond what the chosen way would have cost;
    /// `AutoCounters::explore_cost_share`).
    pub auto_explore_cost: Option<f64>,
    /// `Mode::Auto`: size classes that started from what an earlier sender of the process
    /// learned (a bench run after the first).
    pub auto_resumed: Option<u64>,
    /// `Mode::Auto`: the threshold its size classes learned (`from 4096 B`, `never`, `always`).
    pub auto_learned: Option<String>,
    /// `Mode::Auto`: sends of the run's size class before it had learned its way.
    pub auto_decided_after: Option<u64>,
    /// `Mode::Auto`: that class's zero-copy CPU per byte over copy's (median of its pairs).
    pub auto_zc_over_copy: Option<f64>,
    /// `Mode::Auto` sending GSO trains: what the route's device does with them
    /// ([`zcnet::auto::Trains`]: `trains of 1472 B segments leave by sink0, which cuts them in
    /// software ...`).
    pub auto_trains: Option<String>,
}

impl Run {
    /// Adds what a `Mode::Auto` sender learned in this run, sending `size`-byte messages.
    pub fn with_auto(
        mut self,
        choice: Option<zcnet::auto::Choice>,
        counters: zcnet::auto::AutoCounters,
        size: usize,
    ) -> Run {
        let Some(choice) = choice else {
            return self;
        };
        let class = choice
            .classes
            .iter()
            .find(|c| c.from <= size && c.to.is_none_or(|t| size < t));
        self.auto_explore_share = counters.explore_share();
        self.auto_explore_cost = counters.explore_cost_share();
        self.auto_resumed = Some(counters.resumed_classes);
        self.auto_learned = choice.learned_threshold().map(|t| t.to_string());
        self.auto_decided_after = class.and_then(|c| c.decided_after);
        self.auto_zc_over_copy = class.and_then(|c| c.zero_copy_over_copy);
        self.auto_trains = choice.trains.as_ref().map(ToString::to_string);
        self
    }
}

/// What a run did, as the bench knows it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Work {
    /// Payload bytes.
    pub bytes: u64,
    /// Requests (send calls, packets), where that is the unit of work.
    pub requests: Option<u64>,
    /// Fraction really zero-copied, where it applies.
    pub zero_copy_share: Option<f64>,
    /// Verification outcome, when verification ran.
    pub verified: Option<bool>,
}

/// Measures one run. Create it on the thread that does the work, call [`Meter::finish`] on
/// the same thread: `RUSAGE_THREAD` counts only the calling thread.
#[derive(Debug)]
pub struct Meter {
    start: Instant,
    thread: ThreadCpu,
    machine: Option<MachineCpu>,
}

impl Meter {
    /// Starts measuring.
    pub fn start() -> Meter {
        Meter {
            machine: MachineCpu::now(),
            thread: ThreadCpu::now(),
            start: Instant::now(),
        }
    }

    /// Ends the run and computes its record.
    pub fn finish(self, work: Work) -> Run {
        let seconds = self.start.elapsed().as_secs_f64();
        let cpu = ThreadCpu::now().since(&self.thread);
        record(work, seconds, cpu, MachineCpu::elapsed(self.machine))
    }
}

impl Run {
    /// The line a bench prints as each run ends: `[condition] mode  Gbit, side us/MB (user,
    /// sys), share without a user copy`; `side` names whose CPU it is (`sender`, `server`).
    pub fn line(&self, condition: &str, mode: &str, side: &str) -> String {
        format!(
            "[{condition}] {mode:<10} {:>7.2} Gbit, {side} {:>6.1} us/MB (user {:.3} s, sys {:.3} \
             s), {:>6.2} % without a user copy",
            self.gbit,
            self.cpu_us_per_mb,
            self.cpu_user_s,
            self.cpu_sys_s,
            100.0 * self.zero_copy_share.unwrap_or(0.0)
        ) + &self.far_part()
    }

    /// `, far side N us/MB` for a `--remote` run, else nothing.
    pub fn far_part(&self) -> String {
        self.remote_cpu_us_per_mb
            .map_or(String::new(), |f| format!(", far side {f:.1} us/MB"))
    }
}

impl Run {
    /// Adds the far host's figures of a `--remote` run; its verification counts with ours.
    pub fn with_far(mut self, far: &Far) -> Run {
        self.remote_cpu_us_per_mb = Some(far.cpu_us_per_mb);
        self.remote_cpu_user_s = Some(far.cpu_user_s);
        self.remote_cpu_sys_s = Some(far.cpu_sys_s);
        self.remote_ctx_switches = Some(far.ctx_switches);
        self.remote_bytes = Some(far.bytes);
        if let Some(ok) = far.verified {
            self.verified = Some(self.verified.unwrap_or(true) && ok);
        }
        self
    }
}

/// The far side's figures for one run of `zcnet bench --remote`, as `zcnet serve` measures and
/// reports them: its CPU (the thread that did the work, `RUSAGE_THREAD`) and what it moved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Far {
    /// Payload bytes received, sent or fetched.
    pub bytes: u64,
    /// Datagrams, frames or files.
    pub messages: u64,
    /// Whether every byte matched the run's [`Check`](crate::remote::proto::Check) (`None`:
    /// not checked).
    pub verified: Option<bool>,
    /// Stream offset of the first byte that did not.
    pub first_bad: Option<u64>,
    /// Wall time of the far side's work.
    pub seconds: f64,
    /// User CPU seconds.
    pub cpu_user_s: f64,
    /// System CPU seconds.
    pub cpu_sys_s: f64,
    /// CPU µs per MB of `bytes`.
    pub cpu_us_per_mb: f64,
    /// Voluntary + involuntary context switches.
    pub ctx_switches: i64,
    /// Whole-machine busy CPU µs per MB, where `/proc/stat` is readable.
    pub machine_cpu_us_per_mb: Option<f64>,
}

/// Computes a [`Run`] from raw measurements (separate from [`Meter`] so it can be tested).
pub fn record(work: Work, seconds: f64, cpu: ThreadCpu, machine: Option<(f64, f64, f64)>) -> Run {
    let mb = work.bytes as f64 / MB;
    let per_mb = |s: f64| if mb > 0.0 { s * 1e6 / mb } else { 0.0 };
    let rate = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    Run {
        bytes: work.bytes,
        seconds,
        gbit: rate(work.bytes as f64 * 8.0) / 1e9,
        requests_per_s: work.requests.map(|r| rate(r as f64)),
        cpu_user_s: cpu.user_s,
        cpu_sys_s: cpu.sys_s,
        cpu_us_per_mb: per_mb(cpu.user_s + cpu.sys_s),
        cpu_ns_per_request: work
            .requests
            .filter(|&r| r > 0)
            .map(|r| (cpu.user_s + cpu.sys_s) * 1e9 / r as f64),
        machine_cpu_us_per_mb: machine.map(|(u, s, si)| per_mb(u + s + si)),
        machine_user_s: machine.map(|m| m.0),
        machine_sys_s: machine.map(|m| m.1),
        machine_softirq_s: machine.map(|m| m.2),
        ctx_switches: cpu.voluntary + cpu.involuntary,
        voluntary_ctx_switches: cpu.voluntary,
        involuntary_ctx_switches: cpu.involuntary,
        zero_copy_share: work.zero_copy_share,
        verified: work.verified,
        packets_offered: None,
        packets_dropped: None,
        capture_share: None,
        received_share: None,
        remote_cpu_us_per_mb: None,
        remote_cpu_user_s: None,
        remote_cpu_sys_s: None,
        remote_ctx_switches: None,
        remote_bytes: None,
        auto_explore_share: None,
        auto_explore_cost: None,
        auto_resumed: None,
        auto_learned: None,
        auto_decided_after: None,
        auto_zc_over_copy: None,
        auto_trains: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const PROC_STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n\
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
intr 1462898 ...\nctxt 1990473\n";

    #[test]
    fn proc_stat_fixture() {
        let c = parse_proc_stat(PROC_STAT).unwrap();
        assert_eq!(c.user, 10132153 + 290696);
        assert_eq!(c.system, 3084719);
        assert_eq!(c.idle, 46828483 + 16683);
        assert_eq!(c.softirq, 25195);
        assert_eq!(parse_proc_stat("cpu0 1 2 3\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
        let later = MachineCpu {
            user: c.user + 100,
            system: c.system + 50,
            irq: 10,
            softirq: c.softirq + 25,
            ..c
        };
        assert_eq!(later.since(&c, 100.0), (1.0, 0.6, 0.25));
    }

    #[test]
    fn another_process_cpu_from_proc() {
        let stat = "4242 (tcp (dump) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 30 120 0 0 20 0 1 0 \
                    123 1000 200 18446744073709551615\n";
        assert_eq!(parse_pid_stat(stat), Some((30, 120)));
        assert_eq!(parse_pid_stat("4242 (short) S 1 2"), None);
        let status =
            "Name:\ttcpdump\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n";
        assert_eq!(parse_pid_status(status), Some((17, 4)));
        assert_eq!(parse_pid_status("Name:\ttcpdump\n"), None);
        let then = ProcessCpu {
            run_ns: 1_000_000_000,
            utime: 10,
            stime: 10,
            voluntary: 5,
            involuntary: 1,
        };
        let now = ProcessCpu {
            run_ns: 1_400_000_000,
            utime: 20,
            stime: 40,
            voluntary: 9,
            involuntary: 2,
        };
        let d = now.since(&then);
        assert!(
            (d.user_s - 0.1).abs() < 1e-9 && (d.sys_s - 0.3).abs() < 1e-9,
            "{d:?}"
        );
        assert_eq!((d.voluntary, d.involuntary), (4, 1));
        // No tick sampled: all user, as the kernel reports it.
        let quiet = ProcessCpu {
            run_ns: 1_002_000_000,
            ..then
        };
        assert_eq!(quiet.since(&then).user_s, 0.002);
        // Our own process reads back.
        let me = ProcessCpu::read(std::process::id()).expect("/proc/self");
        assert!(me.run_ns > 0);
    }

    #[test]
    fn record_computes_rates_in_tcp_mmap_units() {
        let cpu = ThreadCpu {
            user_s: 0.03,
            sys_s: 1.40,
            voluntary: 65000,
            involuntary: 447,
        };
        let r = record(
            Work {
                bytes: 32768 << 20,
                requests: Some(1000),
                zero_copy_share: Some(0.9999),
                verified: Some(true),
            },
            7.98,
            cpu,
            Some((0.5, 2.0, 0.5)),
        );
        assert!(
            (r.cpu_us_per_mb - 43.64).abs() < 0.01,
            "{}",
            r.cpu_us_per_mb
        );
        assert!((r.gbit - 34.45).abs() < 0.01, "{}", r.gbit);
        assert_eq!(r.ctx_switches, 65447);
        assert!((r.machine_cpu_us_per_mb.unwrap() - 91.55).abs() < 0.01);
        assert!((r.requests_per_s.unwrap() - 125.31).abs() < 0.01);
        // 1.43 s of thread CPU over 1000 requests.
        assert!((r.cpu_ns_per_request.unwrap() - 1.43e6).abs() < 1.0);
        // No bytes: no division by zero.
        let empty = record(Work::default(), 0.0, cpu, None);
        assert_eq!((empty.cpu_us_per_mb, empty.gbit), (0.0, 0.0));
        assert_eq!(empty.machine_cpu_us_per_mb, None);
        assert_eq!(empty.cpu_ns_per_request, None);
    }

    #[test]
    fn thread_cpu_counts_this_threads_work() {
        let m = Meter::start();
        let start = ThreadCpu::now();
        let mut x = 0u64;
        let wall = Instant::now();
        // Spin until this thread has used 20 ms of CPU (bounded by wall time).
        while ThreadCpu::now().since(&start).user_s < 0.02
            && wall.elapsed() < Duration::from_secs(20)
        {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let r = m.finish(Work {
            bytes: 1 << 20,
            ..Default::default()
        });
        assert!(r.cpu_user_s >= 0.02, "{r:?}");
        // 1 MiB moved: µs per MB equals the CPU µs spent.
        assert!((r.cpu_us_per_mb - (r.cpu_user_s + r.cpu_sys_s) * 1e6).abs() < 1e-6);
        assert!(
            r.seconds >= r.cpu_user_s * 0.5,
            "wall time cannot be far below one thread's CPU"
        );
    }
}
