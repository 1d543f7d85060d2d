//! `zcnet tune`: where zero copy starts to pay on this machine, per sending path and route kind.
//!
//! For each path (MSG_ZEROCOPY on UDP and TCP, io_uring `SEND_ZC` with and without registered
//! buffers, `sendfile` against `read` + `send` by file length) and each kind of route (delivered locally: the loopback lab; out through a device:
//! the sink lab, or veth for TCP, which cannot run into the sink), copy and zero-copy runs
//! alternate over a size sweep; the break-even is the smallest size from which zero copy costs
//! less sender CPU per byte at every larger size, refined by bisection between the two sizes
//! around it. Completions flagged "copied" mark a route where the kernel copies anyway: there
//! zero copy is "never" (a copy plus pinning cannot beat a copy), whatever the sweep says. The
//! result is a [`Profile`] (TOML) that `Mode::Auto` of the library reads as its prior: each
//! sender learns from there on its own traffic ([`zcnet::auto`]), so a profile is worth having
//! to seed a fleet, or for senders too short-lived to learn, not to make `Mode::Auto` right.
//! The buffer pools are large (256 and 64 MiB), to be cold, as for a server sending distinct
//! data.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use netlab::Family;
use serde_json::json;
use zcnet::auto::{Entry, Profile, Route, SendPath, Threshold};

use crate::bench::sweep::{self, Lab, Proto};
use crate::bench::{tx, uring_tx};
use crate::measure::{self, Metric, Progress, Run};

/// The sizes swept, bytes (the largest fits one UDP datagram).
pub const SIZES: [usize; 7] = [600, 1500, 4000, 8000, 16000, 32000, 64000];

/// Bisection steps between the two sizes around a crossing.
const REFINE_STEPS: usize = 2;

/// MiB of the MSG_ZEROCOPY pool (shared with the benches: 256, cold).
const TX_POOL_MIB: usize = 256;
/// MiB of the io_uring pools, one per size (64: cold, registered quickly).
const URING_POOL_MIB: usize = 64;

/// A path to tune, as the command line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PathArg {
    /// MSG_ZEROCOPY on UDP.
    MsgZerocopyUdp,
    /// MSG_ZEROCOPY on TCP.
    MsgZerocopyTcp,
    /// io_uring SEND_ZC.
    UringZc,
    /// io_uring SEND_ZC from registered buffers.
    UringZcFixed,
    /// sendfile(2) against read(2) + send(2), per file length.
    Sendfile,
}

impl From<PathArg> for SendPath {
    fn from(p: PathArg) -> SendPath {
        match p {
            PathArg::MsgZerocopyUdp => SendPath::MsgZerocopyUdp,
            PathArg::MsgZerocopyTcp => SendPath::MsgZerocopyTcp,
            PathArg::UringZc => SendPath::UringZc,
            PathArg::UringZcFixed => SendPath::UringZcFixed,
            PathArg::Sendfile => SendPath::Sendfile,
        }
    }
}

