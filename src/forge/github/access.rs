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

use http::{Method, StatusCode};
use serde_json::json;

use super::client::{Auth, Operation, Reply};
use super::retry::{Attempt, Stop};
use super::GithubForge;
use crate::forge::{Denial, Forge, ForgeError, WriteAccess};
use crate::identity::RepoName;

impl GithubForge {
    /// The probe: the default branch's own ref, created again at its head.
    pub(super) async fn probe_write(&self, repo: &RepoName) -> Result<WriteAccess, ForgeError> {
        let base = self.base(repo).await?;
        let body = json!({
            "ref": format!("refs/heads/{}", base.branch),
            "sha": base.sha.as_str(),
        });
        self.retry
            .run("checking write access", |_| {
                let (body, base) = (&body, &base);
                async move {
                    let installation = self.auth.installation(repo).await?;
                    let path = format!("/repos/{repo}/git/refs");
                    // A write like any other: paced, and given up once the shutdown begins.
                    let reply = installation
                        .writes
                        .first_write(|| async {
                            installation.ensure_token().await?;
                            installation
                                .send(Operation::CreateRef, Method::POST, &path, Some(body))
                                .await
                        })
                        .await??;
                    let message = reply.message();
                    match reply.status.as_u16() {
                        422 if message.contains("already exists") => Ok(WriteAccess::Granted),
                        // The default branch cannot have been missing: it was read just now.
                        201 => Ok(WriteAccess::Granted),
                        404 => Err(installation.not_found(repo, &reply)),
                        403 => match self.denied(repo, &reply) {
                            Some(denial) => Ok(WriteAccess::Denied(denial)),
                            // A rate limit: retried, as any.
                            None => reply.unexpected(),
                        },
                        400 | 422 => Ok(WriteAccess::Untold {
                            why: format!(
                                "GitHub answered the probe (creating {}'s own ref, which \
                                 exists) {} ({message}), which does not say",
                                base.branch, reply.status
                            ),
                        }),
                        _ => reply.unexpected(),
                    }
                }
            })
            .await
    }

    /// What a write's answer says when GitHub refused it for a permission rowbranch lacks: a
    /// 403 that is not a rate limit. `None` for any other answer.
    pub(super) fn denied(&self, repo: &RepoName, reply: &Reply) -> Option<Denial> {
        if reply.status != StatusCode::FORBIDDEN {
            return None;
        }
        let who = match &self.auth {
            Auth::App(_) => "the App",
            Auth::Token(_) => "the token",
        };
        if let Some(needs) = reply.missing_permission() {
            let fix = match &self.auth {
                Auth::App(_) => format!(
                    "in the App's settings grant {}, then accept the new permissions on the \
                     installation",
                    App(&needs)
                ),
                Auth::Token(_) => format!(
                    "in the workflow, give the job {} (a fine-grained personal access token \
                     needs {} on {repo})",
                    Workflow(&needs),
                    App(&needs)
                ),
            };
            return Some(Denial {
                problem: format!(
                    "{who} cannot write {repo}: it lacks {needs} (GitHub's \
                     X-Accepted-GitHub-Permissions)"
                ),
                fix,
            });
        }
        // A rate limit, said the way rate limits are: retried.
        if matches!(reply.unexpected::<()>(), Err(Stop::Retry { .. })) {
            return None;
        }
        Some(Denial {
            problem: format!(
                "{who} cannot write {repo}: GitHub answered {} ({}) without naming a permission",
                reply.status,
                reply.message()
            ),
            fix: format!("it needs contents write on {repo}"),
        })
    }

    /// A write's answer that the caller does not handle: with a token, a refusal for a missing
    /// permission says which; everything else as [`Reply::unexpected`] says.
    pub(super) fn unexpected_write<T>(&self, repo: &RepoName, reply: &Reply) -> Attempt<T> {
        match (&self.auth, self.denied(repo, reply)) {
            (Auth::Token(_), Some(denial)) => Err(Stop::Fail(ForgeError::Refused {
                message: denial.to_string(),
            })),
            _ => reply.unexpected(),
        }
    }
}

/// The first set of permissions an `X-Accepted-GitHub-Permissions` value accepts
/// (`pull_requests=write,contents=read; issues=write`: the sets are alternatives), as
/// `(name, level)` pairs.
fn first_set(accepted: &str) -> Vec<(&str, &str)> {
    accepted
        .split(';')
        .next()
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| {
            let (name, level) = pair.trim().split_once('=')?;
            Some((name.trim(), level.trim()))
        })
        .collect()
}

/// The permissions, as a workflow's `permissions:` key writes them: `permissions: contents:
/// write`, the names with `-` for `_` (`pull-requests`).
struct Workflow<'a>(&'a str);

impl std::fmt::Display for Workflow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs: Vec<String> = first_set(self.0)
            .into_iter()
            .map(|(name, level)| format!("{}: {level}", name.replace('_', "-")))
            .collect();
        match pairs.as_slice() {
            [one] => write!(f, "`permissions: {one}`"),
            many => write!(f, "`permissions:` with `{}`", many.join("`, `")),
        }
    }
}

/// The permissions as GitHub's settings pages name them: `Contents: read and write`.
struct App<'a>(&'a str);

impl std::fmt::Display for App<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs: Vec<String> = first_set(self.0)
            .into_iter()
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
        f.write_str(&pairs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_reads_as_a_workflow_writes_it_and_as_the_settings_page_names_it() {
        assert_eq!(
            Workflow("contents=write").to_string(),
            "`permissions: contents: write`"
        );
        assert_eq!(
            Workflow("pull_requests=write,contents=read; issues=write").to_string(),
            "`permissions:` with `pull-requests: write`, `contents: read`"
        );
        assert_eq!(
            App("contents=write").to_string(),
            "Contents: read and write"
        );
        assert_eq!(
            App("pull_requests=read, actions=read").to_string(),
            "Pull requests: read-only, Actions: read-only"
        );
    }
}
