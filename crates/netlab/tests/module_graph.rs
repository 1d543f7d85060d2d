//! netlab's modules import each other in no circle (issue 64: `netns` and `reaper` did; the
//! `ip` command and where it keeps namespaces are a leaf of their own now). The graph and its
//! rules: `crates/zcnet/tests/graph/mod.rs`.

#[path = "../../zcnet/tests/graph/mod.rs"]
mod graph;

#[test]
fn netlab_has_no_import_circle() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let g = graph::Graph::build(dir, &["src/lib.rs"], "netlab", &|p| {
        std::fs::read_to_string(p).ok()
    });
    graph::assert_no_circle("crates/netlab", &g, 10, 15);
}
