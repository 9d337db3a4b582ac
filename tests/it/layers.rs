//! The layers of docs/design.md, kept: a module of `src/` may name (by `use crate::…`, a
//! `crate::…` path, or `super::` climbing out of its own module) only modules on its own layer
//! or below, and the modules of one layer name each other without a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The node for lib.rs itself and for what it re-exports (`Failure`, `run`): on the top layer,
/// since it runs the commands.
const ROOT: &str = "crate";

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    repository().join("src")
}

/// The modules of each layer, bottom first, as docs/design.md draws them (top first) under
/// "## The layers"; `crate` is on the top layer.
fn layers() -> &'static [Vec<String>] {
    static LAYERS: OnceLock<Vec<Vec<String>>> = OnceLock::new();
    LAYERS.get_or_init(|| {
        let path = repository().join("docs/design.md");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} does not read: {e}", path.display()));
        let mut layers: Vec<Vec<String>> = parse_layers(&text)
            .unwrap_or_else(|why| panic!("{}: {why}", path.display()))
            .into_iter()
            .rev()
            .map(|(_, modules)| modules)
            .collect();
        layers
            .last_mut()
            .expect("at least one layer")
            .push(ROOT.to_owned());
        layers
    })
}

/// The layers of a design document, top first, each with its name and modules: the first code
/// block after the heading `## The layers`, one line a layer, each line its name, its modules
/// separated by commas, then two or more spaces and what the layer is for.
fn parse_layers(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut lines = text
        .lines()
        .skip_while(|line| line.trim_end() != "## The layers");
    if lines.next().is_none() {
        return Err("no heading `## The layers` to read the layers from".to_owned());
    }
    let mut lines = lines.take_while(|line| !line.starts_with("## "));
    if !lines.any(|line| line.starts_with("```")) {
        return Err("no code block of layers under `## The layers`".to_owned());
    }
    let mut layers = Vec::new();
    let mut seen = BTreeSet::new();
    let mut closed = false;
    for line in lines {
        if line.starts_with("```") {
            closed = true;
            break;
        }
        let bad = |why: &str| format!("the layer line {line:?} {why}");
        let (name, rest) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad("has no modules"))?;
        let (list, description) = rest
            .trim_start()
            .split_once("  ")
            .ok_or_else(|| bad("has no description after two spaces"))?;
        if description.trim().is_empty() {
            return Err(bad("has no description after two spaces"));
        }
        let mut modules = Vec::new();
        for module in list.split(',').map(str::trim) {
            if module.is_empty()
                || !module
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                return Err(bad(&format!("lists {module:?}, which is no module name")));
            }
            if !seen.insert(module.to_owned()) {
                return Err(bad(&format!("lists {module}, which is on a line above")));
            }
            modules.push(module.to_owned());
        }
        layers.push((name.to_owned(), modules));
    }
    if !closed {
        return Err("the code block under `## The layers` does not end".to_owned());
    }
    if layers.is_empty() {
        return Err("the code block under `## The layers` is empty".to_owned());
    }
    Ok(layers)
}

