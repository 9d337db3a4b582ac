//! Reads that check a setup, for `rowbranch doctor` (who the App is, what an installation may
//! do, which workflows a repository has and whether one is enabled), and for `rowbranch init`
//! the account type of a repository's owner and the manifest conversion that finishes creating
//! the App.

use base64::Engine;
use http::Method;

use super::client::{encode_path, encode_query, send, Apps, Auth, Operation, Reply};
use super::transport;
use super::wire::{
    Account, AppInfo, ContentEntry, ContentFile, InstallationFound, ManifestApp, Permissions,
    Workflow,
};
use super::GithubForge;
use crate::forge::ForgeError;
use crate::identity::{RefName, RepoName};

fn expect_ok(reply: Reply, what: &str) -> Result<Reply, ForgeError> {
    if reply.status.is_success() {
        return Ok(reply);
    }
    Err(ForgeError::Refused {
        message: format!("{what} answered {}: {}", reply.status, reply.message()),
    })
}

/// The App, for the calls only an App makes; a refusal with a token.
fn apps(forge: &GithubForge) -> Result<&Apps, ForgeError> {
    match &forge.auth {
        Auth::App(apps) => Ok(apps),
        Auth::Token(_) => Err(ForgeError::Refused {
            message: "rowbranch authenticates with a token ([github] token_env): there is no App"
                .into(),
        }),
    }
}

