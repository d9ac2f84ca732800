//! Checks that the modules of a Rust crate form a stack.
//!
//! `cargo run -p module-stack` reads the crates of this workspace from
//! their sources (`src/lib.rs`, `mlx5dv-sim/src/lib.rs`, the sim's runner,
//! and the two benches), draws an arrow from one module to another where
//! the first names an item the second defines, and fails (exit 1) when
//!
//! - the arrows between files make a circle,
//! - the arrows between top-level modules make a circle, or
//! - an arrow between top-level modules points up the crate's module map:
//!   the numbered list under a `## Module map` heading in the root file's
//!   docs, lowest layer first, where every top-level module must be named
//!   (in backticks, before the line's first colon) exactly once and may
//!   use only modules of its own layer or of a lower one; a crate of more
//!   than one top-level module must have one.
//!
//! What counts as an arrow: every `use` path and every path of two or more
//! segments in the code (types, expressions, patterns, paths inside macro
//! calls), resolved through the crate's own imports and re-exports to the
//! module that defines the item, as the compiler would. A re-export
//! (`pub use child::Item`) is itself an arrow from the re-exporting file to
//! the defining one, but a path that goes through it arrives at the
//! definition, so a folder's `mod.rs` that re-exports its children sits
//! above them, and a child that names `super::Item` depends on the sibling
//! that defines `Item`. Test code (`#[cfg(test)]` items and modules) is
//! left out; so are names of other crates. Method calls, which name no
//! path, draw no arrow: the check is about what the source names.
//!
//! Why a checker of our own rather than `cargo modules dependencies
//! --acyclic`: this one builds in seconds from `syn` (already in the
//! dependency tree through bindgen) where cargo-modules builds
//! rust-analyzer; it reads the module map in the docs, so the map cannot
//! drift from the code; and it checks files as well as top-level modules.
//!
//! Usage: `module-stack [--verbose] [ROOT.rs ...]`; with no roots, the
//! workspace's own. `--verbose` prints every arrow between top-level
//! modules, and the files each one comes from.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::Visit;

/// What a name in a module's scope stands for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// A module.
    Module(usize),
    /// An item defined in this module.
    Item(usize),
}

/// One module: a file or an inline `mod name { ... }`.
#[derive(Default)]
struct Module {
    /// `qp::rc`; empty for the root.
    path: Vec<String>,
    /// The file it is written in (an index into `Crate::files`).
    file: usize,
    parent: Option<usize>,
    children: HashMap<String, usize>,
    /// Items defined here (functions, types, traits, constants, macros).
    defs: BTreeSet<String>,
    /// `use` imports: the name they bind and the path they name.
    imports: HashMap<String, Vec<String>>,
    /// `use path::*` imports.
    globs: Vec<Vec<String>>,
    /// Every path the module's code names (use paths included).
    named: Vec<Vec<String>>,
}

struct Crate {
    root_file: PathBuf,
    files: Vec<PathBuf>,
    modules: Vec<Module>,
    /// `#[macro_export]` macros: reachable as `crate::name!`.
    exported_macros: HashMap<String, usize>,
    /// The numbered lines under `## Module map` in the root's docs.
    map: Vec<BTreeSet<String>>,
    errors: Vec<String>,
}

fn is_test_cfg(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let text = a.meta.to_token_stream().to_string();
        let words: Vec<&str> = text
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .filter(|w| !w.is_empty())
            .collect();
        words.iter().any(|w| *w == "test" || *w == "doctest") && !words.contains(&"not")
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident("path") {
            return None;
        }
        match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        }
    })
}

fn doc_text(attrs: &[syn::Attribute]) -> String {
    let mut out = String::new();
    for a in attrs {
        if !a.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &a.meta {
            if let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
            {
                out.push_str(&s.value());
                out.push('\n');
            }
        }
    }
    out
}

