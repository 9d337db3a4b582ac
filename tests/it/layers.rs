//! The layers of docs/design.md, kept: a module of `src/` may name (by `use crate::…`, a
//! `crate::…` path, or `super::` climbing out of its own module) only modules on its own layer
//! or below, and the modules of one layer name each other without a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom first, as docs/design.md draws them top first. `crate` stands for what lib.rs itself
/// defines (`Failure`, `run`): the top, since it runs the commands.
const LAYERS: &[&[&str]] = &[
    &["identity", "event", "webhook", "shutdown", "metrics"],
    &["config"],
    &["forge", "rows", "templates"],
    &["pipeline"],
    &[
        "http",
        "pgmq",
        "reconcile",
        "doctor",
        "startup",
        "cli",
        "cmd",
        "crate",
    ],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to, and how deep in it the file is (0 for `foo.rs` and
/// `foo/mod.rs`, 1 for `foo/bar.rs`); `None` for lib.rs and main.rs.
fn module_of(file: &Path) -> Option<(String, usize)> {
    let relative = file.strip_prefix(src()).expect("a file under src/");
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.len() == 1 {
        let name = parts[0].trim_end_matches(".rs");
        return (name != "lib" && name != "main").then(|| (name.to_owned(), 0));
    }
    let last = parts.last().expect("a file name");
    let depth = parts.len() - if last == "mod.rs" { 2 } else { 1 };
    Some((parts[0].clone(), depth))
}

/// The text without comments and string literals, so that prose and messages name nothing.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The top-level names a file's code reaches through `crate::` (with `{…}` groups) or through
/// `super::` chains that climb past its own module to one of the crate's modules.
fn named_modules(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `rowbranch_crate::`, say: not this crate's root
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, at brace depth 0.
            let mut level = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        names.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue; // counted from the first `super` of the chain
        }
        let mut rest = &code[at..];
        let mut climb = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climb += 1;
            rest = r;
        }
        // Only a module of the crate's root counts: inside an inline `mod tests`, one more
        // `super` than the file's depth is still the file's own module.
        let name = ident(rest);
        if climb > depth && layer_of(&name).is_some() {
            names.insert(name);
        }
    }
    names
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Which top-level module names which, from the sources.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let code = code_only(&text);
        let (module, depth) = match module_of(&file) {
            Some(found) => found,
            None => ("crate".to_owned(), 0),
        };
        let named = named_modules(&code, depth)
            .into_iter()
            .filter(|name| *name != module)
            .map(|name| {
                if layer_of(&name).is_some() {
                    name
                } else {
                    "crate".to_owned()
                }
            })
            .filter(|name| *name != module)
            .collect::<Vec<_>>();
        edges.entry(module).or_default().extend(named);
    }
    edges
}

#[test]
fn every_module_of_src_has_a_layer() {
    let unplaced: Vec<String> = edges()
        .into_keys()
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "give these modules a layer in docs/design.md and in LAYERS: {unplaced:?}"
    );
}

#[test]
fn no_module_names_a_module_above_it() {
    let upward: Vec<String> = edges()
        .iter()
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|to| layer_of(to) > layer_of(from))
                .map(move |to| format!("{from} names {to}"))
        })
        .collect();
    assert!(upward.is_empty(), "dependencies point up: {upward:?}");
}

#[test]
fn the_modules_of_one_layer_name_each_other_without_a_cycle() {
    let edges = edges();
    // Depth-first from each module, along edges that stay on its layer.
    for start in edges.keys() {
        let mut stack: Vec<&str> = vec![start];
        let mut seen = BTreeSet::new();
        while let Some(module) = stack.pop() {
            for next in edges.get(module).into_iter().flatten() {
                if layer_of(next) != layer_of(start) {
                    continue;
                }
                assert_ne!(next, start, "{start} reaches itself on its own layer");
                if seen.insert(next.as_str()) {
                    stack.push(next);
                }
            }
        }
    }
}

#[test]
fn the_checker_sees_every_way_of_naming_a_module() {
    let code = code_only(
        "use crate::{config::Route, forge};\n\
         // crate::startup in a comment names nothing\n\
         let a = crate::http::router; let s = \"crate::cmd\";\n\
         use super::super::pipeline::Plan; use super::wire;",
    );
    let named = named_modules(&code, 1);
    let expected: BTreeSet<String> = ["config", "forge", "http", "pipeline"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(named, expected);
}
