//! Tests that cannot run here say so, visibly and countably.
//!
//! libtest has no run-time skip, so a test that lacks root or a kernel feature calls [`skip`]
//! and returns. [`skip`] prints `SKIPPED <test>: <reason>` on stderr and, when the environment
//! variable `ZCNET_SKIP_LOG` names a file, appends the same line there; `.ci/run` counts those
//! lines and prints them with the totals.

use std::io::Write;

/// Records that the current test was skipped for `reason`. The caller returns right after.
pub fn skip(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("<unnamed test>");
    // One line a skip, whatever the reason holds (a library's error can span lines): CI counts
    // and groups the lines.
    let reason = reason.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let line = format!("SKIPPED {test}: {}", reason.trim());
    // Straight to the stderr handle, not `eprintln!`: libtest captures the macros' output of a
    // passing test, and a skip must show in a plain `cargo test` run too.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    if let Some(path) = std::env::var_os("ZCNET_SKIP_LOG") {
        if let Err(e) = append_line(std::path::Path::new(&path), &line) {
            eprintln!(
                "netlab: cannot append to ZCNET_SKIP_LOG {}: {e}",
                path.to_string_lossy()
            );
        }
    }
}

/// Appends `line` and its newline to `path` in one `write(2)` (`O_APPEND`): tests skip from many
/// threads and processes at once, and `writeln!` on a `File` writes the line and its newline
/// apart, so two skips could land as one line (".ci/run" once counted 14 skips for 15).
fn append_line(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// Returns from the calling test, recorded as skipped, when this process cannot build labs.
#[macro_export]
macro_rules! require_lab {
    () => {
        if let Err(e) = $crate::check_privileges() {
            $crate::skip::skip(&e.to_string());
            return;
        }
    };
}

/// Returns from the calling test, recorded as skipped, when `program` is not on the PATH.
#[macro_export]
macro_rules! require_program {
    ($program:expr) => {
        if !$crate::skip::on_path($program) {
            $crate::skip::skip(&format!("{} is not installed", $program));
            return;
        }
    };
}

/// Whether `program` is an executable file on the `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .any(|dir| std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file()))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_from_many_threads_stay_one_line_each() {
        let path = std::env::temp_dir().join(format!("netlab-skip-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        super::append_line(&path, &format!("SKIPPED t{t}-{i}: why")).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(text.lines().count(), 8 * 200);
        assert!(
            text.lines()
                .all(|l| l.starts_with("SKIPPED t") && l.ends_with(": why"))
        );
    }
}
