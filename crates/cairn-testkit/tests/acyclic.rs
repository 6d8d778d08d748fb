//! No module of any crate of the workspace imports a module that imports
//! it back (see `cairn_testkit::modules` for what counts as an import).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// Every crate root of the workspace: libraries and binaries.
fn roots() -> Vec<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
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
