//! Routing, authentication, rate limits, faults and the endpoints themselves.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State as AxState};
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::Response;
use serde_json::{json, Map, Value};

use crate::auth::{epoch_secs, verify_jwt, JWT_DECODE, JWT_DOC};
use crate::conn::ConnKill;
use crate::faults::{primary_message, secondary_reply, status_reply, Fault, Op, RATE_LIMIT_DOC};
use crate::reply::Reply;
use crate::shapes;
use crate::state::{
    level, random_token, repo_key, Auth, DispatchRecord, PlainToken, PullState, RateKey,
    RateSnapshot, RequestRecord, Shared, State, Token,
};

/// Which repository a path names.
#[derive(Clone, Debug)]
pub(crate) enum RepoSel {
    /// `/repos/{owner}/{name}`.
    Name(String),
    /// `/repositories/{id}` (the form GitHub's `Link` headers use).
    Id(u64),
}

#[derive(Clone, Debug)]
pub(crate) enum RepoRoute {
    Get,
    Installation,
    GetRef(String),
    MatchingRefs(String),
    CreateRef,
    DeleteRef(String),
    Dispatch,
    ListPulls,
    Compare(String),
    Contents(String),
    ListRuns,
    /// `actions/workflows/{workflow_id}`: the workflow's file name.
    Workflow(String),
}

#[derive(Clone, Debug)]
pub(crate) enum Route {
    GetApp,
    GetHookConfig,
    RateLimit,
    GetUser(String),
    ManifestConversion(String),
    MintToken(String),
    Repo(RepoSel, RepoRoute),
}

impl Route {
    fn op(&self) -> Op {
        match self {
            Route::GetApp => Op::GetApp,
            Route::GetHookConfig => Op::GetHookConfig,
            Route::RateLimit => Op::RateLimit,
            Route::GetUser(_) => Op::GetUser,
            Route::ManifestConversion(_) => Op::ManifestConversion,
            Route::MintToken(_) => Op::MintToken,
            Route::Repo(_, r) => match r {
                RepoRoute::Get => Op::GetRepo,
                RepoRoute::Installation => Op::GetInstallation,
                RepoRoute::GetRef(_) => Op::GetRef,
                RepoRoute::MatchingRefs(_) => Op::MatchingRefs,
                RepoRoute::CreateRef => Op::CreateRef,
                RepoRoute::DeleteRef(_) => Op::DeleteRef,
                RepoRoute::Dispatch => Op::Dispatch,
                RepoRoute::ListPulls => Op::ListPulls,
                RepoRoute::Compare(_) => Op::Compare,
                RepoRoute::Contents(_) => Op::GetContents,
                RepoRoute::ListRuns => Op::ListRuns,
                RepoRoute::Workflow(_) => Op::GetWorkflow,
            },
        }
    }
}

/// Percent-decodes a path segment or query part (`+` is a space only in queries).
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `per_page` (30 unless given, at most 100) and `page` (from 1), as GitHub's list endpoints
/// read them, and the `Link` header they answer with.
struct Paging {
    per_page: usize,
    page: usize,
}

impl Paging {
    fn from_params(params: &[(String, String)]) -> Paging {
        let per_page = match param(params, "per_page").and_then(|v| v.parse::<usize>().ok()) {
            None | Some(0) => 30,
            Some(n) => n.min(100),
        };
        let page = param(params, "page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        Paging { per_page, page }
    }

    fn skip(&self) -> usize {
        (self.page - 1).saturating_mul(self.per_page)
    }

    /// Sets `Link` (prev, next, last, first, as they apply) on a page of `total` items: each
    /// link is `url` with the request's query, its `page=` replaced.
    fn link(&self, reply: &mut Reply, url: &str, query: Option<&str>, total: usize) {
        let (page, last) = (self.page, total.div_ceil(self.per_page).max(1));
        let link_to = |n: usize| {
            let mut parts: Vec<String> = query
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty() && !p.starts_with("page="))
                .map(str::to_owned)
                .collect();
            parts.push(format!("page={n}"));
            format!("<{url}?{}>", parts.join("&"))
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(format!("{}; rel=\"prev\"", link_to((page - 1).min(last))));
        }
        if page < last {
            links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
            links.push(format!("{}; rel=\"last\"", link_to(last)));
        }
        if page > 1 {
            links.push(format!("{}; rel=\"first\"", link_to(1)));
        }
        if !links.is_empty() {
            reply.set_header("link", links.join(", "));
        }
    }
}

/// The decoded, non-empty rest of `path` after `prefix`.
fn tail(path: &str, prefix: &str) -> Option<String> {
    path.strip_prefix(prefix)
        .filter(|r| !r.is_empty())
        .map(|r| percent_decode(r, false))
}

