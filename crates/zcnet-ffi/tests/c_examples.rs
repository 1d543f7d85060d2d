//! The C examples (`examples/c/`), built with the system `cc` against `include/zcnet.h` and
//! libzcnet, run in a loopback lab: 64 MiB of random data from `zc_send` to `zc_recv`, by the
//! MSG_ZEROCOPY sender and by `zcnet_send_file`, every byte compared, the counters checked.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `target/<profile>`, where cargo put this test and libzcnet.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_owned()
}

/// Builds libzcnet (the cdylib: `cargo test` builds only what the tests link) and the two C
/// programs; returns their paths.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    build_lib();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c");
    (
        cc(&examples.join("zc_send.c"), &dir.join("zc_send")),
        cc(&examples.join("zc_recv.c"), &dir.join("zc_recv")),
    )
}

/// Builds libzcnet, the cdylib, into this test's target directory.
fn build_lib() {
    let target = target_dir();
    let root = target.parent().unwrap();
    let profile = target.file_name().unwrap().to_str().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "-p", "zcnet-ffi", "--target-dir"])
        .arg(root);
    if profile == "release" {
        cargo.arg("--release");
    }
    assert!(cargo.status().unwrap().success(), "building libzcnet");
}

/// Compiles the C program `src` against the header and libzcnet, strictly, into `bin`.
fn cc(src: &Path, bin: &Path) -> PathBuf {
    let target = target_dir();
    let status = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg(src)
        .arg("-L")
        .arg(&target)
        .arg("-lzcnet")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(bin)
        .status()
        .unwrap();
    assert!(status.success(), "cc {}", src.display());
    bin.to_owned()
}

/// `len` random bytes from /dev/urandom.
fn random_file(path: &Path, len: usize) {
    use std::io::Read;
    let mut data = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut data)
        .unwrap();
    std::fs::write(path, data).unwrap();
}

/// The numbers of a line, in order ("received 5 bytes, mapped 4" gives [5, 4]).
fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

#[test]
fn c_sender_to_c_receiver_through_libzcnet() {
    if !netlab::skip::on_path("cc") {
        netlab::skip::skip("no C compiler (cc) to build examples/c");
        return;
    }
    netlab::require_lab!();
    let dir = std::env::temp_dir().join(format!("zcnet-ffi-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (send, recv) = build(&dir);
    let src = dir.join("src");
    const LEN: usize = 64 << 20;
    random_file(&src, LEN);
    // MTU 61512: 15 whole pages per segment, which TCP_ZEROCOPY_RECEIVE can map.
    let lab = netlab::LoopbackLab::new(Some(61512)).unwrap();
    let addr = lab.addr(netlab::Family::V4).to_string();
    for (round, args) in [(0, &[][..]), (1, &["--sendfile"][..])] {
        let out = dir.join(format!("out{round}"));
        let port = (47300 + round).to_string();
        let mut receiver = lab
            .ns
            .command(recv.to_str().unwrap())
            .args([&addr, &port, out.to_str().unwrap()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "listening");
        let sent = lab
            .ns
            .command(send.to_str().unwrap())
            .args([src.to_str().unwrap(), &addr, &port])
            .args(args)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&sent.stdout).into_owned();
        assert!(
            sent.status.success(),
            "{said} {}",
            String::from_utf8_lossy(&sent.stderr)
        );
        let got = lines.next().unwrap().unwrap();
        assert!(receiver.wait().unwrap().success());
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(),
            "round {round}: the received file differs"
        );
        // "received N bytes, mapped M, copied C"
        let rx = numbers(&got);
        assert_eq!((rx[0], rx[1] + rx[2]), (LEN as u64, LEN as u64), "{got}");
        let tx = numbers(&said);
        if round == 0 {
            // "sent N bytes in C chunks, B back; zerocopy calls Z, copied X, really zero-copy R
            // bytes": every 256 KiB chunk loaned with MSG_ZEROCOPY and back; loopback flags each
            // copied (the receiving socket is on this host), and the receiver maps most pages.
            let chunks = (LEN / (256 << 10)) as u64;
            assert_eq!(
                &tx[..5],
                [LEN as u64, chunks, chunks, chunks, chunks],
                "{said}"
            );
            assert!(rx[1] > LEN as u64 / 2, "{got}");
        } else {
            // "sent N bytes, M without a user copy"
            assert_eq!(tx, [LEN as u64, LEN as u64], "{said}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The C++ snippet of docs/c.md compiles against the header and links with libzcnet.
#[test]
fn the_cpp_snippet_of_the_docs_compiles() {
    if !netlab::skip::on_path("c++") {
        netlab::skip::skip("no C++ compiler (c++) for the docs' snippet");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(manifest.join("../../docs/c.md")).unwrap();
    let code = doc
        .split("```cpp\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a cpp block in docs/c.md");
    let dir = std::env::temp_dir().join(format!("zcnet-ffi-cpp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("snippet.cpp");
    std::fs::write(&src, format!("{code}\nint main() {{ return 0; }}\n")).unwrap();
    let target = target_dir();
    let (_, _) = build(&dir);
    let status = Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Werror", "-I"])
        .arg(manifest.join("include"))
        .arg(&src)
        .arg("-L")
        .arg(&target)
        .arg("-lzcnet")
        .arg(format!("-Wl,-rpath,{}", target.display()))
        .arg("-o")
        .arg(dir.join("snippet"))
        .status()
        .unwrap();
    assert!(status.success(), "c++ docs/c.md snippet");
    assert!(
        Command::new(dir.join("snippet"))
            .status()
            .unwrap()
            .success()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 35 item 6 as C sees it: the modes of the header are `int`s, and every value no constant
/// has is `-EINVAL` from each function that takes one, with no handle made and nothing sent
/// (`zcnet_send_file` crashed with a file mode of 5; the others returned 0).
#[test]
fn modes_no_constant_has_are_einval_from_c() {
    if !netlab::skip::on_path("cc") {
        return netlab::skip::skip("no C compiler (cc) to build tests/c/out_of_range.c");
    }
    let dir = std::env::temp_dir().join(format!("zcnet-ffi-modes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_lib();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/out_of_range.c");
    let out = Command::new(cc(&src, &dir.join("out_of_range")))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.pop(), Some("peer received 0 bytes"), "{text}");
    assert_eq!(lines.len(), 5 * 3 + 5, "{text}");
    for line in lines {
        let rc = line.rsplit(' ').next().unwrap();
        assert_eq!(rc, (-libc::EINVAL).to_string(), "{line}");
    }
}