/// Options of `zcnet tune`.
#[derive(Debug, clap::Args)]
pub struct Opt {
    /// The profile to write (or, with --show, to print). Default: the one `Mode::Auto` reads,
    /// $ZCNET_PROFILE, else $XDG_CONFIG_HOME/zcnet/profile.toml (~/.config/zcnet/profile.toml).
    #[arg(long, value_name = "PATH")]
    pub profile: Option<PathBuf>,
    /// Print the profile (the file, else the one in use) and measure nothing.
    #[arg(long)]
    pub show: bool,
    /// Only these paths (repeatable). Default: all five.
    #[arg(long = "path", value_enum)]
    pub paths: Vec<PathArg>,
    /// Alternations per mode and size.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=50))]
    pub runs: usize,
    /// Length of one run, in seconds.
    #[arg(long, value_name = "S", default_value_t = 0.12, value_parser = crate::args::bench_seconds)]
    pub seconds: f64,
    /// Print the profile as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One path in one lab.
#[derive(Clone, Copy, Debug)]
struct Target {
    path: SendPath,
    lab: &'static str,
    route: Route,
}

/// What is tuned: each path on a local route (loopback) and a device route.
const TARGETS: [Target; 10] = [
    Target {
        path: SendPath::MsgZerocopyUdp,
        lab: "sink",
        route: Route::Device,
    },
    Target {
        path: SendPath::MsgZerocopyUdp,
        lab: "loopback",
        route: Route::Local,
    },
    Target {
        path: SendPath::MsgZerocopyTcp,
        lab: "veth",
        route: Route::Device,
    },
    Target {
        path: SendPath::MsgZerocopyTcp,
        lab: "loopback",
        route: Route::Local,
    },
    Target {
        path: SendPath::UringZc,
        lab: "sink",
        route: Route::Device,
    },
    Target {
        path: SendPath::UringZc,
        lab: "loopback",
        route: Route::Local,
    },
    Target {
        path: SendPath::UringZcFixed,
        lab: "sink",
        route: Route::Device,
    },
    Target {
        path: SendPath::UringZcFixed,
        lab: "loopback",
        route: Route::Local,
    },
    Target {
        path: SendPath::Sendfile,
        lab: "veth",
        route: Route::Device,
    },
    Target {
        path: SendPath::Sendfile,
        lab: "loopback",
        route: Route::Local,
    },
];

/// The break-even of a sweep: `ratios` are (size, zero-copy CPU per byte / copy's), sorted by
/// size. Zero copy pays from the smallest size at and above which every ratio is below 1.
/// Returns the threshold and, for a crossing, the sizes around it.
pub fn crossing(ratios: &[(usize, f64)]) -> (Threshold, Option<[usize; 2]>) {
    let first_win = (0..ratios.len())
        .find(|&i| ratios[i..].iter().all(|&(_, r)| r < 1.0))
        .filter(|_| !ratios.is_empty());
    match first_win {
        None => (Threshold::Never, None),
        Some(0) => (Threshold::Always, None),
        Some(i) => (
            Threshold::From(ratios[i].0),
            Some([ratios[i - 1].0, ratios[i].0]),
        ),
    }
}

/// The size halfway between `lo` and `hi` on a log scale, rounded to 100 bytes.
fn midpoint(lo: usize, hi: usize) -> usize {
    let m = ((lo as f64) * (hi as f64)).sqrt();
    ((m / 100.0).round() as usize * 100).clamp(lo + 1, hi - 1)
}

/// What one size's runs send from.
enum Source {
    /// The MSG_ZEROCOPY benches' pool.
    Pool(&'static [u8]),
    /// An io_uring pool of buffers of the size.
    Uring(uring_tx::SendPool),
    /// A file of the size.
    File(std::sync::Arc<SmallFile>),
}

/// Runs of one target: a lab built once, and the pools.
struct Bench {
    target: Target,
    lab: Lab,
    proto: Proto,
    runs: usize,
    seconds: f64,
}

impl Bench {
    /// What the runs at `size` send from, made once per size: the shared pool, an io_uring
    /// pool (64 MiB filled with the pattern: once, not per run), or a file.
    fn source(&self, size: usize) -> anyhow::Result<Source> {
        Ok(match self.target.path {
            SendPath::MsgZerocopyUdp | SendPath::MsgZerocopyTcp => {
                Source::Pool(sweep::pool(TX_POOL_MIB)?)
            }
            SendPath::UringZc | SendPath::UringZcFixed => Source::Uring(uring_tx::make_pool(
                size,
                uring_tx::PoolSpec::Mib(URING_POOL_MIB),
            )?),
            SendPath::Sendfile => Source::File(std::sync::Arc::new(SmallFile::new(size)?)),
        })
    }

    /// One run at `size` from `source`, zero copy or copy.
    fn one(&self, size: usize, source: &Source, zero_copy: bool) -> anyhow::Result<Run> {
        let (proto, seconds, lab) = (self.proto, self.seconds, &self.lab);
        match source {
            Source::Pool(pool) => {
                let mode = if zero_copy {
                    tx::Mode::Zc
                } else {
                    tx::Mode::Copy
                };
                let sends = tx::Sends {
                    mode,
                    size,
                    seconds,
                    pool,
                };
                tx::one_run(lab, proto, Family::V4, sends)
            }
            Source::Uring(pool) => {
                use zcnet::uring::Mode;
                let mode = match (zero_copy, self.target.path) {
                    (false, _) => Mode::Copy,
                    (true, SendPath::UringZcFixed) => Mode::ZeroCopyFixed,
                    (true, _) => Mode::ZeroCopy,
                };
                uring_tx::one_run(lab, proto, Family::V4, mode, seconds, pool)
            }
            Source::File(file) => {
                let file = file.clone();
                let far = (seconds, crate::remote::proto::Check::Count);
                sweep::run_in_lab(lab, Proto::Tcp, Family::V4, far, move |conn| match conn {
                    sweep::Conn::Tcp(s) => file.send_for(&s, zero_copy, seconds),
                    sweep::Conn::Udp(_) => anyhow::bail!("sendfile needs TCP"),
                })
            }
        }
    }

