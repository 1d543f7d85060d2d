//! The file-level import graph of a crate's `src`, read with `syn`, and its circles: the one
//! architecture rule the compiler cannot check (the layer below, `zcnet-sys`, is a crate of its
//! own, so that nothing in it can name the library above it).
//!
//! A node is a module file; an inline module (`mod tests { .. }`) belongs to its file. An edge
//! A -> B is a path in A, in a `use` tree, in code or in a macro's tokens, that names B's module
//! or something in it, read from `crate::`, the crate's name, `super::`, `self::`, a child
//! module, or a name a `use` bound: the file that defines the name, following the `use` items
//! and globs that hand it on, else the deepest module on its way. `mod x;` is no edge (a parent
//! declaring a child does not use it), nor is a `pub use` of the module's own descendant (its
//! face); a glob names its module. Names it cannot place (locals, the prelude, other crates,
//! macros by textual scope) are no edge.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Module paths (`["bench", "engine"]`) and what each holds; edges between files.
pub struct Graph {
    pub modules: BTreeMap<Vec<String>, Names>,
    /// from -> (to -> the line of the first path that names it).
    pub edges: BTreeMap<String, BTreeMap<String, usize>>,
    /// The library's name, as its binaries write it (`zcnet_cli`).
    name: String,
}

/// A module's file and names: those it defines, those its `use` items bind (with their paths
/// and lines), and the modules it takes every name of (`use x::*`).
pub struct Names {
    pub file: String,
    defs: BTreeSet<String>,
    uses: BTreeMap<String, (Vec<String>, usize)>,
    globs: Vec<(Vec<String>, usize)>,
    /// The lines of its `pub use` items.
    faces: BTreeSet<usize>,
}

/// One module's text to read: its path, its file and its items.
struct Module {
    path: Vec<String>,
    file: String,
    items: Vec<syn::Item>,
}

type Seg = Vec<String>;

impl Graph {
    /// The graph of the crate whose roots (`src/lib.rs`, `src/main.rs`, ...) are in `dir`;
    /// `name` is the library's name. `read` gives a file's text (the disk, or a fixture).
    pub fn build(
        dir: &Path,
        roots: &[&str],
        name: &str,
        read: &dyn Fn(&Path) -> Option<String>,
    ) -> Graph {
        let mut modules = Vec::new();
        for (i, root) in roots.iter().enumerate() {
            // The first root is the library; a binary's modules live under a name of its own.
            let base = if i == 0 {
                vec![]
            } else {
                vec![format!("<{root}>")]
            };
            load(dir, Path::new(root), base, read, &mut modules);
        }
        let names = |m: &Module| {
            let (uses, globs, faces) = bindings(&m.items);
            let defs = m.items.iter().filter_map(defined).collect();
            Names {
                file: m.file.clone(),
                defs,
                uses,
                globs,
                faces,
            }
        };
        let mut g = Graph {
            modules: modules.iter().map(|m| (m.path.clone(), names(m))).collect(),
            edges: BTreeMap::new(),
            name: name.to_owned(),
        };
        for m in &modules {
            let mut paths = Paths(Vec::new());
            // A module's own `use` items are read as bindings (below); those in functions, here.
            let code = |i: &&syn::Item| !matches!(i, syn::Item::Mod(_) | syn::Item::Use(_));
            for item in m.items.iter().filter(code) {
                paths.visit_item(item);
            }
            let n = &g.modules[&m.path];
            // A `pub use` of the module's own descendant is its face, as `mod x;` is: no edge.
            let own = |b: &&Bound| {
                !n.faces.contains(&b.1)
                    || !g
                        .absolute(&m.path, &b.0, 0)
                        .is_some_and(|a| a.starts_with(&m.path))
            };
            let named: Vec<(Seg, usize)> = paths
                .0
                .into_iter()
                .chain(n.uses.values().filter(own).cloned())
                .collect();
            let mut to: Vec<(String, usize)> = named
                .iter()
                .filter_map(|(s, l)| Some((g.locate(&m.path, s, 0)?, *l)))
                .collect();
            to.extend(
                n.globs
                    .iter()
                    .filter(own)
                    .filter_map(|(s, l)| Some((g.file_of(&g.absolute(&m.path, s, 0)?)?, *l))),
            );
            for (file, line) in to.into_iter().filter(|(f, _)| *f != m.file) {
                let e = g
                    .edges
                    .entry(m.file.clone())
                    .or_default()
                    .entry(file)
                    .or_insert(line);
                *e = (*e).min(line);
            }
        }
        g
    }

