//! The GitHub clients: as the App, one client with a JWT signed for each request ([`AppKey`])
//! and one per installation, held for the life of the process so its token is minted once and
//! renewed before it expires; with a token (`[github] token_env`), one client that uses it as
//! given. Every request goes through [`send`], which turns GitHub's answers (or their absence)
//! into retry decisions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use super::jwt::AppKey;
use super::pace::Pacer;
use super::retry::{classify, Attempt, Cause, Stop};
use super::transport::{self, Client, REQUEST_TIMEOUT};
use super::wire;
use crate::config::{AccessToken, PaceSettings};
use crate::forge::{ForgeError, OpenError};
use crate::identity::RepoName;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// A token with less life left than this is renewed before use (GitHub's tokens live 1 h).
const TOKEN_RENEW_BEFORE: i64 = 120;
/// How long a repository's installation id is trusted.
const INSTALLATION_TTL: Duration = Duration::from_secs(600);

/// An installation of the App, by GitHub's id for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstallationId(pub u64);

impl std::fmt::Display for InstallationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What GitHub answered: status, headers and body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json<T: DeserializeOwned>(&self) -> Attempt<T> {
        serde_json::from_str(&self.body).map_err(|e| {
            Stop::Fail(ForgeError::Other(anyhow!(
                "GitHub's {} answer did not parse: {e}",
                self.status
            )))
        })
    }

    /// GitHub's `message` field, or the start of the body.
    pub fn message(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| self.body.chars().take(200).collect())
    }

    /// The answer as a retry decision, for statuses the caller does not handle itself.
    pub fn unexpected<T>(&self) -> Attempt<T> {
        Err(classify(self.status, &self.headers, &self.message()))
    }

    /// For a 403 that is a permission the installation lacks (not a rate limit): what GitHub
    /// says the endpoint accepts, from `X-Accepted-GitHub-Permissions` (`actions=read`).
    pub fn missing_permission(&self) -> Option<String> {
        if self.status != StatusCode::FORBIDDEN {
            return None;
        }
        let header = |name: &str| self.headers.get(name).and_then(|v| v.to_str().ok());
        if header("x-ratelimit-remaining") == Some("0") || header("retry-after").is_some() {
            return None;
        }
        header("x-accepted-github-permissions").map(str::to_owned)
    }

    /// The `rel="next"` page of a paginated answer.
    pub fn next_page(&self) -> Option<String> {
        let link = self.headers.get("link")?.to_str().ok()?;
        link.split(',').find_map(|part| {
            let (url, rel) = part.split_once(';')?;
            if !rel.contains("rel=\"next\"") {
                return None;
            }
            // Path and query only: credentials go to the base URL's host alone,
            // and an absolute URL on GitHub Enterprise would go out without them.
            let url = url.trim().trim_start_matches('<').trim_end_matches('>');
            let uri: http::Uri = url.parse().ok()?;
            uri.path_and_query().map(|pq| pq.as_str().to_owned())
        })
    }
}

/// GitHub's 409 for an empty repository: nothing to branch from.
pub fn empty_repository(repo: &RepoName) -> Stop {
    Stop::Fail(ForgeError::Refused {
        message: format!("{repo} is empty: push a first commit to its default branch"),
    })
}

/// Reads a listing of `repo` page by page: GETs `first`, hands each page to `take`, and follows
/// `rel="next"` while `take` says to go on. GitHub is reported to send every matching ref at
/// once, so a short page is not taken for the last one: only the missing link is.
pub async fn pages<T, F>(
    installation: &Installation,
    operation: Operation,
    repo: &RepoName,
    first: &str,
    take: F,
) -> Attempt<()>
where
    T: DeserializeOwned,
    F: FnMut(Vec<T>) -> bool,
{
    listing(installation, operation, repo, first, Permission::Held, take)
        .await
        .map(|_| ())
}

