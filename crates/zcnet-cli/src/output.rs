//! Output files: `recv -o`, `capture -w`, `report -o`, `bench --report` and the profile of
//! `tune`, written as users expect of `-o` in curl, tcpdump or dd (issue 35 item 1), and left
//! as they were by a command that fails before its work starts (issue 15 item 5).
//!
//! [`Output::open`] runs before the work (before listening, before a ring opens, before a bench
//! measures), so that a path that cannot be written fails at once. It opens the path as given,
//! following symlinks:
//! - an existing file is opened without truncating it, and [`Output::begin`] truncates it once
//!   the work has begun. It keeps its inode, so its mode, owner, hard links and the symlinks to
//!   it. A file the user may not write is refused (as curl, cp and a shell's `>` refuse it),
//!   never replaced by one that can be written.
//! - a device or a FIFO is written as it is; opening a FIFO waits for its reader, as a shell's
//!   `>` does.
//! - where nothing is (a missing file, or the missing target of a symlink), the data goes to a
//!   temporary beside it, which `begin` renames there, unless something took the name meanwhile
//!   (that is then opened as above). A failure before the work leaves nothing.
//!
//! [`Output::replace`] is the atomic replace, for a file other processes read whole (the profile
//! of `zcnet tune`): [`Output::commit`] puts a complete file of the same mode and owner in place
//! of an existing one (of a symlink's target, where the path is a symlink); a device or FIFO is
//! written in place, and so is a file with other hard links (a replacement would split them) or
//! whose owner the replacement could not keep.
//!
//! A temporary goes when its `Output` drops unfinished, and when SIGINT, SIGTERM or SIGHUP end
//! a command that watches them ([`crate::interrupt`]); only SIGKILL can leave one behind.
//! Commands that run for minutes and start other programs (`bench`, `tune`) do not watch them
//! and keep no temporary while they run ([`Output::holds_temporary`]): they open the path to
//! fail early, and again to write it at the end.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

/// Temporaries of this process that are neither renamed nor removed yet.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn temporaries() -> MutexGuard<'static, Vec<PathBuf>> {
    TEMPORARIES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes every temporary not yet put in place (the process is ending by a signal).
pub(crate) fn remove_temporaries() {
    for tmp in temporaries().drain(..) {
        let _ = std::fs::remove_file(tmp);
    }
}

/// A file being written; see the module docs.
#[derive(Debug)]
pub struct Output {
    file: File,
    state: State,
}

#[derive(Debug)]
enum State {
    /// The path itself, opened as it is; `truncate` for a regular file, at [`Output::begin`].
    InPlace { truncate: bool },
    /// A temporary beside `dest`, renamed there by [`Output::begin`], or by [`Output::commit`]
    /// when `at_commit`.
    Temporary {
        tmp: PathBuf,
        dest: PathBuf,
        at_commit: bool,
    },
    /// In place: nothing left to do.
    Done,
}

