//! No module of any crate of the workspace imports a module that imports
//! it back (see `cairn_testkit::modules` for what counts as an import).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// Every crate root of the workspace: libraries and binaries. Another
/// checkout can be checked with `CAIRN_ACYCLIC_ROOT=<its top>` (how the
/// cycle this check first found is shown on the tree that had it).
fn roots() -> Vec<PathBuf> {
    let top = std::env::var_os("CAIRN_ACYCLIC_ROOT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        PathBuf::from,
    );
    let mut roots = vec![top.join("src/main.rs"), top.join("bench/src/main.rs")];
    for entry in std::fs::read_dir(top.join("crates")).unwrap() {
        let lib = entry.unwrap().path().join("src/lib.rs");
        if lib.exists() {
            roots.push(lib);
        }
    }
    roots.sort();
    roots
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut failed = Vec::new();
    for root in roots() {
        let g = cairn_testkit::modules::graph(&root).unwrap();
        match cairn_testkit::modules::cycle(&g) {
            Some(c) => failed.push(format!("{}: {}", root.display(), c.join(" -> "))),
            None => eprintln!(
                "{}: {} modules, no import cycle",
                root.display(),
                g.modules.len()
            ),
        }
    }
    assert!(failed.is_empty(), "import cycles:\n{}", failed.join("\n"));
}