/// [`pages`] for a listing the installation may not be permitted to read: each page's body
/// (of any shape) goes to `take`; a 403 for a missing permission ends the listing with what
/// GitHub says it needs (`Some("actions=read")`), which is an answer, not a failure.
pub async fn permitted_pages<P, F>(
    installation: &Installation,
    operation: Operation,
    repo: &RepoName,
    first: &str,
    take: F,
) -> Attempt<Option<String>>
where
    P: DeserializeOwned,
    F: FnMut(P) -> bool,
{
    listing(
        installation,
        operation,
        repo,
        first,
        Permission::MayLack,
        take,
    )
    .await
}

/// Whether a listing's permission is the caller's to assume, or may be missing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Permission {
    /// Assumed (the repository's contents): a 409 is an empty repository.
    Held,
    /// May be missing: a 403 naming it is the answer.
    MayLack,
}

/// The loop under [`pages`] and [`permitted_pages`].
async fn listing<P, F>(
    installation: &Installation,
    operation: Operation,
    repo: &RepoName,
    first: &str,
    permission: Permission,
    mut take: F,
) -> Attempt<Option<String>>
where
    P: DeserializeOwned,
    F: FnMut(P) -> bool,
{
    let mut path = first.to_owned();
    loop {
        let reply = installation
            .send(operation, http::Method::GET, &path, None::<&()>)
            .await?;
        match (reply.status.as_u16(), permission) {
            (200, _) => {}
            (404, _) => return Err(installation.not_found(repo, &reply)),
            (409, Permission::Held) => return Err(empty_repository(repo)),
            (_, Permission::MayLack) => match reply.missing_permission() {
                Some(needs) => return Ok(Some(needs)),
                None => return reply.unexpected(),
            },
            (_, Permission::Held) => return reply.unexpected(),
        }
        let go_on = take(reply.json()?);
        match reply.next_page() {
            Some(next) if go_on => path = next,
            _ => return Ok(None),
        }
    }
}

/// Characters kept as they are in a path segment or query value; everything else is
/// percent-encoded (a default branch or a file name may hold anything git allows).
const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A git path (`a/b/c`) for a URL: each segment encoded, the slashes kept.
pub fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|segment| percent_encoding::utf8_percent_encode(segment, KEEP).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// A query value for a URL.
pub fn encode_query(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, KEEP).to_string()
}

/// What a request does: `rowbranch_github_requests_total{operation}` counts by it.
pub use crate::metrics::GithubOperation as Operation;

/// [`send`], counted: the answer's status (or `error`), how long it took, and the rate limit
/// GitHub says is left.
async fn send_counted<B: Serialize + ?Sized>(
    client: &Client,
    metrics: &Metrics,
    operation: Operation,
    method: http::Method,
    path: &str,
    body: Option<&B>,
) -> Attempt<Reply> {
    let start = Instant::now();
    let result = send(client, method, path, body).await;
    let status = match &result {
        Ok(reply) => {
            let header = |name: &str| reply.headers.get(name).and_then(|v| v.to_str().ok());
            if let Some(remaining) = header("x-ratelimit-remaining").and_then(|v| v.parse().ok()) {
                metrics.rate_limit_remaining(
                    header("x-ratelimit-resource").unwrap_or("core"),
                    remaining,
                );
            }
            reply.status.as_u16().to_string()
        }
        Err(_) => "error".to_owned(),
    };
    metrics.github_request(operation, &status, start.elapsed());
    result
}

/// One request, and how its answer (or its absence) is to be read.
pub async fn send<B: Serialize + ?Sized>(
    client: &Client,
    method: http::Method,
    path: &str,
    body: Option<&B>,
) -> Attempt<Reply> {
    let json = body.map(serde_json::to_vec).transpose().map_err(|e| {
        Stop::Fail(ForgeError::Other(anyhow!(
            "a request body did not serialize: {e}"
        )))
    })?;
    match tokio::time::timeout(REQUEST_TIMEOUT, client.request(method, path, json)).await {
        Ok(Ok(response)) => {
            let (parts, body) = response.into_parts();
            Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                // GitHub answers JSON, which is UTF-8; anything else is kept readable for the
                // message that quotes it.
                body: String::from_utf8(body.into())
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            })
        }
        Ok(Err(e)) => Err(from_transport(e)),
        Err(_) => Err(Stop::Retry {
            message: format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
            after: None,
            ambiguous: true,
            cause: Cause::NoAnswer,
        }),
    }
}