    /// The absolute path `segs` names in module `at`, if it is this crate's.
    fn absolute(&self, at: &[String], segs: &[String], depth: u8) -> Option<Seg> {
        let (first, rest) = segs.split_first()?;
        // A binary's `crate` is its own root; the library's name is the library's.
        let root: Seg = at
            .first()
            .filter(|r| r.starts_with('<'))
            .into_iter()
            .cloned()
            .collect();
        let base: Seg = match first.as_str() {
            "crate" | "$crate" => root,
            s if s == self.name => vec![],
            "self" => at.to_vec(),
            "super" => {
                let up = 1 + rest.iter().take_while(|s| *s == "super").count();
                let rest = &rest[up - 1..];
                return Some(
                    at.get(..at.len().checked_sub(up)?)?
                        .iter()
                        .chain(rest)
                        .cloned()
                        .collect(),
                );
            }
            _ => {
                let child: Seg = at.iter().chain([first]).cloned().collect();
                if self.modules.contains_key(&child) {
                    child
                } else {
                    let (bound, _) = self
                        .modules
                        .get(at)?
                        .uses
                        .get(first)
                        .filter(|(b, _)| depth < 6 && b != segs)?;
                    let whole: Seg = bound.iter().chain(rest).cloned().collect();
                    return self.absolute(at, &whole, depth + 1);
                }
            }
        };
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    }

    /// The file that defines what `segs` names in module `at`: the deepest module on its way,
    /// or, for a name that module binds by `use` or takes by a glob, where that leads.
    fn locate(&self, at: &[String], segs: &[String], depth: u8) -> Option<String> {
        let abs = self.absolute(at, segs, depth)?;
        let k = (0..=abs.len())
            .rev()
            .find(|&k| self.modules.contains_key(&abs[..k]))?;
        let (m, names) = (&abs[..k], &self.modules[&abs[..k]]);
        let Some(n) = abs.get(k).filter(|n| depth < 6 && !names.defs.contains(*n)) else {
            return Some(names.file.clone());
        };
        if let Some((bound, _)) = names.uses.get(n) {
            let whole: Seg = bound.iter().chain(&abs[k + 1..]).cloned().collect();
            // Another crate's name (`use zcnet_sys as sys`) is no edge.
            return self.locate(m, &whole, depth + 1);
        }
        let via_glob = names.globs.iter().find_map(|(g, _)| {
            let t = self.modules.get(&self.absolute(m, g, depth + 1)?)?;
            (t.defs.contains(n) || t.uses.contains_key(n))
                .then(|| g.iter().chain(&abs[k..]).cloned().collect::<Seg>())
        });
        via_glob
            .and_then(|w| self.locate(m, &w, depth + 1))
            .or(Some(names.file.clone()))
    }

    /// The file of the deepest module on `path`'s way.
    fn file_of(&self, path: &[String]) -> Option<String> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]).map(|m| m.file.clone()))
    }

    /// Every circle, as the files in order with the line of the path that names the next.
    pub fn cycles(&self) -> Vec<Vec<(String, usize)>> {
        let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
        let mut out = Vec::new();
        for start in self.edges.keys() {
            // A shortest way back to `start`, breadth first.
            let mut from: BTreeMap<&String, &String> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            while let Some(f) = queue.pop_front() {
                for to in self.edges.get(f).into_iter().flat_map(|e| e.keys()) {
                    if to == start {
                        let mut ring = vec![f.clone()];
                        while let Some(&p) = from.get(ring.last().unwrap()) {
                            ring.push(p.clone());
                        }
                        ring.reverse();
                        let mut key = ring.clone();
                        key.sort();
                        if found.insert(key) {
                            let lines = ring.iter().enumerate().map(|(i, f)| {
                                let next = ring.get(i + 1).unwrap_or(start);
                                (f.clone(), self.edges[f][next])
                            });
                            out.push(lines.chain([(start.clone(), 0)]).collect());
                        }
                        queue.clear();
                        break;
                    }
                    if to != start && !from.contains_key(to) {
                        from.insert(to, f);
                        queue.push_back(to);
                    }
                }
            }
        }
        out
    }
}

