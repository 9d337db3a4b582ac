//! `rowbranch --version` names the commit: build.rs's choice between a given commit, git's
//! `HEAD` and `unknown`, tried on folders made for it, and the binary's own line.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

use crate::support::tools::checked;

// The build script's rules (build.rs includes the same file), tried without building anything.
#[path = "../../build/commit.rs"]
mod build_script;

fn git(dir: &Path, args: &[&str]) -> String {
    checked(
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=rowbranch"])
            .args(["-c", "user.email=rowbranch@example.com"])
            .args(args),
    )
}

/// A new repository with one commit; returns its full sha.
fn repository_with_a_commit(dir: &Path) -> String {
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    git(dir, &["commit", "--quiet", "--allow-empty", "-m", "first"]);
    git(dir, &["rev-parse", "HEAD"])
}

#[test]
fn a_given_commit_wins_shortened_and_an_empty_one_is_not_given() {
    let dir = TempDir::new().unwrap();
    let sha = repository_with_a_commit(dir.path());
    let given = "0123456789ABCDEF0123456789abcdef01234567";
    let found = build_script::commit(dir.path(), Some(given)).unwrap();
    assert_eq!(found.commit, "0123456789ab");
    assert!(found.watch.is_empty());
    let found = build_script::commit(dir.path(), Some("  ")).unwrap();
    assert_eq!(found.commit, sha[..12]);
}

#[test]
fn a_given_value_that_is_no_commit_is_an_error_naming_the_variable() {
    let dir = TempDir::new().unwrap();
    for bad in ["main", "abc", "0123456789abcdef0123456789abcdef012345678"] {
        let err = build_script::commit(dir.path(), Some(bad)).unwrap_err();
        assert!(err.contains("ROWBRANCH_BUILD_COMMIT"), "{err}");
        assert!(err.contains(bad), "{err}");
    }
}

#[test]
fn a_folder_without_git_is_unknown() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("Cargo.toml"), "[package]\n").unwrap();
    let found = build_script::commit(dir.path(), None).unwrap();
    assert_eq!(found.commit, "unknown");
    assert!(found.watch.is_empty());
}

#[test]
fn the_top_of_a_work_tree_names_its_head_and_watches_it() {
    let dir = TempDir::new().unwrap();
    let sha = repository_with_a_commit(dir.path());
    let found = build_script::commit(dir.path(), None).unwrap();
    assert_eq!(found.commit, sha[..12]);
    assert!(
        found.watch.iter().any(|p| p.ends_with("HEAD")),
        "{:?}",
        found.watch
    );
    assert!(found.watch.iter().all(|p| p.exists()), "{:?}", found.watch);

    // A second commit is a different answer.
    git(
        dir.path(),
        &["commit", "--quiet", "--allow-empty", "-m", "second"],
    );
    let next = build_script::commit(dir.path(), None).unwrap();
    assert_ne!(next.commit, found.commit);
}

#[test]
fn a_package_inside_another_repository_does_not_take_its_commit() {
    let dir = TempDir::new().unwrap();
    repository_with_a_commit(dir.path());
    let package = dir.path().join("vendor/rowbranch");
    std::fs::create_dir_all(&package).unwrap();
    let found = build_script::commit(&package, None).unwrap();
    assert_eq!(found.commit, "unknown");
}

#[test]
fn the_binary_prints_its_version_and_the_commit_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    // What build.rs decides for this very checkout, in the environment cargo built it in.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let given = std::env::var("ROWBRANCH_BUILD_COMMIT").ok();
    let expected = build_script::commit(root, given.as_deref()).unwrap().commit;
    assert_eq!(
        line,
        format!(
            "rowbranch {} (commit {expected})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        rowbranch::cli::VERSION,
        line["rowbranch ".len()..].trim_end()
    );
    // In a clone with git at hand, that is HEAD.
    if given.is_none() && root.join(".git").exists() {
        if let Ok(out) = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
        {
            if out.status.success() {
                let head = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                assert_eq!(expected, head);
            }
        }
    }
}