/// A request with no answer: a URL that cannot be made fails; a lost connection may have been
/// applied.
fn from_transport(e: transport::Error) -> Stop {
    match &e {
        transport::Error::Url(_) => Stop::Fail(ForgeError::Other(anyhow::Error::new(e))),
        other => Stop::Retry {
            message: transport_failure(other),
            after: None,
            ambiguous: true,
            cause: Cause::NoAnswer,
        },
    }
}

/// What went wrong on the way to GitHub, once: whether the connection was never made, and the
/// innermost cause ("Connection refused (os error 111)", a DNS or certificate error), without
/// the layers of wrapping each library adds ("Service Error: client error (Connect): tcp
/// connect error: …").
fn transport_failure(e: &transport::Error) -> String {
    let mut innermost: &(dyn std::error::Error + 'static) = e;
    let mut connect = matches!(e, transport::Error::Send(client) if client.is_connect());
    while let Some(source) = innermost.source() {
        if let Some(client) = source.downcast_ref::<hyper_util::client::legacy::Error>() {
            connect |= client.is_connect();
        }
        innermost = source;
    }
    let lead = if connect {
        "could not connect"
    } else {
        "the connection failed"
    };
    format!("{lead}: {innermost}")
}

/// One installation — or, with a token, the token: its token, the pacer of its writes and the
/// bound on its requests.
pub struct Installation {
    pub writes: Arc<Pacer>,
    /// Requests open at GitHub at once for this installation, reads and writes together.
    requests: Arc<Semaphore>,
    token: TokenKind,
    metrics: Arc<Metrics>,
}

/// Where an [`Installation`]'s token comes from.
enum TokenKind {
    /// Minted from the App's JWT and renewed here.
    Minted(Minter),
    /// Given (`[github] token_env`): its client, used as it is, never minted or renewed.
    Given(Client),
}

/// What mints an installation's tokens, and the token last minted.
struct Minter {
    id: InstallationId,
    /// The App's client (no credentials of its own) and key.
    app: Client,
    key: Arc<AppKey>,
    /// The repository each token is narrowed to.
    repository: String,
    /// The client with the current token; held while a token is minted, so that concurrent
    /// requests do not each mint one.
    current: Mutex<Option<Arc<Token>>>,
}

/// An installation token, in the client that sends it.
struct Token {
    client: Client,
    expires_at: DateTime<Utc>,
}

/// GitHub's answer to a token mint (the fields read of it).
#[derive(Deserialize)]
struct MintedToken {
    token: String,
    expires_at: DateTime<Utc>,
}

impl Installation {
    /// One request with this installation's token, holding one of the installation's request
    /// permits while it is open, and only then: never while it waits for a turn to write or
    /// between retries. With a minted token, a 401 means GitHub no longer takes it (revoked,
    /// expired early): the request is made once more with a new one. A given token is sent as
    /// it is; its 401 is the caller's to read.
    pub async fn send<B: Serialize + ?Sized>(
        &self,
        operation: Operation,
        method: http::Method,
        path: &str,
        body: Option<&B>,
    ) -> Attempt<Reply> {
        let _open = self.requests.acquire().await.map_err(closed)?;
        let minter = match &self.token {
            TokenKind::Given(client) => {
                return send_counted(client, &self.metrics, operation, method, path, body).await
            }
            TokenKind::Minted(minter) => minter,
        };
        let token = minter.token(&self.metrics).await?;
        let reply = send_counted(
            &token.client,
            &self.metrics,
            operation,
            method.clone(),
            path,
            body,
        )
        .await?;
        if reply.status != StatusCode::UNAUTHORIZED {
            return Ok(reply);
        }
        minter.forget(&token).await;
        let token = minter.token(&self.metrics).await?;
        send_counted(&token.client, &self.metrics, operation, method, path, body).await
    }

    /// GitHub's 404 for something of `repo`: the repository is missing, or the credentials
    /// cannot see it.
    pub fn not_found(&self, repo: &RepoName, reply: &Reply) -> Stop {
        let reach = match self.token {
            TokenKind::Minted(_) => "is the App installed on it?",
            TokenKind::Given(_) => {
                "may the token see it? (a workflow's GITHUB_TOKEN sees its own repository alone)"
            }
        };
        Stop::Fail(ForgeError::Refused {
            message: format!(
                "GitHub answered 404 for {repo} ({}): does the repository exist, and {reach}",
                reply.message()
            ),
        })
    }

    /// Makes sure the cached token has life left, minting one (once) when it has not. A
    /// given token is used as it is.
    pub async fn ensure_token(&self) -> Attempt<()> {
        match &self.token {
            TokenKind::Minted(minter) => minter.token(&self.metrics).await.map(|_| ()),
            TokenKind::Given(_) => Ok(()),
        }
    }
}

impl Minter {
    /// The current token, minted first when there is none or it is about to expire.
    async fn token(&self, metrics: &Metrics) -> Attempt<Arc<Token>> {
        let mut current = self.current.lock().await;
        let renew_at = chrono::Duration::seconds(TOKEN_RENEW_BEFORE);
        match &*current {
            Some(token) if token.expires_at - Utc::now() > renew_at => Ok(Arc::clone(token)),
            _ => {
                let token = Arc::new(self.mint().await.map_err(Stop::not_applied)?);
                metrics.token_minted();
                *current = Some(Arc::clone(&token));
                Ok(token)
            }
        }
    }

    /// Drops `token` unless another has replaced it meanwhile.
    async fn forget(&self, token: &Arc<Token>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|t| Arc::ptr_eq(t, token)) {
            *current = None;
        }
    }

    /// `POST /app/installations/{id}/access_tokens`, the token narrowed to the repository.
    /// (https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app)
    async fn mint(&self) -> Attempt<Token> {
        let app = with_jwt(&self.app, &self.key)?;
        let path = format!("/app/installations/{}/access_tokens", self.id);
        let body = json!({ "repositories": [self.repository] });
        let reply = send(&app, http::Method::POST, &path, Some(&body)).await?;
        if !reply.status.is_success() {
            return reply.unexpected();
        }
        let minted: MintedToken = reply.json()?;
        Ok(Token {
            client: with_token(&self.app, &minted.token)?,
            expires_at: minted.expires_at,
        })
    }
}

