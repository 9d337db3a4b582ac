//! GitHub's JSON shapes, full enough for octocrab's models to deserialize them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::auth::epoch_secs;
use crate::state::{Account, Installation, Pull, Repo, WorkflowRun};

pub(crate) const APP_OWNER: &str = "rowbranch-test-owner";

/// `2026-12-02T13:00:00Z`: RFC 3339, UTC, whole seconds, as GitHub writes times.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = epoch_secs(t);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A stable number for a name (user ids and the like).
pub(crate) fn stable_id(seed: &str) -> u64 {
    let digest = Sha256::digest(seed.as_bytes());
    let mut n = [0u8; 8];
    n.copy_from_slice(&digest[..8]);
    1_000_000 + u64::from_be_bytes(n) % 90_000_000
}

/// A sha-like (40 hex) digest of some bytes: the fake's blob and tree ids.
pub(crate) fn object_id(kind: &str, bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("{kind} {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())[..40].to_owned()
}

pub(crate) fn node_id(prefix: &str, seed: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD_NO_PAD.encode(seed.as_bytes());
    format!("{prefix}_{}", b.replace(['+', '/'], "x"))
}

/// A user or organization as GitHub embeds it (`simple-user`); `kind` is its `type`.
pub(crate) fn user(base: &str, login: &str, kind: &str) -> Value {
    let api = format!("{base}/users/{login}");
    json!({
        "login": login,
        "id": stable_id(login),
        "node_id": node_id("O", login),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{}?v=4", stable_id(login)),
        "gravatar_id": "",
        "url": api,
        "html_url": format!("https://github.com/{login}"),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": kind,
        "user_view_type": "public",
        "site_admin": false,
    })
}

/// An account as `GET /users/{username}` answers (`public-user`, the same for an
/// organization, with its `type`).
pub(crate) fn public_user(base: &str, account: &Account) -> Value {
    let mut value = user(base, &account.login, &account.kind);
    if let Some(object) = value.as_object_mut() {
        for (key, v) in [
            ("name", Value::Null),
            ("company", Value::Null),
            ("blog", json!("")),
            ("location", Value::Null),
            ("email", Value::Null),
            ("hireable", Value::Null),
            ("bio", Value::Null),
            ("twitter_username", Value::Null),
            ("public_repos", json!(0)),
            ("public_gists", json!(0)),
            ("followers", json!(0)),
            ("following", json!(0)),
            ("created_at", json!("2020-01-01T00:00:00Z")),
            ("updated_at", json!("2025-01-01T00:00:00Z")),
        ] {
            object.insert(key.to_owned(), v);
        }
    }
    value
}

pub(crate) fn repo_api(base: &str, repo: &Repo) -> String {
    format!("{base}/repos/{}/{}", repo.owner, repo.name)
}

pub(crate) fn repo_html(repo: &Repo) -> String {
    format!("https://github.com/{}/{}", repo.owner, repo.name)
}

/// `minimal-repository`'s first keys: what a workflow run names its repository with, and
/// where `full-repository` begins.
fn minimal_repo(base: &str, repo: &Repo, owner_kind: &str) -> Value {
    json!({
        "id": repo.id,
        "node_id": node_id("R", &repo.id.to_string()),
        "name": repo.name,
        "full_name": repo.full_name(),
        "private": true,
        "owner": user(base, &repo.owner, owner_kind),
        "html_url": repo_html(repo),
        "description": null,
        "fork": false,
        "url": repo_api(base, repo),
    })
}

/// `full-repository`, trimmed to what clients read (no `permissions`: an installation token
/// does not get them).
pub(crate) fn repo(base: &str, repo: &Repo, owner_kind: &str) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let pushed = repo
        .commits
        .values()
        .map(|c| c.time)
        .max()
        .unwrap_or(repo.created_at);
    let first = merge(
        minimal_repo(base, repo, owner_kind),
        json!({
            "archive_url": format!("{api}/{{archive_format}}{{/ref}}"),
            "branches_url": format!("{api}/branches{{/branch}}"),
            "commits_url": format!("{api}/commits{{/sha}}"),
            "compare_url": format!("{api}/compare/{{base}}...{{head}}"),
            "contents_url": format!("{api}/contents/{{+path}}"),
            "git_refs_url": format!("{api}/git/refs{{/sha}}"),
            "pulls_url": format!("{api}/pulls{{/number}}"),
            "hooks_url": format!("{api}/hooks"),
        }),
    );
    let open = repo
        .pulls
        .iter()
        .filter(|p| p.state == crate::state::PullState::Open)
        .count();
    let more = json!({
        "git_url": format!("git://github.com/{}.git", repo.full_name()),
        "ssh_url": format!("git@github.com:{}.git", repo.full_name()),
        "clone_url": format!("{html}.git"),
        "homepage": null,
        "size": 1,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": null,
        "has_issues": true,
        "has_projects": false,
        "has_downloads": true,
        "has_wiki": false,
        "has_pages": false,
        "has_discussions": false,
        "forks_count": 0,
        "mirror_url": null,
        "archived": false,
        "disabled": false,
        "open_issues_count": open,
        "license": null,
        "allow_forking": false,
        "is_template": false,
        "web_commit_signoff_required": false,
        "topics": [],
        "visibility": "private",
        "forks": 0,
        "open_issues": open,
        "watchers": 0,
        "default_branch": repo.default_branch,
        "created_at": rfc3339(repo.created_at),
        "updated_at": rfc3339(pushed),
        "pushed_at": rfc3339(pushed),
        "network_count": 0,
        "subscribers_count": 0,
    });
    merge(first, more)
}

