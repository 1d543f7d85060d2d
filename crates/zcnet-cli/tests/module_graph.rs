//! Issue 32's acceptance, checked on the source: the CLI has no import cycle, and the library's
//! `sys` imports nothing from the modules above it.
//!
//! Both read the file-level import graph of a crate's `src` tree, built here with `syn`:
//!
//! - a node is a module file; an inline module (`mod tests { .. }`) belongs to its file;
//! - an edge A -> B is a path in A that names B or something in it: a `use` tree, or a path in
//!   code or in a macro's tokens, resolved from `crate::`, `super::`, `self::`, a child module's
//!   name, or a name a `use` (or a glob) brought in, to the deepest module file that is a
//!   prefix of it. An item belongs to the file of its module; re-exports are not followed, so
//!   `crate::measure::Run` names `measure/mod.rs` even where `Run` is defined further down;
//! - `mod x;` is no edge: a parent declaring its children does not use them. A parent that
//!   calls `child::f()` does, so a child that uses `super::helper` closes a cycle with a parent
//!   that dispatches to it: a helper that siblings share lives in a leaf module of its own.
//!
//! Names the resolver cannot place (locals, the prelude, other crates' items) are no edge, and a
//! path in code that stops at a module (a local variable named like one) is none either.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

type ModId = usize;
type FileId = usize;

/// Past this many hops through `use` bindings and globs a name is taken as unresolvable: only
/// `use` items naming each other in a loop get that far.
const MAX_HOPS: usize = 16;

/// A logical module: a file's own, or an inline `mod x { .. }` within a file.
struct Module {
    file: FileId,
    parent: Option<ModId>,
    root: ModId,
    children: BTreeMap<String, ModId>,
    /// What each name a `use` binds here stands for (several: a name can be bound in a type and
    /// in a value namespace, or by `use` items in different functions of the module).
    uses: BTreeMap<String, Vec<Vec<String>>>,
    /// The paths of this module's `use path::*`.
    globs: Vec<Vec<String>>,
}

/// Where a path lands: the deepest module on its way, and whether it goes on past that module
/// to name something in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    module: ModId,
    item: bool,
}

/// A `use` tree's leaf: the whole path, the name it binds (none for a glob or `as _`), and the
/// line where it is written.
struct Leaf {
    path: Vec<String>,
    binds: Option<String>,
    glob: bool,
    line: usize,
}

/// The import graph of one or more crate roots (a library, its binaries).
struct Graph {
    /// Each file as shown: relative to the directory the graph was built in.
    files: Vec<String>,
    modules: Vec<Module>,
    /// Crate names other roots may use (`zcnet_cli::` in a binary) and their root modules.
    externs: BTreeMap<String, ModId>,
    /// (from, to) -> the first line of `from` that names `to`.
    edges: BTreeMap<(FileId, FileId), usize>,
    /// Names already looked up, and those being looked up: globs that import each other (a
    /// child's `use super::*` under a parent's `use child::*`) would otherwise be followed
    /// round and round, each hop trying every glob again.
    lookups: RefCell<BTreeMap<(ModId, String), Option<Target>>>,
    visiting: RefCell<BTreeSet<(ModId, String)>>,
}

impl Graph {
    /// The graph of the crates whose root files are `roots` (with the crate's name where other
    /// roots may name it), under `base`, read by `read`.
    fn build(
        base: &Path,
        roots: &[(&str, Option<&str>)],
        read: &dyn Fn(&Path) -> Option<String>,
    ) -> Graph {
        let mut loader = Loader {
            base,
            read,
            graph: Graph {
                files: Vec::new(),
                modules: Vec::new(),
                externs: BTreeMap::new(),
                edges: BTreeMap::new(),
                lookups: RefCell::default(),
                visiting: RefCell::default(),
            },
            asts: Vec::new(),
        };
        for &(file, name) in roots {
            let root = loader.load(&base.join(file), None, true);
            if let Some(name) = name {
                loader.graph.externs.insert(name.to_owned(), root);
            }
        }
        let Loader {
            mut graph, asts, ..
        } = loader;
        let file_modules: Vec<ModId> = (0..graph.modules.len())
            .filter(|&m| graph.is_file_module(m))
            .collect();
        let mut edges = BTreeMap::new();
        for m in file_modules {
            let file = graph.modules[m].file;
            let mut walk = Edges {
                graph: &graph,
                stack: vec![m],
                edges: &mut edges,
            };
            walk.visit_file(asts[file].as_ref().expect("a loaded file"));
        }
        graph.edges = edges;
        graph
    }