/// The App's client with a JWT made now.
fn with_jwt(app: &Client, key: &AppKey) -> Attempt<Client> {
    let jwt = key.jwt().map_err(|e| {
        Stop::Fail(ForgeError::Refused {
            message: format!("the App's JWT could not be made: {e}"),
        })
    })?;
    with_token(app, &jwt)
}

/// `app`'s connection pool with `token` as its bearer.
fn with_token(app: &Client, token: &str) -> Attempt<Client> {
    app.with_bearer(token)
        .map_err(|e| Stop::Fail(ForgeError::Other(anyhow::Error::new(e))))
}

/// A client that authenticates with `token` as given, for every repository: its writes keep
/// one pace and its requests one bound, as an installation's do (GitHub's limits for a
/// `GITHUB_TOKEN` are per repository, and a workflow's token reaches one).
pub fn token_client(
    token: &AccessToken,
    api_url: &str,
    limits: Limits,
) -> Result<Installation, OpenError> {
    let client = Client::new(api_url)?.with_bearer(token.expose())?;
    Ok(Installation {
        writes: Arc::new(Pacer::new(
            limits.pace,
            limits.shutdown,
            Arc::clone(&limits.metrics),
        )),
        requests: Arc::new(Semaphore::new(limits.max_concurrent_requests)),
        token: TokenKind::Given(client),
        metrics: limits.metrics,
    })
}

