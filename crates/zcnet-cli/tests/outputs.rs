//! Every option that writes a file (`recv -o`, `capture -w`, `report -o`, `bench --report`,
//! `tune --profile`) pointed at what users point `-o` at (issue 35 item 1): a device node, a
//! FIFO with a reader, a symlink, an existing read-only file of another owner. Each must be
//! written as it is (a device stays a device, the symlink's target is written, mode and owner
//! are kept), as curl, tcpdump and dd write; a rename over the path made them regular files.

mod common;
use common::{TempDir, one_line_error, wait_bounded, zcnet};

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use netlab::pattern::random_bytes;

/// What `recv` is sent.
const DATA_LEN: usize = 1 << 20;

/// A test directory holding `out/`, where the output goes (nothing else may appear there), and
/// `scratch/`, for inputs and checks.
struct Case {
    _root: TempDir,
    dir: std::path::PathBuf,
    scratch: std::path::PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        let root = TempDir::new(&format!("outputs-{name}"));
        let (dir, scratch) = (root.join("out"), root.join("scratch"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&scratch).unwrap();
        Case {
            _root: root,
            dir,
            scratch,
        }
    }

    /// The names in `out/`, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// A command that writes a file, as a user runs it.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Recv,
    Capture,
    Report,
    Bench,
    Tune,
}

impl Writer {
    const ALL: [Writer; 5] = [
        Writer::Recv,
        Writer::Capture,
        Writer::Report,
        Writer::Bench,
        Writer::Tune,
    ];

    /// Whether it can run here; if not, the reason (recorded as a skip by the caller).
    fn cannot_run(self) -> Option<String> {
        match self {
            Writer::Recv | Writer::Report => None,
            Writer::Capture | Writer::Bench | Writer::Tune => {
                netlab::check_privileges().err().map(|e| e.to_string())
            }
        }
    }

    /// Runs the command writing `path` to its end; its output and, for `recv`, the data sent.
    /// Its input, if it needs one, is made in `scratch`.
    fn run(self, scratch: &Path, path: &Path) -> (Output, Vec<u8>) {
        let mut cmd = zcnet();
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        match self {
            Writer::Recv => return recv(path),
            Writer::Capture => {
                // A fresh namespace's lo, where nothing flows: the file is the pcap header.
                let lab = netlab::LoopbackLab::new(None).unwrap();
                let mut c = lab.ns.command(env!("CARGO_BIN_EXE_zcnet"));
                c.args(["capture", "-i", "lo", "--seconds", "0.3", "-w"])
                    .arg(path)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped());
                return (wait_bounded(c.spawn().unwrap(), 30), Vec::new());
            }
            Writer::Report => {
                let input = scratch.join("suite.json");
                std::fs::write(&input, include_str!("fixtures/suite.json")).unwrap();
                cmd.arg("report").arg(&input).arg("-o").arg(path);
            }
            Writer::Bench => {
                cmd.args(["bench", "udp-tx", "--lab", "loopback", "--mode", "copy"])
                    .args(["--size", "1000", "--runs", "1", "--seconds", "0.05"])
                    .args(["--pool-mib", "1", "--report"])
                    .arg(path);
            }
            Writer::Tune => {
                cmd.args(["tune", "--path", "sendfile", "--runs", "1"])
                    .args(["--seconds", "0.05", "--profile"])
                    .arg(path);
            }
        }
        (wait_bounded(cmd.spawn().unwrap(), 120), Vec::new())
    }

    /// Checks that `bytes` are what the command writes (`sent`: what `recv` was sent).
    fn check(self, bytes: &[u8], sent: &[u8], scratch: &Path) {
        match self {
            Writer::Recv => assert!(bytes == sent, "recv wrote other bytes"),
            Writer::Capture => {
                assert_eq!(bytes.len(), 24, "a pcap header, nothing captured");
                assert_eq!(&bytes[..4], &0xa1b2_3c4du32.to_ne_bytes());
            }
            Writer::Report | Writer::Bench => {
                let page = String::from_utf8_lossy(bytes);
                assert!(page.starts_with("<!DOCTYPE html>"), "{self:?}: a page");
                assert!(
                    page.trim_end().ends_with("</html>"),
                    "{self:?}: a whole page"
                );
            }
            Writer::Tune => {
                let file = scratch.join("profile.toml");
                std::fs::write(&file, bytes).unwrap();
                zcnet::auto::Profile::load(&file).expect("a profile");
            }
        }
    }
}