pub(crate) fn parse_route(method: &Method, path: &str) -> Option<Route> {
    let p = path.strip_prefix('/')?;
    if p == "app" {
        return (method == Method::GET).then_some(Route::GetApp);
    }
    if p == "app/hook/config" {
        return (method == Method::GET).then_some(Route::GetHookConfig);
    }
    if p == "rate_limit" {
        return (method == Method::GET).then_some(Route::RateLimit);
    }
    if let Some(login) = p.strip_prefix("users/") {
        let ok = method == Method::GET && !login.is_empty() && !login.contains('/');
        return ok.then(|| Route::GetUser(percent_decode(login, false)));
    }
    if let Some(rest) = p.strip_prefix("app-manifests/") {
        let code = rest.strip_suffix("/conversions")?;
        let ok = method == Method::POST && !code.is_empty() && !code.contains('/');
        return ok.then(|| Route::ManifestConversion(code.to_owned()));
    }
    if let Some(rest) = p.strip_prefix("app/installations/") {
        let id = rest.strip_suffix("/access_tokens")?;
        let ok = method == Method::POST && !id.is_empty() && !id.contains('/');
        return ok.then(|| Route::MintToken(id.to_owned()));
    }
    let (sel, rest) = if let Some(r) = p.strip_prefix("repos/") {
        let mut parts = r.splitn(3, '/');
        let owner = parts.next().filter(|s| !s.is_empty())?;
        let name = parts.next().filter(|s| !s.is_empty())?;
        let full = format!(
            "{}/{}",
            percent_decode(owner, false),
            percent_decode(name, false)
        );
        (RepoSel::Name(full), parts.next())
    } else if let Some(r) = p.strip_prefix("repositories/") {
        let mut parts = r.splitn(2, '/');
        let id = parts.next()?.parse().ok()?;
        (RepoSel::Id(id), parts.next())
    } else {
        return None;
    };
    let get = method == Method::GET;
    let route = match rest {
        None if get => RepoRoute::Get,
        None => return None,
        Some(rest) => {
            if get && rest == "installation" {
                RepoRoute::Installation
            } else if get && rest.starts_with("git/ref/") {
                RepoRoute::GetRef(tail(rest, "git/ref/")?)
            } else if get && rest.starts_with("git/matching-refs/") {
                RepoRoute::MatchingRefs(tail(rest, "git/matching-refs/")?)
            } else if method == Method::POST && rest == "git/refs" {
                RepoRoute::CreateRef
            } else if method == Method::DELETE && rest.starts_with("git/refs/") {
                RepoRoute::DeleteRef(tail(rest, "git/refs/")?)
            } else if method == Method::POST && rest == "dispatches" {
                RepoRoute::Dispatch
            } else if get && rest == "pulls" {
                RepoRoute::ListPulls
            } else if get && rest.starts_with("compare/") {
                RepoRoute::Compare(tail(rest, "compare/")?)
            } else if get && rest == "actions/runs" {
                RepoRoute::ListRuns
            } else if get && rest.starts_with("actions/workflows/") {
                RepoRoute::Workflow(tail(rest, "actions/workflows/")?)
            } else if get && rest == "contents" {
                RepoRoute::Contents(String::new())
            } else if get && rest.starts_with("contents/") {
                RepoRoute::Contents(tail(rest, "contents/")?)
            } else {
                return None;
            }
        }
    };
    Some(Route::Repo(sel, route))
}

/// What a request authenticated as.
#[derive(Clone, Debug)]
pub(crate) enum Credential {
    None,
    Jwt,
    Token(Token),
    Plain(PlainToken),
}

/// The request body as the endpoint sees it.
pub(crate) enum BodyParse {
    None,
    Json(Value),
    Invalid,
}

struct Ctx<'a> {
    cred: &'a Credential,
    /// The bucket the request counts in (`GET /rate_limit` reports it).
    rate_key: RateKey,
    body: &'a BodyParse,
    query: Option<&'a str>,
    now: SystemTime,
}

struct Outcome {
    reply: Reply,
    drop_connection: bool,
}

/// axum's fallback handler: every request comes here.
pub(crate) async fn handle(
    AxState(shared): AxState<Arc<Shared>>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, 32 << 20).await {
        Ok(b) => b,
        Err(_) => {
            return Reply::json(400, json!({"message": "Problems parsing JSON"})).into_response()
        }
    };
    // The work runs in its own task so that a client giving up (closing the connection)
    // does not cancel an effect half-way: GitHub applies what it received.
    let work = tokio::spawn(process(
        shared,
        parts.method,
        parts.uri,
        parts.headers,
        bytes,
    ));
    match work.await {
        Ok(outcome) => {
            if outcome.drop_connection {
                conn.kill();
            }
            outcome.reply.into_response()
        }
        Err(e) => Reply::json(
            500,
            json!({"message": format!("fake GitHub: the handler failed: {e}")}),
        )
        .into_response(),
    }
}

fn scheme_value<'a>(header: &'a str, scheme: &str) -> Option<&'a str> {
    let (s, v) = header.split_once(' ')?;
    s.eq_ignore_ascii_case(scheme)
        .then(|| v.trim())
        .filter(|v| !v.is_empty())
}

fn authenticate(
    shared: &Shared,
    op: Op,
    headers: &HeaderMap,
    now: SystemTime,
) -> Result<Credential, Reply> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if op.needs_jwt() {
        let Some(jwt) = header.and_then(|h| scheme_value(h, "bearer")) else {
            return Err(Reply::error(401, JWT_DECODE, JWT_DOC));
        };
        let (app_id, client_id) = shared.with(|s| (s.app_id, s.client_id.clone()));
        verify_jwt(jwt, app_id, &client_id, now).map_err(|m| Reply::error(401, m, JWT_DOC))?;
        return Ok(Credential::Jwt);
    }
    let Some(h) = header else {
        return Ok(Credential::None);
    };
    let bad = || Reply::error(401, "Bad credentials", "https://docs.github.com/rest");
    let token = scheme_value(h, "token")
        .or_else(|| scheme_value(h, "bearer"))
        .ok_or_else(bad)?;
    shared.with(|s| match s.tokens.get(token) {
        Some(t) if t.expires_at > now => Ok(Credential::Token(t.clone())),
        Some(_) => Err(bad()),
        None => match s.plain_tokens.get(token) {
            Some(t) => Ok(Credential::Plain(t.clone())),
            None => Err(bad()),
        },
    })
}

