//! The local forge: a git repository on this machine stands in for GitHub. Claims are real git
//! ref updates that fail when the ref exists; a dispatch runs an optional command and is logged
//! to `dispatches.jsonl` beside the repository. It has no pull requests.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context};
use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Mutex;

use super::{Base, Branch, Claim, Forge, ForgeError, OpenError, Sha};
use crate::config::LocalSettings;
use crate::identity::{BranchName, BranchPrefix, EventType, RefName, RepoName};

/// How long an `on_dispatch` command may run before it counts as a failed dispatch.
const DISPATCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a failed local dispatch asks the sender to wait before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long a ref update waits for another writer's lock file to go, in milliseconds.
const LOCK_TIMEOUT: &str = "core.filesRefLockTimeout=1000";
/// A ref's lock file older than this was left by a git process that died holding it (one that
/// was killed): git holds a ref's lock for the milliseconds an update takes, and never removes
/// a stale one itself.
const STALE_LOCK: Duration = Duration::from_secs(10);

/// The variables an `on_dispatch` command gets from rowbranch's environment; every other is
/// left out, so that the command never sees rowbranch's secrets (the webhook secret,
/// `DATABASE_URL`, the App's key, a status password, a token) nor anything else the process was
/// given. What is kept lets a command run as the user would run it by hand: `PATH` to find the
/// commands it names; `HOME`, `USER` and `LOGNAME` for the tools that read their own settings
/// and credentials from there (git, ssh, gh); `TMPDIR` for temporary files; `LANG`, `LANGUAGE`
/// and `LC_*` for how text is read and written (the payload is UTF-8); `TZ` for times.
const DISPATCH_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LANGUAGE", "TZ",
];

/// The part of `vars` an `on_dispatch` command gets: [`DISPATCH_ENV`] and `LC_*`.
fn dispatch_env(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    vars.filter(|(name, _)| {
        name.to_str()
            .is_some_and(|name| DISPATCH_ENV.contains(&name) || name.starts_with("LC_"))
    })
}

/// A git repository used as the forge.
pub struct LocalForge {
    git_dir: PathBuf,
    on_dispatch: Option<String>,
    dispatch_log: PathBuf,
    /// Serializes appends to the dispatch log within this process.
    log_lock: Mutex<()>,
}

/// Runs git on the repository `git_dir`, with stable messages to match on, no prompts from a
/// server process, and a fixed identity, so a machine without `user.name` can still commit.
async fn git(git_dir: &Path, args: &[&str]) -> anyhow::Result<Output> {
    Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "rowbranch")
        .env("GIT_AUTHOR_EMAIL", "rowbranch@localhost")
        .env("GIT_COMMITTER_NAME", "rowbranch")
        .env("GIT_COMMITTER_EMAIL", "rowbranch@localhost")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("could not run git: is it installed and on PATH?")
}

/// Runs git and returns its stdout, trimmed, or an error carrying its stderr.
async fn git_ok(git_dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = git(git_dir, args).await?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    anyhow::ensure!(
        out.status.success(),
        "git {} failed: {}",
        args.join(" "),
        text(&out.stderr)
    );
    Ok(text(&out.stdout))
}

fn stderr(out: &Output) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&out.stderr)
}

