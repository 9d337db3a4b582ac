//! The GitHub client: octocrab, built once per forge on rowbranch's own connection stack, and
//! the credentials its requests carry. As the App: a JWT for the App's own requests and one
//! client per repository whose installation token is minted once and renewed before it
//! expires; with a token (`[github] token_env`), one client that sends it as given.
//!
//! octocrab's default stack sends `User-Agent: octocrab` (its extra headers are appended, so
//! ours would make a second one) and no `Accept`, retries POSTs and follows redirects. So the
//! stack under it is built here: rustls with ring and the system's roots, plain HTTP allowed
//! for a test server, octocrab's connect and read timeouts, and one service that sets the
//! three headers GitHub asks for, bounds each answer's body, and counts the request.
//! (https://docs.github.com/rest/using-the-rest-api/getting-started-with-the-rest-api#user-agent,
//! https://docs.github.com/rest/about-the-rest-api/api-versions)

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::header::{HeaderValue, ACCEPT, USER_AGENT};
use http::{HeaderMap, HeaderName, Method, Request, StatusCode};
use http_body_util::Limited;
use octocrab::service::middleware::base_uri::BaseUriLayer;
use octocrab::{AuthState, GitHubError, OctoBody, Octocrab, OctocrabBuilder};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::jwt::AppKey;
use super::pace::Pacer;
use super::retry::{classify, Attempt, Cause, Setback};
use crate::config::{GithubAuth, GithubSettings, PrivateKeySource};
use crate::forge::OpenError;
use crate::identity::RepoName;
use crate::metrics::{GithubOperation as Operation, Metrics};
use crate::shutdown::Shutdown;

/// rowbranch and its version: GitHub asks for the application's name, and refuses a request
/// without a `User-Agent`.
const USER_AGENT_VALUE: &str = concat!("rowbranch/", env!("CARGO_PKG_VERSION"));
/// GitHub's media type for its REST API.
const ACCEPT_VALUE: &str = "application/vnd.github+json";
/// The REST API version every request asks for. `2022-11-28` is supported until March 2028;
/// a request without the header gets the oldest version still supported, which changes under it.
const API_VERSION: &str = "2022-11-28";
const API_VERSION_HEADER: HeaderName = HeaderName::from_static("x-github-api-version");

/// How long to wait for a connection; octocrab sets none by default.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take in all, its answer's body included; past it the answer counts
/// as lost (ambiguous).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The most of an answer's body that is read: a single object is a few KiB.
const ANSWER_LIMIT: usize = 1 << 20;
/// The most of a refs listing that is read: `matching-refs` is not paged, and 50,000 branches
/// are over 10 MB.
const REFS_LIMIT: usize = 64 << 20;

/// A token with less life left than this is renewed before use (GitHub's tokens live 1 h).
const TOKEN_RENEW_BEFORE: i64 = 120;
/// How long a repository's installation id is trusted.
const INSTALLATION_TTL: Duration = Duration::from_secs(600);

