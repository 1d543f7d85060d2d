//! Issue 50: this crate is the kernel's ABI and its calls, nothing else. Each of its leaf files
//! holds `unsafe` code or kernel ABI: it is `abi.rs`, names it, or lays out a `#[repr(C)]`
//! struct. Policy without either (a state machine, a cache, a retry rule) lives above, in
//! `zcnet`. A `mod.rs` only gathers its area (and `lib.rs` the errno helpers every call shares).

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_file_holds_unsafe_code_or_kernel_abi() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut without = Vec::new();
    let mut leaves = 0;
    for f in &all {
        let name = f.file_name().unwrap().to_string_lossy();
        if ["mod.rs", "lib.rs", "abi.rs"].contains(&&*name) {
            continue;
        }
        leaves += 1;
        let text = std::fs::read_to_string(f).unwrap();
        // The file's own code: its unit tests (a `#[cfg(test)]` module at the end) aside.
        let code: String = (text.split("\n#[cfg(test)]\nmod ").next().unwrap_or(""))
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let unsafe_code = ["unsafe {", "unsafe fn ", "unsafe impl "]
            .iter()
            .any(|t| code.contains(t));
        let names_abi = code.contains("abi::") || code.contains("abi;") || code.contains("abi,");
        if !(unsafe_code || names_abi || code.contains("#[repr(C)]")) {
            without.push(f.strip_prefix(&src).unwrap().display().to_string());
        }
    }
    assert!(leaves > 10, "{all:?}");
    assert!(
        without.is_empty(),
        "files with neither unsafe code nor kernel ABI (move them up, into zcnet):\n  {}",
        without.join("\n  ")
    );
}