/// Who rowbranch is to GitHub: the App, with its installations, or a token.
pub enum Auth {
    /// Boxed: one forge a process, and the token's variant is a pointer.
    App(Box<Apps>),
    /// The one client of the token, for every repository.
    Token(Arc<Installation>),
}

impl Auth {
    /// The client for `repo`, with a token ready: the installation that holds it, or the
    /// token's.
    pub async fn installation(&self, repo: &RepoName) -> Attempt<Arc<Installation>> {
        match self {
            Auth::App(apps) => apps.installation(repo).await,
            Auth::Token(token) => Ok(Arc::clone(token)),
        }
    }
}

/// The App and its installations.
pub struct Apps {
    /// The connection stack every client shares, without credentials.
    app: Client,
    key: Arc<AppKey>,
    pace: PaceSettings,
    max_concurrent_requests: usize,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    /// Requests open at once with the App's own JWT (installation lookups, `GET /app`).
    app_requests: Semaphore,
    /// One client per repository, its token narrowed to that repository: a repository missing
    /// from an installation then fails alone, not every repository of its account.
    installations: Mutex<HashMap<RepoName, (InstallationId, Arc<Installation>)>>,
    /// One pacer and one request bound per installation: GitHub's limits are per installation,
    /// not per repository.
    limits: Mutex<HashMap<InstallationId, PerInstallation>>,
    /// Held while a repository's installation is looked up, so a burst of rows looks it up once.
    lookups: Mutex<HashMap<RepoName, (InstallationId, Instant)>>,
}

/// What one installation's clients share: the pacer of its writes and the bound on its requests.
type PerInstallation = (Arc<Pacer>, Arc<Semaphore>);

/// What the GitHub client is built with, besides the App's credentials.
pub struct Limits {
    pub pace: PaceSettings,
    pub max_concurrent_requests: usize,
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
}

impl Apps {
    /// Builds the App's client: JWTs from `app_id` and the PEM key (which must sign one here,
    /// as every request will), timeouts set, no redirects and no retries of the client's own
    /// (they would re-send a dispatch).
    pub fn new(app_id: u64, pem: &str, api_url: &str, limits: Limits) -> Result<Apps, OpenError> {
        let key = Arc::new(AppKey::new(app_id, pem)?);
        let app = Client::new(api_url)?;
        Ok(Apps {
            app,
            key,
            pace: limits.pace,
            max_concurrent_requests: limits.max_concurrent_requests,
            app_requests: Semaphore::new(limits.max_concurrent_requests),
            shutdown: limits.shutdown,
            metrics: limits.metrics,
            installations: Mutex::new(HashMap::new()),
            limits: Mutex::new(HashMap::new()),
            lookups: Mutex::new(HashMap::new()),
        })
    }

    /// One request with the App's JWT, for App endpoints, within the App's own bound.
    pub async fn send_app<B: Serialize + ?Sized>(
        &self,
        operation: Operation,
        method: http::Method,
        path: &str,
        body: Option<&B>,
    ) -> Attempt<Reply> {
        let _open = self.app_requests.acquire().await.map_err(closed)?;
        let app = with_jwt(&self.app, &self.key)?;
        send_counted(&app, &self.metrics, operation, method, path, body).await
    }