/// The keys of `b` added to the object `a` (the `json!` macro has a recursion limit).
fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// A `git-ref` object.
pub(crate) fn git_ref(base: &str, repo: &Repo, full_ref: &str, sha: &str) -> Value {
    let api = repo_api(base, repo);
    json!({
        "ref": full_ref,
        "node_id": node_id("REF", &format!("{}:{full_ref}", repo.id)),
        "url": format!("{api}/git/{full_ref}"),
        "object": {
            "sha": sha,
            "type": "commit",
            "url": format!("{api}/git/commits/{sha}"),
        },
    })
}

/// A `commit` object as in compare results.
pub(crate) fn commit(base: &str, repo: &Repo, sha: &str) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let c = repo.commits.get(sha);
    let time = rfc3339(c.map(|c| c.time).unwrap_or_else(SystemTime::now));
    let message = c.map(|c| c.message.clone()).unwrap_or_default();
    let parents: Vec<Value> = c
        .map(|c| c.parents.clone())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            json!({
                "sha": p,
                "url": format!("{api}/commits/{p}"),
                "html_url": format!("{html}/commit/{p}"),
            })
        })
        .collect();
    let tree = object_id("tree", sha.as_bytes());
    let who = json!({"name": "rowbranch test", "email": "test@example.invalid", "date": time});
    json!({
        "url": format!("{api}/commits/{sha}"),
        "sha": sha,
        "node_id": node_id("C", sha),
        "html_url": format!("{html}/commit/{sha}"),
        "comments_url": format!("{api}/commits/{sha}/comments"),
        "commit": {
            "url": format!("{api}/git/commits/{sha}"),
            "author": who,
            "committer": who,
            "message": message,
            "tree": {"sha": tree, "url": format!("{api}/git/trees/{tree}")},
            "comment_count": 0,
            "verification": {"verified": false, "reason": "unsigned", "signature": null, "payload": null, "verified_at": null},
        },
        "author": null,
        "committer": null,
        "parents": parents,
    })
}

/// A pull request as in the list (`pull-request-simple`).
pub(crate) fn pull(base: &str, repo: &Repo, owner_kind: &str, p: &Pull) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let number = p.number;
    let repo_json = self::repo(base, repo, owner_kind);
    let owner = user(base, &repo.owner, owner_kind);
    json!({
        "url": format!("{api}/pulls/{number}"),
        "id": p.id,
        "node_id": node_id("PR", &p.id.to_string()),
        "html_url": format!("{html}/pull/{number}"),
        "diff_url": format!("{html}/pull/{number}.diff"),
        "patch_url": format!("{html}/pull/{number}.patch"),
        "issue_url": format!("{api}/issues/{number}"),
        "commits_url": format!("{api}/pulls/{number}/commits"),
        "review_comments_url": format!("{api}/pulls/{number}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{api}/issues/{number}/comments"),
        "statuses_url": format!("{api}/statuses/{}", p.head_sha),
        "number": number,
        "state": p.state.as_str(),
        "locked": false,
        "title": p.title,
        "user": owner,
        "body": null,
        "labels": [],
        "milestone": null,
        "active_lock_reason": null,
        "created_at": rfc3339(p.created_at),
        "updated_at": rfc3339(p.updated_at),
        "closed_at": p.closed_at.map(rfc3339),
        "merged_at": p.merged_at.map(rfc3339),
        "merge_commit_sha": p.merged_at.map(|_| object_id("merge", p.head_sha.as_bytes())),
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "head": {
            "label": format!("{}:{}", repo.owner, p.head_ref),
            "ref": p.head_ref,
            "sha": p.head_sha,
            "user": owner,
            "repo": repo_json,
        },
        "base": {
            "label": format!("{}:{}", repo.owner, p.base_ref),
            "ref": p.base_ref,
            "sha": p.base_sha,
            "user": owner,
            "repo": repo_json,
        },
        "author_association": "MEMBER",
        "auto_merge": null,
        "draft": false,
    })
}