/// octocrab for the API at `api_url`, without credentials: each request's client gets its
/// bearer (the App's JWT, an installation's token) with `Octocrab::user_access_token`, and
/// shares this stack. Builds in a tokio runtime (octocrab spawns its buffer's worker).
pub fn octocrab(api_url: &str, metrics: Arc<Metrics>) -> Result<Octocrab, OpenError> {
    let unusable = |why: String| OpenError::Github(format!("api_url `{api_url}` {why}"));
    let base: http::Uri = (api_url.parse()).map_err(|e| unusable(format!("is not a URL: {e}")))?;
    if base.scheme().is_none() || base.authority().is_none() {
        return Err(unusable(
            "names no scheme and host (e.g. https://api.github.com)".into(),
        ));
    }
    // The config refuses it first; `init --api-url` comes here directly.
    if let Some(problem) = crate::identity::api_url_problem(api_url) {
        return Err(OpenError::Github(problem));
    }
    // The process's provider when one is installed, else ring: what octocrab picks.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| {
            let e = anyhow::Error::new(e);
            OpenError::Github(format!("no TLS roots for GitHub's certificate: {e:#}"))
        })?
        .https_or_http()
        .enable_http1()
        .build();
    let connector = Octocrab::builder()
        .set_connect_timeout(Some(CONNECT_TIMEOUT))
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .set_write_timeout(Some(REQUEST_TIMEOUT))
        .set_connect_timeout_service(connector);
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, OctoBody>(connector);
    let service = tower::service_fn(move |mut request: Request<OctoBody>| {
        let (http, metrics) = (http.clone(), Arc::clone(&metrics));
        async move {
            let headers = request.headers_mut();
            headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
            headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_VALUE));
            headers.insert(API_VERSION_HEADER, HeaderValue::from_static(API_VERSION));
            let path = request.uri().path();
            let operation = operation(request.method(), path);
            let refs = path.contains("/git/matching-refs/");
            let limit = if refs { REFS_LIMIT } else { ANSWER_LIMIT };
            let started = Instant::now();
            let answer = http.request(request).await;
            // Counted: the answer's status (or `error`), how long its head took, and the rate
            // limit GitHub says is left.
            if let Some(operation) = operation {
                let status = match &answer {
                    Ok(response) => {
                        let header = |name| response.headers().get(name)?.to_str().ok();
                        let left = header("x-ratelimit-remaining").and_then(|v| v.parse().ok());
                        if let Some(left) = left {
                            let resource = header("x-ratelimit-resource").unwrap_or("core");
                            metrics.rate_limit_remaining(resource, left);
                        }
                        response.status().as_u16().to_string()
                    }
                    Err(_) => "error".to_owned(),
                };
                metrics.github_request(operation, &status, started.elapsed());
            }
            answer.map(|response| response.map(|body| Limited::new(body, limit)))
        }
    });
    Ok(OctocrabBuilder::new_empty()
        .with_service(service)
        .with_layer(&BaseUriLayer::new(base))
        .with_auth(AuthState::None)
        .build()
        .unwrap_or_else(|never| match never {}))
}

/// What a request does, by its method and path: `rowbranch_github_requests_total{operation}`
/// counts by it. The token mint and `init`'s calls are not counted.
fn operation(method: &Method, path: &str) -> Option<Operation> {
    let Some((_, rest)) = path.split_once("/repos/") else {
        return match (method.as_str(), path.rsplit('/').next()) {
            ("GET", Some("app")) if !path.contains("/app/") => Some(Operation::GetApp),
            ("GET", Some("rate_limit")) => Some(Operation::RateLimit),
            _ => None,
        };
    };
    // What follows `{owner}/{repo}`.
    let within = rest.splitn(3, '/').nth(2).unwrap_or("");
    let starts = |prefix: &str| within.starts_with(prefix);
    Some(match method.as_str() {
        "POST" if within == "git/refs" => Operation::CreateRef,
        "POST" if within == "dispatches" => Operation::Dispatch,
        "DELETE" if starts("git/refs/") => Operation::DeleteRef,
        "GET" if within.is_empty() => Operation::GetRepo,
        "GET" if within == "installation" => Operation::GetInstallation,
        "GET" if starts("git/ref/") => Operation::GetRef,
        "GET" if starts("git/matching-refs/") => Operation::MatchingRefs,
        "GET" if within == "pulls" => Operation::ListPulls,
        "GET" if starts("compare/") => Operation::Compare,
        "GET" if starts("contents/") => Operation::GetContents,
        "GET" if within == "actions/runs" => Operation::ListRuns,
        "GET" if starts("actions/workflows/") => Operation::GetWorkflow,
        _ => return None,
    })
}

/// GitHub's answer when it is not a success: its status, `message` and headers.
pub type Refusal = Box<GitHubError>;