    /// The installation that holds `repo`, with a token ready. Nothing here writes, so no
    /// stop is ambiguous.
    pub async fn installation(&self, repo: &RepoName) -> Attempt<Arc<Installation>> {
        let id = self
            .installation_id(repo)
            .await
            .map_err(Stop::not_applied)?;
        let installation = {
            let mut all = self.installations.lock().await;
            match all.get(repo) {
                Some((known, installation)) if *known == id => Arc::clone(installation),
                // New, or the repository moved to another installation.
                _ => {
                    let made = Arc::new(self.client_for(id, repo).await);
                    all.insert(repo.clone(), (id, Arc::clone(&made)));
                    made
                }
            }
        };
        if let Err(stop) = installation.ensure_token().await {
            // The installation may be gone or changed: look it up afresh next time.
            if matches!(stop, Stop::Fail(_)) {
                self.lookups.lock().await.remove(repo);
            }
            return Err(stop);
        }
        Ok(installation)
    }

    async fn client_for(&self, id: InstallationId, repo: &RepoName) -> Installation {
        let (writes, requests) = self
            .limits
            .lock()
            .await
            .entry(id)
            .or_insert_with(|| {
                (
                    Arc::new(Pacer::new(
                        self.pace,
                        self.shutdown.clone(),
                        Arc::clone(&self.metrics),
                    )),
                    Arc::new(Semaphore::new(self.max_concurrent_requests)),
                )
            })
            .clone();
        Installation {
            writes,
            requests,
            token: TokenKind::Minted(Minter {
                id,
                app: self.app.clone(),
                key: Arc::clone(&self.key),
                repository: repo.name().to_owned(),
                current: Mutex::new(None),
            }),
            metrics: Arc::clone(&self.metrics),
        }
    }

    /// `GET /repos/{owner}/{repo}/installation`, cached for a while.
    /// (https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app)
    async fn installation_id(&self, repo: &RepoName) -> Attempt<InstallationId> {
        // Held across the lookup: the rows of a burst wait for the first one's answer.
        let mut known = self.lookups.lock().await;
        if let Some((id, at)) = known.get(repo) {
            if at.elapsed() < INSTALLATION_TTL {
                return Ok(*id);
            }
        }
        let path = format!("/repos/{repo}/installation");
        let reply = self
            .send_app(
                Operation::GetInstallation,
                http::Method::GET,
                &path,
                None::<&()>,
            )
            .await?;
        match reply.status.as_u16() {
            200 => {
                let id = InstallationId(reply.json::<wire::InstallationFound>()?.id);
                known.insert(repo.clone(), (id, Instant::now()));
                Ok(id)
            }
            404 => Err(Stop::Fail(ForgeError::Refused {
                message: format!(
                    "the GitHub App is not installed on {repo}: install it on that repository"
                ),
            })),
            401 => Err(Stop::Fail(ForgeError::Refused {
                message: format!(
                    "GitHub refused the App's credentials ({}): check app_id and the private key",
                    reply.message()
                ),
            })),
            _ => reply.unexpected(),
        }
    }
}

/// Where a new key comes from, for every message about a key that cannot sign.
pub const NEW_KEY: &str = "the App's settings page on GitHub → Private keys → Generate a \
     private key gives a .pem file whose text starts with -----BEGIN RSA PRIVATE KEY----- (or \
     -----BEGIN PRIVATE KEY-----)";

/// The App's private key cannot be used: what is wrong with it, then where a good one comes
/// from. Never holds the key's text.
#[derive(Debug, thiserror::Error)]
#[error("{problem}: {NEW_KEY}")]
pub struct KeyError {
    /// What is wrong, without the remedy (`doctor` prints that on its own line).
    pub problem: String,
}

/// A request bound that was closed: nothing closes one, so this is a bug.
fn closed(_: tokio::sync::AcquireError) -> Stop {
    Stop::Fail(ForgeError::Other(anyhow!("a request bound was closed")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_path_keeps_its_slashes_and_encodes_the_rest() {
        assert_eq!(
            encode_path("feedback/42-add-dark-mode"),
            "feedback/42-add-dark-mode"
        );
        assert_eq!(encode_path("release/v1.0 #2"), "release/v1.0%20%232");
        assert_eq!(encode_path("größe"), "gr%C3%B6%C3%9Fe");
        assert_eq!(encode_query("feature/a&b"), "feature%2Fa%26b");
    }
}