fn rate_headers(reply: &mut Reply, snap: RateSnapshot) {
    if reply.has_header("x-ratelimit-limit") {
        return;
    }
    reply.set_header("x-ratelimit-limit", snap.limit.to_string());
    reply.set_header("x-ratelimit-remaining", snap.remaining.to_string());
    reply.set_header("x-ratelimit-reset", snap.reset.to_string());
    reply.set_header(
        "x-ratelimit-used",
        (snap.limit - snap.remaining.min(snap.limit)).to_string(),
    );
    reply.set_header("x-ratelimit-resource", "core");
}

fn common_headers(reply: &mut Reply) {
    let id: u64 = rand::random();
    reply.set_header("x-github-media-type", "github.v3; format=json");
    reply.set_header("x-github-api-version-selected", "2022-11-28");
    reply.set_header(
        "x-github-request-id",
        format!(
            "{:04X}:{:04X}:{:07X}:{:07X}:{:08X}",
            id & 0xffff,
            (id >> 16) & 0xffff,
            (id >> 32) & 0xfff_ffff,
            id & 0xfff_ffff,
            (id >> 8) & 0xffff_ffff
        ),
    );
}

fn who(key: RateKey) -> String {
    match key {
        RateKey::Installation(id) => format!("installation ID {id}"),
        // A workflow's GITHUB_TOKEN is an installation token.
        RateKey::Plain(id) => format!("installation ID {id}"),
        RateKey::App => "app".to_owned(),
        RateKey::Anonymous => "your IP address".to_owned(),
    }
}

/// A request being handled, counted in [`crate::InFlight`] until it is answered.
struct Open<'a> {
    shared: &'a Shared,
    token: bool,
}

impl<'a> Open<'a> {
    fn enter(shared: &'a Shared, token: bool) -> Open<'a> {
        shared.with(|s| {
            let f = &mut s.in_flight;
            f.all += 1;
            f.max_all = f.max_all.max(f.all);
            if token {
                f.tokens += 1;
                f.max_tokens = f.max_tokens.max(f.tokens);
            }
        });
        Open { shared, token }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.shared.with(|s| {
            s.in_flight.all -= 1;
            if self.token {
                s.in_flight.tokens -= 1;
            }
        });
    }
}

/// GitHub's answer to a request without a `User-Agent` header, which it refuses before
/// anything else: "Requests with no `User-Agent` header will be rejected."
/// (https://docs.github.com/rest/using-the-rest-api/getting-started-with-the-rest-api#user-agent)
const NO_USER_AGENT: &str = "Request forbidden by administrative rules. Please make sure your \
     request has a User-Agent header \
     (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). \
     Check https://developer.github.com for other possible causes.\n";

/// A request's headers for its record, without the credential.
fn recorded_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| *name != header::AUTHORIZATION)
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

async fn process(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Outcome {
    let path = uri.path().to_owned();
    let query = uri.query().map(str::to_owned);
    let arrived = SystemTime::now();
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        BodyParse::None
    } else {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => BodyParse::Json(v),
            Err(_) => BodyParse::Invalid,
        }
    };
    let (idx, prefix) = shared.with(|s| {
        s.log.push(RequestRecord {
            method: method.to_string(),
            path: path.clone(),
            op: None,
            auth: Auth::NotChecked,
            status: None,
            dropped: false,
            fault: None,
            at: std::time::Instant::now(),
            at_tokio: tokio::time::Instant::now(),
            headers: recorded_headers(&headers),
        });
        (s.log.len() - 1, s.path_prefix.clone())
    });
    if !headers.contains_key(header::USER_AGENT) {
        shared.with(|s| s.log[idx].status = Some(403));
        return Outcome {
            reply: Reply::text(403, NO_USER_AGENT),
            drop_connection: false,
        };
    }
    let route = path
        .strip_prefix(prefix.as_str())
        .and_then(|p| parse_route(&method, p));
    let Some(route) = route else {
        let line = match &query {
            Some(q) => format!("{method} {path}?{q}"),
            None => format!("{method} {path}"),
        };
        let mut reply = Reply::json(
            501,
            json!({"message": format!("fake GitHub: unexpected request {line}")}),
        );
        shared.with(|s| {
            s.unexpected.push(line);
            let (snap, _) = s.take_rate(RateKey::Anonymous, epoch_secs(arrived));
            rate_headers(&mut reply, snap);
            s.log[idx].status = Some(501);
        });
        common_headers(&mut reply);
        return Outcome {
            reply,
            drop_connection: false,
        };
    };
    let op = route.op();
    let auth = authenticate(&shared, op, &headers, arrived);
    let _open = Open::enter(
        &shared,
        matches!(auth, Ok(Credential::Token(_) | Credential::Plain(_))),
    );
    let standing = shared.with(|s| s.standing_delays.get(&op).copied());
    if let Some(delay) = standing {
        tokio::time::sleep(delay).await;
    }
    let (cred, rate_key, auth_record) = match &auth {
        Ok(Credential::None) => (Credential::None, RateKey::Anonymous, Auth::Anonymous),
        Ok(Credential::Jwt) => (Credential::Jwt, RateKey::App, Auth::Jwt),
        Ok(Credential::Token(t)) => (
            Credential::Token(t.clone()),
            RateKey::Installation(t.installation_id),
            Auth::Token {
                installation_id: t.installation_id,
            },
        ),
        Ok(Credential::Plain(t)) => (
            Credential::Plain(t.clone()),
            RateKey::Plain(t.id),
            Auth::Plain { token_id: t.id },
        ),
        Err(r) => (
            Credential::None,
            RateKey::Anonymous,
            Auth::Rejected(reply_message(r)),
        ),
    };
    let (snap, exhausted, fault) = shared.with(|s| {
        // "Accessing this endpoint does not count against your REST API rate limit."
        let (snap, exhausted) = if op == Op::RateLimit {
            (s.peek_rate(rate_key, epoch_secs(arrived)), false)
        } else {
            s.take_rate(rate_key, epoch_secs(arrived))
        };
        let fault = if auth.is_ok() && !exhausted {
            s.take_fault(op)
        } else {
            None
        };
        let record = &mut s.log[idx];
        record.op = Some(op);
        record.auth = auth_record;
        record.fault = fault.clone();
        (snap, exhausted, fault)
    });

    let mut drop_connection = false;
    let mut reply = if let Err(r) = auth {
        r
    } else if exhausted {
        Reply::error(403, primary_message(&who(rate_key)), RATE_LIMIT_DOC)
    } else {
        match fault {
            Some(Fault::Status(code)) => status_reply(code, op),
            Some(Fault::SecondaryRateLimit { retry_after_secs }) => {
                secondary_reply(403, retry_after_secs)
            }
            Some(Fault::TooManyRequests { retry_after_secs }) => {
                secondary_reply(429, retry_after_secs)
            }
            Some(Fault::PrimaryRateLimit { reset_in_secs }) => {
                let reset = epoch_secs(SystemTime::now()) + reset_in_secs as i64;
                Reply::error(403, primary_message(&who(rate_key)), RATE_LIMIT_DOC)
                    .with_header("x-ratelimit-limit", snap.limit.to_string())
                    .with_header("x-ratelimit-remaining", "0")
                    .with_header("x-ratelimit-reset", reset.to_string())
                    .with_header("x-ratelimit-used", snap.limit.to_string())
                    .with_header("x-ratelimit-resource", "core")
            }
            Some(Fault::Unprocessable(message)) => Reply::error(422, message, op.doc_url()),
            Some(Fault::DropBeforeApply) => {
                drop_connection = true;
                Reply::empty(500)
            }
            other => {
                if let Some(Fault::Delay(d)) = other {
                    tokio::time::sleep(d).await;
                }
                let applied = shared.with(|s| {
                    let ctx = Ctx {
                        cred: &cred,
                        rate_key,
                        body: &body,
                        query: query.as_deref(),
                        now: SystemTime::now(),
                    };
                    execute(s, &route, &ctx)
                });
                match other {
                    Some(Fault::AppliedThen(code)) => status_reply(code, op),
                    Some(Fault::DropAfterApply) => {
                        drop_connection = true;
                        applied
                    }
                    Some(Fault::DelayAfterApply(d)) => {
                        tokio::time::sleep(d).await;
                        applied
                    }
                    _ => applied,
                }
            }
        }
    };
    rate_headers(&mut reply, snap);
    common_headers(&mut reply);
    shared.with(|s| {
        let record = &mut s.log[idx];
        if drop_connection {
            record.dropped = true;
        } else {
            record.status = Some(reply.status);
        }
    });
    Outcome {
        reply,
        drop_connection,
    }
}

