//! The module graph of a crate, read from its source with `syn`, and its
//! import cycles.
//!
//! Every path that names a module of the crate counts as an edge from the
//! module it is written in: `use` items (nested trees included) and paths
//! written inline anywhere in the code (`crate::engine::Inner` in a
//! signature, `super::view::logged(..)` in an expression). A path is lifted
//! to the deepest module it names. Edges between a module and its own
//! ancestors or descendants are structure (a parent declares and
//! re-exports its children; a child reaches its parent's re-exports), not
//! dependencies, and are left out. `#[cfg(test)]` modules are skipped, and
//! so are paths inside macro invocations, which `syn` sees as tokens.
//!
//! This replaces a graph from `cargo-modules`, which took a quarter of a
//! fresh CI run to compile and missed cycles made of inline paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module: its path from the crate root, `crate::a::b`.
pub type Module = String;

/// The modules of a crate and the edges between them.
#[derive(Debug, Default)]
pub struct Graph {
    pub modules: BTreeSet<Module>,
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
}

/// Reads the crate whose root file is `root` (`src/lib.rs`, `src/main.rs`).
pub fn graph(root: &Path) -> Result<Graph, String> {
    let mut files = Vec::new();
    collect("crate".to_owned(), root, true, &mut files)?;
    let modules: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &files {
        let mut paths = Paths::default();
        paths.visit_file(file);
        for path in paths.found {
            if let Some(target) = resolve(module, &path, &modules)
                && !related(module, &target)
            {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    Ok(Graph { modules, edges })
}

/// A cycle among the graph's modules, if there is one.
pub fn cycle(g: &Graph) -> Option<Vec<Module>> {
    fn visit<'a>(
        node: &'a str,
        g: &'a Graph,
        open: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<Module>> {
        open.push(node);
        for next in g.edges.get(node).into_iter().flatten() {
            if let Some(at) = open.iter().position(|n| n == next) {
                let mut c: Vec<Module> = open[at..].iter().map(|s| (*s).to_owned()).collect();
                c.push(next.clone());
                return Some(c);
            }
            if !done.contains(next.as_str())
                && let Some(c) = visit(next, g, open, done)
            {
                return Some(c);
            }
        }
        open.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for m in &g.modules {
        if !done.contains(m.as_str())
            && let Some(c) = visit(m, g, &mut Vec::new(), &mut done)
        {
            return Some(c);
        }
    }
    None
}

/// Parses `file` as module `module` and every file module below it.
/// `owns_dir`: its children live beside it (`lib.rs`, `main.rs`, `mod.rs`)
/// rather than in a directory of its name.
fn collect(
    module: Module,
    file: &Path,
    owns_dir: bool,
    out: &mut Vec<(Module, syn::File)>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let dir: PathBuf = if owns_dir {
        file.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        file.with_extension("")
    };
    for item in &parsed.items {
        let syn::Item::Mod(m) = item else { continue };
        if m.content.is_some() || is_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let child = format!("{module}::{name}");
        let flat = dir.join(format!("{name}.rs"));
        if flat.exists() {
            collect(child, &flat, false, out)?;
        } else {
            collect(child, &dir.join(&name).join("mod.rs"), true, out)?;
        }
    }
    out.push((module, parsed));
    Ok(())
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Every path written in a file, as segment names.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                self.found.push(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                self.found.push(path);
            }
            syn::UseTree::Glob(_) => self.found.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.tree(&mut Vec::new(), &u.tree);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Test modules depend on what they test; inline modules are not
        // file modules of their own here.
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            self.found
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }
}

/// The deepest module of the crate that `path`, written in `module`, names.
fn resolve(module: &str, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut at: Vec<&str> = module.split("::").collect();
    let mut rest = path.iter().map(String::as_str).peekable();
    match rest.peek().copied() {
        Some("crate") => {
            rest.next();
            at = vec!["crate"];
        }
        Some("self") => {
            rest.next();
        }
        Some("super") => {
            while rest.peek() == Some(&"super") {
                rest.next();
                at.pop();
            }
        }
        // A bare first segment names a module only if it is a child.
        Some(first) if modules.contains(&format!("{module}::{first}")) => {}
        _ => return None,
    }
    if at.is_empty() {
        return None;
    }
    let mut found = at.join("::");
    for seg in rest {
        let deeper = format!("{found}::{seg}");
        if !modules.contains(&deeper) {
            break;
        }
        found = deeper;
    }
    Some(found)
}

/// Whether one module is the other or contains it.
fn related(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir.join("lib.rs")
    }

    /// The cycle `cargo-modules` missed: siblings that name each other
    /// only through inline paths, no `use` between them.
    #[test]
    fn a_planted_cycle_of_inline_paths_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(
            dir.path(),
            &[
                ("lib.rs", "mod engine;\nmod follow;\n"),
                (
                    "engine.rs",
                    "pub struct Inner;\npub fn open() { crate::follow::follow(); }\n",
                ),
                (
                    "follow.rs",
                    "pub fn follow() {}\npub fn peek(_: &crate::engine::Inner) {}\n",
                ),
            ],
        );
        let g = graph(&root).unwrap();
        let c = cycle(&g).expect("the cycle is found");
        assert!(c.contains(&"crate::engine".to_owned()), "{c:?}");
        assert!(c.contains(&"crate::follow".to_owned()), "{c:?}");
    }

    #[test]
    fn use_trees_super_and_children_resolve_and_structure_is_no_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let root = write(
            dir.path(),
            &[
                ("lib.rs", "mod watch;\nmod hub;\npub use watch::Item;\n"),
                (
                    "watch/mod.rs",
                    "pub mod stream;\npub mod scope;\npub use stream::Item;\n",
                ),
                (
                    "watch/stream.rs",
                    "pub struct Item;\nuse crate::{hub::Hub, watch::scope};\n",
                ),
                ("watch/scope.rs", "use super::Item;\n"),
                (
                    "hub.rs",
                    "pub struct Hub;\n#[cfg(test)]\nmod tests { use crate::watch::stream::Item; }\n",
                ),
            ],
        );
        let g = graph(&root).unwrap();
        assert_eq!(cycle(&g), None, "{g:?}");
        let stream = &g.edges["crate::watch::stream"];
        assert!(stream.contains("crate::hub") && stream.contains("crate::watch::scope"));
        assert!(
            !g.edges.contains_key("crate::hub"),
            "test modules are skipped"
        );
        // A real one through a use tree.
        std::fs::write(
            dir.path().join("hub.rs"),
            "use crate::watch::{stream::Item};\npub struct Hub;\n",
        )
        .unwrap();
        assert!(cycle(&graph(&root).unwrap()).is_some());
    }
}
