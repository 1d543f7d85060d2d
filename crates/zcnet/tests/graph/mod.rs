//! The file-level import graph of a crate's `src`, read with `syn`, and its circles: the one
//! architecture rule the compiler cannot check (`zcnet-sys`, the layer below, is a crate). A
//! node is a module file (an inline module belongs to its file). An edge A -> B is a path in A
//! (a `use` tree, code, a macro's tokens) from `crate::`, the crate's name, `super::`, `self::`,
//! a child module or a name a `use` bound, that ends in B: the deepest module on its way, or
//! where that module's `use` of the next name leads. `mod x;` is no edge, nor a `pub use` of
//! the module's own descendant (its face); a glob names its module.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;

/// A module's path (`["bench", "engine"]`) or a path as written; with the line it is on; a
/// file's text by its path in the crate.
type Seg = Vec<String>;
type Bound = (Seg, usize);
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// The modules and what each holds; edges between files.
#[derive(Default)]
pub struct Graph {
    pub modules: BTreeMap<Seg, Names>,
    /// from -> (to -> the line of the first path that names it, in the order of its items).
    pub edges: BTreeMap<String, BTreeMap<String, usize>>,
    /// The library's name, as its binaries write it (`zcnet_cli`).
    name: String,
}

/// A module's file; the names its `use` items bind, with their paths; the paths that name
/// something (a glob's ends in `*`), in its code and its `use` items, each marked if a `pub use`
/// (an edge unless it leads into the module itself: its face).
#[derive(Default)]
pub struct Names {
    pub file: String,
    uses: BTreeMap<String, Seg>,
    named: Vec<(Bound, bool)>,
}

impl Graph {
    /// The graph of the crate whose roots (`src/lib.rs` first, then binaries) are in `dir`, its
    /// library named `name`; `read` gives a file's text (`fs::read_to_string`, or a fixture's).
    pub fn build(dir: &Path, roots: &[&str], name: &str, read: Read) -> Graph {
        let read = |p: &Path| read(&dir.join(p));
        let mut g = Graph {
            name: name.to_owned(),
            ..Graph::default()
        };
        for (i, root) in roots.iter().enumerate() {
            // A binary's modules live under a name of their own.
            let base = (i > 0).then(|| format!("<{root}>")).into_iter().collect();
            g.load(Path::new(root), base, &read);
        }
        let mut edges: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for (at, n) in &g.modules {
            let mine = |s: &Seg| g.absolute(at, s).is_some_and(|a| a.starts_with(at));
            let named = n.named.iter().filter(|((s, _), face)| !face || !mine(s));
            let to = |s: &Seg| g.locate(at, s, 0).filter(|f| *f != n.file);
            for (to, line) in named.filter_map(|((s, l), _)| Some((to(s)?, *l))) {
                let e = edges.entry(n.file.clone()).or_default();
                e.entry(to).or_insert(line);
            }
        }
        g.edges = edges;
        g
    }

    /// The absolute path `segs` names in module `at`, if it is this crate's: a name not from
    /// the crate's root, `super` or `self` is `at`'s child or what `at` binds by `use`.
    fn absolute(&self, at: &[String], segs: &[String]) -> Option<Seg> {
        let (first, rest) = segs.split_first()?;
        let up = 1 + rest.iter().take_while(|s| *s == "super").count();
        // A binary's `crate` is its own root; the library's name is the library's.
        let root = &at[..at.iter().take_while(|r| r.starts_with('<')).count()];
        Some(match first.as_str() {
            "crate" => [root, rest].concat(),
            s if s == self.name => rest.to_vec(),
            "self" => [at, rest].concat(),
            "super" => [at.get(..at.len().checked_sub(up)?)?, &rest[up - 1..]].concat(),
            _ => {
                let bound = self.modules.get(at)?.uses.contains_key(first);
                let child = self.modules.contains_key(&[at, &segs[..1]].concat());
                (bound || child).then(|| [at, segs].concat())?
            }
        })
    }