    /// The files `file` has an edge to.
    fn edges_from(&self, file: &str) -> BTreeSet<&str> {
        self.edges
            .keys()
            .filter(|(from, _)| self.files[*from] == file)
            .map(|&(_, to)| self.files[to].as_str())
            .collect()
    }

    /// The first line of `from` that names `to`.
    fn line(&self, from: &str, to: &str) -> Option<usize> {
        self.edges
            .iter()
            .find(|((f, t), _)| self.files[*f] == from && self.files[*t] == to)
            .map(|(_, &line)| line)
    }

    /// Whether `m` is the module of a file (not an inline module within one).
    fn is_file_module(&self, m: ModId) -> bool {
        self.modules[m]
            .parent
            .is_none_or(|p| self.modules[p].file != self.modules[m].file)
    }

    /// The parent of `m`, through inline modules too.
    fn parent(&self, m: ModId) -> Option<ModId> {
        self.modules[m].parent
    }

    /// Resolves `path` as written in module `m`.
    fn resolve(&self, m: ModId, path: &[String], hops: usize) -> Option<Target> {
        if hops > MAX_HOPS {
            return None;
        }
        let (first, mut rest) = path.split_first()?;
        let mut here = match first.as_str() {
            "crate" | "$crate" => self.modules[m].root,
            "self" => m,
            "super" => self.parent(m)?,
            "::" => {
                let (name, after) = rest.split_first()?;
                rest = after;
                *self.externs.get(name)?
            }
            name => {
                let t = self.lookup(m, name, hops)?;
                if t.item {
                    return Some(t);
                }
                t.module
            }
        };
        for seg in rest {
            if seg == "super" {
                here = self.parent(here)?;
            } else if let Some(&child) = self.modules[here].children.get(seg) {
                here = child;
            } else {
                return Some(Target {
                    module: here,
                    item: true,
                });
            }
        }
        Some(Target {
            module: here,
            item: false,
        })
    }

    /// What `name` stands for in module `m`: a child module, a name a `use` bound, a name a
    /// glob brought in, or another crate of the graph, in Rust's order of precedence.
    fn lookup(&self, m: ModId, name: &str, hops: usize) -> Option<Target> {
        let key = (m, name.to_owned());
        if let Some(&known) = self.lookups.borrow().get(&key) {
            return known;
        }
        if !self.visiting.borrow_mut().insert(key.clone()) {
            return None; // a glob cycle back to this very lookup
        }
        let found = self.lookup_uncached(m, name, hops);
        self.visiting.borrow_mut().remove(&key);
        self.lookups.borrow_mut().insert(key, found);
        found
    }

    fn lookup_uncached(&self, m: ModId, name: &str, hops: usize) -> Option<Target> {
        let module = &self.modules[m];
        if let Some(&child) = module.children.get(name) {
            return Some(Target {
                module: child,
                item: false,
            });
        }
        if let Some(paths) = module.uses.get(name) {
            // Bound here, maybe to another crate: then it is no module of this graph, whatever
            // a glob or a crate name would have said.
            return paths.iter().find_map(|p| self.resolve(m, p, hops + 1));
        }
        for glob in &module.globs {
            if let Some(Target {
                module: g,
                item: false,
            }) = self.resolve(m, glob, hops + 1)
            {
                if g != m {
                    if let Some(t) = self.lookup(g, name, hops + 1) {
                        return Some(t);
                    }
                }
            }
        }
        self.externs.get(name).map(|&root| Target {
            module: root,
            item: false,
        })
    }