fn reply_message(r: &Reply) -> String {
    match &r.body {
        crate::reply::ReplyBody::Json(v) => v["message"].as_str().unwrap_or("").to_owned(),
        _ => String::new(),
    }
}

fn not_found(op: Op) -> Reply {
    Reply::error(404, "Not Found", op.doc_url())
}

fn invalid_request(op: Op, detail: &str) -> Reply {
    Reply::error(422, format!("Invalid request.\n\n{detail}"), op.doc_url())
}

fn problems_parsing(op: Op) -> Reply {
    Reply::error(400, "Problems parsing JSON", op.doc_url())
}

fn empty_repo(op: Op) -> Reply {
    Reply::error(409, "Git Repository is empty.", op.doc_url())
}

/// The request body as a JSON object (an absent body counts as `{}`).
fn body_object(op: Op, body: &BodyParse) -> Result<Map<String, Value>, Reply> {
    match body {
        BodyParse::None => Ok(Map::new()),
        BodyParse::Json(Value::Object(m)) => Ok(m.clone()),
        BodyParse::Json(_) | BodyParse::Invalid => Err(problems_parsing(op)),
    }
}

/// The request body as a JSON object, and its required string property `name`.
fn body_with(op: Op, body: &BodyParse, name: &str) -> Result<(Map<String, Value>, String), Reply> {
    let body = body_object(op, body)?;
    let value = required_str(op, &body, name)?;
    Ok((body, value))
}

/// A required string property of a request body.
fn required_str(op: Op, body: &Map<String, Value>, name: &str) -> Result<String, Reply> {
    match body.get(name) {
        None | Some(Value::Null) => {
            Err(invalid_request(op, &format!("\"{name}\" wasn't supplied.")))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid_request(
            op,
            &format!("For 'properties/{name}', {other} is not a string."),
        )),
    }
}

fn resolve_sel(s: &State, sel: &RepoSel) -> Option<String> {
    match sel {
        RepoSel::Name(name) => {
            let key = repo_key(name);
            s.repos.contains_key(&key).then_some(key)
        }
        RepoSel::Id(id) => s
            .repos
            .iter()
            .find(|(_, r)| r.id == *id)
            .map(|(k, _)| k.clone()),
    }
}

/// GitHub's order of checks on a repository endpoint: the repository must be visible to the
/// credential (else 404, hiding it), then the token must hold the operation's permission.
fn access(s: &State, sel: &RepoSel, cred: &Credential, op: Op) -> Result<String, Reply> {
    let key = resolve_sel(s, sel).ok_or_else(|| not_found(op))?;
    let repo = &s.repos[&key];
    match cred {
        // Every repository of the fake is private: hidden from anonymous requests, and an App
        // JWT does not reach repository endpoints.
        Credential::None | Credential::Jwt => return Err(not_found(op)),
        Credential::Token(t) => {
            let installed = s
                .installations
                .get(&t.installation_id)
                .is_some_and(|i| i.covers(repo));
            let in_narrowing = t.repositories.as_ref().is_none_or(|r| r.contains(&key));
            if !installed || !in_narrowing {
                return Err(not_found(op));
            }
            permitted(op, &t.permissions, "Resource not accessible by integration")?;
        }
        Credential::Plain(t) => {
            if !t.repositories.contains(&key) {
                return Err(not_found(op));
            }
            permitted(op, &t.permissions, t.not_accessible())?;
        }
    }
    Ok(key)
}

