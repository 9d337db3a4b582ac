//! What docs/design.md claims of the code's shape, checked: the floors (a module names only
//! modules on lower floors), the pure planner, no adapter seeing the whole config, and one name
//! per concept (no type name defined in two files). The
//! compiler checks names and types; these are the three rules it cannot see. Sources are read as
//! text: line comments and the trailing `#[cfg(test)]` module are left out, since tests may name
//! anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The floors, bottom up, as docs/design.md draws them.
const FLOORS: [&[&str]; 9] = [
    &["identity", "reason", "shutdown"],
    &["event", "metrics"],
    &["webhook"],
    &["config"],
    &["db", "forge", "cli"],
    &["pipeline"],
    &["http", "queue", "sweep"],
    &["startup"],
    &["cmd"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of module `name` (its file and its folder), as the code that ships.
fn module_sources(name: &str) -> Vec<(PathBuf, String)> {
    let mut paths = vec![src().join(format!("{name}.rs"))];
    let mut folders = vec![src().join(name)];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                paths.push(path);
            }
        }
    }
    paths
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a readable source");
            (p, shipped(&text))
        })
        .collect()
}

/// `text` without line comments and without a trailing test module.
fn shipped(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` names `crate::module` (as a path, or inside `crate::{…}`).
fn names(code: &str, module: &str) -> bool {
    let word = |text: &str, at: usize| {
        let end = at + module.len();
        text[end..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    };
    let path = format!("crate::{module}");
    let by_path = code.match_indices(&path).any(|(at, _)| word(code, at + 7));
    let in_group = code.match_indices("crate::{").any(|(at, _)| {
        let group = &code[at + 8..];
        let group = &group[..group.find('}').unwrap_or(group.len())];
        group.split(',').any(|item| {
            let item = item.trim();
            item == module || item.starts_with(&format!("{module}::"))
        })
    });
    by_path || in_group
}

#[test]
fn every_module_of_the_crate_is_on_a_floor_and_design_md_draws_the_same_floors() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let mut placed: Vec<&str> = FLOORS.iter().flat_map(|f| f.iter().copied()).collect();
    let mut declared_sorted = declared.clone();
    placed.sort_unstable();
    declared_sorted.sort_unstable();
    assert_eq!(
        placed, declared_sorted,
        "src/lib.rs's modules and the floors"
    );
    let design = std::fs::read_to_string(src().join("../docs/design.md")).expect("design.md");
    for floor in FLOORS {
        let line = floor.join(", ");
        assert!(
            design.lines().any(|l| l.contains(&line)),
            "docs/design.md's floors name `{line}` on one line"
        );
    }
}

#[test]
fn a_module_names_only_modules_on_lower_floors() {
    let floor_of: BTreeMap<&str, usize> = FLOORS
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.iter().map(move |m| (*m, i)))
        .collect();
    let mut wrong = Vec::new();
    for (module, &floor) in &floor_of {
        for (path, code) in module_sources(module) {
            for (other, &other_floor) in &floor_of {
                if other != module && other_floor >= floor && names(&code, other) {
                    wrong.push(format!(
                        "{} (floor {floor}) names {other} (floor {other_floor})",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_planner_does_no_io() {
    let code = shipped(&std::fs::read_to_string(src().join("pipeline/plan.rs")).unwrap());
    for io in [
        "tokio",
        "std::fs",
        "std::net",
        "std::process",
        "reqwest",
        "octocrab",
        "tokio_postgres",
        "async fn",
        ".await",
    ] {
        assert!(!code.contains(io), "src/pipeline/plan.rs uses {io}");
    }
    // Of the forge it knows the data a plan carries (the base it starts from), never the trait
    // that makes requests.
    assert!(
        !code.contains("Forge"),
        "src/pipeline/plan.rs names the Forge trait"
    );
    for module in ["db", "http", "queue", "sweep", "startup", "cmd"] {
        assert!(!names(&code, module), "src/pipeline/plan.rs names {module}");
    }
}

#[test]
fn no_adapter_sees_the_whole_config() {
    // The payload template is the pipeline's, but built from its route's settings alone too.
    let template = src().join("pipeline/template.rs");
    let template = (
        template.clone(),
        shipped(&std::fs::read_to_string(&template).unwrap()),
    );
    for adapter in ["db", "forge"] {
        for (path, code) in module_sources(adapter)
            .into_iter()
            .chain([template.clone()])
        {
            let grouped = code.match_indices("crate::config::{").any(|(at, _)| {
                let group = &code[at + 16..];
                let group = &group[..group.find('}').unwrap_or(group.len())];
                group.split(',').any(|item| item.trim() == "Config")
            });
            assert!(
                !grouped && !code.contains("config::Config;") && !code.contains("config::Config>"),
                "{} takes the whole Config: hand it its settings instead",
                path.display()
            );
        }
    }
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert!(names("use crate::forge::Forge;", "forge"));
    assert!(names("use crate::{config, forge::Base};", "forge"));
    assert!(!names("use crate::forge_names;", "forge"));
    assert!(!names("use crate::{config, identity};", "forge"));
    assert_eq!(shipped("a // crate::cmd\nb"), "a \nb");
    assert_eq!(shipped("a\n#[cfg(test)]\nmod tests { crate::cmd }"), "a");
    assert_eq!(
        defined_types(
            "pub struct Plan {\npub(crate) enum Fate {\n    type Out = u8;\ntype Id = i64;\nlet type_ = 1;"
        ),
        ["Plan", "Fate", "Id"]
    );
    assert!(defined_types("// a struct Foo\n    select type from t").is_empty());
}

/// Every `.rs` file under `src/`, as the code that ships (test files left out).
fn all_sources() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut folders = vec![src()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                folders.push(path);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                let text = std::fs::read_to_string(&path).expect("a readable source");
                found.push((path, shipped(&text)));
            }
        }
    }
    found
}

/// The struct, enum, trait and type alias names `code` defines.
fn defined_types(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().peekable();
            if words.peek().is_some_and(|w| w.starts_with("pub")) {
                words.next();
            }
            match words.next()? {
                "struct" | "enum" | "trait" => {}
                // An indented `type` is a trait's or an impl's associated type, not an alias.
                "type" if !line.starts_with(char::is_whitespace) => {}
                _ => return None,
            }
            let name: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            name.starts_with(char::is_uppercase).then_some(name)
        })
        .collect()
}

#[test]
fn no_type_name_is_defined_in_two_files() {
    let mut files_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, code) in all_sources() {
        let file = path
            .strip_prefix(src())
            .unwrap_or(&path)
            .display()
            .to_string();
        for name in defined_types(&code) {
            let files = files_of.entry(name).or_default();
            if !files.contains(&file) {
                files.push(file.clone());
            }
        }
    }
    let twice: Vec<String> = files_of
        .iter()
        .filter(|(name, files)| *name != "Error" && files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "one name per concept: rename these to what each one is\n{}",
        twice.join("\n")
    );
}