    /// Every cycle, as chains of `(file, line)`: the line of each file that names the next one,
    /// the chain closing on its first file (with line 0). Within each strongly connected
    /// component one shortest cycle is listed through every edge of it, so that every import
    /// taking part in a cycle is shown (all elementary cycles of a large component are too many
    /// to read).
    fn cycles(&self) -> Vec<Vec<(&str, usize)>> {
        let mut found: BTreeSet<Vec<FileId>> = BTreeSet::new();
        for component in self.components() {
            if component.len() < 2 {
                continue;
            }
            let inside: BTreeSet<FileId> = component.iter().copied().collect();
            for (&(u, v), _) in self.edges.iter() {
                if u == v || !inside.contains(&u) || !inside.contains(&v) {
                    continue;
                }
                if let Some(mut cycle) = self.shortest_path(v, u, &inside) {
                    cycle.insert(0, u);
                    cycle.pop();
                    // One rotation per cycle: starting at its least file.
                    let start = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap();
                    cycle.rotate_left(start);
                    found.insert(cycle);
                }
            }
        }
        found
            .into_iter()
            .map(|cycle| {
                let mut chain: Vec<(&str, usize)> = cycle
                    .iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let next = cycle[(i + 1) % cycle.len()];
                        (self.files[f].as_str(), self.edges[&(f, next)])
                    })
                    .collect();
                chain.push((self.files[cycle[0]].as_str(), 0));
                chain
            })
            .collect()
    }

    /// The files of a shortest path `from` ->* `to` through `inside`, both ends included.
    fn shortest_path(
        &self,
        from: FileId,
        to: FileId,
        inside: &BTreeSet<FileId>,
    ) -> Option<Vec<FileId>> {
        let mut came_from: BTreeMap<FileId, FileId> = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        let mut seen = BTreeSet::from([from]);
        while let Some(f) = queue.pop_front() {
            if f == to {
                let mut path = vec![to];
                let mut at = to;
                while at != from {
                    at = came_from[&at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            for (&(_, next), _) in self.edges.range((f, 0)..(f + 1, 0)) {
                if inside.contains(&next) && seen.insert(next) {
                    came_from.insert(next, f);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// The strongly connected components (Tarjan's algorithm).
    fn components(&self) -> Vec<Vec<FileId>> {
        struct Tarjan<'g> {
            graph: &'g Graph,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<FileId>,
            next: usize,
            out: Vec<Vec<FileId>>,
        }
        impl Tarjan<'_> {
            fn visit(&mut self, v: FileId) {
                self.index[v] = Some(self.next);
                self.low[v] = self.next;
                self.next += 1;
                self.stack.push(v);
                self.on_stack[v] = true;
                for (&(_, w), _) in self.graph.edges.range((v, 0)..(v + 1, 0)) {
                    match self.index[w] {
                        None => {
                            self.visit(w);
                            self.low[v] = self.low[v].min(self.low[w]);
                        }
                        Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                        Some(_) => {}
                    }
                }
                if Some(self.low[v]) == self.index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    self.out.push(component);
                }
            }
        }
        let n = self.files.len();
        let mut t = Tarjan {
            graph: self,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if t.index[v].is_none() {
                t.visit(v);
            }
        }
        t.out
    }
}

/// Reads the files of a crate: the module tree and the names each module's `use` items bind.
struct Loader<'a> {
    base: &'a Path,
    read: &'a dyn Fn(&Path) -> Option<String>,
    graph: Graph,
    /// Each file's syntax, by `FileId` (`None` while its children load).
    asts: Vec<Option<syn::File>>,
}

impl Loader<'_> {
    /// Loads the module file `path` as a child of `parent`, and the files it declares.
    /// `mod_rs`: its children live beside it (a crate root, a `mod.rs`, a `#[path]` file)
    /// rather than in a directory named after it.
    fn load(&mut self, path: &Path, parent: Option<ModId>, mod_rs: bool) -> ModId {
        let text = (self.read)(path).unwrap_or_else(|| panic!("cannot read {}", path.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = self.graph.files.len();
        self.graph.files.push(shown(self.base, path));
        self.asts.push(None);
        let m = self.new_module(file, parent);
        let dir = if mod_rs {
            path.parent().unwrap_or(Path::new("")).to_path_buf()
        } else {
            path.with_extension("")
        };
        let file_dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut declare = Declare {
            loader: self,
            stack: vec![(m, dir)],
            file_dir,
        };
        declare.visit_file(&ast);
        self.asts[file] = Some(ast);
        m
    }

    fn new_module(&mut self, file: FileId, parent: Option<ModId>) -> ModId {
        let id = self.graph.modules.len();
        let root = parent.map_or(id, |p| self.graph.modules[p].root);
        self.graph.modules.push(Module {
            file,
            parent,
            root,
            children: BTreeMap::new(),
            uses: BTreeMap::new(),
            globs: Vec::new(),
        });
        id
    }
}

/// `path` relative to `base`, `..` folded: `src/bench/mod.rs`.
fn shown(base: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(base).unwrap_or(path);
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::ParentDir if parts.last().is_some_and(|p| p != "..") => {
                parts.pop();
            }
            Component::CurDir => {}
            c => parts.push(c.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// The first pass over a file: its modules (loading the files they declare) and its bindings.
struct Declare<'l, 'a> {
    loader: &'l mut Loader<'a>,
    /// The module being read and the directory its `mod x;` children are found in.
    stack: Vec<(ModId, PathBuf)>,
    /// The file's own directory, which `#[path]` is relative to.
    file_dir: PathBuf,
}

impl<'ast> Visit<'ast> for Declare<'_, '_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let (m, dir) = self.stack.last().cloned().expect("a module");
        let name = item.ident.to_string();
        let child = match &item.content {
            Some((_, items)) => {
                let file = self.loader.graph.modules[m].file;
                let child = self.loader.new_module(file, Some(m));
                self.stack.push((child, dir.join(&name)));
                for item in items {
                    self.visit_item(item);
                }
                self.stack.pop();
                child
            }
            None => {
                let (path, mod_rs) = match path_attr(&item.attrs) {
                    Some(p) => (self.file_dir.join(p), true),
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let nested = dir.join(&name).join("mod.rs");
                        if (self.loader.read)(&flat).is_some() {
                            (flat, false)
                        } else {
                            (nested, true)
                        }
                    }
                };
                self.loader.load(&path, Some(m), mod_rs)
            }
        };
        self.loader.graph.modules[m].children.insert(name, child);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let m = self.stack.last().expect("a module").0;
        let module = &mut self.loader.graph.modules[m];
        for leaf in leaves(item) {
            if leaf.glob {
                module.globs.push(leaf.path);
            } else if let Some(name) = leaf.binds {
                module.uses.entry(name).or_default().push(leaf.path);
            }
        }
    }
}

/// The value of a `#[path = "..."]` attribute.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The leaves of a `use` item.
fn leaves(item: &syn::ItemUse) -> Vec<Leaf> {
    fn walk(prefix: &mut Vec<String>, tree: &syn::UseTree, out: &mut Vec<Leaf>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(prefix, &p.tree, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => out.push(named(prefix, &n.ident, Some(&n.ident))),
            syn::UseTree::Rename(r) => out.push(named(prefix, &r.ident, Some(&r.rename))),
            syn::UseTree::Glob(g) => out.push(Leaf {
                path: prefix.clone(),
                binds: None,
                glob: true,
                line: g.star_token.span.start().line,
            }),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    walk(prefix, tree, out);
                }
            }
        }
    }
    /// `prefix::ident as binds`, where `self` stands for the prefix itself.
    fn named(prefix: &[String], ident: &syn::Ident, binds: Option<&syn::Ident>) -> Leaf {
        let mut path = prefix.to_vec();
        let mut name = binds.map(ToString::to_string);
        if ident == "self" {
            if name.as_deref() == Some("self") {
                name = prefix.last().cloned();
            }
        } else {
            path.push(ident.to_string());
        }
        Leaf {
            path,
            binds: name.filter(|n| n != "_"),
            glob: false,
            line: ident.span().start().line,
        }
    }
    let mut prefix = Vec::new();
    if item.leading_colon.is_some() {
        prefix.push("::".to_owned());
    }
    let mut out = Vec::new();
    walk(&mut prefix, &item.tree, &mut out);
    out
}