/// GitHub's 403 for a token without the operation's permission: its message, and in
/// `X-Accepted-GitHub-Permissions` what the endpoint needs
/// (https://docs.github.com/rest/using-the-rest-api/troubleshooting-the-rest-api#resource-not-accessible).
fn permitted(
    op: Op,
    permissions: &std::collections::BTreeMap<String, String>,
    message: &str,
) -> Result<(), Reply> {
    let Some((perm, wanted)) = op.permission() else {
        return Ok(());
    };
    let have = permissions.get(perm).map_or(0, |v| level(v));
    if have < level(wanted) {
        return Err(Reply::error(403, message, op.doc_url())
            .with_header("x-accepted-github-permissions", format!("{perm}={wanted}")));
    }
    Ok(())
}

fn execute(s: &mut State, route: &Route, ctx: &Ctx<'_>) -> Reply {
    match route {
        Route::RateLimit => {
            let snap = s.peek_rate(ctx.rate_key, epoch_secs(ctx.now));
            Reply::json(
                200,
                shapes::rate_limit(snap.limit, snap.remaining, snap.reset),
            )
        }
        Route::GetApp => Reply::json(
            200,
            shapes::app(
                &s.base_url,
                s.app_id,
                &s.client_id,
                &s.app_name,
                &s.app_slug,
            ),
        ),
        // GitHub masks the secret: `********` when one is set, and leaves it out otherwise.
        Route::GetHookConfig => {
            let hook = &s.hook;
            let mut config = json!({
                "content_type": hook.content_type,
                "insecure_ssl": if hook.insecure_ssl { "1" } else { "0" },
                "url": hook.url,
            });
            if hook.secret {
                config["secret"] = json!("********");
            }
            Reply::json(200, config)
        }
        Route::GetUser(login) => match s.find_account(login) {
            Some(account) => Reply::json(200, shapes::public_user(&s.base_url, &account)),
            None => not_found(Op::GetUser),
        },
        Route::MintToken(id) => mint_token(s, id, ctx),
        Route::ManifestConversion(code) => {
            // The code works once; the answer carries the App's credentials, and the App now
            // has the name and slug it was created under.
            let Some((name, slug)) = s.manifest_codes.remove(code) else {
                return not_found(Op::ManifestConversion);
            };
            s.app_name = name;
            s.app_slug = slug;
            let mut app = shapes::app(
                &s.base_url,
                s.app_id,
                &s.client_id,
                &s.app_name,
                &s.app_slug,
            );
            if let Some(obj) = app.as_object_mut() {
                obj.insert("pem".into(), json!(crate::auth::TEST_APP_PRIVATE_KEY_PEM));
                obj.insert(
                    "webhook_secret".into(),
                    json!(crate::TEST_APP_WEBHOOK_SECRET),
                );
                obj.insert("client_secret".into(), json!("test-only-client-secret"));
            }
            Reply::json(201, app)
        }
        Route::Repo(sel, RepoRoute::Installation) => {
            let op = Op::GetInstallation;
            let Some(key) = resolve_sel(s, sel) else {
                return not_found(op);
            };
            match s.installation_for(&key) {
                Some(inst) => Reply::json(
                    200,
                    shapes::installation(
                        &s.base_url,
                        s.app_id,
                        &s.app_slug,
                        s.account_kind(&inst.account),
                        inst,
                    ),
                ),
                None => not_found(op),
            }
        }
        Route::Repo(sel, r) => {
            let op = route.op();
            let key = match access(s, sel, ctx.cred, op) {
                Ok(k) => k,
                Err(reply) => return reply,
            };
            match r {
                RepoRoute::Get => {
                    let repo = &s.repos[&key];
                    let kind = s.account_kind(&repo.owner);
                    Reply::json(200, shapes::repo(&s.base_url, repo, kind))
                }
                RepoRoute::Installation => not_found(op),
                RepoRoute::GetRef(r) => get_ref(s, &key, r),
                RepoRoute::MatchingRefs(p) => matching_refs(s, &key, p),
                RepoRoute::CreateRef => create_ref(s, &key, ctx),
                RepoRoute::DeleteRef(r) => delete_ref(s, &key, r),
                RepoRoute::Dispatch => dispatch(s, &key, ctx),
                RepoRoute::ListPulls => list_pulls(s, &key, ctx),
                RepoRoute::Compare(spec) => compare(s, &key, spec),
                RepoRoute::Contents(path) => contents(s, &key, path, ctx),
                RepoRoute::ListRuns => list_runs(s, &key, ctx),
                RepoRoute::Workflow(id) => workflow(s, &key, id),
            }
        }
    }
}

const NOT_ACCESSIBLE: &str = "There is at least one repository that does not exist or is not accessible to the parent installation.";