fn layer_of(module: &str) -> Option<usize> {
    layers()
        .iter()
        .position(|layer| layer.iter().any(|m| m == module))
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

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text without comments, string literals and char literals, so that prose, messages and
/// quote characters name nothing.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let at = |k: usize| chars.get(k).copied();
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], at(i + 1)) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                // Block comments nest.
                let mut level = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == Some('*') {
                        level += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == Some('/') {
                        level -= 1;
                        i += 2;
                        if level == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            ('r', _) if raw_string_hashes(&chars, i).is_some() => {
                // `r"…"`, `r#"…"#` (and `br…`, `cr…`, whose prefix went out as code): no
                // escapes, and it ends at a quote followed by as many `#` as it began with.
                let hashes = raw_string_hashes(&chars, i).expect("a raw string");
                i += 1 + hashes + 1;
                while i < chars.len()
                    && !(chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == Some('#')))
                {
                    i += 1;
                }
                i += 1 + hashes;
                out.push_str("\"\"");
            }
            ('\'', next) => {
                // A char literal (`'x'`, `'\''`, `'\u{7f}'`, `b'"'`), or a lifetime or label
                // (`'a`), which has no closing quote.
                let end = if next == Some('\\') {
                    (i + 3..chars.len()).find(|&k| chars[k] == '\'')
                } else if at(i + 2) == Some('\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        out.push_str("''");
                        i = end + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// How many `#` the raw string starting with the `r` at `i` has, if a raw string starts there:
/// `r` not inside an identifier (but maybe after a `b` or `c` prefix), then `#`s, then `"`. A
/// raw identifier (`r#type`) has no quote.
fn raw_string_hashes(chars: &[char], i: usize) -> Option<usize> {
    let before = |k: usize| i.checked_sub(k).map(|k| chars[k]);
    let starts = match before(1) {
        None => true,
        Some('b' | 'c') => !before(2).is_some_and(is_ident_char),
        Some(c) => !is_ident_char(c),
    };
    if !starts {
        return None;
    }
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

fn ident(s: &str) -> String {
    s.chars().take_while(|&c| is_ident_char(c)).collect()
}

/// The first names of a path's rest: `a` of `a::b`, or `a` and `c` of `{a::b, c}` (the items of
/// the group at its top level).
fn heads(rest: &str) -> Vec<String> {
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let mut heads = Vec::new();
    let mut level = 0;
    let mut item_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => level += 1,
            '}' if level == 0 => break,
            '}' => level -= 1,
            ',' if level == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                heads.push(ident(&group[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// The byte ranges of the bodies of inline modules (`mod tests { … }`), nested ones too.
fn inline_modules(code: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut open: Vec<(usize, usize)> = Vec::new(); // (brace level outside it, where it starts)
    let mut level = 0;
    for (i, c) in code.char_indices() {
        match c {
            '{' => {
                let before = code[..i].trim_end();
                let name: usize = before
                    .chars()
                    .rev()
                    .take_while(|&c| is_ident_char(c))
                    .map(char::len_utf8)
                    .sum();
                let before = before[..before.len() - name].trim_end();
                let keyword = before.strip_suffix("mod");
                if name > 0
                    && keyword.is_some_and(|k| !k.chars().next_back().is_some_and(is_ident_char))
                {
                    open.push((level, i));
                }
                level += 1;
            }
            '}' => {
                level -= 1;
                if open.last().is_some_and(|&(outside, _)| outside == level) {
                    let (_, start) = open.pop().expect("an open module");
                    ranges.push((start, i));
                }
            }
            _ => {}
        }
    }
    ranges
}

/// The top-level names a file's code reaches through `crate::` (with `{…}` groups) or through
/// `super::` chains that climb out of its own module to the crate's root: a module of the crate,
/// or an item of lib.rs.
fn named_modules(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(is_ident_char) {
            continue; // `rowbranch_crate::`, say: not this crate's root
        }
        names.extend(heads(code[at + "crate::".len()..].trim_start()));
    }
    let inline = inline_modules(code);
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
        // The root is one `super` above the file's top-level module, and one more for each
        // inline module (`mod tests`) the path is written in; fewer stay inside the module.
        let nesting = inline
            .iter()
            .filter(|&&(start, end)| start < at && at < end)
            .count();
        if climb == depth + 1 + nesting {
            names.extend(heads(rest.trim_start()));
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

/// The modules lib.rs declares (`mod x;`, `pub mod x;`) and names by their bare path (`x::…`,
/// `use x::…`, `pub use x::{…}`), as the crate's root may.
fn named_by_the_root(code: &str) -> BTreeSet<String> {
    let declared: BTreeSet<String> = code
        .split(';')
        .filter_map(|statement| {
            let words: Vec<&str> = statement.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] => Some((*name).to_owned()),
                _ => None,
            }
        })
        .collect();
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("::") {
        let before = &code[..at];
        let name: String = {
            let mut name: Vec<char> = before
                .chars()
                .rev()
                .take_while(|&c| is_ident_char(c))
                .collect();
            name.reverse();
            name.into_iter().collect()
        };
        let ahead = &before[..before.len() - name.len()];
        // The first segment of a path only: not the `b` of `a::b`.
        if declared.contains(&name) && !ahead.ends_with("::") {
            names.insert(name);
        }
    }
    names
}

/// A source file of the crate, as the checker sees it.
struct Source {
    /// Its top-level module, or `crate` for lib.rs and main.rs.
    module: String,
    depth: usize,
    /// lib.rs, which names its modules by bare paths.
    root: bool,
    code: String,
}

impl Source {
    fn new(module: Option<(String, usize)>, root: bool, text: &str) -> Source {
        let (module, depth) = module.unwrap_or_else(|| (ROOT.to_owned(), 0));
        Source {
            module,
            depth,
            root,
            code: code_only(text),
        }
    }
}

/// Which top-level module names which: a name that is not a module is an item of lib.rs, so
/// `crate`.
fn edges_of(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let mut named = named_modules(&source.code, source.depth);
        if source.root {
            named.extend(named_by_the_root(&source.code));
        }
        let named = named
            .into_iter()
            .map(|name| {
                if layer_of(&name).is_some() {
                    name
                } else {
                    ROOT.to_owned()
                }
            })
            .filter(|name| *name != source.module)
            .collect::<Vec<_>>();
        edges
            .entry(source.module.clone())
            .or_default()
            .extend(named);
    }
    edges
}

/// Which top-level module names which, from the sources.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let sources: Vec<Source> = files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("a readable source file");
            Source::new(module_of(file), *file == src().join("lib.rs"), &text)
        })
        .collect();
    edges_of(&sources)
}

/// A module that reaches itself along edges that stay on its layer, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    // Depth-first from each module, along edges that stay on its layer.
    for start in edges.keys() {
        let mut stack: Vec<&str> = vec![start];
        let mut seen = BTreeSet::new();
        while let Some(module) = stack.pop() {
            for next in edges.get(module).into_iter().flatten() {
                if layer_of(next) != layer_of(start) {
                    continue;
                }
                if next == start {
                    return Some(format!("{start} reaches itself on its own layer"));
                }
                if seen.insert(next.as_str()) {
                    stack.push(next);
                }
            }
        }
    }
    None
}

#[test]
fn every_module_of_src_has_a_layer() {
    let unplaced: Vec<String> = edges()
        .into_keys()
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "give these modules a layer in docs/design.md's \"## The layers\": {unplaced:?}"
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
    assert_eq!(cycle(&edges()), None);
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

#[test]
fn the_checker_sees_every_way_of_naming_a_module() {
    let code = code_only(
        "use crate::{config::Route, forge};\n\
         // crate::startup in a comment names nothing\n\
         let a = crate::http::router; let s = \"crate::cmd\";\n\
         use super::super::pipeline::Plan; use super::wire;",
    );
    assert_eq!(
        named_modules(&code, 1),
        set(&["config", "forge", "http", "pipeline"])
    );
}

#[test]
fn quotes_in_char_literals_and_raw_strings_hide_no_code() {
    let code = code_only(
        r###"let q = b'"'; use crate::http; let d = '"'; use crate::rows;
let e = '\''; use crate::forge; let u = '\u{22}'; use crate::event;
fn f<'a>(x: &'a str) -> crate::config::X { 'outer: loop {} }
let r = r"crate::cmd \"; use crate::templates;
let h = r#"a "crate::startup" b"#; let b = br#"crate::reconcile"#; use crate::pipeline;
let r#type = crate::metrics::Kind; /* a /* nested */ crate::doctor */ use crate::shutdown;"###,
    );
    assert_eq!(
        named_modules(&code, 0),
        set(&[
            "config",
            "event",
            "forge",
            "http",
            "metrics",
            "pipeline",
            "rows",
            "shutdown",
            "templates"
        ])
    );
}

#[test]
fn super_climbing_to_the_root_names_its_item_and_not_from_an_inline_module() {
    // In `foo/bar.rs` (depth 1): two `super`s reach the root, three inside `mod tests`.
    let code = code_only(
        "use super::super::Failure; use super::Sibling;\n\
         mod tests { use super::super::Rows; use super::super::super::{identity, Shared}; }\n\
         fn after() -> super::super::webhook::Body { todo!() }",
    );
    assert_eq!(
        named_modules(&code, 1),
        set(&["Failure", "Shared", "identity", "webhook"])
    );
}

#[test]
fn lib_rs_names_its_modules_by_bare_paths() {
    let code = code_only(
        "pub mod cli;\npub mod cmd;\nmod config;\n\
         use cli::{Cli, Command};\npub use cmd::{run, Failure};\n\
         fn f() { other::config::x(); std::fmt::Write; }",
    );
    assert_eq!(named_by_the_root(&code), set(&["cli", "cmd"]));
}

#[test]
fn a_command_naming_what_lib_rs_reexports_from_it_is_a_cycle() {
    let lib = "pub mod cli;\npub mod cmd;\npub use cmd::{run, Failure};\n";
    let sources = |command: &str| {
        vec![
            Source::new(None, true, lib),
            Source::new(Some(("cmd".to_owned(), 1)), false, command),
        ]
    };
    let through_the_root = edges_of(&sources("use crate::Failure;"));
    assert_eq!(through_the_root["cmd"], set(&[ROOT]));
    assert!(cycle(&through_the_root).is_some());
    let climbing_to_the_root = edges_of(&sources("use super::super::Failure;"));
    assert!(cycle(&climbing_to_the_root).is_some());
    assert_eq!(cycle(&edges_of(&sources("use super::Failure;"))), None);
}

#[test]
fn the_layers_are_read_from_the_design_document() {
    let text = "# Design\n\n## The layers\n\nProse.\n\n```\n\
                top     cmd, http  run, serve\n\
                bottom  identity   ids\n\
                ```\n";
    assert_eq!(
        parse_layers(text).unwrap(),
        vec![
            ("top".to_owned(), vec!["cmd".to_owned(), "http".to_owned()]),
            ("bottom".to_owned(), vec!["identity".to_owned()]),
        ]
    );
    let missing = parse_layers("# Design\n\n## The flow\n").unwrap_err();
    assert!(missing.contains("## The layers"), "{missing}");
    let no_block = parse_layers("## The layers\n\nProse.\n\n## The flow\n\n```\n```\n");
    assert!(no_block.unwrap_err().contains("code block"));
    let no_description = parse_layers("## The layers\n```\ntop cmd, http\n```\n");
    assert!(no_description.unwrap_err().contains("description"));
    let twice = parse_layers("## The layers\n```\ntop  cmd  x\nbottom  cmd  y\n```\n");
    assert!(twice.unwrap_err().contains("above"));
    // The repository's own: the top line first, `crate` with it.
    assert!(layers().last().unwrap().iter().any(|m| m == "cmd"));
    assert_eq!(layer_of(ROOT), layer_of("cmd"));
    assert_eq!(layer_of("identity"), Some(0));
}