/// The module map: the numbered list under `## Module map`, one set of
/// backticked names per line (`[`name`]` and `` `name` `` both count; a
/// path's first segment is the module).
fn parse_map(docs: &str) -> Vec<BTreeSet<String>> {
    let mut layers = Vec::new();
    let mut inside = false;
    let mut current: Option<BTreeSet<String>> = None;
    for line in docs.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            if inside {
                break;
            }
            inside = t
                .trim_start_matches('#')
                .trim()
                .eq_ignore_ascii_case("module map");
            continue;
        }
        if !inside {
            continue;
        }
        let numbered = t
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            if let Some(l) = current.take() {
                layers.push(l);
            }
            current = Some(BTreeSet::new());
        } else {
            // A continuation line describes; a blank line ends the list.
            if t.is_empty() {
                if let Some(l) = current.take() {
                    layers.push(l);
                }
            }
            continue;
        }
        // Only the numbered line's text before a colon names the layer's
        // modules.
        let head = t.split(": ").next().unwrap_or(t);
        let l = current.as_mut().expect("set above");
        for (i, piece) in head.split('`').enumerate() {
            if i % 2 == 1 {
                let name = piece.trim_start_matches("crate::");
                let first = name.split("::").next().unwrap_or(name);
                if !first.is_empty() && first.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    l.insert(first.to_string());
                }
            }
        }
    }
    if let Some(l) = current.take() {
        layers.push(l);
    }
    layers
}

/// Collects the paths a module's code names.
struct PathCollector<'a> {
    out: &'a mut Vec<Vec<String>>,
}

impl PathCollector<'_> {
    fn tokens(&mut self, ts: TokenStream) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            if let TokenTree::Group(g) = &tokens[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            // A path: IDENT (:: IDENT)+ where the first is crate/super/self.
            if let TokenTree::Ident(id) = &tokens[i] {
                let first = id.to_string();
                if first == "crate" || first == "super" || first == "self" {
                    let mut segs = vec![first];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() && is_colon(&tokens[j]) && is_colon(&tokens[j + 1]) {
                        match &tokens[j + 2] {
                            TokenTree::Ident(n) => {
                                segs.push(n.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segs.len() > 1 {
                        self.out.push(segs);
                    }
                    i = j;
                    continue;
                }
            }
            i += 1;
        }
    }
}

fn is_colon(t: &TokenTree) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == ':')
}

impl<'ast> Visit<'ast> for PathCollector<'_> {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
    fn visit_item_use(&mut self, _: &'ast syn::ItemUse) {}
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if item_attrs(i).is_some_and(is_test_cfg) {
            return;
        }
        syn::visit::visit_item(self, i);
    }
    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs = match i {
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            _ => return syn::visit::visit_impl_item(self, i),
        };
        if !is_test_cfg(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.out
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
}

fn item_attrs(i: &syn::Item) -> Option<&[syn::Attribute]> {
    Some(match i {
        syn::Item::Const(x) => &x.attrs,
        syn::Item::Enum(x) => &x.attrs,
        syn::Item::ExternCrate(x) => &x.attrs,
        syn::Item::Fn(x) => &x.attrs,
        syn::Item::ForeignMod(x) => &x.attrs,
        syn::Item::Impl(x) => &x.attrs,
        syn::Item::Macro(x) => &x.attrs,
        syn::Item::Mod(x) => &x.attrs,
        syn::Item::Static(x) => &x.attrs,
        syn::Item::Struct(x) => &x.attrs,
        syn::Item::Trait(x) => &x.attrs,
        syn::Item::TraitAlias(x) => &x.attrs,
        syn::Item::Type(x) => &x.attrs,
        syn::Item::Union(x) => &x.attrs,
        syn::Item::Use(x) => &x.attrs,
        _ => return None,
    })
}

fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    imports: &mut Vec<(String, Vec<String>)>,
    globs: &mut Vec<Vec<String>>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, imports, globs);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    imports.push((last.clone(), prefix.clone()));
                }
            } else {
                let mut full = prefix.clone();
                full.push(name.clone());
                imports.push((name, full));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                full.push(name);
            }
            imports.push((r.rename.to_string(), full));
        }
        syn::UseTree::Glob(_) => globs.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, imports, globs);
            }
        }
    }
}

