//! Reads that check a setup, for `rowbranch doctor` (who the App is, what an installation may
//! do, which workflows a repository has and whether one is enabled), and for `rowbranch init`
//! the account type of a repository's owner and the manifest conversion that finishes creating
//! the App.

use std::collections::BTreeMap;
use std::sync::Arc;

use octocrab::{GitHubError, Octocrab};
use serde::Deserialize;
use serde_json::Value;

use super::client::{call, encode_path, missing_permission, octocrab, said, Credentials, Refusal};
use super::GithubForge;
use crate::forge::{ForgeError, Listing};
use crate::identity::{RefName, RepoName};
use crate::metrics::Metrics;

/// The App, as `GET /app` describes it, or as GitHub hands it back when it is created from a
/// manifest: then with its private key, which `Debug` never shows.
#[derive(Deserialize)]
pub struct AppInfo {
    pub id: u64,
    pub slug: Option<String>,
    pub name: String,
    /// Only in the manifest conversion's answer.
    #[serde(default)]
    pub pem: String,
    /// The secret GitHub signs the App's events with: only in the manifest conversion's
    /// answer, and `null` there when the manifest has no webhook.
    #[serde(default)]
    pub webhook_secret: Option<String>,
}

impl std::fmt::Debug for AppInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AppInfo({}, id {})", self.name, self.id)
    }
}

/// GitHub's refusal of a setup check, naming `what` was asked.
fn refused(what: &str, refusal: &GitHubError) -> ForgeError {
    let status = refusal.status_code;
    ForgeError::refused(format!("{what} answered {status}: {}", said(refusal)))
}

/// GitHub's answer to `what`: the value, `None` for a 404, or its refusal.
fn found<T>(what: &str, answer: Result<T, Refusal>) -> Result<Option<T>, ForgeError> {
    match answer {
        Ok(value) => Ok(Some(value)),
        Err(refusal) if refusal.status_code.as_u16() == 404 => Ok(None),
        Err(refusal) => Err(refused(what, &refusal)),
    }
}

/// The App, for the calls only an App makes; a refusal with a token.
fn app(forge: &GithubForge) -> Result<&Credentials, ForgeError> {
    match forge.auth.is_app() {
        true => Ok(&forge.auth.own),
        false => Err(ForgeError::refused(
            "rowbranch authenticates with a token ([github] token_env): there is no App",
        )),
    }
}

/// `GET /app` with the App's JWT.
/// (https://docs.github.com/rest/apps/apps#get-the-authenticated-app)
pub async fn app_info(forge: &GithubForge) -> Result<AppInfo, ForgeError> {
    let found = app(forge)?.run(|gh| async move { gh.get("/app", None::<&()>).await });
    found
        .await?
        .map_err(|refusal| refused("GET /app", &refusal))
}

/// The App's webhook, as `GET /app/hook/config` gives it: where GitHub sends the App's events
/// and how. GitHub masks the secret (`********`), and says nothing of whether the webhook is
/// active.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct AppHook {
    /// Empty for an App made without a webhook.
    pub url: String,
    /// `json` or `form`.
    pub content_type: String,
    secret: Option<String>,
    /// `"1"` when GitHub does not check the certificate of `url`'s host.
    insecure_ssl: Option<Value>,
}

impl AppHook {
    /// Whether GitHub signs the events (a secret is set).
    pub fn signs(&self) -> bool {
        self.secret.as_deref().is_some_and(|s| !s.is_empty())
    }

    /// Whether GitHub sends them without checking the host's certificate.
    pub fn insecure(&self) -> bool {
        let insecure = self.insecure_ssl.as_ref();
        insecure.is_some_and(|v| v == "1" || v == 1)
    }
}

/// `GET /app/hook/config` with the App's JWT; `None` when GitHub has no webhook for the App.
/// (https://docs.github.com/rest/apps/webhooks#get-a-webhook-configuration-for-an-app)
pub async fn app_hook(forge: &GithubForge) -> Result<Option<AppHook>, ForgeError> {
    let path = "/app/hook/config";
    let hook = app(forge)?.run(|gh| async move { gh.get::<AppHook, _, ()>(path, None).await });
    found("GET /app/hook/config", hook.await?)
}

/// The permissions of the installation that holds `repo`, each one's name and level
/// (`contents` → `write`).
pub async fn installation_permissions(
    forge: &GithubForge,
    repo: &RepoName,
) -> Result<BTreeMap<String, String>, ForgeError> {
    Ok(app(forge)?.installation_of(repo).await?.permissions)
}

