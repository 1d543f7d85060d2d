//! Zero copy only where it pays: the profile behind every sending mechanism's `Mode::Auto`.
//!
//! Zero copy trades a copy for page pinning and a completion; below some message size the trade
//! loses, and on some routes the kernel copies anyway (a socket on this host: loopback, or a
//! veth into another namespace; `Documentation/networking/msg_zerocopy.rst`, "Loopback"). Where
//! the break-even lies depends on the path, the route and the machine, so it is measured:
//! `zcnet tune` alternates copy and zero-copy runs over a size sweep per path and route kind
//! and writes a [`Profile`]. `Mode::Auto` of [`msg_zerocopy`](crate::msg_zerocopy),
//! [`uring`](crate::uring) and [`file`](crate::file) then sends a message by zero copy when it
//! is at least the profile's threshold for the socket's [`Route`], by copy otherwise; after a
//! completion flagged "copied" it copies for a while ([`BACKOFF_SENDS`]) and then tries again.
//!
//! The profile in use ([`active`]) is the one installed by [`set_profile`], else the file named
//! by `$ZCNET_PROFILE`, else `$XDG_CONFIG_HOME/zcnet/profile.toml` (`~/.config/...`) when it
//! exists, else [`Profile::builtin`]: the kernel documents' figures (MSG_ZEROCOPY "is generally
//! only effective at writes over around 10 KB"; no zero copy to local sockets, which copy).
//!
//! # Example
//! ```no_run
//! use std::net::UdpSocket;
//! use zcnet::msg_zerocopy::{Config, Mode, ZerocopySender};
//!
//! // The profile `zcnet tune --profile profile.toml` wrote (else ~/.config/zcnet/profile.toml,
//! // else the built-in thresholds).
//! zcnet::auto::set_profile(zcnet::auto::Profile::load("profile.toml".as_ref())?);
//! let sock = UdpSocket::bind("127.0.0.1:0")?;
//! sock.connect("127.0.0.1:9")?;
//! let config = Config { mode: Mode::Auto, ..Config::default() };
//! let mut tx = ZerocopySender::<_, Vec<u8>>::new(sock, config)?;
//! // "auto: msg_zerocopy_udp on a local route: zero copy never (profile profile.toml, ...)"
//! println!("{}", tx.auto_choice().expect("auto mode"));
//! tx.send(vec![0u8; 64000]).map_err(|e| e.error)?;
//! tx.drain(std::time::Duration::from_secs(1))?;
//! let c = tx.counters().auto;
//! println!("{} sends by zero copy, {} by copy below the threshold", c.zero_copy_calls, c.small_calls);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::sys;

/// Sends by copy after a completion flagged "copied", before zero copy is tried again.
pub const BACKOFF_SENDS: u64 = 1024;

/// A sending path whose break-even a profile holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendPath {
    /// `MSG_ZEROCOPY` on UDP.
    MsgZerocopyUdp,
    /// `MSG_ZEROCOPY` on TCP.
    MsgZerocopyTcp,
    /// io_uring `SEND_ZC` from ordinary memory.
    UringZc,
    /// io_uring `SEND_ZC` from registered buffers.
    UringZcFixed,
    /// `sendfile(2)` against `read(2)` + `send(2)`.
    Sendfile,
}

impl SendPath {
    /// Every path, in report order.
    pub const ALL: [SendPath; 5] = [
        SendPath::MsgZerocopyUdp,
        SendPath::MsgZerocopyTcp,
        SendPath::UringZc,
        SendPath::UringZcFixed,
        SendPath::Sendfile,
    ];

    /// The name in profiles and reports (`msg_zerocopy_udp`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SendPath::MsgZerocopyUdp => "msg_zerocopy_udp",
            SendPath::MsgZerocopyTcp => "msg_zerocopy_tcp",
            SendPath::UringZc => "uring_zc",
            SendPath::UringZcFixed => "uring_zc_fixed",
            SendPath::Sendfile => "sendfile",
        }
    }
}

/// Where a socket's data goes, as far as zero copy cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// To a socket of this network namespace (a loopback or a local address): the receiver's
    /// queue holds the sender's pages, which the kernel copies to release them.
    Local,
    /// Out through a device. A device that hands the packet to a socket on this host after all
    /// (veth) shows itself through completions flagged "copied".
    Device,
}

impl Route {
    /// `local`, `device`.
    pub fn name(self) -> &'static str {
        match self {
            Route::Local => "local",
            Route::Device => "device",
        }
    }

    /// The route to `addr`: local when it is a loopback address or one this namespace holds
    /// (a UDP socket can bind it), else through a device.
    pub fn to(addr: IpAddr) -> Route {
        if addr.is_loopback() || UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok() {
            Route::Local
        } else {
            Route::Device
        }
    }

    /// The route of a connected socket; `None` when it is not connected.
    pub fn of(socket: &impl AsFd) -> Option<Route> {
        sys::peer_addr(socket.as_fd())
            .ok()
            .flatten()
            .map(|a| Route::to(a.ip()))
    }
}