/// One request through octocrab, within [`REQUEST_TIMEOUT`]: what GitHub answered (the value,
/// or its refusal for the caller to read), or a setback when there was no answer to read.
pub async fn call<T>(
    request: impl Future<Output = octocrab::Result<T>>,
) -> Attempt<Result<T, Refusal>> {
    let lost = |message| Setback::Retry {
        message,
        after: None,
        ambiguous: true,
        cause: Cause::NoAnswer,
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Err(_) => Err(lost(format!(
            "no answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
        Ok(Ok(value)) => Ok(Ok(value)),
        Ok(Err(octocrab::Error::GitHub { source, .. })) => Ok(Err(source)),
        Ok(Err(
            e @ (octocrab::Error::Serde { .. }
            | octocrab::Error::Json { .. }
            | octocrab::Error::Uri { .. }
            | octocrab::Error::UriParse { .. }
            | octocrab::Error::Http { .. }),
        )) => Err(Setback::bug(format!(
            "GitHub's answer could not be read, or the request made: {e}"
        ))),
        Ok(Err(e)) => Err(lost(no_answer(&e))),
    }
}

/// How the message of a lookup of GitHub's host that failed begins: the retry policy gives up on
/// it at once, since a mistyped `api_url` (or a resolver that is down) does not mend in seconds,
/// and a caller that waited out the whole budget would learn nothing more.
pub const UNRESOLVED: &str = "could not resolve the host";

/// What went wrong on the way to GitHub, once: whether the connection was never made, and the
/// innermost cause ("Connection refused (os error 111)", a DNS or certificate error), without
/// the layers of wrapping each library adds. An answer past its bound says so.
fn no_answer(e: &octocrab::Error) -> String {
    let mut innermost: &(dyn std::error::Error + 'static) = e;
    let mut connect = false;
    let mut dns = false;
    while let Some(source) = innermost.source() {
        // hyper-util's connector says "dns error" when the name did not resolve, rustls
        // "invalid dns name" when it cannot be one.
        dns |= matches!(
            source.to_string().as_str(),
            "dns error" | "invalid dns name"
        );
        if let Some(client) = source.downcast_ref::<hyper_util::client::legacy::Error>() {
            connect |= client.is_connect();
        }
        if source.is::<http_body_util::LengthLimitError>() {
            return format!(
                "GitHub's answer was longer than rowbranch reads ({} MiB, {} MiB for a listing \
                 of branches)",
                ANSWER_LIMIT >> 20,
                REFS_LIMIT >> 20
            );
        }
        innermost = source;
    }
    let lead = match (dns, connect) {
        (true, _) => UNRESOLVED,
        (false, true) => "could not connect",
        (false, false) => "the connection failed",
    };
    format!("{lead}: {innermost}")
}

/// GitHub's `message`, cut for a message of ours.
pub fn said(refusal: &GitHubError) -> String {
    refusal.message.chars().take(200).collect()
}

/// A refusal as the retry policy sorts it, for statuses the caller does not handle itself.
pub fn unexpected(refusal: &GitHubError) -> Setback {
    let none = HeaderMap::new();
    let headers = refusal.headers.as_ref().unwrap_or(&none);
    classify(refusal.status_code, headers, &said(refusal))
}

/// For a 403 that is a permission the credentials lack (not a rate limit): what GitHub says
/// the endpoint accepts, from `X-Accepted-GitHub-Permissions` (`actions=read`).
pub fn missing_permission(refusal: &GitHubError) -> Option<String> {
    let headers = refusal.headers.as_ref()?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let limited = header("x-ratelimit-remaining") == Some("0") || header("retry-after").is_some();
    (refusal.status_code == StatusCode::FORBIDDEN && !limited)
        .then(|| header("x-accepted-github-permissions").map(str::to_owned))
        .flatten()
}

/// Characters kept as they are in a git path (`a/b/c`), its slashes included; everything else
/// is percent-encoded (a default branch or a file name may hold anything git allows).
/// octocrab's typed calls put what they are given into the path as it is.
const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// A git path for a URL: each segment encoded, the slashes kept.
pub fn encode_path(path: &str) -> String {
    percent_encoding::utf8_percent_encode(path, KEEP).to_string()
}

/// A client with a token, and when the token expires (never, for a token given as it is).
type Minted = (Octocrab, DateTime<Utc>);

/// Credentials that run requests — the App's own, one installation's for one repository, or a
/// given token's for every repository — with the pacer of their writes and the bound on their
/// requests.
pub struct Credentials {
    pub writes: Arc<Pacer>,
    /// octocrab without credentials: the stack every client shares, each token's built on it.
    gh: Octocrab,
    bearer: Bearer,
    /// The client with the current token. Held while a token is minted, so that concurrent
    /// requests do not each mint one.
    current: Mutex<Option<Arc<Minted>>>,
}

/// What a request carries to say who sends it.
enum Bearer {
    /// A token given as it is, never minted or renewed.
    Given,
    /// The App's JWT, made for each request.
    App(AppKey),
    /// An installation's token, minted by the App, narrowed to one repository (a repository
    /// missing from an installation then fails alone), and renewed before it expires.
    Installation {
        id: u64,
        app: Arc<Credentials>,
        /// The repository's name (without its owner), as the token is narrowed to it.
        name: String,
    },
}

impl Credentials {
    /// One request with these credentials, holding one of their request permits while it is
    /// open, and only then: never while it waits for a turn to write or between retries. With
    /// a minted token, a 401 means GitHub no longer takes it (revoked, expired early): the
    /// request is made once more with a new one. Any other 401 is the caller's to read.
    pub async fn run<T, F, Fut>(&self, request: F) -> Attempt<Result<T, Refusal>>
    where
        F: Fn(Octocrab) -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        let _open = (self.writes.requests.acquire().await).map_err(Setback::bug)?;
        let token = self.token().await?;
        match call(request(token.0.clone())).await? {
            Err(refusal)
                if refusal.status_code == StatusCode::UNAUTHORIZED
                    && matches!(self.bearer, Bearer::Installation { .. }) =>
            {
                // Dropped unless another has replaced it meanwhile.
                let mut current = self.current.lock().await;
                if current.as_ref().is_some_and(|t| Arc::ptr_eq(t, &token)) {
                    *current = None;
                }
                drop(current);
                call(request(self.token().await?.0.clone())).await
            }
            answer => Ok(answer),
        }
    }

    /// The client with the current token: the App's with a JWT made now; an installation's
    /// minted first when there is none or it is about to expire:
    /// `POST /app/installations/{id}/access_tokens`, the token narrowed to the repository.
    /// (https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app)
    pub async fn token(&self) -> Attempt<Arc<Minted>> {
        if let Bearer::App(key) = &self.bearer {
            let jwt = (key.jwt_at(jsonwebtoken::get_current_timestamp()))
                .map_err(|e| Setback::refused(format!("the App's JWT could not be made: {e}")))?;
            let gh = self.gh.user_access_token(jwt).map_err(Setback::bug)?;
            return Ok(Arc::new((gh, DateTime::<Utc>::MAX_UTC)));
        }
        let mut current = self.current.lock().await;
        let renew_at = chrono::Duration::seconds(TOKEN_RENEW_BEFORE);
        if let Some(token) = current.as_ref().filter(|t| t.1 - Utc::now() > renew_at) {
            return Ok(Arc::clone(token));
        }
        // A given token never expires here: only an installation's comes this far.
        let Bearer::Installation { id, app, name } = &self.bearer else {
            return Err(Setback::bug("a given token expired"));
        };
        let (path, body) = (
            &format!("/app/installations/{id}/access_tokens"),
            &json!({ "repositories": [name] }),
        );
        // Boxed: the App's request is a `run` of its own, within the App's bound.
        let minted = Box::pin(app.run(|gh| async move { gh.post(path, Some(body)).await }));
        let minted: MintedToken = (minted.await.map_err(Setback::not_applied)?)
            .map_err(|refusal| unexpected(&refusal).not_applied())?;
        let gh = (self.gh.user_access_token(minted.token)).map_err(Setback::bug)?;
        let token = Arc::new((gh, minted.expires_at));
        self.writes.metrics.token_minted();
        *current = Some(Arc::clone(&token));
        Ok(token)
    }

    /// The installation that holds `repo`; a refusal when the App is not installed on it.
    /// (https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app)
    pub async fn installation_of(&self, repo: &RepoName) -> Attempt<InstallationFound> {
        let path = &format!("/repos/{repo}/installation");
        let found = self.run(|gh| async move { gh.get(path, None::<&()>).await });
        found
            .await?
            .map_err(|refusal| match refusal.status_code.as_u16() {
                404 => Setback::refused(format!(
                    "the App is not installed on {repo}: install it on that repository"
                )),
                401 => Setback::refused(format!(
                    "GitHub refused the App's credentials ({}): check app_id and the private key",
                    said(&refusal)
                )),
                _ => unexpected(&refusal),
            })
    }
}

/// GitHub's answer to a token mint (the fields read of it).
#[derive(Deserialize)]
struct MintedToken {
    token: String,
    expires_at: DateTime<Utc>,
}

/// Who rowbranch is to GitHub — the App, with its installations, or a token — and the client
/// of each repository it reaches.
pub struct Auth {
    /// The credentials that are no repository's: the App's JWT, or the token. The token's are
    /// every repository's too: its writes keep one pace and its requests one bound, as an
    /// installation's do (GitHub's limits for a `GITHUB_TOKEN` are per repository, and a
    /// workflow's token reaches one).
    pub own: Arc<Credentials>,
    /// Makes an installation's pacer, which holds its request bound.
    pacer: Box<dyn Fn() -> Arc<Pacer> + Send + Sync>,
    /// The App's client per repository, its token narrowed to that repository, and when its
    /// installation was looked up. Held across a lookup, so that a burst of rows looks it up
    /// once.
    repos: Mutex<HashMap<RepoName, (Instant, Arc<Credentials>)>>,
    /// One pacer and one request bound per installation: GitHub's limits are per installation,
    /// not per repository.
    limits_of: std::sync::Mutex<HashMap<u64, Arc<Pacer>>>,
}

impl Auth {
    /// The credentials the settings name, on the stack `gh`: the App's key read (from its
    /// file, or the PEM text) and proved, or the token taken as it is. Makes no request.
    pub fn new(
        settings: &GithubSettings,
        gh: Octocrab,
        shutdown: Shutdown,
        metrics: Arc<Metrics>,
    ) -> Result<Auth, OpenError> {
        let (pace, max) = (settings.pace, settings.max_concurrent_requests);
        let pacer = move || {
            Arc::new(Pacer::new(
                pace,
                max,
                shutdown.clone(),
                Arc::clone(&metrics),
            ))
        };
        let (bearer, current) = match &settings.auth {
            GithubAuth::Token(token) => {
                let unusable = |cause: &str| {
                    OpenError::Github(format!("could not build the GitHub client: {cause}"))
                };
                HeaderValue::try_from(format!("Bearer {}", token.expose()))
                    .map_err(|_| unusable("the token holds characters no HTTP header may carry"))?;
                let client = (gh.user_access_token(token.expose().to_owned()))
                    .map_err(|_| unusable("octocrab took no token"))?;
                let never = DateTime::<Utc>::MAX_UTC;
                (Bearer::Given, Some(Arc::new((client, never))))
            }
            GithubAuth::App { app_id, key } => {
                let pem = match key {
                    PrivateKeySource::Pem(pem) => pem.expose().to_owned(),
                    PrivateKeySource::File(path) => {
                        std::fs::read_to_string(path).map_err(|cause| {
                            OpenError::Github(format!(
                                "cannot read the GitHub App private key {}: {cause} (set \
                                 [github] private_key_path, or GITHUB_APP_PRIVATE_KEY to the \
                                 PEM text)",
                                path.display()
                            ))
                        })?
                    }
                };
                (Bearer::App(AppKey::new(*app_id, &pem)?), None)
            }
        };
        let own = Credentials {
            writes: pacer(),
            gh,
            bearer,
            current: Mutex::new(current),
        };
        Ok(Auth {
            own: Arc::new(own),
            pacer: Box::new(pacer),
            repos: Mutex::default(),
            limits_of: Default::default(),
        })
    }

    /// Whether rowbranch is the App (and not a token).
    pub fn is_app(&self) -> bool {
        matches!(self.own.bearer, Bearer::App(_))
    }

    /// The client for `repo`, with a token ready: the token's, or the installation's that
    /// holds it. Nothing here writes, so no setback is ambiguous.
    pub async fn installation(&self, repo: &RepoName) -> Attempt<Arc<Credentials>> {
        if !self.is_app() {
            return Ok(Arc::clone(&self.own));
        }
        let mut repos = self.repos.lock().await;
        let known = repos.get(repo).cloned();
        let installation = match known {
            Some((at, known)) if at.elapsed() < INSTALLATION_TTL => known,
            _ => {
                let found = self.own.installation_of(repo).await;
                let id = found.map_err(Setback::not_applied)?.id;
                let installation = match known {
                    // The same installation: its token is still good.
                    Some((_, known)) if matches!(known.bearer, Bearer::Installation { id: had, .. } if had == id) => {
                        known
                    }
                    _ => {
                        let mut limits_of =
                            (self.limits_of.lock()).unwrap_or_else(|e| e.into_inner());
                        let shared = limits_of.entry(id).or_insert_with(&self.pacer);
                        let (app, name) = (Arc::clone(&self.own), repo.name().to_owned());
                        Arc::new(Credentials {
                            writes: Arc::clone(shared),
                            gh: self.own.gh.clone(),
                            bearer: Bearer::Installation { id, app, name },
                            current: Mutex::new(None),
                        })
                    }
                };
                repos.insert(repo.clone(), (Instant::now(), Arc::clone(&installation)));
                installation
            }
        };
        drop(repos);
        if let Err(setback) = installation.token().await {
            // The installation may be gone or changed: look it up afresh next time.
            if matches!(setback, Setback::Fail(_)) {
                self.repos.lock().await.remove(repo);
            }
            return Err(setback);
        }
        Ok(installation)
    }
}

/// `GET /repos/{o}/{r}/installation`: the installation that holds the repository, and what
/// it may do (octocrab's model names only seven permissions, not `pull_requests`).
#[derive(Deserialize)]
pub struct InstallationFound {
    id: u64,
    #[serde(default)]
    pub permissions: BTreeMap<String, String>,
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
    }

    #[test]
    fn each_request_is_counted_as_what_it_does() {
        let of = |method: Method, path: &str| operation(&method, path);
        assert_eq!(of(Method::GET, "/app"), Some(Operation::GetApp));
        assert_eq!(
            of(Method::GET, "/api/v3/rate_limit"),
            Some(Operation::RateLimit)
        );
        assert_eq!(of(Method::POST, "/app/installations/1/access_tokens"), None);
        assert_eq!(of(Method::POST, "/app-manifests/c/conversions"), None);
        assert_eq!(of(Method::GET, "/users/acme"), None);
        let repo = "/api/v3/repos/acme/app";
        for (method, tail, operation) in [
            (Method::GET, "", Operation::GetRepo),
            (Method::GET, "/installation", Operation::GetInstallation),
            (Method::GET, "/git/ref/heads/main", Operation::GetRef),
            (
                Method::GET,
                "/git/matching-refs/heads/f/1",
                Operation::MatchingRefs,
            ),
            (Method::POST, "/git/refs", Operation::CreateRef),
            (Method::DELETE, "/git/refs/heads/f/1", Operation::DeleteRef),
            (Method::POST, "/dispatches", Operation::Dispatch),
            (Method::GET, "/pulls", Operation::ListPulls),
            (Method::GET, "/compare/main...f/1", Operation::Compare),
            (
                Method::GET,
                "/contents/.github/workflows",
                Operation::GetContents,
            ),
            (Method::GET, "/actions/runs", Operation::ListRuns),
            (
                Method::GET,
                "/actions/workflows/a.yml",
                Operation::GetWorkflow,
            ),
        ] {
            assert_eq!(
                of(method, &format!("{repo}{tail}")),
                Some(operation),
                "{tail}"
            );
        }
    }
}