    /// zero-copy/copy CPU per byte at `size` (median of the pairs), and the zero-copy runs'
    /// median share really zero-copied.
    fn ratio(&self, size: usize, progress: &Progress) -> anyhow::Result<(f64, f64)> {
        let what = || {
            format!(
                "{} in the {} lab at {size} B",
                self.target.path.name(),
                self.target.lab
            )
        };
        let source = self.source(size).with_context(what)?;
        let per_mode = measure::alternate(&[false, true], self.runs, progress, |zc, _| {
            self.one(size, &source, zc)
        })
        .with_context(what)?;
        let pairs = measure::ratio_pairs(&per_mode[1], &per_mode[0], Metric::CpuUsPerMb);
        let ratio = measure::median(&pairs).unwrap_or(f64::NAN);
        let shares: Vec<f64> = per_mode[1]
            .iter()
            .filter_map(|r| r.zero_copy_share)
            .collect();
        Ok((ratio, measure::median(&shares).unwrap_or(0.0)))
    }

    /// The sweep and its refinement: the profile entry.
    fn entry(&self, progress: &Progress) -> anyhow::Result<Entry> {
        let mut ratios = Vec::new();
        let mut shares = Vec::new();
        for size in SIZES {
            let (r, share) = self.ratio(size, progress)?;
            ratios.push((size, r));
            shares.push(share);
        }
        let (mut threshold, mut between) = crossing(&ratios);
        if let Some([mut lo, mut hi]) = between {
            for _ in 0..REFINE_STEPS {
                if hi - lo <= 200 {
                    break;
                }
                let mid = midpoint(lo, hi);
                let (r, _) = self.ratio(mid, progress)?;
                ratios.push((mid, r));
                if r < 1.0 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            ratios.sort_by_key(|&(s, _)| s);
            threshold = Threshold::From(hi);
            between = Some([lo, hi]);
        }
        // Where the kernel copies anyway, zero copy is a copy plus pinning and completions:
        // it cannot pay, whatever the sender's own CPU says (on loopback the receiver's copy
        // runs in softirq, partly on other CPUs than the sender's).
        let copies = measure::median(&shares).is_some_and(|s| s < 0.5);
        if copies {
            threshold = Threshold::Never;
            between = None;
        }
        Ok(Entry {
            path: self.target.path,
            route: self.target.route,
            lab: self.target.lab.to_owned(),
            threshold,
            between,
            ratios,
            copies,
        })
    }
}

/// Makes the profile's directory (a fresh ~/.config has none) and opens the profile to be
/// replaced whole once measured; until then an existing one is left as it was.
fn open_profile(path: &std::path::Path) -> anyhow::Result<crate::output::Output> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    dir.map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| crate::output::Output::replace(path))
        .with_context(|| format!("cannot write the profile {}", path.display()))
}

/// A file of `len` pattern bytes in page cache, sent again and again by `sendfile` or by
/// `read` + `send` (one call each: the buffer holds the whole file); removed on drop.
struct SmallFile {
    path: PathBuf,
    len: u64,
}

impl SmallFile {
    fn new(len: usize) -> anyhow::Result<SmallFile> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("zcnet-tune-{}-{n}", std::process::id()));
        std::fs::write(
            &path,
            netlab::pattern::chunk_at(0, len.min(netlab::pattern::MAX_CHUNK)),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        let len = std::fs::metadata(&path)?.len();
        Ok(SmallFile { path, len })
    }

    /// Sends the file over `sock` for `seconds`, measuring this thread.
    fn send_for(
        &self,
        sock: &std::net::TcpStream,
        zero_copy: bool,
        seconds: f64,
    ) -> anyhow::Result<Run> {
        use zcnet::file::{self, FileSender, Mode};
        let f = std::fs::File::open(&self.path)?;
        let mode = if zero_copy {
            Mode::Sendfile
        } else {
            Mode::Copy
        };
        let mut tx = FileSender::new(
            sock,
            file::Config {
                mode,
                ..file::Config::default()
            },
        )?;
        let meter = measure::Meter::start();
        let start = std::time::Instant::now();
        let mut files = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            tx.send_file(&f, 0, self.len)?;
            files += 1;
        }
        let c = tx.counters();
        use zcnet::ZeroCopyCounters as _;
        Ok(meter.finish(measure::Work {
            bytes: c.bytes,
            requests: Some(files),
            zero_copy_share: c.zero_copy_share(),
            verified: None,
        }))
    }
}