/// Reads `file` as module `path`, then the modules it declares, inline or in files of their own.
fn load(
    dir: &Path,
    file: &Path,
    path: Vec<String>,
    read: &dyn Fn(&Path) -> Option<String>,
    out: &mut Vec<Module>,
) {
    let Some(text) = read(&dir.join(file)) else {
        return;
    };
    let items = syn::parse_file(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .items;
    // Where its children's files are: beside a root or a `mod.rs`, else in a folder of its name.
    let stem = file.file_stem().unwrap().to_string_lossy();
    let here = file.parent().unwrap_or(Path::new(""));
    let folder = match &*stem {
        "lib" | "main" | "mod" => here.to_path_buf(),
        _ if path.first().is_some_and(|p| p.starts_with('<')) && path.len() == 1 => {
            here.to_path_buf()
        }
        s => here.join(s),
    };
    walk(dir, file, &folder, path, items, read, out);
}

fn walk(
    dir: &Path,
    file: &Path,
    folder: &Path,
    path: Vec<String>,
    items: Vec<syn::Item>,
    read: &dyn Fn(&Path) -> Option<String>,
    out: &mut Vec<Module>,
) {
    for item in &items {
        let syn::Item::Mod(m) = item else { continue };
        let child: Vec<String> = path.iter().cloned().chain([m.ident.to_string()]).collect();
        let at_path = m
            .attrs
            .iter()
            .find(|a| a.path().is_ident("path"))
            .and_then(|a| match &a.meta {
                syn::Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            });
        match (&m.content, at_path) {
            (Some((_, inner)), _) => walk(
                dir,
                file,
                &folder.join(m.ident.to_string()),
                child,
                inner.clone(),
                read,
                out,
            ),
            (None, Some(p)) => load(
                dir,
                &file.parent().unwrap_or(Path::new("")).join(p),
                child,
                read,
                out,
            ),
            (None, None) => {
                let flat = folder.join(format!("{}.rs", m.ident));
                let nested = folder.join(m.ident.to_string()).join("mod.rs");
                let f = if read(&dir.join(&flat)).is_some() {
                    flat
                } else {
                    nested
                };
                load(dir, &f, child, read, out);
            }
        }
    }
    out.push(Module {
        path,
        file: file.to_string_lossy().into_owned(),
        items,
    });
}

/// A binding's or a glob's path and line.
type Bound = (Seg, usize);

/// The names a module's `use` items bind (not `_`), with their paths and lines; its globs; the
/// lines of those that are its face (`pub`).
fn bindings(items: &[syn::Item]) -> (BTreeMap<String, Bound>, Vec<Bound>, BTreeSet<usize>) {
    let (mut out, mut faces) = ((BTreeMap::new(), Vec::new()), BTreeSet::new());
    for item in items {
        if let syn::Item::Use(u) = item {
            let one = leaves(&u.tree);
            // Its `pub use` items, kept apart: re-exporting a descendant is no edge (`build`).
            if !matches!(u.vis, syn::Visibility::Inherited) {
                faces.extend(one.0.values().chain(&one.1).map(|b| b.1));
            }
            out.0.extend(one.0);
            out.1.extend(one.1);
        }
    }
    (out.0, out.1, faces)
}

/// A `use` tree's leaves: the names it binds (not `_`), with their paths and lines, and its
/// globs (and `as _` imports).
fn leaves(t: &syn::UseTree) -> (BTreeMap<String, Bound>, Vec<Bound>) {
    fn tree(t: &syn::UseTree, pre: &mut Seg, out: &mut (BTreeMap<String, Bound>, Vec<Bound>)) {
        let line = |i: &syn::Ident| i.span().start().line;
        let path =
            |pre: &Seg, last: &syn::Ident| pre.iter().cloned().chain([last.to_string()]).collect();
        match t {
            syn::UseTree::Path(p) => {
                pre.push(p.ident.to_string());
                tree(&p.tree, pre, out);
                pre.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                let name = pre.last().cloned().unwrap_or_default();
                out.0.insert(name, (pre.clone(), line(&n.ident)));
            }
            syn::UseTree::Name(n) => {
                out.0
                    .insert(n.ident.to_string(), (path(pre, &n.ident), line(&n.ident)));
            }
            syn::UseTree::Rename(r) if r.rename != "_" => {
                out.0
                    .insert(r.rename.to_string(), (path(pre, &r.ident), line(&r.ident)));
            }
            syn::UseTree::Rename(r) => out.1.push((path(pre, &r.ident), line(&r.ident))),
            syn::UseTree::Glob(g) => out.1.push((pre.clone(), g.star_token.span.start().line)),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| tree(t, pre, out)),
        }
    }
    let mut out = (BTreeMap::new(), Vec::new());
    tree(t, &mut Vec::new(), &mut out);
    out
}