impl LocalForge {
    /// Opens the repository at the settings' `path` (bare, or a work tree with `.git`). Fails
    /// with a message that names the path when it is not a git repository.
    pub async fn open(settings: &LocalSettings) -> Result<LocalForge, OpenError> {
        let path = &settings.path;
        let dot_git = Some(path.join(".git")).filter(|dot_git| dot_git.is_dir());
        let git_dir = dot_git.unwrap_or_else(|| path.clone());
        if git_ok(&git_dir, &["rev-parse", "--git-dir"]).await.is_err() {
            return Err(OpenError::NotARepository { path: path.clone() });
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        Ok(LocalForge {
            dispatch_log: parent.unwrap_or(Path::new(".")).join("dispatches.jsonl"),
            git_dir,
            on_dispatch: settings.on_dispatch.clone(),
            log_lock: Mutex::new(()),
        })
    }

    async fn ref_exists(&self, full_ref: &str) -> Result<bool, ForgeError> {
        let out = git(
            &self.git_dir,
            &["rev-parse", "--verify", "--quiet", full_ref],
        )
        .await?;
        Ok(out.status.success())
    }

    /// `git update-ref ARGS` of `full_ref`, waiting while another writer holds the ref's lock
    /// (its update may yet fail), and once more after removing a lock that a git process left
    /// when it died: git's answer, or `Unavailable` when the lock stayed. git does the waiting
    /// itself (`core.filesRefLockTimeout`, retried with backoff).
    async fn update_ref(&self, full_ref: &str, args: &[&str]) -> Result<Output, ForgeError> {
        let args = [&["-c", LOCK_TIMEOUT, "update-ref"], args].concat();
        for _round in 0..2 {
            let out = git(&self.git_dir, &args).await?;
            if out.status.success() || !stderr(&out).contains("File exists") {
                return Ok(out);
            }
            if !self.clear_stale_locks(full_ref) {
                break;
            }
        }
        Err(ForgeError::Unavailable {
            message: format!("{full_ref} stayed locked by another git process"),
            retry_after: Some(RETRY_AFTER),
        })
    }

    /// Removes the lock files of `full_ref` (and of packed-refs) older than [`STALE_LOCK`]:
    /// left by a git process that died holding them. Whether one was removed.
    fn clear_stale_locks(&self, full_ref: &str) -> bool {
        let mut cleared = false;
        for lock in [
            self.git_dir.join(format!("{full_ref}.lock")),
            self.git_dir.join("packed-refs.lock"),
        ] {
            let age = std::fs::metadata(&lock)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok());
            if age.is_some_and(|age| age >= STALE_LOCK) && std::fs::remove_file(&lock).is_ok() {
                tracing::warn!(
                    lock = %lock.display(),
                    "removed a lock file that a git process left when it died"
                );
                cleared = true;
            }
        }
        cleared
    }

