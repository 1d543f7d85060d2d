//! The CLI's modules (its library, the `zcnet` binary and the others) import each other in no
//! circle. The graph and its rules: `crates/zcnet/tests/graph/mod.rs`.

#[path = "../../zcnet/tests/graph/mod.rs"]
mod graph;
use graph::Graph;

#[test]
fn the_cli_has_no_import_circle() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec!["src/lib.rs".to_owned(), "src/main.rs".to_owned()];
    let mut bins: Vec<String> = std::fs::read_dir(dir.join("src/bin"))
        .expect("src/bin")
        .map(|e| format!("src/bin/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    bins.sort();
    roots.extend(bins);
    let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
    let g = Graph::build(dir, &roots, "zcnet_cli", &|p| {
        std::fs::read_to_string(p).ok()
    });
    graph::assert_no_circle("crates/zcnet-cli", &g, 40, 100);
}