impl Output {
    /// Opens `path` for a command's output, before its work; see the module docs.
    ///
    /// # Errors
    /// An empty path, a directory, a file or directory the user may not write, a missing
    /// directory.
    pub fn open(path: &Path) -> io::Result<Output> {
        check_name(path)?;
        match open_existing(path) {
            Ok(file) => {
                let truncate = file.metadata()?.is_file();
                Ok(Output {
                    file,
                    state: State::InPlace { truncate },
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Output::temporary(&destination(path)?, None, false)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens `path` to be replaced whole by [`Output::commit`]; see the module docs.
    ///
    /// # Errors
    /// As [`Output::open`].
    pub fn replace(path: &Path) -> io::Result<Output> {
        check_name(path)?;
        let dest = destination(path)?;
        match std::fs::metadata(&dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Output::temporary(&dest, None, true),
            Err(e) => Err(e),
            Ok(m) if m.is_file() && m.nlink() == 1 => {
                // Refused where the user may not write the file itself, as by `open`.
                drop(open_existing(&dest)?);
                Output::temporary(&dest, Some(&m), true)
            }
            Ok(m) => Ok(Output {
                file: open_existing(&dest)?,
                state: State::InPlace {
                    truncate: m.is_file(),
                },
            }),
        }
    }

    /// A temporary beside `dest`, of the mode and owner of `like` where it replaces that file.
    fn temporary(dest: &Path, like: Option<&Metadata>, at_commit: bool) -> io::Result<Output> {
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = dest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        // A name of up to 255 bytes is fine for the output, not with ".zcnet-PID" around it.
        let mut tmp_name = OsString::from(".");
        tmp_name.push(OsStr::from_bytes(&name.as_bytes()[..name.len().min(200)]));
        tmp_name.push(format!(".zcnet-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        // Registered as it is made: a signal never finds it made and unlisted.
        let mut listed = temporaries();
        let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        listed.push(tmp.clone());
        drop(listed);
        if let Some(m) = like {
            // Owner first: chown(2) clears the set-id bits that the mode then puts back.
            let kept = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()))
                .and_then(|()| file.set_permissions(Permissions::from_mode(m.mode() & 0o7777)));
            if kept.is_err() {
                // Not ours to give away: a replacement would change its owner.
                discard(&tmp);
                return Ok(Output {
                    file: open_existing(dest)?,
                    state: State::InPlace { truncate: true },
                });
            }
        }
        Ok(Output {
            file,
            state: State::Temporary {
                tmp,
                dest: dest.to_path_buf(),
                at_commit,
            },
        })
    }

    /// The work has begun: an existing file is truncated, a new one put in place. Writing
    /// starts after this.
    ///
    /// # Errors
    /// `ftruncate`'s or `rename`'s error.
    pub fn begin(&mut self) -> io::Result<()> {
        match &self.state {
            State::InPlace { truncate: true } => self.file.set_len(0)?,
            State::Temporary {
                tmp,
                dest,
                at_commit: false,
            } => {
                let listed = temporaries();
                match renameat2(AT_FDCWD, tmp, AT_FDCWD, dest, RenameFlags::RENAME_NOREPLACE) {
                    Ok(()) => {}
                    Err(Errno::EEXIST) => {
                        // Something took the name since `open`: written as any existing path.
                        let file = open_existing(dest)?;
                        if file.metadata()?.is_file() {
                            file.set_len(0)?;
                        }
                        self.file = file;
                        let _ = std::fs::remove_file(tmp);
                    }
                    // A filesystem without RENAME_NOREPLACE.
                    Err(Errno::EINVAL) => std::fs::rename(tmp, dest)?,
                    Err(e) => return Err(e.into()),
                }
                forget(listed, tmp);
            }
            State::InPlace { truncate: false } | State::Temporary { .. } | State::Done => {
                return Ok(());
            }
        }
        self.state = State::Done;
        Ok(())
    }

    /// The output is complete: an [`Output::replace`] replaces its target now (synced first,
    /// so that a crash leaves the old file or the new one). Nothing to do for [`Output::open`].
    ///
    /// # Errors
    /// `fsync`'s or `rename`'s error.
    pub fn commit(&mut self) -> io::Result<()> {
        if let State::Temporary {
            tmp,
            dest,
            at_commit: true,
        } = &self.state
        {
            self.file.sync_all()?;
            let listed = temporaries();
            std::fs::rename(tmp, dest)?;
            forget(listed, tmp);
            self.state = State::Done;
        }
        Ok(())
    }

    /// Whether the output is written under a temporary name until [`Output::begin`] or
    /// [`Output::commit`] puts it in place (a new file, or one [`Output::replace`] replaces).
    pub fn holds_temporary(&self) -> bool {
        matches!(self.state, State::Temporary { .. })
    }

    /// `bytes` as the whole output: [`Output::begin`], write, [`Output::commit`].
    ///
    /// # Errors
    /// As those, and the write's error.
    pub fn write_whole(mut self, bytes: &[u8]) -> io::Result<()> {
        self.begin()?;
        self.write_all(bytes)?;
        self.commit()
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let State::Temporary { tmp, .. } = &self.state {
            discard(tmp);
        }
    }
}

/// Removes a temporary and its listing.
fn discard(tmp: &Path) {
    let listed = temporaries();
    let _ = std::fs::remove_file(tmp);
    forget(listed, tmp);
}

fn forget(mut listed: MutexGuard<'_, Vec<PathBuf>>, tmp: &Path) {
    listed.retain(|p| p != tmp);
}

/// `path` as an error line names it: `''` when empty, which would read as nothing at all.
pub fn shown(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    if path.as_os_str().is_empty() {
        "''".into()
    } else {
        path.display().to_string()
    }
}

fn check_name(path: &Path) -> io::Result<()> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an empty file name",
        ));
    }
    Ok(())
}

/// `path` opened for writing as it is: no creation, no truncation, never our controlling tty.
fn open_existing(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::IsADirectory {
                io::Error::new(io::ErrorKind::IsADirectory, "it is a directory")
            } else {
                e
            }
        })
}