impl Crate {
    fn load(root_file: &Path) -> Crate {
        let mut c = Crate {
            root_file: root_file.to_path_buf(),
            files: Vec::new(),
            modules: Vec::new(),
            exported_macros: HashMap::new(),
            map: Vec::new(),
            errors: Vec::new(),
        };
        match std::fs::read_to_string(root_file)
            .map_err(|e| e.to_string())
            .and_then(|s| syn::parse_file(&s).map_err(|e| e.to_string()))
        {
            Ok(file) => {
                c.map = parse_map(&doc_text(&file.attrs));
                c.files.push(root_file.to_path_buf());
                c.modules.push(Module::default());
                c.add_items(0, &file.items, root_file, true);
            }
            Err(e) => c.errors.push(format!("{}: {e}", root_file.display())),
        }
        c
    }

    /// Reads `items` into module `m`, written in `file`; `dir_owner` is
    /// whether the file owns its directory (lib.rs, main.rs, mod.rs, or a
    /// `#[path]` file), so its child modules' files sit beside it.
    fn add_items(&mut self, m: usize, items: &[syn::Item], file: &Path, dir_owner: bool) {
        let mut named = Vec::new();
        for item in items {
            if item_attrs(item).is_some_and(is_test_cfg) {
                continue;
            }
            match item {
                syn::Item::Mod(im) => {
                    let name = im.ident.to_string();
                    let mut path = self.modules[m].path.clone();
                    path.push(name.clone());
                    let idx = self.modules.len();
                    self.modules.push(Module {
                        path,
                        file: self.modules[m].file,
                        parent: Some(m),
                        ..Module::default()
                    });
                    self.modules[m].children.insert(name.clone(), idx);
                    if let Some((_, inner)) = &im.content {
                        self.add_items(idx, inner, file, dir_owner);
                    } else {
                        let dir = if dir_owner {
                            file.parent().unwrap_or(Path::new(".")).to_path_buf()
                        } else {
                            file.with_extension("")
                        };
                        let (child_file, owner) = if let Some(p) = path_attr(&im.attrs) {
                            let f = file.parent().unwrap_or(Path::new(".")).join(p);
                            (f, true)
                        } else if dir.join(format!("{name}.rs")).exists() {
                            (dir.join(format!("{name}.rs")), false)
                        } else {
                            (dir.join(&name).join("mod.rs"), true)
                        };
                        match std::fs::read_to_string(&child_file)
                            .map_err(|e| e.to_string())
                            .and_then(|s| syn::parse_file(&s).map_err(|e| e.to_string()))
                        {
                            Ok(f) => {
                                self.files.push(child_file.clone());
                                self.modules[idx].file = self.files.len() - 1;
                                self.add_items(idx, &f.items, &child_file, owner);
                            }
                            Err(e) => self.errors.push(format!("{}: {e}", child_file.display())),
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let mut imports = Vec::new();
                    let mut globs = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut imports, &mut globs);
                    for (name, path) in imports {
                        named.push(path.clone());
                        self.modules[m].imports.insert(name, path);
                    }
                    for g in globs {
                        named.push(g.clone());
                        self.modules[m].globs.push(g);
                    }
                }
                other => {
                    let name = match other {
                        syn::Item::Const(x) => Some(x.ident.to_string()),
                        syn::Item::Enum(x) => Some(x.ident.to_string()),
                        syn::Item::Fn(x) => Some(x.sig.ident.to_string()),
                        syn::Item::Static(x) => Some(x.ident.to_string()),
                        syn::Item::Struct(x) => Some(x.ident.to_string()),
                        syn::Item::Trait(x) => Some(x.ident.to_string()),
                        syn::Item::TraitAlias(x) => Some(x.ident.to_string()),
                        syn::Item::Type(x) => Some(x.ident.to_string()),
                        syn::Item::Union(x) => Some(x.ident.to_string()),
                        syn::Item::Macro(x) => x.ident.as_ref().map(|i| i.to_string()),
                        _ => None,
                    };
                    if let syn::Item::ForeignMod(fm) = other {
                        for fi in &fm.items {
                            match fi {
                                syn::ForeignItem::Fn(f) => {
                                    self.modules[m].defs.insert(f.sig.ident.to_string());
                                }
                                syn::ForeignItem::Static(s) => {
                                    self.modules[m].defs.insert(s.ident.to_string());
                                }
                                _ => {}
                            }
                        }
                    }
                    if let (syn::Item::Macro(x), Some(n)) = (other, &name) {
                        if x.attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                            self.exported_macros.insert(n.clone(), m);
                        }
                    }
                    if let Some(n) = name {
                        self.modules[m].defs.insert(n);
                    }
                    let mut v = PathCollector { out: &mut named };
                    v.visit_item(other);
                }
            }
        }
        self.modules[m].named.extend(named);
    }

