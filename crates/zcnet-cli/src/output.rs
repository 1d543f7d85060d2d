//! Output files that are never clobbered by a command that fails before doing its work.
//!
//! The data goes to a temporary file beside the target (so a bad path or directory fails at
//! once, before any peer connects or any ring opens); [`Output::commit`] renames it over the
//! target when the work has really started. Dropped uncommitted, the temporary is removed and
//! an existing target is left as it was (issue 15: `recv -o existing` truncated it when the
//! listen address was taken; `capture -w existing.pcap` left a 24-byte file).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file being written under a temporary name; see the module docs.
#[derive(Debug)]
pub struct Output {
    file: File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Output {
    /// Creates the temporary file beside `target`.
    ///
    /// # Errors
    /// The directory cannot be written (or does not exist).
    pub fn create(target: &Path) -> io::Result<Output> {
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if target.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        let name = target
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        let tmp = dir.join(format!(".{name}.zcnet-{}", std::process::id()));
        let file = File::options().write(true).create_new(true).open(&tmp)?;
        Ok(Output {
            file,
            tmp,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// Puts the file in place of the target (`rename(2)`: atomic, replacing it); writing goes
    /// on into the same file.
    ///
    /// # Errors
    /// `rename`'s error.
    pub fn commit(&mut self) -> io::Result<()> {
        if !self.committed {
            std::fs::rename(&self.tmp, &self.target)?;
            self.committed = true;
        }
        Ok(())
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
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncommitted_output_leaves_the_target_alone_and_committed_replaces_it() {
        let dir = std::env::temp_dir().join(format!("zcnet-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("data");
        std::fs::write(&target, b"precious").unwrap();
        {
            let mut o = Output::create(&target).unwrap();
            o.write_all(b"new").unwrap();
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "temporary removed"
        );
        let mut o = Output::create(&target).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        o.write_all(b" and more").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&target).unwrap(), b"new and more");
        assert!(Output::create(&dir.join("no/such/dir/f")).is_err());
        assert!(Output::create(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