fn mint_token(s: &mut State, id: &str, ctx: &Ctx<'_>) -> Reply {
    let op = Op::MintToken;
    let Some(inst) = id
        .parse::<u64>()
        .ok()
        .and_then(|id| s.installations.get(&id))
        .cloned()
    else {
        return not_found(op);
    };
    let body = match body_object(op, ctx.body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut narrowed = BTreeSet::new();
    for (field, by_id) in [("repositories", false), ("repository_ids", true)] {
        let Some(list) = body.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(items) = list.as_array() else {
            return invalid_request(
                op,
                &format!("For 'properties/{field}', {list} is not an array."),
            );
        };
        if items.len() > 500 {
            return Reply::error(
                422,
                "Too many repositories specified (maximum is 500)",
                op.doc_url(),
            );
        }
        for item in items {
            let key = match (by_id, item) {
                (false, Value::String(name)) => {
                    let key = repo_key(&format!("{}/{}", inst.account, name));
                    s.repos.contains_key(&key).then_some(key)
                }
                (true, Value::Number(n)) => s
                    .repos
                    .iter()
                    .find(|(_, r)| Some(r.id) == n.as_u64())
                    .map(|(k, _)| k.clone()),
                _ => {
                    return invalid_request(
                        op,
                        &format!(
                            "For 'items', {item} is not a {}.",
                            if by_id { "integer" } else { "string" }
                        ),
                    )
                }
            };
            match key {
                Some(k) if inst.covers(&s.repos[&k]) => {
                    narrowed.insert(k);
                }
                _ => return Reply::error(422, NOT_ACCESSIBLE, op.doc_url()),
            }
        }
    }
    let mut permissions = inst.permissions.clone();
    if let Some(requested) = body.get("permissions").filter(|v| !v.is_null()) {
        let Some(requested) = requested.as_object() else {
            return invalid_request(
                op,
                &format!("For 'properties/permissions', {requested} is not an object."),
            );
        };
        let mut granted = std::collections::BTreeMap::new();
        for (name, value) in requested {
            let wanted = value.as_str().unwrap_or("");
            let have = inst.permissions.get(name).map_or(0, |v| level(v));
            if level(wanted) == 0 || level(wanted) > have {
                return Reply::error(
                    422,
                    "The permissions requested are not granted to this installation.",
                    op.doc_url(),
                );
            }
            granted.insert(name.clone(), wanted.to_owned());
        }
        granted
            .entry("metadata".to_owned())
            .or_insert_with(|| "read".to_owned());
        permissions = granted;
    }
    let token = random_token();
    let expires_at = ctx.now + s.token_ttl;
    let narrowed = (!narrowed.is_empty()).then_some(narrowed);
    let mut answer = json!({
        "token": token,
        "expires_at": shapes::rfc3339(expires_at),
        "permissions": shapes::permissions_json(&permissions),
        "repository_selection": if narrowed.is_some() { "selected" } else { inst.selection() },
    });
    if let Some(keys) = &narrowed {
        let repos: Vec<Value> = keys
            .iter()
            .map(|k| {
                let repo = &s.repos[k];
                shapes::repo(&s.base_url, repo, s.account_kind(&repo.owner))
            })
            .collect();
        answer["repositories"] = Value::Array(repos);
    }
    s.tokens.insert(
        token.clone(),
        Token {
            token,
            installation_id: inst.id,
            repositories: narrowed,
            permissions,
            expires_at,
            minted_at: ctx.now,
        },
    );
    s.token_mints += 1;
    Reply::json(201, answer)
}

/// `git check-ref-format`, plus GitHub's demand of `refs/` and at least two slashes.
pub(crate) fn valid_ref_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("refs/") else {
        return false;
    };
    if !rest.contains('/') || name.ends_with('/') || name.ends_with('.') {
        return false;
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return false;
    }
    if name
        .chars()
        .any(|c| c.is_control() || c == ' ' || "~^:?*[\\\x7f".contains(c))
    {
        return false;
    }
    name.split('/')
        .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

fn get_ref(s: &State, key: &str, r: &str) -> Reply {
    let op = Op::GetRef;
    let repo = &s.repos[key];
    if repo.is_empty() {
        return empty_repo(op);
    }
    let full = format!("refs/{r}");
    match repo.refs.get(&full) {
        Some(sha) => Reply::json(200, shapes::git_ref(&s.base_url, repo, &full, sha)),
        None => not_found(op),
    }
}

fn matching_refs(s: &State, key: &str, prefix: &str) -> Reply {
    let repo = &s.repos[key];
    if repo.is_empty() {
        return empty_repo(Op::MatchingRefs);
    }
    let full = format!("refs/{prefix}");
    let matches: Vec<Value> = repo
        .refs
        .iter()
        .filter(|(name, _)| name.starts_with(&full))
        .map(|(name, sha)| shapes::git_ref(&s.base_url, repo, name, sha))
        .collect();
    Reply::json(200, Value::Array(matches))
}

fn create_ref(s: &mut State, key: &str, ctx: &Ctx<'_>) -> Reply {
    let op = Op::CreateRef;
    let (body, name) = match body_with(op, ctx.body, "ref") {
        Ok(read) => read,
        Err(r) => return r,
    };
    let sha = match required_str(op, &body, "sha") {
        Ok(v) => v.to_ascii_lowercase(),
        Err(r) => return r,
    };
    let base = s.base_url.clone();
    let repo = s.repos.get_mut(key).expect("checked by access");
    if repo.is_empty() {
        return empty_repo(op);
    }
    if !valid_ref_name(&name) {
        return Reply::error(
            422,
            format!("{name} is not a valid ref name."),
            op.doc_url(),
        );
    }
    if !repo.commits.contains_key(&sha) {
        return Reply::error(422, "Object does not exist", op.doc_url());
    }
    if repo.refs.contains_key(&name) {
        return Reply::error(422, "Reference already exists", op.doc_url());
    }
    repo.refs.insert(name.clone(), sha.clone());
    let answer = shapes::git_ref(&base, repo, &name, &sha);
    let location = answer["url"].as_str().unwrap_or_default().to_owned();
    Reply::json(201, answer).with_header("location", location)
}

fn delete_ref(s: &mut State, key: &str, r: &str) -> Reply {
    let op = Op::DeleteRef;
    let repo = s.repos.get_mut(key).expect("checked by access");
    if repo.is_empty() {
        return empty_repo(op);
    }
    let full = format!("refs/{r}");
    if !repo.refs.contains_key(&full) {
        return Reply::error(422, "Reference does not exist", op.doc_url());
    }
    if full == format!("refs/heads/{}", repo.default_branch) {
        return Reply::error(
            422,
            "Cannot delete the default branch of the repository",
            op.doc_url(),
        );
    }
    repo.refs.remove(&full);
    Reply::empty(204)
}

const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

fn dispatch(s: &mut State, key: &str, ctx: &Ctx<'_>) -> Reply {
    let op = Op::Dispatch;
    let (body, event_type) = match body_with(op, ctx.body, "event_type") {
        Ok(read) => read,
        Err(r) => return r,
    };
    let chars = event_type.chars().count();
    if chars == 0 {
        return invalid_request(op, "event_type is too short (minimum is 1 character).");
    }
    if chars > 100 {
        return invalid_request(op, "event_type is too long (maximum is 100 characters).");
    }
    let payload = match body.get("client_payload") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(other) => {
            return invalid_request(
                op,
                &format!("For 'properties/client_payload', {other} is not an object."),
            )
        }
    };
    let keys = payload.as_object().map_or(0, Map::len);
    if keys > 10 {
        return invalid_request(
            op,
            &format!("No more than 10 properties are allowed; {keys} were supplied."),
        );
    }
    let size = serde_json::to_vec(&payload).map_or(0, |v| v.len());
    if size >= MAX_PAYLOAD_BYTES {
        return invalid_request(
            op,
            &format!("client_payload is too large ({size} bytes; it must be under 64 KB)."),
        );
    }
    let installation_id = match ctx.cred {
        Credential::Token(t) => Some(t.installation_id),
        _ => None,
    };
    let repo = s.repos.get_mut(key).expect("checked by access");
    repo.dispatches.push(DispatchRecord {
        event_type,
        client_payload: payload,
        installation_id,
    });
    Reply::empty(204)
}