impl Drop for SmallFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The CPU model of /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The table `zcnet tune` and `zcnet tune --show` print.
pub fn render(p: &Profile) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "{}\nkernel {}, cpu {}\n{:<18} {:<7} {:<9} {:<14} {:<14} {:<7} zc/copy CPU per byte by size\n",
        p.origin(),
        if p.kernel.is_empty() { "-" } else { &p.kernel },
        if p.cpu.is_empty() { "-" } else { &p.cpu },
        "path",
        "route",
        "lab",
        "zero copy",
        "between",
        "copies"
    );
    for e in &p.entries {
        let between = e
            .between
            .map_or("-".to_owned(), |[a, b]| format!("{a}-{b} B"));
        let ratios: Vec<String> = e
            .ratios
            .iter()
            .map(|(s, r)| format!("{s}:{r:.2}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<18} {:<7} {:<9} {:<14} {:<14} {:<7} {}",
            e.path.name(),
            e.route.name(),
            e.lab,
            e.threshold.to_string(),
            between,
            if e.copies { "yes" } else { "no" },
            ratios.join(" ")
        );
    }
    out.push_str(&learning_note());
    out
}

/// How `Mode::Auto` uses these thresholds: the starting point of a learner on each sender.
pub fn learning_note() -> String {
    let l = zcnet::auto::LEARNING;
    format!(
        "Mode::Auto starts each size class from these thresholds and learns on its own socket:\n\
         rounds of about {} MiB one way; {} pairs (a round the other way against the \
         rounds around it)\nwhen a class first sends, then the median of the last {} \
         decides ({:.0} % hysteresis), exploring for about {:.1} % of the CPU.\n\
         auto_choice() and counters().auto say what it learned; `zcnet bench udp-tx` or \
         `uring-tx` with --mode auto show it.\n",
        l.round_bytes >> 20,
        l.first_pairs,
        l.pairs_kept,
        l.hysteresis * 100.0,
        l.explore_cost * 100.0
    )
}