/// `recv -o path` fed `DATA_LEN` random bytes over 127.0.0.1.
fn recv(path: &Path) -> (Output, Vec<u8>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = zcnet()
        .args(["recv", "--listen", &format!("127.0.0.1:{port}"), "-o"])
        .arg(path)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let data = random_bytes(DATA_LEN, 35);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "recv never listened: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    c.write_all(&data).unwrap();
    drop(c);
    (wait_bounded(child, 30), data)
}

/// Runs `test` for every writer that can run here (the others are recorded as skipped), each in
/// a fresh [`Case`] named after `kind`.
fn each_writer(kind: &str, mut test: impl FnMut(Writer, &Case)) {
    for w in Writer::ALL {
        match w.cannot_run() {
            Some(why) => netlab::skip::skip(&format!("{w:?}: {why}")),
            None => test(w, &Case::new(&format!("{kind}-{w:?}"))),
        }
    }
}

fn assert_ok(w: Writer, case: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{w:?} into {case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private character device of major 1, minor 3 (what /dev/null is) in a test directory;
/// the host's /dev is never touched. `None` (a skip) without CAP_MKNOD or on a `nodev` mount.
fn null_device(path: &Path) -> Option<()> {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    if let Err(e) = mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 3),
    ) {
        netlab::skip::skip(&format!("mknod: {e} (needs CAP_MKNOD)"));
        return None;
    }
    if let Err(e) = std::fs::OpenOptions::new().write(true).open(path) {
        netlab::skip::skip(&format!("a device node cannot be opened here: {e}"));
        return None;
    }
    // mknod's mode is cut by the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
    Some(())
}

#[test]
fn every_output_option_keeps_a_device_a_device() {
    each_writer("dev", |w, case| {
        let dir = &case.dir;
        let dev = dir.join("null");
        if null_device(&dev).is_none() {
            return;
        }
        let (out, _) = w.run(&case.scratch, &dev);
        assert_ok(w, "a device", &out);
        let m = std::fs::symlink_metadata(&dev).unwrap();
        assert!(m.file_type().is_char_device(), "{w:?}: {m:?}");
        assert_eq!(m.rdev(), nix::sys::stat::makedev(1, 3), "{w:?}");
        assert_eq!(m.mode() & 0o7777, 0o666, "{w:?}");
        assert_eq!(case.names(), ["null"], "{w:?}: nothing beside it");
    });
}

#[test]
fn every_output_option_writes_into_a_fifo_its_reader_reads() {
    each_writer("fifo", |w, case| {
        let dir = &case.dir;
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // The reader waits in open(2) until a writer comes: its result is awaited for a
        // bounded time (a command that never opens the FIFO would leave it waiting).
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let read = std::fs::File::open(fifo).and_then(|mut f| f.read_to_end(&mut got));
                let _ = tx.send(read.map(|_| got));
            });
        }
        let (out, sent) = w.run(&case.scratch, &fifo);
        assert_ok(w, "a FIFO", &out);
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{w:?}: the FIFO's reader got nothing"))
            .unwrap();
        w.check(&got, &sent, &case.scratch);
        let m = std::fs::symlink_metadata(&fifo).unwrap();
        assert!(m.file_type().is_fifo(), "{w:?}: {m:?}");
        assert_eq!(case.names(), ["fifo"], "{w:?}: nothing beside it");
    });
}

#[test]
fn every_output_option_writes_a_symlinks_target_and_keeps_the_link() {
    each_writer("link", |w, case| {
        let dir = &case.dir;
        let (link, target) = (dir.join("link"), dir.join("target"));
        // Longer than anything written: what is left must be exactly the new output.
        std::fs::write(&target, vec![b'x'; 4 << 20]).unwrap();
        std::os::unix::fs::symlink("target", &link).unwrap();
        let (out, sent) = w.run(&case.scratch, &link);
        assert_ok(w, "a symlink", &out);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("target"),
            "{w:?}: the link is kept"
        );
        w.check(&std::fs::read(&target).unwrap(), &sent, &case.scratch);
        assert_eq!(case.names(), ["link", "target"], "{w:?}");
    });
}

