//! Whether rowbranch may write a repository: asked once at start without changing anything,
//! and said again, the same way, by a write GitHub refuses for a missing permission.
//!
//! GitHub tells no installation token what it may do — and a workflow's `GITHUB_TOKEN` is an
//! installation token: `GET /repos/{o}/{r}`'s `permissions` describe a user's access, not the
//! token's. So the probe is a write GitHub refuses whatever the token may do: it creates the
//! default branch's own ref at the head it points at already (`POST /repos/{o}/{r}/git/refs`).
//! A token that may write is told 422 "Reference already exists", and nothing is created; one
//! that may not is told 403 "Resource not accessible by integration" with
//! `X-Accepted-GitHub-Permissions: contents=write`, the permission the endpoint needs.
//!
//! That GitHub checks the permission before it looks at the request's body is what its docs
//! imply — "Resource not accessible" means "your token has insufficient permissions", and the
//! header lists what the endpoint needs, not what this request would — but do not state. So
//! the probe trusts only those two answers; anything else leaves the question untold, and the
//! first write answers it with the same message.
//! (https://docs.github.com/rest/git/refs#create-a-reference,
//! https://docs.github.com/rest/using-the-rest-api/troubleshooting-the-rest-api#resource-not-accessible)

use octocrab::params::repos::Reference;
use octocrab::GitHubError;

use super::client::{missing_permission, said, unexpected, Auth};
use super::retry::Setback;
use super::{GithubForge, Turn};
use crate::forge::{Denial, Forge, ForgeError, WriteAccess};
use crate::identity::RepoName;

impl GithubForge {
    /// The probe: the default branch's own ref, created again at its head.
    pub(super) async fn probe_write(&self, repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        let base = &self.base(repo).await?;
        let reference = &Reference::Branch(base.branch.as_str().to_owned());
        self.retry
            .run("checking write access", |_| async move {
                // A write like any other: paced, and given up once the shutdown begins.
                let created = self.send(repo, Turn::Claim, |gh| async move {
                    let repos = gh.repos(repo.owner(), repo.name());
                    repos.create_ref(reference, base.sha.as_str()).await
                });
                // 201: the default branch cannot have been missing, it was read just now.
                let Err(refusal) = created.await? else {
                    return Ok(WriteAccess::Granted);
                };
                match refusal.status_code.as_u16() {
                    422 if refusal.message.contains("already exists") => Ok(WriteAccess::Granted),
                    // Not a denial: a rate limit, retried as any.
                    403 => (self.denied(repo, &refusal).map(WriteAccess::Denied))
                        .ok_or_else(|| unexpected(&refusal)),
                    400 | 422 => Ok(WriteAccess::Untold {
                        why: format!(
                            "GitHub answered the probe (creating {}'s own ref, which exists) {} \
                             ({}), which does not say",
                            base.branch,
                            refusal.status_code,
                            said(&refusal)
                        ),
                    }),
                    _ => Err(self.refused(repo, &refusal, Turn::Read)),
                }
            })
            .await
    }

    /// What a write's refusal says when GitHub refused it for a permission rowbranch lacks: a
    /// 403 that is not a rate limit. `None` for any other answer.
    pub(super) fn denied(&self, repo: &RepoName, refusal: &GitHubError) -> Option<Denial> {
        if refusal.status_code.as_u16() != 403 {
            return None;
        }
        let app = matches!(self.auth, Auth::App(_));
        let who = if app { "the App" } else { "the token" };
        let Some(needs) = missing_permission(refusal) else {
            // A rate limit, said the way rate limits are: retried.
            if matches!(unexpected(refusal), Setback::Retry { .. }) {
                return None;
            }
            return Some(Denial {
                problem: format!(
                    "{who} cannot write {repo}: GitHub answered {} ({}) without naming a \
                     permission",
                    refusal.status_code,
                    said(refusal)
                ),
                fix: format!("it needs contents write on {repo}"),
            });
        };
        let (settings, key) = (as_settings_name(&needs), as_workflow_key(&needs));
        Some(Denial {
            problem: format!(
                "{who} cannot write {repo}: it lacks {needs} (GitHub's \
                 X-Accepted-GitHub-Permissions)"
            ),
            fix: match app {
                true => format!(
                    "in the App's settings grant {settings}, then accept the new permissions on \
                     the installation"
                ),
                false => format!(
                    "in the workflow, give the job {key} (a fine-grained personal access token \
                     needs {settings} on {repo})"
                ),
            },
        })
    }
}

/// The first set of permissions an `X-Accepted-GitHub-Permissions` value accepts
/// (`pull_requests=write,contents=read; issues=write`: the sets are alternatives), as
/// `(name, level)` pairs.
fn first_set(accepted: &str) -> impl Iterator<Item = (&str, &str)> {
    let first = accepted.split(';').next().unwrap_or_default();
    first.split(',').filter_map(|pair| {
        let (name, level) = pair.trim().split_once('=')?;
        Some((name.trim(), level.trim()))
    })
}

/// The permissions as a workflow's `permissions:` key writes them: `permissions: contents:
/// write`, the names with `-` for `_` (`pull-requests`).
fn as_workflow_key(accepted: &str) -> String {
    let pairs: Vec<String> = first_set(accepted)
        .map(|(name, level)| format!("{}: {level}", name.replace('_', "-")))
        .collect();
    match pairs.as_slice() {
        [one] => format!("`permissions: {one}`"),
        many => format!("`permissions:` with `{}`", many.join("`, `")),
    }
}

/// The permissions as GitHub's settings pages name them: `Contents: read and write`.
fn as_settings_name(accepted: &str) -> String {
    let pairs: Vec<String> = first_set(accepted)
        .map(|(name, level)| {
            let mut words = name.replace('_', " ");
            if let Some(first) = words.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            let level = match level {
                "write" => "read and write",
                "read" => "read-only",
                other => other,
            };
            format!("{words}: {level}")
        })
        .collect();
    pairs.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_reads_as_a_workflow_writes_it_and_as_the_settings_page_names_it() {
        assert_eq!(
            as_workflow_key("contents=write"),
            "`permissions: contents: write`"
        );
        assert_eq!(
            as_workflow_key("pull_requests=write,contents=read; issues=write"),
            "`permissions:` with `pull-requests: write`, `contents: read`"
        );
        assert_eq!(
            as_settings_name("contents=write"),
            "Contents: read and write"
        );
        assert_eq!(
            as_settings_name("pull_requests=read, actions=read"),
            "Pull requests: read-only, Actions: read-only"
        );
    }
}