/// A workflow run (`workflow-run`), as `GET /repos/{o}/{r}/actions/runs` lists it.
pub(crate) fn workflow_run(
    base: &str,
    repo: &Repo,
    owner_kind: &str,
    app_slug: &str,
    run: &WorkflowRun,
) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let id = run.id;
    let workflow_id = stable_id(&run.path);
    let runs = format!("{api}/actions/runs/{id}");
    let check_suite_id = id + 1_000_000_000;
    // A dispatch the App sent: its bot is the actor.
    let actor = user(base, &format!("{app_slug}[bot]"), "Bot");
    let minimal_repo = minimal_repo(base, repo, owner_kind);
    let commit_time = repo
        .commits
        .get(&run.head_sha)
        .map_or(run.created_at, |c| c.time);
    let who = json!({"name": "rowbranch test", "email": "test@example.invalid"});
    let first = json!({
        "id": id,
        "name": run.name,
        "node_id": node_id("WFR", &id.to_string()),
        "head_branch": run.head_branch,
        "head_sha": run.head_sha,
        "path": run.path,
        "display_title": run.display_title,
        "run_number": run.run_number,
        "event": run.event,
        "status": run.status,
        "conclusion": run.conclusion,
        "workflow_id": workflow_id,
        "check_suite_id": check_suite_id,
        "check_suite_node_id": node_id("CS", &check_suite_id.to_string()),
        "url": runs,
        "html_url": format!("{html}/actions/runs/{id}"),
        "pull_requests": [],
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
        "actor": actor,
        "run_attempt": 1,
        "referenced_workflows": [],
        "run_started_at": rfc3339(run.created_at),
        "triggering_actor": actor,
    });
    let more = json!({
        "jobs_url": format!("{runs}/jobs"),
        "logs_url": format!("{runs}/logs"),
        "check_suite_url": format!("{api}/check-suites/{check_suite_id}"),
        "artifacts_url": format!("{runs}/artifacts"),
        "cancel_url": format!("{runs}/cancel"),
        "rerun_url": format!("{runs}/rerun"),
        "previous_attempt_url": null,
        "workflow_url": format!("{api}/actions/workflows/{workflow_id}"),
        "head_commit": {
            "id": run.head_sha,
            "tree_id": object_id("tree", run.head_sha.as_bytes()),
            "message": repo.commits.get(&run.head_sha).map(|c| c.message.clone()).unwrap_or_default(),
            "timestamp": rfc3339(commit_time),
            "author": who,
            "committer": who,
        },
        "repository": minimal_repo,
        "head_repository": minimal_repo,
    });
    merge(first, more)
}

/// A workflow (`workflow`), as `GET /repos/{o}/{r}/actions/workflows/{id}` gives it: `path` is
/// its file (`.github/workflows/x.yml`), `state` whether GitHub runs it.
pub(crate) fn workflow(base: &str, repo: &Repo, path: &str, name: &str, state: &str) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let id = stable_id(path);
    json!({
        "id": id,
        "node_id": node_id("W", &id.to_string()),
        "name": name,
        "path": path,
        "state": state,
        "created_at": rfc3339(repo.created_at),
        "updated_at": rfc3339(repo.created_at),
        "url": format!("{api}/actions/workflows/{id}"),
        "html_url": format!("{html}/blob/{}/{path}", repo.default_branch),
        "badge_url": format!("{html}/workflows/{}/badge.svg", name.replace(' ', "%20")),
    })
}

