//! The library's modules import each other in no circle (issue 64). The layer below,
//! `zcnet-sys`, is a crate of its own: that nothing in it names the library is the compiler's
//! to check. The graph and its rules: `graph/mod.rs`, tried here on small fixtures first.

mod graph;
use graph::{Graph, assert_no_circle, chain};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[test]
fn the_library_has_no_import_circle() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let g = Graph::build(dir, &["src/lib.rs"], "zcnet", &|p| {
        std::fs::read_to_string(p).ok()
    });
    assert_no_circle("crates/zcnet", &g, 100, 250);
}

#[test]
fn two_files_naming_each_other_are_a_circle() {
    let g = fixture(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B;\nfn f() { let _ = crate::a::A; }"),
    ]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(chain(&cycles[0]), "a.rs:1 -> b.rs:2 -> a.rs");
}

#[test]
fn a_parent_declaring_its_child_is_no_circle_but_dispatching_to_it_is() {
    let declaring = fixture(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod c; pub fn helper() {}"),
        ("p/c.rs", "use super::helper; fn f() { helper() }"),
    ]);
    assert!(declaring.cycles().is_empty());
    let dispatching = fixture(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod c; pub fn helper() {}\nfn g() { c::f() }"),
        ("p/c.rs", "use super::*; pub fn f() { helper() }"),
    ]);
    assert_eq!(
        chain(&dispatching.cycles()[0]),
        "p/c.rs:1 -> p/mod.rs:2 -> p/c.rs"
    );
}

#[test]
fn names_resolve_to_the_deepest_module_file_and_nowhere_else() {
    let g = fixture(&[
        ("lib.rs", "mod a; mod x;"),
        ("a/mod.rs", "pub mod b;"),
        ("a/b.rs", "pub mod c { pub fn f() {} }"),
        // A group, a name bound by `use`, `super::super` from an inline module, a macro's
        // path, another crate's path and a local: three edges, all to a/b.rs.
        (
            "x.rs",
            "use crate::a::{b, b::c};\nmod t { fn g() { super::super::a::b::c::f() } }\nfn h() { c::f(); println!(\"{}\", crate::a::b::c::f as usize); std::mem::drop(1); }",
        ),
    ]);
    let to: Vec<&String> = g.edges["x.rs"].keys().collect();
    assert_eq!(to, ["a/b.rs"], "{:?}", g.edges);
    assert!(g.cycles().is_empty());
}

#[test]
fn a_face_is_no_edge_but_a_use_in_a_function_and_a_sibling_re_export_are() {
    let g = fixture(&[
        ("lib.rs", "mod p; mod q; mod r;"),
        // `pub use` of its own child: p's face. Of a sibling: a use of it.
        ("p/mod.rs", "mod c; pub use c::C; pub use crate::q::Q;"),
        ("p/c.rs", "pub struct C; fn f() { let _ = super::Q; }"),
        ("q.rs", "pub struct Q;"),
        // A `use` in a function, and another crate's name through a binding: one edge, to q.rs.
        (
            "r.rs",
            "use std::mem as m;\nfn f() { use crate::q::Q; let _ = Q; m::drop(1); }",
        ),
    ]);
    let from = |f: &str| {
        g.edges
            .get(f)
            .map(|e| e.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(from("p/mod.rs"), ["q.rs"]);
    // c names Q through p's re-export: the file that defines it.
    assert_eq!(from("p/c.rs"), ["q.rs"]);
    assert_eq!(from("r.rs"), ["q.rs"]);
    assert!(g.cycles().is_empty());
}

/// The graph of an inline crate: `(file, text)` pairs, `lib.rs` its root.
fn fixture(files: &[(&str, &str)]) -> Graph {
    let files: BTreeMap<PathBuf, &str> = files.iter().map(|(f, t)| (f.into(), *t)).collect();
    let read = |p: &Path| Some(files.get(p)?.to_string());
    Graph::build(Path::new(""), &["lib.rs"], "fixture", &read)
}