/// The paths written in a macro's tokens (`format!("{}", crate::x::f())`), with their lines:
/// every `a::b..` and `$crate::..`, however the macro reads them.
fn macro_paths(tokens: TokenStream, out: &mut Vec<(Vec<String>, usize)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let colon = |i: usize| match tokens.get(i) {
        Some(TokenTree::Punct(p)) if p.as_char() == ':' => Some(p.spacing()),
        _ => None,
    };
    let colons = |i: usize| colon(i) == Some(Spacing::Joint) && colon(i + 1).is_some();
    let mut i = 0;
    while i < tokens.len() {
        let (mut path, line) = match (&tokens[i], tokens.get(i + 1)) {
            (TokenTree::Group(g), _) => {
                macro_paths(g.stream(), out);
                i += 1;
                continue;
            }
            (TokenTree::Punct(p), Some(TokenTree::Ident(id)))
                if p.as_char() == '$' && id == "crate" =>
            {
                i += 2;
                (vec!["$crate".to_owned()], id.span().start().line)
            }
            (TokenTree::Ident(id), _) => {
                let leading = i >= 2 && colons(i - 2);
                i += 1;
                let mut path = Vec::new();
                if leading {
                    path.push("::".to_owned());
                }
                path.push(id.to_string());
                (path, id.span().start().line)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        while colons(i) {
            match tokens.get(i + 2) {
                Some(TokenTree::Ident(id)) => {
                    path.push(id.to_string());
                    i += 3;
                }
                _ => break,
            }
        }
        if (path.len() >= 2 && path[0] != "::") || path.len() >= 3 {
            out.push((path, line));
        }
    }
}

/// The second pass over a file: an edge for every path that names another module file.
struct Edges<'g, 'e> {
    graph: &'g Graph,
    /// The module being read (inline modules pushed on entry).
    stack: Vec<ModId>,
    edges: &'e mut BTreeMap<(FileId, FileId), usize>,
}

impl Edges<'_, '_> {
    fn here(&self) -> ModId {
        *self.stack.last().expect("a module")
    }

    /// Records the edge of `path` written at `line`; `use_tree`: a `use` names a module itself
    /// too, code only what is in one.
    fn edge(&mut self, path: &[String], line: usize, use_tree: bool) {
        let m = self.here();
        if let Some(t) = self.graph.resolve(m, path, 0) {
            if !t.item && !use_tree {
                return;
            }
            let from = self.graph.modules[m].file;
            let to = self.graph.modules[t.module].file;
            if from != to {
                let first = self.edges.entry((from, to)).or_insert(line);
                *first = (*first).min(line);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Edges<'_, '_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // `mod x;` declares, it does not use; an inline module is read as part of its file.
        if let Some((_, items)) = &item.content {
            let m = self.here();
            let Some(&child) = self.graph.modules[m].children.get(&item.ident.to_string()) else {
                return;
            };
            self.stack.push(child);
            for item in items {
                self.visit_item(item);
            }
            self.stack.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for leaf in leaves(item) {
            self.edge(&leaf.path, leaf.line, true);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = Vec::new();
        if path.leading_colon.is_some() {
            segments.push("::".to_owned());
        }
        segments.extend(path.segments.iter().map(|s| s.ident.to_string()));
        if let Some(first) = path.segments.first() {
            self.edge(&segments, first.ident.span().start().line, false);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let mut paths = Vec::new();
        macro_paths(mac.tokens.clone(), &mut paths);
        for (path, line) in paths {
            self.edge(&path, line, false);
        }
        visit::visit_macro(self, mac);
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(in crate::x)` limits who sees an item; it uses nothing.
    }
}

/// Reads a file from the disk.
fn disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `crates/NAME`.
fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .join(name)
}

/// A chain as printed: `src/a.rs:3 -> src/b.rs:9 -> src/a.rs`.
fn chain(cycle: &[(&str, usize)]) -> String {
    let (last, links) = cycle.split_last().expect("a closed chain");
    let mut text = String::new();
    for (file, line) in links {
        text.push_str(&format!("{file}:{line} -> "));
    }
    text.push_str(last.0);
    text
}

#[test]
fn the_cli_has_no_import_cycle() {
    let dir = crate_dir("zcnet-cli");
    let mut roots = vec![
        ("src/lib.rs".to_owned(), Some("zcnet_cli")),
        ("src/main.rs".to_owned(), None),
    ];
    let mut bins: Vec<String> = std::fs::read_dir(dir.join("src/bin"))
        .expect("src/bin")
        .map(|e| format!("src/bin/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    bins.sort();
    roots.extend(bins.into_iter().map(|b| (b, None)));
    let roots: Vec<(&str, Option<&str>)> = roots.iter().map(|(f, n)| (f.as_str(), *n)).collect();
    let graph = Graph::build(&dir, &roots, &disk);
    // The check sees the tree, or it proves nothing.
    let (files, edges) = (graph.files.len(), graph.edges.len());
    eprintln!("crates/zcnet-cli: {files} module files, {edges} import edges");
    assert!(files > 40 && edges > 100, "{files} files, {edges} edges");
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "{} import cycles in crates/zcnet-cli (each FILE:LINE names the next file):\n{}",
        cycles.len(),
        cycles
            .iter()
            .map(|c| format!("  {}", chain(c)))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_library_sys_imports_nothing_from_above() {
    let dir = crate_dir("zcnet");
    let graph = Graph::build(&dir, &[("src/lib.rs", Some("zcnet"))], &disk);
    let sys = |f: &str| f.starts_with("src/sys/");
    assert!(
        graph.files.iter().filter(|f| sys(f)).count() > 5,
        "{:?}",
        graph.files
    );
    let above: Vec<String> = graph
        .edges
        .iter()
        .filter(|&(&(from, to), _)| sys(&graph.files[from]) && !sys(&graph.files[to]))
        .map(|(&(from, to), line)| format!("  {}:{line} -> {}", graph.files[from], graph.files[to]))
        .collect();
    assert!(
        above.is_empty(),
        "src/sys/ imports from the modules above it:\n{}",
        above.join("\n")
    );
}

/// Issue 50: `sys` is the kernel's ABI and its calls, nothing else. Each of its leaf files holds
/// `unsafe` code, or kernel ABI: it is `abi.rs`, names it, or lays out a `#[repr(C)]` struct.
/// Policy without either (a state machine, a cache, a retry rule) lives above `sys`. A `mod.rs`
/// only gathers its area (and `sys/mod.rs` the errno helpers every call shares).
#[test]
fn every_sys_file_holds_unsafe_code_or_kernel_abi() {
    let dir = crate_dir("zcnet");
    let graph = Graph::build(&dir, &[("src/lib.rs", Some("zcnet"))], &disk);
    let abi = graph
        .files
        .iter()
        .position(|f| f == "src/sys/abi.rs")
        .expect("src/sys/abi.rs is in the graph");
    let names_abi = |i: usize| graph.edges.keys().any(|&(from, to)| from == i && to == abi);
    let mut without = Vec::new();
    let mut leaves = 0;
    for (i, f) in graph.files.iter().enumerate() {
        if !f.starts_with("src/sys/") || f.ends_with("/mod.rs") || i == abi {
            continue;
        }
        leaves += 1;
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        // The file's own code: its unit tests (a `#[cfg(test)]` module at the end) aside.
        let code = text.split("\n#[cfg(test)]\nmod ").next().unwrap_or("");
        let unsafe_code = ["unsafe {", "unsafe fn ", "unsafe impl "]
            .iter()
            .any(|t| code.contains(t));
        if !(unsafe_code || names_abi(i) || code.contains("#[repr(C)]")) {
            without.push(f.clone());
        }
    }
    assert!(leaves > 10, "{:?}", graph.files);
    assert!(
        without.is_empty(),
        "src/sys/ files with neither unsafe code nor kernel ABI (move them above sys):\n  {}",
        without.join("\n  ")
    );
}

/// The graph of an inline crate: `(file, text)` pairs, `lib.rs` its root.
fn fixture(files: &[(&str, &str)]) -> Graph {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(f, t)| (PathBuf::from(f), (*t).to_owned()))
        .collect();
    Graph::build(Path::new(""), &[("lib.rs", Some("fixture"))], &|p| {
        files.get(p).cloned()
    })
}

#[test]
fn two_files_naming_each_other_are_a_cycle() {
    let g = fixture(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub fn f() {\n    crate::b::g();\n}\n"),
        ("b.rs", "pub fn g() {}\nfn h() {\n    super::a::f();\n}\n"),
    ]);
    assert_eq!(g.edges_from("a.rs"), BTreeSet::from(["b.rs"]));
    assert_eq!(g.edges_from("b.rs"), BTreeSet::from(["a.rs"]));
    assert_eq!(g.edges_from("lib.rs"), BTreeSet::new());
    let cycles = g.cycles();
    assert_eq!(cycles, vec![vec![("a.rs", 2), ("b.rs", 3), ("a.rs", 0)]]);
    assert_eq!(chain(&cycles[0]), "a.rs:2 -> b.rs:3 -> a.rs");
}

#[test]
fn a_parent_declaring_its_child_is_no_cycle_but_dispatching_to_it_is() {
    let declares = fixture(&[
        ("lib.rs", "mod p;\n"),
        ("p/mod.rs", "mod c;\npub fn helper() {}\n"),
        ("p/c.rs", "use super::helper;\nfn f() { helper() }\n"),
    ]);
    assert_eq!(declares.edges_from("p/c.rs"), BTreeSet::from(["p/mod.rs"]));
    assert_eq!(declares.edges_from("p/mod.rs"), BTreeSet::new());
    assert!(declares.cycles().is_empty());

    let dispatches = fixture(&[
        ("lib.rs", "mod p;\n"),
        (
            "p.rs",
            "mod c;\npub fn helper() {}\npub fn run() {\n    c::f()\n}\n",
        ),
        ("p/c.rs", "pub fn f() {\n    super::helper()\n}\n"),
    ]);
    assert_eq!(
        dispatches.cycles(),
        vec![vec![("p.rs", 4), ("p/c.rs", 2), ("p.rs", 0)]]
    );
}

#[test]
fn a_use_group_gives_an_edge_per_leaf() {
    let g = fixture(&[
        ("lib.rs", "mod a;\nmod b;\nmod x;\n"),
        ("a.rs", ""),
        ("b.rs", "pub mod c;\n"),
        ("b/c.rs", ""),
        ("x.rs", "use crate::{a, b::{c}};\n"),
    ]);
    assert_eq!(g.edges_from("x.rs"), BTreeSet::from(["a.rs", "b/c.rs"]));
    // `b::{..}` is a prefix, not a leaf: `b.rs` itself is not named.
    assert!(!g.edges_from("x.rs").contains("b.rs"));
}

#[test]
fn super_super_climbs_two_modules() {
    let g = fixture(&[
        ("lib.rs", "mod x;\nmod p;\n"),
        ("x.rs", "pub fn g() {}\n"),
        ("p.rs", "mod q;\n"),
        ("p/q.rs", "fn f() {\n    super::super::x::g();\n}\n"),
    ]);
    assert_eq!(g.edges_from("p/q.rs"), BTreeSet::from(["x.rs"]));
    assert_eq!(g.line("p/q.rs", "x.rs"), Some(2));
}

#[test]
fn names_from_use_and_globs_resolve_to_the_deepest_file() {
    let g = fixture(&[
        ("lib.rs", "pub mod m;\nmod u;\nmod v;\nmod w;\n"),
        ("m/mod.rs", "pub mod deep;\npub struct Top;\n"),
        ("m/deep.rs", "pub fn f() {}\n"),
        // A name `use` brought in, then a path through it.
        ("u.rs", "use crate::m;\nfn g() {\n    m::deep::f();\n}\n"),
        // A glob brings in the parent's child modules, and a macro's tokens are paths too.
        (
            "v.rs",
            "mod tests {\n    use crate::m::*;\n    fn t() { assert!(deep::f() == ()); }\n}\n",
        ),
        // A local named like a module and another crate's path are no edges.
        (
            "w.rs",
            "fn h(m: u8) -> u8 {\n    let x = m;\n    std::convert::identity(x)\n}\n",
        ),
    ]);
    assert_eq!(
        g.edges_from("u.rs"),
        BTreeSet::from(["m/mod.rs", "m/deep.rs"])
    );
    assert_eq!(g.line("u.rs", "m/deep.rs"), Some(3));
    assert_eq!(
        g.edges_from("v.rs"),
        BTreeSet::from(["m/mod.rs", "m/deep.rs"])
    );
    assert_eq!(g.edges_from("w.rs"), BTreeSet::new());
}