    /// What `name` stands for in module `m`'s scope.
    fn lookup(&self, m: usize, name: &str, depth: u32) -> Option<Target> {
        if depth > 32 {
            return None;
        }
        let module = &self.modules[m];
        if let Some(&c) = module.children.get(name) {
            return Some(Target::Module(c));
        }
        if module.defs.contains(name) {
            return Some(Target::Item(m));
        }
        if let Some(path) = module.imports.get(name) {
            return self.resolve(m, path, depth + 1);
        }
        if m == 0 {
            if let Some(&d) = self.exported_macros.get(name) {
                return Some(Target::Item(d));
            }
        }
        for g in &module.globs {
            if let Some(Target::Module(gm)) = self.resolve(m, g, depth + 1) {
                if gm != m {
                    if let Some(t) = self.lookup(gm, name, depth + 1) {
                        return Some(t);
                    }
                }
            }
        }
        None
    }

    /// Where the path `segs`, written in module `m`, leads.
    fn resolve(&self, m: usize, segs: &[String], depth: u32) -> Option<Target> {
        let mut it = segs.iter().peekable();
        let first = it.next()?;
        let mut cur = match first.as_str() {
            "crate" => Target::Module(0),
            "self" => Target::Module(m),
            "super" => {
                let mut p = self.modules[m].parent?;
                while it.peek().is_some_and(|s| *s == "super") {
                    it.next();
                    p = self.modules[p].parent?;
                }
                Target::Module(p)
            }
            "Self" => return None,
            name => self.lookup(m, name, depth)?,
        };
        for seg in it {
            match cur {
                Target::Item(_) => break,
                Target::Module(x) => match self.lookup(x, seg, depth + 1) {
                    Some(t) => cur = t,
                    None => break,
                },
            }
        }
        Some(cur)
    }

    /// The arrows between files: (from file, to file) → an example path.
    fn file_arrows(&self) -> BTreeMap<(usize, usize), String> {
        let mut arrows = BTreeMap::new();
        for (i, m) in self.modules.iter().enumerate() {
            for p in &m.named {
                let to = match self.resolve(i, p, 0) {
                    Some(Target::Module(x)) | Some(Target::Item(x)) => x,
                    None => continue,
                };
                let (a, b) = (m.file, self.modules[to].file);
                // A module naming its own descendant module as a path
                // prefix (`child::f`) is an arrow to the child's file; a
                // file naming itself is none.
                if a != b {
                    arrows.entry((a, b)).or_insert_with(|| p.join("::"));
                }
            }
        }
        arrows
    }

    fn file_name(&self, f: usize) -> String {
        let base = self.root_file.parent().unwrap_or(Path::new("."));
        self.files[f]
            .strip_prefix(base)
            .unwrap_or(&self.files[f])
            .display()
            .to_string()
    }

    /// The top-level module a file belongs to ("" for the root's file).
    fn top_of_file(&self, f: usize) -> String {
        let m = self
            .modules
            .iter()
            .find(|m| m.file == f)
            .expect("every file is some module's");
        m.path.first().cloned().unwrap_or_default()
    }
}