/// As root: an existing file of mode 0444 owned by `nobody` is written as `cp` and curl write
/// it (root may), keeping its mode and owner. As `nobody`, a file it may not write is refused at
/// once in one line and left as it was, even in a directory it may write (where a rename would
/// have replaced it).
#[test]
fn every_output_option_keeps_mode_and_owner_and_refuses_what_it_may_not_write() {
    if !nix::unistd::geteuid().is_root() {
        return netlab::skip::skip("chown to another user needs root");
    }
    each_writer("mode", |w, case| {
        let dir = &case.dir;
        let file = dir.join("out");
        std::fs::write(&file, vec![b'x'; 4 << 20]).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
        let (out, sent) = w.run(&case.scratch, &file);
        assert_ok(w, "a read-only file", &out);
        let m = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (m.mode() & 0o7777, m.uid(), m.gid()),
            (0o444, 65534, 65534),
            "{w:?}"
        );
        w.check(&std::fs::read(&file).unwrap(), &sent, &case.scratch);
        assert_eq!(case.names(), ["out"], "{w:?}");
    });
    if !netlab::skip::on_path("setpriv") {
        return netlab::skip::skip("setpriv (util-linux) is not installed");
    }
    // As nobody, in a directory nobody may write, a file of root's it may not.
    let dir = TempDir::new("outputs-nobody");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.join("roots");
    std::fs::write(&file, b"root's bytes").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let input = dir.join("suite.json");
    std::fs::write(&input, include_str!("fixtures/suite.json")).unwrap();
    let nobody = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["--inh-caps=-all", "--bounding-set=-all"])
            .arg(env!("CARGO_BIN_EXE_zcnet"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (f, i) = (file.as_os_str(), input.as_os_str());
    for args in [
        &[
            "recv".as_ref(),
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "-o".as_ref(),
            f,
        ][..],
        &["report".as_ref(), i, "-o".as_ref(), f],
    ] {
        let err = one_line_error(wait_bounded(nobody(args), 20));
        assert!(err.contains("Permission denied"), "{args:?}: {err}");
        let m = std::fs::metadata(&file).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o644), "{args:?}");
        assert_eq!(std::fs::read(&file).unwrap(), b"root's bytes", "{args:?}");
        assert_eq!(dir.names(), ["roots", "suite.json"], "{args:?}");
    }
}

/// Issue 35 item 16, for the pages: `bench --report` to a path that cannot be written failed
/// only after its runs. It now fails before the bench starts (the page's error comes before
/// the one of an unknown lab), and a bench or a report that fails before its work leaves an
/// existing page as it was and makes no new one.
#[test]
fn pages_are_opened_before_the_work_and_left_alone_when_it_fails() {
    let dir = TempDir::new("outputs-pages");
    let err = one_line_error(
        zcnet()
            .args(["bench", "udp-tx", "--lab", "nosuchlab", "--report"])
            .arg(dir.join("missing/page.html"))
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("page.html: No such file or directory"),
        "{err}"
    );
    let (old, new) = (dir.join("old.html"), dir.join("new.html"));
    std::fs::write(&old, b"the last page").unwrap();
    let bad_input = dir.join("bad.json");
    std::fs::write(&bad_input, b"{}").unwrap();
    for page in [&old, &new] {
        let bench = zcnet()
            .args(["bench", "udp-tx", "--lab", "nosuchlab", "--report"])
            .arg(page)
            .output()
            .unwrap();
        assert!(one_line_error(bench).contains("no lab \"nosuchlab\""));
        let report = zcnet()
            .arg("report")
            .arg(&bad_input)
            .arg("-o")
            .arg(page)
            .output()
            .unwrap();
        assert_eq!(report.status.code(), Some(2), "{report:?}");
    }
    assert_eq!(std::fs::read(&old).unwrap(), b"the last page");
    assert_eq!(dir.names(), ["bad.json", "old.html"]);
}

/// Issue 48 item 15: `recv -o -` with standard output closed exited 0, the stream written into
/// the `/dev/null` Rust's start-up put in its place. It is refused at once now; standard
/// output sent to `/dev/null` on purpose is still written.
#[test]
fn recv_to_a_closed_standard_output_is_refused() {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            r#"exec "$0" recv --listen 127.0.0.1:0 -o - >&-"#,
            env!("CARGO_BIN_EXE_zcnet"),
        ])
        .output()
        .unwrap();
    let err = one_line_error(out);
    assert!(err.contains("standard output is closed"), "{err}");
    // On purpose: `> /dev/null` (write-only) is a place to write.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = zcnet()
        .args(["recv", "--listen", &format!("127.0.0.1:{port}"), "-o", "-"])
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .unwrap(),
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut c = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    };
    c.write_all(&random_bytes(1000, 1)).unwrap();
    drop(c);
    let out = wait_bounded(child, 10);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