/// From which message size zero copy costs less CPU per byte than copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// Zero copy never paid in the sweep: always copy.
    Never,
    /// Zero copy paid at every size measured.
    Always,
    /// Zero copy from this many bytes on.
    From(usize),
}

impl Threshold {
    /// Whether a message of `len` bytes goes by zero copy.
    pub fn zero_copy(self, len: usize) -> bool {
        match self {
            Threshold::Never => false,
            Threshold::Always => true,
            Threshold::From(n) => len >= n,
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Never => f.write_str("never"),
            Threshold::Always => f.write_str("always"),
            Threshold::From(n) => write!(f, "from {n} B"),
        }
    }
}

impl Serialize for Threshold {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Threshold::Never => s.serialize_str("never"),
            Threshold::Always => s.serialize_str("always"),
            Threshold::From(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Bytes(u64),
            Word(String),
        }
        match Repr::deserialize(d)? {
            Repr::Bytes(n) => usize::try_from(n)
                .map(Threshold::From)
                .map_err(serde::de::Error::custom),
            Repr::Word(w) if w == "never" => Ok(Threshold::Never),
            Repr::Word(w) if w == "always" => Ok(Threshold::Always),
            Repr::Word(w) => Err(serde::de::Error::custom(format!(
                "threshold {w:?}: give a size in bytes, \"never\" or \"always\""
            ))),
        }
    }
}

/// One measured break-even.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The path.
    pub path: SendPath,
    /// The route kind.
    pub route: Route,
    /// The lab it was measured in (`loopback`, `veth`, `sink`), or `builtin`.
    pub lab: String,
    /// The break-even.
    pub threshold: Threshold,
    /// The crossing lies between these sizes (the last size where copy won, the first where
    /// zero copy won), bytes; absent for "never", "always" and built-in entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between: Option<[usize; 2]>,
    /// Zero-copy CPU per byte over copy's at each size measured: `[size, ratio]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratios: Vec<(usize, f64)>,
    /// Whether completions said the kernel copied anyway on this route.
    #[serde(default)]
    pub copies: bool,
}

/// Break-evens for one machine, as `zcnet tune` writes them (TOML).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Kernel release it was measured on.
    pub kernel: String,
    /// CPU model.
    pub cpu: String,
    /// When (UTC, ISO 8601).
    pub date: String,
    /// The entries, one per path and route.
    #[serde(rename = "threshold")]
    pub entries: Vec<Entry>,
    /// Where it was read from (not stored).
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// Why a profile file was passed over for this one, if one was (not stored).
    #[serde(skip)]
    pub passed_over: Option<String>,
}

/// A profile that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file cannot be read.
    #[error("cannot read the profile {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds more than a profile ever does ([`MAX_PROFILE`]): a device such as
    /// `/dev/zero`, or another file named by mistake. Nothing past the cap is read.
    #[error("the profile {path} is larger than {} MiB, the cap for a profile", MAX_PROFILE >> 20)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a profile.
    #[error("the profile {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line.
        message: String,
    },
}

/// The most bytes a profile file may hold: `zcnet tune` writes a few KiB (an entry per path and
/// route), so 1 MiB leaves room for any hand edit, and `--profile /dev/zero` is refused at once
/// (it was read whole, gigabytes, before).
pub const MAX_PROFILE: u64 = 1 << 20;

impl Profile {
    /// The kernel documents' figures, used when no profile was measured: MSG_ZEROCOPY and
    /// `SEND_ZC` from 10 KB on routes through a device, never to local sockets (the kernel
    /// copies there); `sendfile` always (no user copy and one call instead of two).
    pub fn builtin() -> Profile {
        let mut entries = Vec::new();
        for path in SendPath::ALL {
            for route in [Route::Local, Route::Device] {
                let threshold = match (path, route) {
                    (SendPath::Sendfile, _) => Threshold::Always,
                    (_, Route::Local) => Threshold::Never,
                    (_, Route::Device) => Threshold::From(10_000),
                };
                entries.push(Entry {
                    path,
                    route,
                    lab: "builtin".into(),
                    threshold,
                    between: None,
                    ratios: Vec::new(),
                    copies: route == Route::Local && path != SendPath::Sendfile,
                });
            }
        }
        Profile {
            kernel: String::new(),
            cpu: String::new(),
            date: String::new(),
            entries,
            source: None,
            passed_over: None,
        }
    }