/// Strongly connected components with more than one node (Tarjan).
fn circles<N: Ord + Clone>(nodes: &[N], arrows: &BTreeSet<(N, N)>) -> Vec<Vec<N>> {
    let index_of: BTreeMap<&N, usize> = nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in arrows {
        if let (Some(&x), Some(&y)) = (index_of.get(a), index_of.get(b)) {
            adj[x].push(y);
        }
    }
    struct St {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn strong(v: usize, adj: &[Vec<usize>], s: &mut St) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    strong(w, adj, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().expect("v is on the stack");
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..nodes.len() {
        if s.index[v].is_none() {
            strong(v, &adj, &mut s);
        }
    }
    s.out
        .into_iter()
        .map(|c| {
            let mut c: Vec<N> = c.into_iter().map(|i| nodes[i].clone()).collect();
            c.sort();
            c
        })
        .collect()
}

/// Checks one crate; prints its report and returns whether it passed.
fn check(root: &Path, verbose: bool) -> bool {
    let c = Crate::load(root);
    let mut ok = true;
    for e in &c.errors {
        println!("error: {e}");
        ok = false;
    }
    let file_arrows = c.file_arrows();
    let files: Vec<String> = (0..c.files.len()).map(|f| c.file_name(f)).collect();
    let fa: BTreeSet<(String, String)> = file_arrows
        .keys()
        .map(|&(a, b)| (files[a].clone(), files[b].clone()))
        .collect();
    let file_circles = circles(&files, &fa);

    // Top-level modules; the root file is not one of them.
    let mut tops: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (&(a, b), example) in &file_arrows {
        let (ta, tb) = (c.top_of_file(a), c.top_of_file(b));
        if ta != tb && !ta.is_empty() && !tb.is_empty() {
            tops.entry((ta, tb))
                .or_default()
                .push(format!("{} -> {} ({example})", files[a], files[b]));
        }
    }
    let top_names: Vec<String> = c.modules[0]
        .children
        .keys()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let ta: BTreeSet<(String, String)> = tops.keys().cloned().collect();
    let top_circles = circles(&top_names, &ta);

    println!(
        "{}: {} files, {} arrows between files, {} circles; {} top-level modules, {} arrows between them, {} circles",
        root.display(),
        files.len(),
        file_arrows.len(),
        file_circles.len(),
        top_names.len(),
        tops.len(),
        top_circles.len()
    );
    for circle in &file_circles {
        ok = false;
        println!("  circle between files: {}", circle.join(", "));
        for ((a, b), ex) in &file_arrows {
            if circle.contains(&files[*a]) && circle.contains(&files[*b]) {
                println!("    {} -> {} ({ex})", files[*a], files[*b]);
            }
        }
    }
    for circle in &top_circles {
        ok = false;
        println!("  circle between modules: {}", circle.join(", "));
        for ((a, b), why) in &tops {
            if circle.contains(a) && circle.contains(b) {
                println!("    {a} -> {b}: {}", why.join("; "));
            }
        }
    }

    // The module map.
    if c.map.is_empty() {
        if top_names.len() > 1 {
            ok = false;
            println!("  no `## Module map` in {}'s docs", root.display());
        }
    } else {
        let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, l) in c.map.iter().enumerate() {
            for n in l {
                if layer_of.insert(n, i + 1).is_some() {
                    ok = false;
                    println!("  the module map names `{n}` twice");
                }
            }
        }
        for n in &top_names {
            if !layer_of.contains_key(n.as_str()) {
                ok = false;
                println!("  the module map does not name the module `{n}`");
            }
        }
        for n in layer_of.keys() {
            if !top_names.iter().any(|t| t == n) {
                ok = false;
                println!("  the module map names `{n}`, which is not a top-level module");
            }
        }
        let mut up = 0;
        for ((a, b), why) in &tops {
            if let (Some(&la), Some(&lb)) = (layer_of.get(a.as_str()), layer_of.get(b.as_str())) {
                if lb > la {
                    up += 1;
                    ok = false;
                    println!(
                        "  up the map: {a} (layer {la}) -> {b} (layer {lb}): {}",
                        why.join("; ")
                    );
                }
            }
        }
        println!("  module map: {} layers, {up} arrows up", c.map.len());
    }
    if verbose {
        for ((a, b), why) in &tops {
            println!("  {a} -> {b}");
            for w in why {
                println!("      {w}");
            }
        }
    }
    ok
}

fn main() -> ExitCode {
    let mut verbose = false;
    let mut roots = Vec::new();
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--verbose" | "-v" => verbose = true,
            "-h" | "--help" => {
                println!("usage: module-stack [--verbose] [ROOT.rs ...]");
                return ExitCode::SUCCESS;
            }
            _ => roots.push(PathBuf::from(a)),
        }
    }
    if roots.is_empty() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for r in [
            "src/lib.rs",
            "mlx5dv-sim/src/lib.rs",
            "mlx5dv-sim/src/bin/mlx5-sim/main.rs",
            "mlx5dv-bench/benches/real_provider/main.rs",
            "mlx5dv-bench/benches/post_vs_c.rs",
        ] {
            roots.push(ws.join(r));
        }
    }
    let mut ok = true;
    for r in &roots {
        ok &= check(r, verbose);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        println!("module-stack: the modules do not form a stack (see above)");
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` (path, text) under a fresh folder; returns its path.
    fn fixture(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("module-stack-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, text) in files {
            let f = dir.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        dir
    }

    const MAP: &str = "//! ## Module map\n//!\n//! 1. `low`: below.\n//! 2. `high`: above.\n";

    #[test]
    fn a_stack_passes_and_its_arrows_are_drawn_through_re_exports() {
        let dir = fixture(
            "stack",
            &[
                (
                    "lib.rs",
                    &format!("{MAP}mod low;\nmod high;\npub use low::Thing;\n"),
                ),
                ("low/mod.rs", "mod inner;\npub use inner::Thing;\n"),
                ("low/inner.rs", "pub struct Thing;\n"),
                // Through the root's re-export, to the defining file.
                ("high.rs", "pub fn f(_: crate::Thing) {}\n"),
            ],
        );
        let c = Crate::load(&dir.join("lib.rs"));
        let names: BTreeSet<(String, String)> = c
            .file_arrows()
            .keys()
            .map(|&(a, b)| (c.file_name(a), c.file_name(b)))
            .collect();
        assert!(
            names.contains(&("high.rs".into(), "low/inner.rs".into())),
            "{names:?}"
        );
        assert!(check(&dir.join("lib.rs"), false));
    }

    #[test]
    fn a_circle_between_files_fails() {
        let dir = fixture(
            "files",
            &[
                (
                    "lib.rs",
                    "//! ## Module map\n//!\n//! 1. `a`: all.\nmod a;\n",
                ),
                ("a/mod.rs", "mod b;\npub struct Root;\npub use b::Leaf;\n"),
                // The child names its parent's item: a circle of two files.
                ("a/b.rs", "pub struct Leaf(pub super::Root);\n"),
            ],
        );
        assert!(!check(&dir.join("lib.rs"), false));
    }

    #[test]
    fn an_arrow_up_the_map_fails_and_test_code_draws_none() {
        let up = fixture(
            "up",
            &[
                ("lib.rs", &format!("{MAP}mod low;\nmod high;\n")),
                ("low.rs", "pub fn g() { crate::high::f() }\n"),
                ("high.rs", "pub fn f() {}\n"),
            ],
        );
        assert!(!check(&up.join("lib.rs"), false));
        let test_only = fixture(
            "test-only",
            &[
                ("lib.rs", &format!("{MAP}mod low;\nmod high;\n")),
                (
                    "low.rs",
                    "#[cfg(test)]\nmod tests { fn t() { crate::high::f() } }\n",
                ),
                ("high.rs", "pub fn f() { crate::low::h() }\n"),
            ],
        );
        assert!(check(&test_only.join("lib.rs"), false));
    }

    #[test]
    fn the_map_must_name_every_module_once() {
        let dir = fixture(
            "unnamed",
            &[
                (
                    "lib.rs",
                    "//! ## Module map\n//!\n//! 1. `a`: one.\nmod a;\nmod b;\n",
                ),
                ("a.rs", ""),
                ("b.rs", ""),
            ],
        );
        assert!(!check(&dir.join("lib.rs"), false));
        assert_eq!(
            parse_map(
                "## Module map\n\n1. `x`, `y`: both; not `z`\n   more `w`: text\n2. `z`: last\n"
            ),
            vec![
                BTreeSet::from(["x".to_string(), "y".to_string()]),
                BTreeSet::from(["z".to_string()])
            ]
        );
    }
}