/// Runs `zcnet tune`.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    // Where Mode::Auto will read it: a profile written elsewhere while $ZCNET_PROFILE names
    // another file would change nothing, with no word (issue 48 item 14).
    let from_env = std::env::var_os("ZCNET_PROFILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    if let (Some(asked), Some(env)) = (&opt.profile, &from_env)
        && asked != env
        && !opt.show
    {
        eprintln!(
            "zcnet tune: note: $ZCNET_PROFILE names {}, which Mode::Auto reads instead of {}",
            env.display(),
            asked.display()
        );
    }
    // Shown before a path is needed: without HOME or XDG_CONFIG_HOME there is no default
    // file, and the profile in use is the built-in one, as `bench` says (issue 62 item 10).
    if opt.show {
        let profile = match &opt.profile {
            Some(p) => Profile::load(p)?,
            None => (*zcnet::auto::active()).clone(),
        };
        return print(&profile, opt.json, None);
    }
    let path = match opt
        .profile
        .clone()
        .or(from_env)
        .or_else(Profile::default_path)
    {
        Some(p) => p,
        None => anyhow::bail!("no HOME or XDG_CONFIG_HOME to keep the profile in: give --profile"),
    };
    // A profile that cannot be written fails now, not after a minute of measuring. A device or
    // FIFO stays open (a FIFO is opened once); a temporary does not wait through the runs, as
    // nothing would remove it if a signal ended them (tune, starting programs, does not take
    // the signals over: they would inherit them blocked).
    let out = Some(open_profile(&path)?).filter(|o| !o.holds_temporary());
    netlab::check_privileges().context("tune runs its labs in private network namespaces")?;
    let paths: Vec<SendPath> = if opt.paths.is_empty() {
        TARGETS.iter().map(|t| t.path).collect()
    } else {
        opt.paths.iter().map(|&p| p.into()).collect()
    };
    let targets: Vec<Target> = TARGETS
        .iter()
        .copied()
        .filter(|t| paths.contains(&t.path))
        .collect();
    let uring = zcnet::uring::support();
    let zc_ok = zcnet::msg_zerocopy::support();
    let sweeps = SIZES.len() + REFINE_STEPS;
    let steps = (targets.len() * sweeps * opt.runs * 2) as u64;
    let progress = Progress::new(
        "tune",
        steps,
        Duration::from_secs_f64(opt.seconds * steps as f64),
    );
    let _pinned = measure::Pinned::to(1);
    let mut profile = Profile::builtin();
    profile.kernel = zcnet::probe::features().host.kernel.clone();
    profile.cpu = cpu_model();
    profile.date = crate::date::utc_now();
    for t in targets {
        use zcnet::support::Status;
        let missing = match t.path {
            SendPath::MsgZerocopyUdp => {
                (zc_ok.udp.status != Status::Available).then(|| zc_ok.udp.reason.clone())
            }
            SendPath::MsgZerocopyTcp => {
                (zc_ok.tcp.status != Status::Available).then(|| zc_ok.tcp.reason.clone())
            }
            SendPath::UringZc => {
                (uring.send_zc.status != Status::Available).then(|| uring.send_zc.reason.clone())
            }
            SendPath::UringZcFixed => {
                let pool_bytes = (URING_POOL_MIB as u64) << 20;
                if uring.send_zc.status != Status::Available {
                    Some(uring.send_zc.reason.clone())
                } else {
                    zcnet::uring::memlock_check(pool_bytes)
                        .err()
                        .map(|e| crate::error_line::chain(&e))
                }
            }
            SendPath::Sendfile => {
                let s = zcnet::file::support();
                (s.sendfile.status != Status::Available).then(|| s.sendfile.reason.clone())
            }
        };
        if let Some(why) = missing {
            eprintln!(
                "zcnet tune: {} in the {} lab not measured (built-in entry kept): {why}",
                t.path.name(),
                t.lab
            );
            continue;
        }
        let proto = match t.path {
            SendPath::MsgZerocopyUdp => Proto::Udp,
            SendPath::MsgZerocopyTcp | SendPath::Sendfile => Proto::Tcp,
            _ => uring_tx::proto_of(t.lab),
        };
        let bench = Bench {
            target: t,
            lab: Lab::build(t.lab, proto)?,
            proto,
            runs: opt.runs,
            seconds: opt.seconds,
        };
        let entry = bench.entry(&progress)?;
        if let Some(e) = profile
            .entries
            .iter_mut()
            .find(|e| e.path == entry.path && e.route == entry.route)
        {
            *e = entry;
        }
    }
    drop(progress);
    let text = profile.to_toml();
    // Replaced whole: a bench or a Mode::Auto sender reading it meanwhile gets the old profile
    // or the new one, never a part.
    let out = match out {
        Some(o) => o,
        None => open_profile(&path)?,
    };
    out.write_whole(text.as_bytes())
        .with_context(|| format!("cannot write the profile {}", path.display()))?;
    profile.source = Some(path.clone());
    print(&profile, opt.json, Some(&path))
}

fn print(profile: &Profile, json: bool, written: Option<&std::path::Path>) -> anyhow::Result<()> {
    if json {
        let mut v = serde_json::to_value(profile)?;
        v["origin"] = json!(profile.origin());
        v["learning"] = json!(zcnet::auto::LEARNING);
        if let Some(p) = written {
            v["written"] = json!(p.display().to_string());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(profile));
        if let Some(p) = written {
            eprintln!("zcnet tune: profile written to {}", p.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_of_sweeps() {
        let s = |v: &[(usize, f64)]| crossing(v);
        assert_eq!(
            s(&[(600, 1.2), (8000, 0.9), (64000, 0.5)]).0,
            Threshold::From(8000)
        );
        assert_eq!(
            s(&[(600, 1.2), (8000, 0.9), (64000, 0.5)]).1,
            Some([600, 8000])
        );
        assert_eq!(s(&[(600, 0.9), (8000, 0.8)]).0, Threshold::Always);
        assert_eq!(s(&[(600, 1.1), (8000, 1.3)]).0, Threshold::Never);
        // A win followed by a loss is not a crossing: the last loss decides.
        assert_eq!(
            s(&[(600, 0.9), (8000, 1.1), (64000, 0.7)]).0,
            Threshold::From(64000)
        );
        // A ratio that is not a number (no runs) never counts as a win.
        assert_eq!(s(&[(600, f64::NAN)]).0, Threshold::Never);
        assert_eq!(s(&[]).0, Threshold::Never);
    }

    #[test]
    fn midpoints_stay_inside() {
        assert_eq!(midpoint(4000, 16000), 8000);
        let m = midpoint(600, 1500);
        assert!(m > 600 && m < 1500, "{m}");
        assert_eq!(midpoint(1000, 1002), 1001);
    }
}