    /// Reads a profile written by `zcnet tune`, at most [`MAX_PROFILE`] bytes of it.
    ///
    /// # Errors
    /// The file cannot be read, is larger than [`MAX_PROFILE`], or is not a profile.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        use std::io::Read;
        let read = |source| ProfileError::Read {
            path: path.to_owned(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_PROFILE + 1).read_to_end(&mut bytes))
            .map_err(read)?;
        if bytes.len() as u64 > MAX_PROFILE {
            return Err(ProfileError::TooLarge {
                path: path.to_owned(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| ProfileError::Parse {
            path: path.to_owned(),
            message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        })?;
        let mut p: Profile = toml::from_str(&text).map_err(|e| ProfileError::Parse {
            path: path.to_owned(),
            message: e.message().to_owned()
                + &e.span()
                    .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
                    .unwrap_or_default(),
        })?;
        p.source = Some(path.to_owned());
        Ok(p)
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).unwrap_or_default();
        format!("# zcnet tune profile: where zero copy starts to pay, per path and route\n{body}")
    }

    /// `$XDG_CONFIG_HOME/zcnet/profile.toml`, or `$HOME/.config/zcnet/profile.toml`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".config"))
            })?;
        Some(base.join("zcnet").join("profile.toml"))
    }

    /// The entry for `path` on `route`: the profile's, else the built-in one.
    pub fn entry(&self, path: SendPath, route: Route) -> Entry {
        self.entries
            .iter()
            .find(|e| e.path == path && e.route == route)
            .cloned()
            .unwrap_or_else(|| {
                Profile::builtin()
                    .entries
                    .into_iter()
                    .find(|e| e.path == path && e.route == route)
                    .expect("the built-in profile has every path and route")
            })
    }

    /// Where this profile came from, for reasons and reports.
    pub fn origin(&self) -> String {
        match &self.source {
            Some(p) if self.date.is_empty() => format!("profile {}", p.display()),
            Some(p) => format!("profile {}, tuned {}", p.display(), self.date),
            None => match &self.passed_over {
                Some(why) => format!("built-in defaults ({why})"),
                None => "built-in defaults (no profile: run `zcnet tune`)".to_owned(),
            },
        }
    }
}

static INSTALLED: RwLock<Option<Arc<Profile>>> = RwLock::new(None);

/// Makes `profile` the one `Mode::Auto` senders created from now on use.
pub fn set_profile(profile: Profile) {
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(profile));
}

/// The profile in use (see the module docs for the order). A profile file that cannot be read
/// is skipped for the built-in one; [`Profile::origin`] then says which was used.
pub fn active() -> Arc<Profile> {
    if let Some(p) = INSTALLED.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return p.clone();
    }
    let from_env = std::env::var_os("ZCNET_PROFILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let file = from_env.or_else(|| Profile::default_path().filter(|p| p.exists()));
    let profile = match file.map(|f| Profile::load(&f)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            let mut p = Profile::builtin();
            let mut why = e.to_string();
            if let Some(cause) = std::error::Error::source(&e) {
                why = format!("{why}: {cause}");
            }
            p.passed_over = Some(why);
            p
        }
        None => Profile::builtin(),
    };
    let profile = Arc::new(profile);
    *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(profile.clone());
    profile
}

/// What a `Mode::Auto` sender decided at its start: the threshold for its path and route, and
/// where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The path.
    pub path: SendPath,
    /// The socket's route (`Device` when it is not connected).
    pub route: Route,
    /// The threshold used.
    pub threshold: Threshold,
    /// The profile it came from ([`Profile::origin`]).
    pub origin: String,
}

impl Choice {
    /// The choice for `path` on `socket` from the [`active`] profile.
    pub fn for_socket(path: SendPath, socket: &impl AsFd) -> Choice {
        let route = Route::of(socket).unwrap_or(Route::Device);
        let profile = active();
        Choice {
            path,
            route,
            threshold: profile.entry(path, route).threshold,
            origin: profile.origin(),
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "auto: {} on a {} route: zero copy {} ({})",
            self.path.name(),
            self.route.name(),
            self.threshold,
            self.origin
        )
    }
}

/// Why an auto sender sent a message by copy, counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AutoCounters {
    /// Sends by zero copy.
    pub zero_copy_calls: u64,
    /// Their bytes.
    pub zero_copy_bytes: u64,
    /// Sends by copy because the message was below the threshold.
    pub small_calls: u64,
    /// Their bytes.
    pub small_bytes: u64,
    /// Sends by copy because completions had said the kernel copied (backing off).
    pub backoff_calls: u64,
    /// Their bytes.
    pub backoff_bytes: u64,
}

/// The per-send decision of an auto sender: the threshold, and a back-off after copied
/// completions.
#[derive(Clone, Debug)]
pub(crate) struct Decider {
    pub(crate) choice: Choice,
    copy_for: u64,
    pub(crate) counters: AutoCounters,
}

