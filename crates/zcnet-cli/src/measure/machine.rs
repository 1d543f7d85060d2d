//! What makes figures comparable across machines (issue 46): the CPU model, whether this is a
//! virtual machine or a container, the load at the start, and what other processes and the
//! hypervisor took of the CPU while a bench ran ([`Competing`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde::Serialize;

use super::cpu::{MachineCpu, ticks_per_second};

/// Others are said to compete when they took more than this share of the machine's CPU time
/// (all CPUs) during a bench's runs, steal included: a busy loop on one CPU of two is 50 %.
/// 10 % is 0.2 of a CPU on a 2-CPU machine, enough to move a 1 s run's figures by more than the
/// noise of a quiet one (docs/measuring.md: +-40 % under a busy loop, +-10-15 % quiet).
pub const BUSY_SHARE: f64 = 0.10;

/// The `model name` of the first CPU in `/proc/cpuinfo` (`AMD EPYC`, `Intel(R) Xeon(R) ...`).
pub fn cpu_model() -> Option<String> {
    parse_cpu_model(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// The first `model name` line's value.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The virtualization this runs under, as `systemd-detect-virt` tells it: `kvm`, `kvm, docker`
/// (a container in a VM), `none`. Without systemd-detect-virt: `vm` when the CPU flags name a
/// hypervisor, a container from its marker file (`/.dockerenv`, `/run/.containerenv`), else
/// `none`.
pub fn virtualization() -> String {
    static VIRT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VIRT.get_or_init(|| {
        let detect = |arg: &str| -> Option<String> {
            let out = std::process::Command::new("systemd-detect-virt")
                .arg(arg)
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            // It prints `none` and exits 1 where there is none.
            let s = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (!s.is_empty()).then_some(s)
        };
        let vm = detect("--vm").unwrap_or_else(|| {
            let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let hv = flags
                .lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor"));
            if hv { "vm" } else { "none" }.to_owned()
        });
        let container = detect("--container").unwrap_or_else(|| {
            let marker = |p: &str| std::path::Path::new(p).exists();
            if marker("/.dockerenv") {
                "docker".into()
            } else if marker("/run/.containerenv") {
                "podman".into()
            } else {
                "none".into()
            }
        });
        match (vm.as_str(), container.as_str()) {
            (v, "none") => v.to_owned(),
            ("none", c) => c.to_owned(),
            (v, c) => format!("{v}, {c}"),
        }
    })
    .clone()
}

/// The 1, 5 and 15 minute load averages of `/proc/loadavg`.
pub fn load_average() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The three load averages of a `/proc/loadavg` text.
pub fn parse_loadavg(s: &str) -> Option<[f64; 3]> {
    let mut f = s.split_whitespace().map(str::parse::<f64>);
    Some([f.next()?.ok()?, f.next()?.ok()?, f.next()?.ok()?])
}

/// One process as `/proc/PID/stat` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The command (`comm`, in parentheses).
    pub comm: String,
    /// Parent process id.
    pub ppid: u32,
    /// A kernel thread (`PF_KTHREAD` in `flags`).
    pub kernel: bool,
    /// User + system ticks of all its threads.
    pub ticks: u64,
    /// Start time, ticks after boot: tells a reused pid from the process that had it.
    pub start: u64,
}

/// `PF_KTHREAD` of `include/linux/sched.h`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Parses a `/proc/PID/stat` line (`proc(5)`); the command may hold spaces and parentheses, so
/// fields count from the last `)`.
pub fn parse_proc_stat_line(s: &str) -> Option<ProcStat> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_owned();
    let f: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    // f[0] is field 3 (state): ppid 4, flags 9, utime 14, stime 15, starttime 22.
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(ProcStat {
        comm,
        ppid: u32::try_from(num(1)?).ok()?,
        kernel: num(6)? & PF_KTHREAD != 0,
        ticks: num(11)? + num(12)?,
        start: num(19)?,
    })
}

/// Every process now, by pid.
fn processes() -> BTreeMap<u32, ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_proc_stat_line(&s)?))
        })
        .collect()
}