    /// The file that defines what `segs` names in module `at`: the deepest module on its way,
    /// or, for a name that module binds by `use`, where that leads.
    fn locate(&self, at: &[String], segs: &[String], depth: u8) -> Option<String> {
        let abs = self.absolute(at, segs)?;
        let known = |k: &usize| self.modules.contains_key(&abs[..*k]);
        let k = (0..=abs.len()).rev().find(known)?;
        let names = &self.modules[&abs[..k]];
        match abs.get(k).and_then(|n| names.uses.get(n)) {
            // Another crate's name (`use zcnet_sys as sys`) is no edge.
            Some(bound) if depth < 6 => {
                self.locate(&abs[..k], &[bound, &abs[k + 1..]].concat(), depth + 1)
            }
            _ => Some(names.file.clone()),
        }
    }

    /// Reads `file` as module `path`, then the modules it declares.
    fn load(&mut self, file: &Path, path: Seg, read: Read) {
        let Some(text) = read(file) else { return };
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Its children's files: beside a root or a `mod.rs`, else in a folder of its name.
        let stem = file.file_stem().unwrap().to_string_lossy();
        let here = file.parent().unwrap_or(Path::new(""));
        let root = path.iter().all(|p| p.starts_with('<')); // a crate's or a binary's
        let flat = root || ["lib", "main", "mod"].contains(&&*stem);
        let folder = here.join(if flat { "" } else { &stem });
        self.add(file, &folder, path, &parsed.items, read);
    }

    /// Adds module `path`, whose `items` are in `file`, and the modules it declares: inline, or
    /// in a file (`#[path]`, else `x.rs` or `x/mod.rs` in `folder`).
    fn add(&mut self, file: &Path, folder: &Path, path: Seg, items: &[syn::Item], read: Read) {
        let (mut n, here) = (Names::default(), file.parent().unwrap());
        n.file = file.to_string_lossy().into_owned();
        for item in items {
            match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let child = [&path[..], std::slice::from_ref(&name)].concat();
                    if let Some((_, inner)) = &m.content {
                        self.add(file, &folder.join(&name), child, inner, read);
                        continue;
                    }
                    let at = m.attrs.iter().find(|a| a.path().is_ident("path"));
                    let at = at.and_then(|a| Some(a.meta.require_name_value().ok()?.value.clone()));
                    let flat = folder.join(format!("{name}.rs"));
                    let f = match at.map(|p| p.to_token_stream().to_string()) {
                        Some(p) => here.join(p.trim_matches('"')),
                        None if read(&flat).is_some() => flat,
                        None => folder.join(&name).join("mod.rs"),
                    };
                    self.load(&f, child, read);
                }
                syn::Item::Use(u) => {
                    let inherited = matches!(u.vis, syn::Visibility::Inherited);
                    for (name, bound) in leaves(&u.tree, &[]) {
                        n.uses.extend(name.map(|name| (name, bound.0.clone())));
                        n.named.push((bound, !inherited));
                    }
                }
                _ => paths(item.to_token_stream(), &mut |b| n.named.push((b, false))),
            }
        }
        self.modules.insert(path, n);
    }

    /// Every circle, as the files in order with the line of the path that names the next.
    pub fn cycles(&self) -> Vec<Vec<(String, usize)>> {
        let (mut seen, mut out) = (BTreeSet::new(), Vec::new());
        for start in self.edges.keys() {
            // A shortest way back to `start`, breadth first: `from` holds each file's way in.
            let (mut from, mut queue) = (BTreeMap::new(), VecDeque::from([start]));
            while let Some(f) = queue.pop_front().filter(|_| !from.contains_key(start)) {
                for to in self.edges.get(f).into_iter().flat_map(|e| e.keys()) {
                    from.entry(to).or_insert_with(|| (queue.push_back(to), f).1);
                }
            }
            let (mut ring, mut at) = (Vec::new(), from.get(start).copied());
            while let Some(f) = at.filter(|f| *f != start) {
                (ring, at) = ([vec![f], ring].concat(), Some(from[f]));
            }
            ring.insert(0, start);
            if at.is_some() && seen.insert(ring.iter().copied().collect::<BTreeSet<_>>()) {
                let to = |i: usize| *ring.get(i + 1).unwrap_or(&start);
                let lines = (0..ring.len()).map(|i| (ring[i].clone(), self.edges[ring[i]][to(i)]));
                out.push(lines.chain([(start.clone(), 0)]).collect());
            }
        }
        out
    }
}