fn list_pulls(s: &State, key: &str, ctx: &Ctx<'_>) -> Reply {
    let repo = &s.repos[key];
    let params = query_pairs(ctx.query);
    let state = param(&params, "state").unwrap_or("open");
    let paging = Paging::from_params(&params);
    // GitHub's quirk: `head` without the `OWNER:` part filters nothing.
    let head = param(&params, "head").and_then(|h| h.split_once(':'));
    let base = param(&params, "base");
    let sort = param(&params, "sort").unwrap_or("created");
    let descending = match param(&params, "direction") {
        Some("asc") => false,
        Some("desc") => true,
        _ => sort == "created" || param(&params, "sort").is_none(),
    };
    let mut pulls: Vec<_> = repo
        .pulls
        .iter()
        .filter(|p| match state {
            "all" => true,
            "closed" => p.state == PullState::Closed,
            _ => p.state == PullState::Open,
        })
        .filter(|p| match head {
            Some((owner, branch)) => repo.owner.eq_ignore_ascii_case(owner) && p.head_ref == branch,
            None => true,
        })
        .filter(|p| base.is_none_or(|b| p.base_ref == b))
        .collect();
    pulls.sort_by_key(|p| {
        let t = if sort == "updated" {
            p.updated_at
        } else {
            p.created_at
        };
        (t, p.number)
    });
    if descending {
        pulls.reverse();
    }
    let total = pulls.len();
    let items: Vec<Value> = pulls
        .iter()
        .skip(paging.skip())
        .take(paging.per_page)
        .map(|p| shapes::pull(&s.base_url, repo, s.account_kind(&repo.owner), p))
        .collect();
    let mut reply = Reply::json(200, Value::Array(items));
    paging.link(
        &mut reply,
        &format!("{}/repositories/{}/pulls", s.base_url, repo.id),
        ctx.query,
        total,
    );
    reply
}

/// `GET /repos/{o}/{r}/actions/runs`: `{total_count, workflow_runs}`, newest first, filtered by
/// `event`, `branch` (the run's head branch: the default branch for a dispatched run) and
/// `status` (a status or a conclusion, as GitHub takes either), `per_page` (30, at most 100)
/// and `page` as GitHub pages, with a `Link` header.
fn list_runs(s: &State, key: &str, ctx: &Ctx<'_>) -> Reply {
    let repo = &s.repos[key];
    let params = query_pairs(ctx.query);
    let paging = Paging::from_params(&params);
    let event = param(&params, "event");
    let branch = param(&params, "branch");
    let status = param(&params, "status");
    let runs: Vec<_> = repo
        .runs
        .iter()
        .rev()
        .filter(|r| event.is_none_or(|e| r.event == e))
        .filter(|r| branch.is_none_or(|b| r.head_branch == b))
        .filter(|r| status.is_none_or(|st| r.status == st || r.conclusion.as_deref() == Some(st)))
        .collect();
    let total = runs.len();
    let owner_kind = s.account_kind(&repo.owner);
    let items: Vec<Value> = runs
        .iter()
        .skip(paging.skip())
        .take(paging.per_page)
        .map(|r| shapes::workflow_run(&s.base_url, repo, owner_kind, &s.app_slug, r))
        .collect();
    let mut reply = Reply::json(200, json!({"total_count": total, "workflow_runs": items}));
    paging.link(
        &mut reply,
        &format!("{}/repositories/{}/actions/runs", s.base_url, repo.id),
        ctx.query,
        total,
    );
    reply
}