/// Where a write to `path` lands: `path`, or the end of the chain of symlinks it starts
/// (a relative target is relative to its link's directory), as open(2) follows them.
fn destination(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    // The kernel's limit on links followed in one lookup.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = p
                    .parent()
                    .map_or_else(|| target.clone(), |d| d.join(&target));
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("zcnet-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_existing_file_is_truncated_only_when_the_work_begins_and_keeps_its_inode() {
        let d = dir("existing");
        let target = d.join("data");
        std::fs::write(&target, b"precious").unwrap();
        std::fs::set_permissions(&target, Permissions::from_mode(0o640)).unwrap();
        let inode = std::fs::metadata(&target).unwrap().ino();
        drop(Output::open(&target).unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let mut o = Output::open(&target).unwrap();
        o.begin().unwrap();
        o.write_all(b"new").unwrap();
        drop(o);
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!((m.ino(), m.mode() & 0o7777), (inode, 0o640));
        assert_eq!(names(&d), ["data"], "nothing beside it");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_new_file_appears_only_when_the_work_begins() {
        let d = dir("new");
        let target = d.join("out");
        drop(Output::open(&target).unwrap());
        assert!(names(&d).is_empty(), "a dropped output leaves nothing");
        let mut o = Output::open(&target).unwrap();
        assert!(!target.exists());
        o.begin().unwrap();
        o.write_all(b"data").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&target).unwrap(), b"data");
        assert_eq!(names(&d), ["out"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_name_taken_meanwhile_is_written_not_replaced() {
        let d = dir("race");
        let target = d.join("out");
        let mut o = Output::open(&target).unwrap();
        std::fs::write(&target, b"someone else's longer bytes").unwrap();
        let inode = std::fs::metadata(&target).unwrap().ino();
        o.begin().unwrap();
        o.write_all(b"ours").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&target).unwrap(), b"ours");
        assert_eq!(std::fs::metadata(&target).unwrap().ino(), inode);
        assert_eq!(names(&d), ["out"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinks_are_followed_and_kept() {
        let d = dir("symlink");
        let (link, target) = (d.join("link"), d.join("target"));
        std::fs::write(&target, b"old").unwrap();
        symlink("target", &link).unwrap();
        Output::open(&link)
            .unwrap()
            .write_whole(b"via link")
            .unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"via link");
        // A dangling link: its target is made, the link stays, nothing else appears.
        std::fs::remove_file(&target).unwrap();
        Output::open(&link).unwrap().write_whole(b"made").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"made");
        assert_eq!(names(&d), ["link", "target"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_is_written_as_a_fifo() {
        let d = dir("fifo");
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        Output::open(&fifo)
            .unwrap()
            .write_whole(b"through")
            .unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(
            &std::fs::metadata(&fifo).unwrap().file_type()
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_replacement_keeps_mode_and_symlink_and_goes_in_whole() {
        let d = dir("replace");
        let (link, target) = (d.join("link"), d.join("target"));
        std::fs::write(&target, b"old profile").unwrap();
        std::fs::set_permissions(&target, Permissions::from_mode(0o600)).unwrap();
        symlink(&target, &link).unwrap();
        let mut o = Output::replace(&link).unwrap();
        o.begin().unwrap();
        o.write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old profile", "not yet");
        o.commit().unwrap();
        drop(o);
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o600);
        assert_eq!(names(&d), ["link", "target"]);
        // Dropped uncommitted: the old file stays, the temporary goes.
        let mut o = Output::replace(&link).unwrap();
        o.write_all(b"half").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(names(&d), ["link", "target"]);
        // With another hard link it is written in place: both names show the new bytes.
        std::fs::hard_link(&target, d.join("other")).unwrap();
        Output::replace(&link)
            .unwrap()
            .write_whole(b"both")
            .unwrap();
        assert_eq!(std::fs::read(d.join("other")).unwrap(), b"both");
        assert_eq!(names(&d), ["link", "other", "target"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn paths_that_cannot_be_written_fail_at_open() {
        let d = dir("bad");
        for bad in [PathBuf::new(), d.clone(), d.join("no/such/dir/f")] {
            assert!(Output::open(&bad).is_err(), "{bad:?}");
            assert!(Output::replace(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Output::open(Path::new("")).unwrap_err().to_string(),
            "an empty file name"
        );
        assert_eq!(
            Output::open(&d).unwrap_err().to_string(),
            "it is a directory"
        );
        // A loop of symlinks.
        symlink("b", d.join("a")).unwrap();
        symlink("a", d.join("b")).unwrap();
        assert!(Output::open(&d.join("a")).is_err());
        assert_eq!(names(&d), ["a", "b"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
