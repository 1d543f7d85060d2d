//! Reading a profile: the TOML file `zcnet tune` writes, found through the environment.

use std::path::{Path, PathBuf};

use super::Profile;

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
        // Opened without blocking: a FIFO without a writer would hold `open` itself, with no
        // word (issue 48 item 12); then read as any file (a FIFO's writer, if it has one, is
        // waited for, and without one it reads as empty).
        let open = || {
            use std::os::unix::fs::OpenOptionsExt as _;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            crate::sys::net::set_blocking(std::os::fd::AsFd::as_fd(&f))?;
            Ok(f)
        };
        open()
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

    /// The profile file the environment names (`$ZCNET_PROFILE`, else the [default
    /// path](Profile::default_path) when it exists), else the built-in one; a file that cannot
    /// be read is passed over for the built-in one, saying why.
    pub(super) fn from_environment() -> Profile {
        let from_env = std::env::var_os("ZCNET_PROFILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let file = from_env.or_else(|| Profile::default_path().filter(|p| p.exists()));
        match file.map(|f| Profile::load(&f)) {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auto::Threshold;

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
}