/// The name an item defines in its module's namespace (`use` and `impl` aside).
fn defined(item: &syn::Item) -> Option<String> {
    use syn::Item::*;
    Some(match item {
        Const(i) => i.ident.to_string(),
        Enum(i) => i.ident.to_string(),
        Fn(i) => i.sig.ident.to_string(),
        Macro(i) => i.ident.as_ref()?.to_string(),
        Mod(i) => i.ident.to_string(),
        Static(i) => i.ident.to_string(),
        Struct(i) => i.ident.to_string(),
        Trait(i) => i.ident.to_string(),
        Type(i) => i.ident.to_string(),
        Union(i) => i.ident.to_string(),
        _ => return None,
    })
}

/// Every path of two or more segments in code and in macros' tokens, with its line.
struct Paths(Vec<(Vec<String>, usize)>);

impl<'a> Visit<'a> for Paths {
    fn visit_path(&mut self, p: &'a syn::Path) {
        if p.segments.len() > 1 {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.0.push((segs, p.segments[0].ident.span().start().line));
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'a syn::Macro) {
        macro_paths(m.tokens.clone(), &mut self.0);
        syn::visit::visit_macro(self, m);
    }

    // A `use` in a function: its leaves, as paths.
    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        let (names, globs) = leaves(&u.tree);
        self.0.extend(names.into_values().chain(globs));
    }

    // Inline modules are read as modules of their own.
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {}
}

/// `a::b..` and `$crate::..` in a macro's tokens, however the macro reads them.
fn macro_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<(Vec<String>, usize)>) {
    use proc_macro2::TokenTree as T;
    let tokens: Vec<T> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        if let T::Group(g) = &tokens[i] {
            macro_paths(g.stream(), out);
        }
        let dollar = matches!(&tokens[i], T::Punct(p) if p.as_char() == '$');
        let start = i + usize::from(dollar);
        let mut segs = Vec::new();
        let mut j = start;
        while let Some(T::Ident(id)) = tokens.get(j) {
            segs.push(if dollar && j == start {
                format!("${id}")
            } else {
                id.to_string()
            });
            let colons = matches!((tokens.get(j + 1), tokens.get(j + 2)), (Some(T::Punct(a)), Some(T::Punct(b))) if a.as_char() == ':' && b.as_char() == ':');
            if !colons {
                break;
            }
            j += 3;
        }
        if segs.len() > 1 {
            let line = tokens[start].span().start().line;
            out.push((segs, line));
            i = j;
        }
        i += 1;
    }
}

/// Asserts `g` has no circle, and that it saw a tree of at least `files` files and `edges`
/// edges (or it proves nothing).
pub fn assert_no_circle(what: &str, g: &Graph, files: usize, edges: usize) {
    let seen: BTreeSet<&String> = g.modules.values().map(|m| &m.file).collect();
    let n: usize = g.edges.values().map(|e| e.len()).sum();
    eprintln!("{what}: {} module files, {n} import edges", seen.len());
    assert!(
        seen.len() >= files && n >= edges,
        "{} files, {n} edges",
        seen.len()
    );
    let cycles = g.cycles();
    let shown: Vec<String> = cycles.iter().map(|c| format!("  {}", chain(c))).collect();
    assert!(
        cycles.is_empty(),
        "{} import circles in {what} (FILE:LINE names the next file):\n{}",
        cycles.len(),
        shown.join("\n")
    );
}

/// A circle as printed: `src/a.rs:3 -> src/b.rs:9 -> src/a.rs`.
pub fn chain(cycle: &[(String, usize)]) -> String {
    let (last, links) = cycle.split_last().expect("a closed chain");
    let mut text: String = links.iter().map(|(f, l)| format!("{f}:{l} -> ")).collect();
    text.push_str(&last.0);
    text
}

/// The graph of an inline crate: `(file, text)` pairs, `lib.rs` its root.
pub fn fixture(files: &[(&str, &str)]) -> Graph {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(f, t)| (PathBuf::from(f), (*t).to_owned()))
        .collect();
    Graph::build(Path::new(""), &["lib.rs"], "fixture", &|p| {
        files.get(p).cloned()
    })
}

/// Reads a file from the disk.
pub fn disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}