impl Decider {
    pub(crate) fn new(choice: Choice) -> Decider {
        Decider {
            choice,
            copy_for: 0,
            counters: AutoCounters::default(),
        }
    }

    /// Whether a message of `len` bytes goes by zero copy; counts the decision.
    pub(crate) fn zero_copy(&mut self, len: usize) -> bool {
        let c = &mut self.counters;
        let len64 = len as u64;
        if !self.choice.threshold.zero_copy(len) {
            c.small_calls += 1;
            c.small_bytes += len64;
            false
        } else if self.copy_for > 0 {
            self.copy_for -= 1;
            c.backoff_calls += 1;
            c.backoff_bytes += len64;
            false
        } else {
            c.zero_copy_calls += 1;
            c.zero_copy_bytes += len64;
            true
        }
    }

    /// A completion said the kernel copied: copy the next [`BACKOFF_SENDS`] messages.
    pub(crate) fn copied(&mut self) {
        self.copy_for = BACKOFF_SENDS;
    }
}

/// Today's date and time in UTC, ISO 8601 (for profiles), from the system clock.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_round_trips_through_toml() {
        let mut p = Profile::builtin();
        p.kernel = "6.1.0".into();
        p.date = "2026-11-23T09:00:00Z".into();
        p.entries[0].threshold = Threshold::From(8000);
        p.entries[0].between = Some([4000, 8000]);
        p.entries[0].ratios = vec![(4000, 1.1), (8000, 0.8)];
        let text = p.to_toml();
        let back: Profile = toml::from_str(&text).unwrap();
        assert_eq!(back, p);
        assert!(text.contains("threshold = 8000"), "{text}");
        assert!(text.contains("threshold = \"never\""), "{text}");
    }

    #[test]
    fn a_bad_threshold_is_refused_with_its_line() {
        let dir = std::env::temp_dir().join(format!("zcnet-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.toml");
        std::fs::write(
            &f,
            "kernel = \"x\"\ncpu = \"y\"\ndate = \"z\"\n\n[[threshold]]\npath = \"uring_zc\"\n\
             route = \"device\"\nlab = \"sink\"\nthreshold = \"sometimes\"\n",
        )
        .unwrap();
        let e = Profile::load(&f).unwrap_err().to_string();
        assert!(e.contains("sometimes"), "{e}");
        assert!(e.contains("line"), "{e}");
        std::fs::write(&f, b"kernel = \"\xff\"\n").unwrap();
        let e = Profile::load(&f).unwrap_err().to_string();
        assert!(e.ends_with("is not valid: not UTF-8 text (byte 10)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_larger_than_a_profile_is_refused_at_the_cap() {
        let dir = std::env::temp_dir().join(format!("zcnet-profile-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A valid profile with a comment that takes it one byte past the cap.
        let mut text = Profile::builtin().to_toml();
        text.push('#');
        text.push_str(&"x".repeat(MAX_PROFILE as usize - text.len()));
        let f = dir.join("p.toml");
        std::fs::write(&f, &text).unwrap();
        assert!(Profile::load(&f).is_ok(), "exactly the cap is a profile");
        text.push('x');
        std::fs::write(&f, &text).unwrap();
        let e = Profile::load(&f).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "the profile {} is larger than 1 MiB, the cap for a profile",
                f.display()
            )
        );
        for endless in ["/dev/zero", "/dev/urandom"] {
            let e = Profile::load(Path::new(endless)).unwrap_err();
            assert!(matches!(e, ProfileError::TooLarge { .. }), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_decider_counts_each_reason() {
        let mut d = Decider::new(Choice {
            path: SendPath::UringZc,
            route: Route::Device,
            threshold: Threshold::From(1000),
            origin: String::new(),
        });
        assert!(!d.zero_copy(999));
        assert!(d.zero_copy(1000));
        d.copied();
        assert!(!d.zero_copy(5000));
        let c = d.counters;
        assert_eq!(
            (c.small_calls, c.zero_copy_calls, c.backoff_calls),
            (1, 1, 1)
        );
        assert_eq!(
            (c.small_bytes, c.zero_copy_bytes, c.backoff_bytes),
            (999, 1000, 5000)
        );
        for _ in 1..BACKOFF_SENDS {
            assert!(!d.zero_copy(5000));
        }
        assert!(
            d.zero_copy(5000),
            "zero copy is tried again after the back-off"
        );
    }

    #[test]
    fn routes_of_loopback_and_local_addresses() {
        assert_eq!(Route::to("127.0.0.1".parse().unwrap()), Route::Local);
        assert_eq!(Route::to("::1".parse().unwrap()), Route::Local);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(Route::of(&s), None);
        s.connect("127.0.0.1:9").unwrap();
        assert_eq!(Route::of(&s), Some(Route::Local));
    }

    #[test]
    fn utc_dates_are_civil() {
        let now = utc_now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20"), "{now}");
    }
}