/// `GET /app` with the App's JWT.
/// (https://docs.github.com/rest/apps/apps#get-the-authenticated-app)
pub async fn app_info(forge: &GithubForge) -> Result<AppInfo, ForgeError> {
    let reply = apps(forge)?
        .send_app(Operation::GetApp, Method::GET, "/app", None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    expect_ok(reply, "GET /app")?
        .json()
        .map_err(ForgeError::from)
}

/// The permissions of the installation that holds `repo` (`GET /repos/{o}/{r}/installation`).
/// (https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app)
pub async fn installation_permissions(
    forge: &GithubForge,
    repo: &RepoName,
) -> Result<Permissions, ForgeError> {
    let path = format!("/repos/{repo}/installation");
    let reply = apps(forge)?
        .send_app(Operation::GetInstallation, Method::GET, &path, None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    if reply.status.as_u16() == 404 {
        return Err(ForgeError::Refused {
            message: format!("the App is not installed on {repo}"),
        });
    }
    let found: InstallationFound = expect_ok(reply, &format!("GET {path}"))?
        .json()
        .map_err(ForgeError::from)?;
    Ok(found.permissions)
}

/// The workflow files on `branch` (`.github/workflows/*.yml|yaml`) and their text.
/// (https://docs.github.com/rest/repos/contents#get-repository-content)
pub async fn workflows(
    forge: &GithubForge,
    repo: &RepoName,
    branch: &RefName,
) -> Result<Vec<(String, String)>, ForgeError> {
    let installation = forge
        .auth
        .installation(repo)
        .await
        .map_err(ForgeError::from)?;
    let at = encode_query(branch.as_str());
    let path = format!("/repos/{repo}/contents/.github/workflows?ref={at}");
    let reply = installation
        .send(Operation::GetContents, Method::GET, &path, None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    if reply.status.as_u16() == 404 {
        return Ok(Vec::new());
    }
    let entries: Vec<ContentEntry> = expect_ok(reply, "listing .github/workflows")?
        .json()
        .map_err(ForgeError::from)?;
    let mut files = Vec::new();
    for entry in entries {
        let is_yaml = entry.path.ends_with(".yml") || entry.path.ends_with(".yaml");
        if entry.kind != "file" || !is_yaml {
            continue;
        }
        let path = format!(
            "/repos/{repo}/contents/{}?ref={at}",
            encode_path(&entry.path)
        );
        let reply = installation
            .send(Operation::GetContents, Method::GET, &path, None::<&()>)
            .await
            .map_err(ForgeError::from)?;
        let file: ContentFile = expect_ok(reply, &format!("reading {}", entry.path))?
            .json()
            .map_err(ForgeError::from)?;
        // GitHub wraps the base64 text every 60 characters.
        let compact: String = file.content.split_whitespace().collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|e| ForgeError::Other(anyhow::anyhow!("{}: bad base64: {e}", entry.path)))?;
        files.push((entry.path, String::from_utf8_lossy(&bytes).into_owned()));
    }
    Ok(files)
}

/// A workflow as `GET /repos/{o}/{r}/actions/workflows/{file}` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowState {
    /// GitHub knows the workflow: its `state` (`active`, `disabled_inactivity`,
    /// `disabled_manually`, `disabled_fork`, `deleted`, or one added since) and its page.
    Found { state: String, html_url: String },
    /// GitHub knows no workflow by that file name.
    Missing,
    /// The credentials may not read it: what GitHub says the request needs (`actions=read`).
    NotPermitted { needs: String },
}

/// The workflow `.github/workflows/{file}` of `repo`, and whether GitHub runs it: a scheduled
/// workflow of a public repository is disabled after 60 days without activity, and then runs
/// neither on its schedule nor on anything else. Needs Actions: read.
/// (https://docs.github.com/rest/actions/workflows#get-a-workflow)
pub async fn workflow_state(
    forge: &GithubForge,
    repo: &RepoName,
    file: &str,
) -> Result<WorkflowState, ForgeError> {
    let installation = forge
        .auth
        .installation(repo)
        .await
        .map_err(ForgeError::from)?;
    let path = format!("/repos/{repo}/actions/workflows/{}", encode_path(file));
    let reply = installation
        .send(Operation::GetWorkflow, Method::GET, &path, None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    if reply.status.as_u16() == 404 {
        return Ok(WorkflowState::Missing);
    }
    if let Some(needs) = reply.missing_permission() {
        return Ok(WorkflowState::NotPermitted { needs });
    }
    let found: Workflow = expect_ok(reply, &format!("GET {path}"))?
        .json()
        .map_err(ForgeError::from)?;
    Ok(WorkflowState::Found {
        state: found.state,
        html_url: found.html_url,
    })
}

/// A client without credentials, for the two calls `init` makes before the App exists.
fn anonymous(api_url: &str) -> Result<transport::Client, ForgeError> {
    transport::Client::new(api_url).map_err(|e| ForgeError::Other(e.into()))
}

/// The `type` GitHub gives the account `login` — `User` or `Organization` (a private App can
/// be installed only on the account that owns it, so `init` creates it there) — or `None` when
/// there is no such account. Asked without credentials (`GET /users/{username}`).
/// (https://docs.github.com/rest/users/users#get-a-user)
pub async fn account_type(api_url: &str, login: &str) -> Result<Option<String>, ForgeError> {
    let client = anonymous(api_url)?;
    let path = format!("/users/{}", encode_path(login));
    let reply = send(&client, Method::GET, &path, None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    if reply.status.as_u16() == 404 {
        return Ok(None);
    }
    let account: Account = expect_ok(reply, "GET /users/{username}")?
        .json()
        .map_err(ForgeError::from)?;
    Ok(Some(account.kind))
}

/// Finishes "create an App from a manifest": trades the one-time `code` GitHub handed back
/// for the App's id and private key (`POST /app-manifests/{code}/conversions`, no auth).
/// (https://docs.github.com/rest/apps/apps#create-a-github-app-from-a-manifest)
pub async fn convert_manifest(api_url: &str, code: &str) -> Result<ManifestApp, ForgeError> {
    let client = anonymous(api_url)?;
    let path = format!("/app-manifests/{}/conversions", encode_path(code));
    let reply = send(&client, Method::POST, &path, None::<&()>)
        .await
        .map_err(ForgeError::from)?;
    if reply.status.as_u16() == 404 {
        return Err(ForgeError::Refused {
            message: "GitHub does not know that code: it works once, for an hour; create the App again from create-app.html".into(),
        });
    }
    expect_ok(reply, "POST /app-manifests/{code}/conversions")?
        .json()
        .map_err(ForgeError::from)
}
