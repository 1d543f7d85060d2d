//! The profile model: break-evens per path and route, and the built-in ones.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Route;

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

/// The `kernel`, `cpu` and `date` of the built-in profile, which no machine measured.
pub const BUILTIN: &str = "built-in (not measured)";

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
        // Not measured anywhere: the fields say so rather than stay empty (issue 62 item 6).
        Profile {
            kernel: BUILTIN.into(),
            cpu: BUILTIN.into(),
            date: BUILTIN.into(),
            entries,
            source: None,
            passed_over: None,
        }
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
                None if cfg!(feature = "profile") => {
                    "built-in defaults (no profile: run `zcnet tune`)".to_owned()
                }
                None => "built-in defaults (no profile support compiled in: zcnet was built \
                         without its feature `profile`)"
                    .to_owned(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 62 item 6: the built-in profile's kernel, cpu and date were empty.
    #[test]
    fn the_builtin_profile_says_it_was_not_measured() {
        let p = Profile::builtin();
        for field in [&p.kernel, &p.cpu, &p.date] {
            assert_eq!(field, BUILTIN);
        }
    }

    #[test]
    fn the_builtin_origin_says_whether_a_profile_could_have_been_read() {
        let origin = Profile::builtin().origin();
        if cfg!(feature = "profile") {
            assert_eq!(origin, "built-in defaults (no profile: run `zcnet tune`)");
        } else {
            assert_eq!(
                origin,
                "built-in defaults (no profile support compiled in: zcnet was built without its \
                 feature `profile`)"
            );
        }
    }
}