/// `GET /rate_limit`'s answer for one bucket: under `resources.core`, and (deprecated, but
/// still sent by the 2022-11-28 version) as `rate`.
pub(crate) fn rate_limit(limit: u64, remaining: u64, reset: i64) -> Value {
    let core = json!({
        "limit": limit,
        "used": limit - remaining.min(limit),
        "remaining": remaining,
        "reset": reset,
        "resource": "core",
    });
    json!({"resources": {"core": core}, "rate": core})
}

pub(crate) fn permissions_json(perms: &BTreeMap<String, String>) -> Value {
    Value::Object(
        perms
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<String, Value>>(),
    )
}

pub(crate) fn installation(
    base: &str,
    app_id: u64,
    app_slug: &str,
    account_kind: &str,
    inst: &Installation,
) -> Value {
    json!({
        "id": inst.id,
        "account": user(base, &inst.account, account_kind),
        "repository_selection": inst.selection(),
        "access_tokens_url": format!("{base}/app/installations/{}/access_tokens", inst.id),
        "repositories_url": format!("{base}/installation/repositories"),
        "html_url": format!("https://github.com/organizations/{}/settings/installations/{}", inst.account, inst.id),
        "app_id": app_id,
        "app_slug": app_slug,
        "client_id": null,
        "target_id": stable_id(&inst.account),
        "target_type": account_kind,
        "permissions": permissions_json(&inst.permissions),
        "events": [],
        "created_at": rfc3339(inst.created_at),
        "updated_at": rfc3339(inst.created_at),
        "single_file_name": null,
        "has_multiple_single_files": false,
        "single_file_paths": [],
        "suspended_by": null,
        "suspended_at": null,
    })
}

pub(crate) fn app(base: &str, app_id: u64, client_id: &str, name: &str, slug: &str) -> Value {
    json!({
        "id": app_id,
        "slug": slug,
        "client_id": client_id,
        "node_id": node_id("A", &app_id.to_string()),
        "owner": user(base, APP_OWNER, "Organization"),
        "name": name,
        "description": "rowbranch's test App",
        "external_url": "https://example.invalid/rowbranch",
        "html_url": format!("https://github.com/apps/{slug}"),
        "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-01T00:00:00Z",
        "permissions": {"actions": "read", "contents": "write", "metadata": "read", "pull_requests": "read"},
        "events": [],
        "installations_count": 1,
    })
}

/// Base64 with a newline every 60 characters (and one at the end), as GitHub sends it.
pub(crate) fn wrapped_base64(bytes: &[u8]) -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(flat.len() + flat.len() / 60 + 1);
    for chunk in flat.as_bytes().chunks(60) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// A content entry (`type` is `file` or `dir`); `content` only for a single file.
pub(crate) fn content(
    base: &str,
    repo: &Repo,
    path: &str,
    git_ref: &str,
    kind: &str,
    file: Option<&[u8]>,
    with_content: bool,
) -> Value {
    let api = repo_api(base, repo);
    let html = repo_html(repo);
    let name = path.rsplit('/').next().unwrap_or(path);
    let (sha, size) = match file {
        Some(bytes) => (object_id("blob", bytes), bytes.len()),
        None => (object_id("tree", path.as_bytes()), 0),
    };
    let self_url = format!("{api}/contents/{path}?ref={git_ref}");
    let (git_url, html_url) = if kind == "dir" {
        (
            format!("{api}/git/trees/{sha}"),
            format!("{html}/tree/{git_ref}/{path}"),
        )
    } else {
        (
            format!("{api}/git/blobs/{sha}"),
            format!("{html}/blob/{git_ref}/{path}"),
        )
    };
    let download = (kind == "file").then(|| {
        format!(
            "https://raw.githubusercontent.com/{}/{}/{git_ref}/{path}",
            repo.owner, repo.name
        )
    });
    let mut v = json!({
        "type": kind,
        "size": size,
        "name": name,
        "path": path,
        "sha": sha,
        "url": self_url,
        "git_url": git_url,
        "html_url": html_url,
        "download_url": download,
        "_links": {"self": self_url, "git": git_url, "html": html_url},
    });
    if with_content {
        if let Some(bytes) = file {
            v["encoding"] = json!("base64");
            v["content"] = json!(wrapped_base64(bytes));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::rfc3339;

    #[test]
    fn rfc3339_writes_utc_whole_seconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
    }
}
