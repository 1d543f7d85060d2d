//! Files a user names, read up to a cap: a device or a file of unbounded size (`/dev/zero`, a
//! 200 MB field in a report) is refused at the cap, with one line naming it, rather than read
//! into memory whole.

use std::io::Read;
use std::path::Path;

use anyhow::bail;

/// Reads `path` as UTF-8 text of at most `cap` bytes; `what` names the kind of file in the
/// error ("a token file").
///
/// # Errors
/// The file cannot be read, holds more than `cap` bytes ("larger than 4 KiB, the cap for a
/// token file"), or is not UTF-8. The caller adds the path.
pub fn read_to_string(path: &Path, cap: u64, what: &str) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        bail!("larger than {}, the cap for {what}", size(cap));
    }
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// A cap as people write it: `4 KiB`, `64 MiB`, else bytes.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_to_its_cap_and_no_further() {
        let dir = std::env::temp_dir().join(format!("zcnet-capped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, "abcd").unwrap();
        assert_eq!(read_to_string(&f, 4, "x").unwrap(), "abcd");
        let e = read_to_string(&f, 3, "a thing").unwrap_err().to_string();
        assert_eq!(e, "larger than 3 bytes, the cap for a thing");
        // A cap that falls inside a character is still "larger", not "not UTF-8".
        std::fs::write(&f, "aé").unwrap();
        let e = read_to_string(&f, 2, "x").unwrap_err().to_string();
        assert!(e.starts_with("larger than"), "{e}");
        std::fs::write(&f, b"a\xffb").unwrap();
        let e = read_to_string(&f, 16, "x").unwrap_err().to_string();
        assert_eq!(e, "not UTF-8 text (byte 1)");
        let e = read_to_string(Path::new("/dev/zero"), 64 << 20, "y").unwrap_err();
        assert_eq!(e.to_string(), "larger than 64 MiB, the cap for y");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(read_to_string(&f, 1, "x").is_err());
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