/// `GET /repos/{o}/{r}/actions/workflows/{workflow_id}`, by file name: a workflow is one whose
/// file is under `.github/workflows/` on the default branch; its `state` is `active` unless a
/// test set another (`set_workflow_state`). Its `name` is the file's top-level `name:`, else
/// its path, as GitHub names it.
fn workflow(s: &State, key: &str, id: &str) -> Reply {
    let op = Op::GetWorkflow;
    let repo = &s.repos[key];
    let path = format!(".github/workflows/{id}");
    let file = repo
        .branch_sha(&repo.default_branch)
        .and_then(|sha| repo.files_at(sha))
        .and_then(|files| files.get(&path));
    let Some(bytes) = file else {
        return not_found(op);
    };
    let text = String::from_utf8_lossy(bytes);
    let name = text
        .lines()
        .find_map(|line| line.strip_prefix("name:"))
        .map(|name| name.trim().trim_matches(['"', '\'']).to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| path.clone());
    let state = repo
        .workflow_states
        .get(id)
        .map_or("active", String::as_str);
    Reply::json(
        200,
        shapes::workflow(&s.base_url, repo, &path, &name, state),
    )
}

/// Resolves one side of a compare (`branch`, `sha`, or `owner:branch`).
fn compare_side(repo: &crate::state::Repo, spec: &str) -> Option<String> {
    let spec = match spec.split_once(':') {
        Some((owner, rest)) if owner.eq_ignore_ascii_case(&repo.owner) => rest,
        Some(_) => return None,
        None => spec,
    };
    repo.resolve(spec)
}

fn compare(s: &State, key: &str, spec: &str) -> Reply {
    let op = Op::Compare;
    let repo = &s.repos[key];
    let Some((base_spec, head_spec)) = spec.split_once("...") else {
        return not_found(op);
    };
    let (Some(base), Some(head)) = (compare_side(repo, base_spec), compare_side(repo, head_spec))
    else {
        return not_found(op);
    };
    let base_anc = repo.ancestors(&base);
    let head_anc = repo.ancestors(&head);
    let mut ahead: Vec<&String> = head_anc.difference(&base_anc).collect();
    let behind = base_anc.difference(&head_anc).count();
    ahead.sort_by_key(|sha| {
        (
            repo.commits.get(*sha).map_or(0, |c| c.generation),
            (*sha).clone(),
        )
    });
    let merge_base = base_anc
        .intersection(&head_anc)
        .max_by_key(|sha| repo.commits.get(*sha).map_or(0, |c| c.generation))
        .cloned()
        .unwrap_or_else(|| base.clone());
    let status = if base == head || (ahead.is_empty() && behind == 0) {
        "identical"
    } else if behind == 0 {
        "ahead"
    } else if ahead.is_empty() {
        "behind"
    } else {
        "diverged"
    };
    let html = shapes::repo_html(repo);
    let api = shapes::repo_api(&s.base_url, repo);
    let commits: Vec<Value> = ahead
        .iter()
        .take(250)
        .map(|sha| shapes::commit(&s.base_url, repo, sha))
        .collect();
    Reply::json(
        200,
        json!({
            "url": format!("{api}/compare/{spec}"),
            "html_url": format!("{html}/compare/{spec}"),
            "permalink_url": format!("{html}/compare/{}...{}", &base[..7], &head[..7]),
            "diff_url": format!("{html}/compare/{spec}.diff"),
            "patch_url": format!("{html}/compare/{spec}.patch"),
            "base_commit": shapes::commit(&s.base_url, repo, &base),
            "merge_base_commit": shapes::commit(&s.base_url, repo, &merge_base),
            "status": status,
            "ahead_by": ahead.len(),
            "behind_by": behind,
            "total_commits": ahead.len(),
            "commits": commits,
            "files": [],
        }),
    )
}

fn contents(s: &State, key: &str, path: &str, ctx: &Ctx<'_>) -> Reply {
    let op = Op::GetContents;
    let repo = &s.repos[key];
    if repo.is_empty() {
        return Reply::error(404, "This repository is empty.", op.doc_url());
    }
    let params = query_pairs(ctx.query);
    let git_ref = param(&params, "ref")
        .filter(|r| !r.is_empty())
        .unwrap_or(&repo.default_branch)
        .to_owned();
    let Some(sha) = repo.resolve(&git_ref) else {
        return Reply::error(
            404,
            format!("No commit found for the ref {git_ref}"),
            op.doc_url(),
        );
    };
    let files = repo.files_at(&sha).cloned().unwrap_or_default();
    let path = path.trim_matches('/');
    if let Some(bytes) = files.get(path) {
        return Reply::json(
            200,
            shapes::content(&s.base_url, repo, path, &git_ref, "file", Some(bytes), true),
        );
    }
    let dir_prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    };
    let mut entries: std::collections::BTreeMap<String, Value> = Default::default();
    for (file, bytes) in files.range(dir_prefix.clone()..) {
        let Some(rest) = file.strip_prefix(&dir_prefix) else {
            break;
        };
        match rest.split_once('/') {
            None => {
                entries.insert(
                    rest.to_owned(),
                    shapes::content(
                        &s.base_url,
                        repo,
                        file,
                        &git_ref,
                        "file",
                        Some(bytes),
                        false,
                    ),
                );
            }
            Some((dir, _)) => {
                let dir_path = format!("{dir_prefix}{dir}");
                entries.entry(dir.to_owned()).or_insert_with(|| {
                    shapes::content(&s.base_url, repo, &dir_path, &git_ref, "dir", None, false)
                });
            }
        }
    }
    if entries.is_empty() {
        return not_found(op);
    }
    Reply::json(200, Value::Array(entries.into_values().collect()))
}
