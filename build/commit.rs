//! How build.rs chooses the commit `rowbranch --version` names: a given commit, git's `HEAD`, or
//! `unknown`. build.rs and tests/it/version.rs both include this file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable a build without `.git` names its commit with.
pub const GIVEN: &str = "ROWBRANCH_BUILD_COMMIT";

/// The commit, and the files whose change means it may have changed.
#[derive(Debug, PartialEq)]
pub struct Found {
    pub commit: String,
    pub watch: Vec<PathBuf>,
}

/// The commit for the package at `dir`: `given` (the value of `ROWBRANCH_BUILD_COMMIT`) when it
/// is set and not empty, else git's, else `unknown`. A given value that is not a commit id is
/// an error, so that a typo cannot end up in `--version`.
pub fn commit(dir: &Path, given: Option<&str>) -> Result<Found, String> {
    if let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) {
        if !is_commit_id(given) {
            return Err(format!(
                "{GIVEN}=`{given}` is not a commit id: give 7 to 40 hexadecimal digits, e.g. the \
                 output of `git rev-parse HEAD`, or leave it unset"
            ));
        }
        return Ok(Found {
            commit: short(given),
            watch: Vec::new(),
        });
    }
    Ok(from_git(dir).unwrap_or_else(|| Found {
        commit: "unknown".to_owned(),
        watch: Vec::new(),
    }))
}

fn is_commit_id(text: &str) -> bool {
    (7..=40).contains(&text.len()) && text.chars().all(|c| c.is_ascii_hexdigit())
}

fn short(commit: &str) -> String {
    commit
        .chars()
        .take(12)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// git's `HEAD`, when git runs and `dir` is the top of its work tree: a package unpacked inside
/// some other repository must not take that repository's commit for its own.
fn from_git(dir: &Path) -> Option<Found> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let head = git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?;
    if !is_commit_id(&head) {
        return None;
    }
    // HEAD itself, and the branch it names: a loose ref file, or where one would appear
    // (its folder) and the packed refs.
    let mut watch = Vec::new();
    let mut add = |path: String| {
        let path = dir.join(path);
        if path.exists() {
            watch.push(path);
        }
    };
    if let Some(path) = git(&["rev-parse", "--git-path", "HEAD"]) {
        add(path);
    }
    if let Some(branch) = git(&["symbolic-ref", "--quiet", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            if dir.join(&path).exists() {
                add(path);
            } else if let Some(folder) = Path::new(&path).parent() {
                add(folder.display().to_string());
            }
        }
        if let Some(path) = git(&["rev-parse", "--git-path", "packed-refs"]) {
            add(path);
        }
    }
    Some(Found {
        commit: short(&head),
        watch,
    })
}
