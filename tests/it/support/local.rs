//! What the local forge leaves behind, for a test to look at: the branches of its bare
//! repository and the lines of its dispatch log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tempfile::TempDir;

/// A new directory holding a bare repository `repo.git` with one commit, as the local forge
/// needs.
pub async fn dir_with_repository() -> Arc<TempDir> {
    let dir = tempfile::tempdir().expect("no temporary directory");
    rowbranch::forge::local::create_repository(&dir.path().join("repo.git"))
        .await
        .expect("could not create the repository");
    Arc::new(dir)
}

/// `rowbranch.toml` in `dir`: the local forge on `repo.git`, and a `feedbacks` route that
/// names no text column. Returns its path.
pub fn write_local_config(dir: &Path) -> PathBuf {
    let path = dir.join("rowbranch.toml");
    std::fs::write(
        &path,
        "[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n[[routes]]\ntable = \"feedbacks\"\n\
         repo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n",
    )
    .expect("could not write the config");
    path
}

/// Short names of a repository's branches other than `main`, sorted.
pub async fn branches(repo: &Path) -> Vec<String> {
    let out = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"])
        .output()
        .await
        .expect("could not run git");
    assert!(out.status.success(), "git for-each-ref failed");
    let mut names: Vec<String> = String::from_utf8(out.stdout)
        .expect("branch names are UTF-8")
        .lines()
        .filter(|b| *b != "main")
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// The lines of a dispatch log, parsed; none when it does not exist yet.
pub fn dispatches(log: &Path) -> Vec<Value> {
    match std::fs::read_to_string(log) {
        Ok(text) => text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a dispatch line is not JSON"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("could not read {}: {e}", log.display()),
    }
}
