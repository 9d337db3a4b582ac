//! The HTTP client under every GitHub request: the App's JWT requests, the installation-token
//! mints, the installation requests, and `init`'s calls without credentials. It carries the
//! headers GitHub asks every request for, and nothing of octocrab's own.
//!
//! octocrab's default client sends `User-Agent: octocrab` (its extra headers are appended, so
//! ours would make a second one), no `Accept`, and no `X-GitHub-Api-Version` on a token mint,
//! and it logs every failed request as an error without the repository or the URL. So the stack
//! is built here: the same connector (rustls with the system's roots, plain HTTP allowed for a
//! test server, the same timeouts), the base URL, and a layer that sets the three headers on
//! every request, replacing what octocrab put there. A failed request is reported once, by the
//! retry policy, with the operation and the repository.
//! (https://docs.github.com/rest/using-the-rest-api/getting-started-with-the-rest-api#user-agent,
//! https://docs.github.com/rest/about-the-rest-api/api-versions)

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderValue, ACCEPT, USER_AGENT};
use http::{HeaderName, Request};
use octocrab::service::middleware::base_uri::BaseUriLayer;
use octocrab::{AuthState, OctoBody, Octocrab, OctocrabBuilder};
use tower::util::MapRequestLayer;

use crate::forge::{with_causes, OpenError};

/// rowbranch and its version: GitHub asks for the application's name, and refuses a request
/// without a `User-Agent`.
pub const USER_AGENT_VALUE: &str = concat!("rowbranch/", env!("CARGO_PKG_VERSION"));
/// GitHub's media type for its REST API.
pub const ACCEPT_VALUE: &str = "application/vnd.github+json";
/// The REST API version every request asks for. `2022-11-28` is supported until March 2028;
/// a request without the header gets the oldest version still supported, which changes under it.
pub const API_VERSION: &str = "2022-11-28";
const API_VERSION_HEADER: HeaderName = HeaderName::from_static("x-github-api-version");

/// How long to wait for a connection; octocrab sets none by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take in all; past it the answer counts as lost (ambiguous).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A client for the API at `api_url` with `auth` (none: each request's client gets its bearer,
/// the App's JWT or an installation's token, with `Octocrab::user_access_token`, and shares
/// this stack, headers included).
pub fn client(api_url: &str, auth: AuthState) -> Result<Octocrab, OpenError> {
    let base: http::Uri = api_url.parse().map_err(|e| OpenError::ApiUrl {
        api_url: api_url.to_owned(),
        cause: with_causes(&e),
    })?;
    // The process's provider when one is installed, else ring: what octocrab picks.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| OpenError::TlsRoots {
            cause: with_causes(&e),
        })?
        // Plain HTTP too: a GitHub Enterprise Server behind a proxy, or a test's server.
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
    let client = OctocrabBuilder::new_empty()
        .with_service(http)
        .with_layer(&MapRequestLayer::new(github_headers))
        .with_layer(&BaseUriLayer::new(base))
        .with_auth(auth)
        .build()
        .map_err(|e| OpenError::Client {
            cause: with_causes(&e),
        })?;
    Ok(client)
}

/// Sets the three headers GitHub asks for, replacing any octocrab set (it adds the version to
/// most requests, but not to a token mint). An `Accept` a request chose is kept.
fn github_headers(mut request: Request<OctoBody>) -> Request<OctoBody> {
    let headers = request.headers_mut();
    headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    headers.insert(API_VERSION_HEADER, HeaderValue::from_static(API_VERSION));
    if !headers.contains_key(ACCEPT) {
        headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_VALUE));
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_gets_the_three_headers_once() {
        let request = Request::builder()
            .header(USER_AGENT, "octocrab")
            .header("x-github-api-version", "2022-11-28")
            .body(OctoBody::empty())
            .unwrap();
        let request = github_headers(request);
        let headers = request.headers();
        let all = |name: &str| {
            headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("user-agent"), [USER_AGENT_VALUE]);
        assert_eq!(all("x-github-api-version"), [API_VERSION]);
        assert_eq!(all("accept"), [ACCEPT_VALUE]);
        assert!(USER_AGENT_VALUE.starts_with("rowbranch/0."));
    }
}
