//! "SPEC §n" in the code and the tests means section n of docs/spec.md: every such reference
//! must find its `## n.` heading there.

use std::path::{Path, PathBuf};

/// The Rust files under `dir`, at any depth.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a readable directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The section numbers cited as `SPEC §n` (or `SPEC.md §n`) in `text`.
fn cited(text: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("SPEC") {
        let rest = text[at + 4..].trim_start_matches(".md").trim_start();
        if let Some(rest) = rest.strip_prefix('§') {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                found.push(n);
            }
        }
    }
    found
}

#[test]
fn every_spec_reference_names_a_section_of_docs_spec() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join("docs/spec.md")).expect("docs/spec.md exists");
    let sources = [files(&root.join("src")), files(&root.join("tests"))].concat();
    let mut checked = 0;
    let mut missing = Vec::new();
    for file in sources {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for n in cited(&text) {
            checked += 1;
            if !spec.lines().any(|l| l.starts_with(&format!("## {n}. "))) {
                missing.push(format!("{}: SPEC §{n}", file.display()));
            }
        }
    }
    assert!(checked > 0, "the code cites the contract somewhere");
    assert!(
        missing.is_empty(),
        "no such section in docs/spec.md: {missing:?}"
    );
}

#[test]
fn citations_are_read_in_each_spelling() {
    assert_eq!(
        cited("see SPEC §3's table, SPEC.md §5 and SPEC § 4"),
        vec![3, 5, 4]
    );
    assert!(cited("SPECIAL § 9").is_empty());
}