/// `root` and every process descended from it in `procs`.
fn tree_of(root: u32, procs: &BTreeMap<u32, ProcStat>) -> BTreeSet<u32> {
    let mut tree = BTreeSet::from([root]);
    // Parents come before their children in no particular order: repeat until nothing joins.
    loop {
        let before = tree.len();
        for (pid, p) in procs {
            if tree.contains(&p.ppid) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

/// The processes descended from `pid` (not itself), by `/proc`: what a program started. A
/// process whose parent ended was adopted elsewhere and is not found.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut tree = tree_of(pid, &processes());
    tree.remove(&pid);
    tree.into_iter().collect()
}

/// The start of a window over which [`Competing`] is measured.
#[derive(Clone, Debug)]
pub struct Window {
    at: Instant,
    machine: Option<MachineCpu>,
    procs: BTreeMap<u32, ProcStat>,
}

impl Window {
    /// Opens a window now.
    pub fn open() -> Window {
        Window {
            at: Instant::now(),
            machine: MachineCpu::now(),
            procs: processes(),
        }
    }

    /// What others took of the CPU since the window opened.
    pub fn close(&self, cpus: usize) -> Competing {
        let seconds = self.at.elapsed().as_secs_f64();
        let now = processes();
        let hz = ticks_per_second();
        let me = std::process::id();
        let (ours_then, ours_now) = (tree_of(me, &self.procs), tree_of(me, &now));
        // Per command: the ticks of processes outside this one's tree, kernel threads aside
        // (their work is mostly what the bench asked of the kernel: softirq, ksoftirqd).
        let mut by_comm: BTreeMap<String, u64> = BTreeMap::new();
        for (pid, p) in &now {
            if p.kernel || ours_now.contains(pid) || ours_then.contains(pid) {
                continue;
            }
            let before = self
                .procs
                .get(pid)
                .filter(|b| b.start == p.start)
                .map_or(0, |b| b.ticks);
            let d = p.ticks.saturating_sub(before);
            if d > 0 {
                *by_comm.entry(p.comm.clone()).or_default() += d;
            }
        }
        let others_cpu_s = by_comm.values().sum::<u64>() as f64 / hz;
        let mut top: Vec<Other> = by_comm
            .into_iter()
            .map(|(command, t)| Other {
                command,
                cpu_s: t as f64 / hz,
            })
            .collect();
        top.sort_by(|a, b| b.cpu_s.total_cmp(&a.cpu_s));
        top.truncate(3);
        let capacity = seconds * cpus.max(1) as f64;
        let steal_s = match (MachineCpu::now(), self.machine) {
            (Some(n), Some(b)) => n.steal.saturating_sub(b.steal) as f64 / hz,
            _ => 0.0,
        };
        let share = |s: f64| if capacity > 0.0 { s / capacity } else { 0.0 };
        let (others_share, steal_share) = (share(others_cpu_s), share(steal_s));
        Competing {
            seconds,
            others_cpu_s,
            others_share,
            steal_share,
            top,
            busy_if_share_above: BUSY_SHARE,
            busy: others_share + steal_share > BUSY_SHARE,
        }
    }
}

/// A process that competed: its command and the CPU it took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Other {
    /// The command (`comm`).
    pub command: String,
    /// CPU seconds (user + system) during the window.
    pub cpu_s: f64,
}

/// What others took of the CPU while a bench ran: processes outside zcnet's own (its threads and
/// the peers it started), and the hypervisor (`steal` in `/proc/stat`). Kernel threads are left
/// out: on these labs their work is mostly the bench's own (softirq, ksoftirqd). Processes that
/// started and ended within the window are missed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Competing {
    /// Wall seconds of the window.
    pub seconds: f64,
    /// CPU seconds of the other processes.
    pub others_cpu_s: f64,
    /// That as a share of the machine's CPU time (all CPUs) over the window.
    pub others_share: f64,
    /// Time the hypervisor ran something else while a CPU here wanted to run, as a share.
    pub steal_share: f64,
    /// The busiest others, at most three.
    pub top: Vec<Other>,
    /// The rule: busy when `others_share + steal_share` is above this ([`BUSY_SHARE`]).
    pub busy_if_share_above: f64,
    /// Whether the rule held.
    pub busy: bool,
}