    async fn run_on_dispatch(&self, command: &str, line: &str) -> Result<(), ForgeError> {
        let unavailable = |message: String| ForgeError::Unavailable {
            message,
            retry_after: Some(RETRY_AFTER),
        };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .env_clear()
            .envs(dispatch_env(std::env::vars_os()))
            .current_dir(self.dispatch_log.parent().unwrap_or(Path::new(".")))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| unavailable(format!("on_dispatch could not start: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A command that ignores its input closes the pipe early; that is its business.
            let _ = stdin.write_all(line.as_bytes()).await;
        }
        let out = tokio::time::timeout(DISPATCH_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| {
                unavailable(format!(
                    "on_dispatch did not finish within {}s",
                    DISPATCH_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| unavailable(format!("on_dispatch failed to run: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        // The command's own words go to the log only: the HTTP answer stays ours.
        let tail: String = stderr(&out).trim().chars().take(300).collect();
        tracing::warn!(exit_status = %out.status, stderr = %tail, "on_dispatch failed");
        Err(unavailable(format!(
            "on_dispatch exited with {}",
            out.status
        )))
    }
}

fn head_ref(branch: &BranchName) -> String {
    format!("refs/heads/{}", branch.as_str())
}

#[async_trait]
impl Forge for LocalForge {
    async fn base(&self, _repo: &RepoName) -> Result<Base, ForgeError> {
        let head = git_ok(&self.git_dir, &["symbolic-ref", "HEAD"]).await?;
        let branch = head.strip_prefix("refs/heads/").unwrap_or(&head);
        let branch = RefName::parse(branch)
            .map_err(|e| ForgeError::refused(format!("the repository's default branch: {e}")))?;
        let commit = format!("{head}^{{commit}}");
        let sha = git_ok(
            &self.git_dir,
            &["rev-parse", "--verify", "--quiet", &commit],
        )
        .await;
        let sha = sha.map_err(|_| {
            ForgeError::refused(format!(
                "the repository's default branch `{branch}` has no commits yet: make a first \
                 commit"
            ))
        })?;
        Ok(Base {
            branch,
            sha: Sha::new(sha),
        })
    }

    async fn claim(
        &self,
        _repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<Claim, ForgeError> {
        let full_ref = head_ref(branch);
        // An empty old value makes git refuse the update when the ref exists: the atomic
        // create-if-absent that GitHub's `POST /git/refs` gives.
        let out = (self.update_ref(&full_ref, &[&full_ref, sha.as_str(), ""])).await?;
        if out.status.success() {
            return Ok(Claim::Created);
        }
        if stderr(&out).contains("reference already exists") || self.ref_exists(&full_ref).await? {
            return Ok(Claim::Exists);
        }
        Err(ForgeError::Other(anyhow!(
            "git update-ref {full_ref} failed: {}",
            stderr(&out).trim()
        )))
    }

    async fn dispatch(
        &self,
        _repo: &RepoName,
        event_type: &EventType,
        payload: &Value,
    ) -> Result<(), ForgeError> {
        // The same body GitHub's `POST /repos/{o}/{r}/dispatches` receives.
        let line =
            json!({ "event_type": event_type.as_str(), "client_payload": payload }).to_string();
        if let Some(command) = &self.on_dispatch {
            self.run_on_dispatch(command, &line).await?;
        }
        let _guard = self.log_lock.lock().await;
        let log = self.dispatch_log.display();
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.dispatch_log)
            .await
            .with_context(|| format!("could not open {log}"))?;
        // One write per line: appends from other processes do not interleave inside it.
        // tokio's File finishes a write in the background: flush, so the line is in the log
        // before the dispatch counts as done, and a failed write is an error, not a shrug.
        let appended = file.write_all(format!("{line}\n").as_bytes()).await;
        (appended.and(file.flush().await)).with_context(|| format!("could not append to {log}"))?;
        Ok(())
    }

    async fn prefix_branches(
        &self,
        _repo: &RepoName,
        prefix: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError> {
        let format = "--format=%(refname) %(objectname)";
        let pattern = format!("refs/heads/{prefix}/");
        let out = git_ok(&self.git_dir, &["for-each-ref", format, &pattern]).await?;
        let branch = |(name, sha): (&str, &str)| {
            Some(Branch {
                name: BranchName::listed(prefix, name.strip_prefix("refs/heads/")?)?,
                sha: Sha::new(sha),
            })
        };
        let lines = out.lines().filter_map(|line| line.split_once(' '));
        Ok(lines.filter_map(branch).collect())
    }

    async fn ahead_by(
        &self,
        _repo: &RepoName,
        base: &Base,
        branch: &BranchName,
    ) -> Result<u64, ForgeError> {
        let range = format!("refs/heads/{}..{}", base.branch, head_ref(branch));
        let out = git_ok(&self.git_dir, &["rev-list", "--count", &range]).await?;
        out.parse()
            .map_err(|e| ForgeError::Other(anyhow!("git rev-list --count said {out:?}: {e}")))
    }

    async fn ready(&self) -> Result<(), ForgeError> {
        git_ok(&self.git_dir, &["rev-parse", "--git-dir"]).await?;
        Ok(())
    }

    async fn release(
        &self,
        _repo: &RepoName,
        branch: &BranchName,
        sha: &Sha,
    ) -> Result<(), ForgeError> {
        let full_ref = head_ref(branch);
        let out = (self.update_ref(&full_ref, &["-d", &full_ref, sha.as_str()])).await?;
        if out.status.success() || !self.ref_exists(&full_ref).await? {
            return Ok(());
        }
        Err(ForgeError::refused(format!(
            "{full_ref} was not deleted: it no longer points at the claimed commit {sha}"
        )))
    }
}

/// Makes a new bare repository at `path` whose `main` branch holds one commit, as the demo and
/// the tests need. Fails if `path` exists.
pub async fn create_repository(path: &Path) -> anyhow::Result<Base> {
    if path.exists() {
        anyhow::bail!("{} exists already", path.display());
    }
    git_ok(
        path,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    )
    .await?;
    let empty_tree = git_ok(path, &["hash-object", "-t", "tree", "-w", "/dev/null"]).await?;
    let commit = git_ok(path, &["commit-tree", &empty_tree, "-m", "Initial commit"]).await?;
    git_ok(path, &["update-ref", "refs/heads/main", &commit, ""]).await?;
    Ok(Base {
        branch: RefName::parse("main").expect("main is a branch name"),
        sha: Sha::new(commit),
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use serde_json::json;

    use super::*;
    use crate::identity::RowId;

    async fn forge() -> (tempfile::TempDir, LocalForge, BranchName, Sha) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("repo.git");
        let base = create_repository(&path).await.expect("a repository");
        let forge = LocalForge::open(&LocalSettings {
            path,
            on_dispatch: None,
        })
        .await
        .expect("the repository opens");
        let prefix = BranchPrefix::parse("feedback").unwrap();
        let branch = BranchName::new(&prefix, &RowId::parse(&json!(1)).unwrap(), None);
        (dir, forge, branch, base.sha)
    }

    #[test]
    fn on_dispatch_gets_the_users_environment_and_none_of_rowbranchs_secrets() {
        let vars = [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "TZ",
            "USER",
            "TMPDIR",
            "ROWBRANCH_WEBHOOK_SECRET",
            "DATABASE_URL",
            "GITHUB_APP_PRIVATE_KEY",
            "GITHUB_WEBHOOK_SECRET",
            "GITHUB_TOKEN",
            "ROWBRANCH_STATUS_PASSWORD",
            "PGPASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "LD_PRELOAD",
        ]
        .map(|name| (name.into(), "x".into()));
        let kept: Vec<String> = dispatch_env(vars.into_iter())
            .map(|(name, _)| name.into_string().unwrap())
            .collect();
        assert_eq!(
            kept,
            ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "TMPDIR"]
        );
    }

    /// A lock file for `branch`'s ref, as a git process leaves it, last written `age` ago.
    fn lock(forge: &LocalForge, branch: &BranchName, age: Duration) -> PathBuf {
        let lock = forge.git_dir.join(format!("{}.lock", head_ref(branch)));
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        let file = std::fs::File::create(&lock).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
        lock
    }

    fn repo() -> RepoName {
        RepoName::parse("acme/app").unwrap()
    }

    #[tokio::test]
    async fn a_lock_left_by_a_git_process_that_died_is_removed_and_the_claim_made() {
        let (_dir, forge, branch, sha) = forge().await;
        let stale = lock(&forge, &branch, Duration::from_secs(60));
        assert!(matches!(
            forge.claim(&repo(), &branch, &sha).await,
            Ok(Claim::Created)
        ));
        assert!(!stale.exists());
        // And a release that meets one too.
        let stale = lock(&forge, &branch, Duration::from_secs(60));
        forge.release(&repo(), &branch, &sha).await.unwrap();
        assert!(!stale.exists());
        assert!(!forge.ref_exists(&head_ref(&branch)).await.unwrap());
    }

    #[tokio::test]
    async fn a_lock_held_now_is_left_alone_and_the_claim_is_worth_retrying() {
        let (_dir, forge, branch, sha) = forge().await;
        let held = lock(&forge, &branch, Duration::ZERO);
        // Its writer keeps it fresh for as long as the claim's retries take, however slow
        // the machine: they must not outlast STALE_LOCK and find it stale.
        std::fs::File::options()
            .write(true)
            .open(&held)
            .unwrap()
            .set_modified(SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        assert!(matches!(
            forge.claim(&repo(), &branch, &sha).await,
            Err(ForgeError::Unavailable { .. })
        ));
        assert!(held.exists(), "another writer's lock is not ours to remove");
    }
}