/// The workflow files on `branch` (`.github/workflows/*.yml|yaml`) and their text.
/// (https://docs.github.com/rest/repos/contents#get-repository-content)
pub async fn workflows(
    forge: &GithubForge,
    repo: &RepoName,
    branch: &RefName,
) -> Result<Vec<(String, String)>, ForgeError> {
    let installation = forge.auth.installation(repo).await?;
    let contents = |gh: Octocrab, path: String| async move {
        let repos = gh.repos(repo.owner(), repo.name());
        repos
            .get_content()
            .path(path)
            .r#ref(branch.as_str())
            .send()
            .await
    };
    let listed = installation.run(|gh| contents(gh, ".github/workflows".to_owned()));
    let Some(mut entries) = found("listing .github/workflows", listed.await?)? else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries.take_items() {
        let is_yaml = entry.path.ends_with(".yml") || entry.path.ends_with(".yaml");
        if entry.r#type != "file" || !is_yaml {
            continue;
        }
        let path = encode_path(&entry.path);
        let file = installation.run(|gh| contents(gh, path.clone())).await?;
        let mut file =
            file.map_err(|refusal| refused(&format!("reading {}", entry.path), &refusal))?;
        let text = file
            .take_items()
            .into_iter()
            .next()
            .and_then(|f| f.decoded_content());
        files.push((entry.path, text.unwrap_or_default()));
    }
    Ok(files)
}

/// The workflow `.github/workflows/{file}` of `repo`, and whether GitHub runs it: a scheduled
/// workflow of a public repository is disabled after 60 days without activity, and then runs
/// neither on its schedule nor on anything else. Found: the workflow's `state` (`active`,
/// `disabled_inactivity`, `disabled_manually`, `disabled_fork`, `deleted`, or one added
/// since), or none when GitHub knows no workflow by that file name. Needs Actions: read.
/// (https://docs.github.com/rest/actions/workflows#get-a-workflow)
pub async fn workflow_state(
    forge: &GithubForge,
    repo: &RepoName,
    file: &str,
) -> Result<Listing<String>, ForgeError> {
    let installation = forge.auth.installation(repo).await?;
    let path = &format!("/repos/{repo}/actions/workflows/{}", encode_path(file));
    let answer = installation.run(|gh| async move { gh.get::<Value, _, ()>(path, None).await });
    let answer = answer.await?;
    if let Some(needs) = answer.as_ref().err().and_then(|r| missing_permission(r)) {
        return Ok(Listing::NotPermitted { needs });
    }
    let workflow = found(&format!("GET {path}"), answer)?;
    let state = workflow.map(|w| w["state"].as_str().unwrap_or_default().to_owned());
    Ok(Listing::Found(state.into_iter().collect()))
}

/// A client without credentials, for the two calls `init` makes before the App exists.
fn anonymous(api_url: &str) -> Result<Octocrab, ForgeError> {
    octocrab(api_url, Arc::new(Metrics::new())).map_err(|e| ForgeError::Other(e.into()))
}

/// The `type` GitHub gives the account `login` — `User` or `Organization` (a private App can
/// be installed only on the account that owns it, so `init` creates it there) — or `None` when
/// there is no such account. Asked without credentials (`GET /users/{username}`).
/// (https://docs.github.com/rest/users/users#get-a-user)
pub async fn account_type(api_url: &str, login: &str) -> Result<Option<String>, ForgeError> {
    let path = format!("/users/{}", encode_path(login));
    let answer = call(anonymous(api_url)?.get::<Value, _, ()>(&path, None)).await?;
    let account = found("GET /users/{username}", answer)?;
    Ok(account.and_then(|account| account["type"].as_str().map(str::to_owned)))
}

/// Finishes "create an App from a manifest": trades the one-time `code` GitHub handed back
/// for the App's id and private key (`POST /app-manifests/{code}/conversions`, no auth).
/// (https://docs.github.com/rest/apps/apps#create-a-github-app-from-a-manifest)
pub async fn convert_manifest(api_url: &str, code: &str) -> Result<AppInfo, ForgeError> {
    let path = format!("/app-manifests/{}/conversions", encode_path(code));
    match call(anonymous(api_url)?.post::<(), AppInfo>(&path, None)).await? {
        Ok(app) => Ok(app),
        Err(refusal) if refusal.status_code.as_u16() == 404 => Err(ForgeError::refused(
            "GitHub does not know that code: it works once, for an hour; create the App again \
             from create-app.html",
        )),
        Err(refusal) => Err(refused("POST /app-manifests/{code}/conversions", &refusal)),
    }
}