impl Competing {
    /// `others took 49 % of the CPU (sh 1.96 s), steal 0 %` where busy; `None` otherwise.
    pub fn busy_note(&self) -> Option<String> {
        self.busy.then(|| self.text())
    }

    /// The figures in one line.
    pub fn text(&self) -> String {
        let top: Vec<String> = self
            .top
            .iter()
            .map(|o| format!("{} {:.2} s", o.command, o.cpu_s))
            .collect();
        format!(
            "others took {:.0} % of the CPU{}, steal {:.0} %",
            self.others_share * 100.0,
            if top.is_empty() {
                String::new()
            } else {
                format!(" ({})", top.join(", "))
            },
            self.steal_share * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_loadavg_fixtures() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\
                       flags\t\t: fpu hypervisor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(parse_cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(parse_cpu_model("processor\t: 0\n"), None);
        assert_eq!(
            parse_loadavg("0.64 1.36 0.92 1/90 25657\n"),
            Some([0.64, 1.36, 0.92])
        );
        assert_eq!(parse_loadavg("0.64 x"), None);
    }

    #[test]
    fn proc_stat_lines_with_odd_commands() {
        let line = "4242 (tcp (dump) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 30 120 0 0 20 0 1 \
                    0 123 1000 200\n";
        let p = parse_proc_stat_line(line).unwrap();
        assert_eq!(
            p,
            ProcStat {
                comm: "tcp (dump) x".into(),
                ppid: 1,
                kernel: false,
                ticks: 150,
                start: 123
            }
        );
        // kthreadd's child: PF_KTHREAD (0x200000) in flags.
        let k = "17 (ksoftirqd/1) S 2 0 0 0 -1 69238848 0 0 0 0 0 50 0 0 20 0 1 0 9 0 0\n";
        assert!(parse_proc_stat_line(k).unwrap().kernel);
        assert_eq!(parse_proc_stat_line("17 (short) S 2"), None);
    }

    #[test]
    fn a_process_tree_holds_every_descendant() {
        let p = |ppid| ProcStat {
            comm: String::new(),
            ppid,
            kernel: false,
            ticks: 0,
            start: 0,
        };
        let procs = BTreeMap::from([(10, p(1)), (30, p(20)), (20, p(10)), (40, p(1))]);
        assert_eq!(tree_of(10, &procs), BTreeSet::from([10, 20, 30]));
    }

    #[test]
    fn a_spinning_process_outside_the_tree_competes_and_our_own_does_not() {
        let spin = "end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do :; done";
        let w = Window::open();
        // Ours: a child spinning.
        let mut child = std::process::Command::new("sh")
            .args(["-c", spin])
            .spawn()
            .unwrap();
        // Not ours: a spinning grandchild whose parent exits at once, so that it is adopted
        // outside this process's tree, as any other process on the machine.
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("sh -c '{spin}' >/dev/null 2>&1 & echo $!")])
            .output()
            .unwrap();
        let orphan: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let c = w.close(zcnet::probe::features().host.cpus);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(orphan),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.kill();
        let _ = child.wait();
        // The orphan ran about 1.5 s of CPU when it had a CPU to itself; the rule is only that it
        // counts and our child does not (at most one spinner's worth is others').
        let sh: f64 = c
            .top
            .iter()
            .filter(|o| o.command == "sh")
            .map(|o| o.cpu_s)
            .sum();
        assert!(sh > 0.0, "the orphan is another's: {c:?}");
        assert!(sh <= c.seconds + 0.05, "our own child counted too: {c:?}");
        assert_eq!(c.busy, c.others_share + c.steal_share > BUSY_SHARE);
        assert_eq!(c.busy_note().is_some(), c.busy, "{c:?}");
    }
}