/// A `use` tree's leaves: each path (a glob's ends in `*`) with its line, and the name it binds
/// (none for a glob and `as _`).
fn leaves(t: &syn::UseTree, pre: &[String]) -> Vec<(Option<String>, Bound)> {
    use syn::UseTree as U;
    let with = |i: &dyn ToString| [pre, &[i.to_string()]].concat();
    let line = |i: &syn::Ident| i.span().start().line;
    let (name, path, line) = match t {
        U::Path(p) => return leaves(&p.tree, &with(&p.ident)),
        U::Group(g) => return g.items.iter().flat_map(|t| leaves(t, pre)).collect(),
        U::Name(n) if n.ident == "self" => (pre.last().cloned(), pre.to_vec(), line(&n.ident)),
        U::Name(n) => (Some(n.ident.to_string()), with(&n.ident), line(&n.ident)),
        U::Rename(r) => {
            let name = (r.rename != "_").then(|| r.rename.to_string());
            (name, with(&r.ident), line(&r.ident))
        }
        U::Glob(g) => (None, with(&"*"), g.star_token.span.start().line),
    };
    vec![(name, (path, line))]
}

/// Every `a::b..` in code (attributes, macros' tokens and a `use` in a function too; `$crate`
/// is read as `crate`), with its line.
fn paths(tokens: TokenStream, out: &mut dyn FnMut(Bound)) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let colon = |t: &TokenTree| matches!(t, TokenTree::Punct(p) if p.as_char() == ':');
    let colons = |k: usize| tokens.iter().skip(k).take(2).filter(|t| colon(t)).count() == 2;
    let mut i = 0;
    while i < tokens.len() {
        if let TokenTree::Group(g) = &tokens[i] {
            paths(g.stream(), out);
        }
        let mut segs = Vec::new();
        while let Some(TokenTree::Ident(id)) = tokens.get(i + 3 * segs.len()) {
            segs.push(id.to_string());
            if !colons(i + 3 * segs.len() - 2) {
                break;
            }
        }
        if segs.len() > 1 {
            let line = tokens[i].span().start().line;
            i += 3 * (segs.len() - 1);
            out((segs, line));
        }
        i += 1;
    }
}

/// Asserts `g` has no circle, and that it saw at least `files` files and `edges` edges (or it
/// proves nothing).
pub fn assert_no_circle(what: &str, g: &Graph, files: usize, edges: usize) {
    let files_seen: BTreeSet<_> = g.modules.values().map(|m| &m.file).collect();
    let seen = files_seen.len();
    let n: usize = g.edges.values().map(|e| e.len()).sum();
    eprintln!("{what}: {seen} module files, {n} import edges");
    assert!(seen >= files && n >= edges, "{seen} files, {n} edges");
    let shown: Vec<String> = g.cycles().iter().map(|c| chain(c)).collect();
    let (k, shown) = (shown.len(), shown.join("\n  "));
    assert!(k == 0, "{k} import circles in {what}:\n  {shown}");
}

/// A circle as printed, FILE:LINE naming the next: `src/a.rs:3 -> src/b.rs:9 -> src/a.rs`.
pub fn chain(cycle: &[(String, usize)]) -> String {
    let (last, links) = cycle.split_last().expect("a closed chain");
    let links: String = links.iter().map(|(f, l)| format!("{f}:{l} -> ")).collect();
    links + &last.0
}
