//! The HTTP client under every GitHub request: the App's JWT requests, the installation-token
//! mints, the installation requests, and `init`'s calls without credentials. One connection
//! pool (hyper's, with rustls and the system's roots), the base URL every path is joined to,
//! the headers GitHub asks every request for, and the bearer a client was made with.
//!
//! rowbranch reads GitHub's REST answers itself (statuses, headers, bodies: [`super::client`])
//! and signs its own JWTs, so what it needs of a client is one request and its whole answer;
//! a request goes from here straight to the pool, with no middleware stack between, which is
//! most of what a new row costs beside the sockets (`scripts/bench.sh`).
//! (https://docs.github.com/rest/using-the-rest-api/getting-started-with-the-rest-api#user-agent,
//! https://docs.github.com/rest/about-the-rest-api/api-versions)

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, USER_AGENT};
use http::{HeaderName, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

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

/// How long to wait for a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take in all, its answer's body included; past it the answer counts
/// as lost (ambiguous). The caller bounds the request with it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

type Pool = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client for the API at one base URL, with or without a bearer. Clones, and the clients
/// [`Client::with_bearer`] makes, share one connection pool.
#[derive(Clone)]
pub struct Client {
    pool: Pool,
    base: Arc<Base>,
    /// `Bearer …`, marked sensitive so that no debug output shows it.
    bearer: Option<HeaderValue>,
}

/// The base URL's parts a request's path is joined to.
struct Base {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The base's path without its trailing `/`: empty for `https://api.github.com`, `/api/v3`
    /// on GitHub Enterprise Server.
    path: String,
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path did not make a URL with the base.
    #[error("a request URL did not parse: {0}")]
    Url(#[source] http::Error),
    /// The connection, the request or the answer's head failed.
    #[error(transparent)]
    Send(#[from] hyper_util::client::legacy::Error),
    /// The answer's body broke off.
    #[error(transparent)]
    Body(#[from] hyper::Error),
}

impl Client {
    /// A client for the API at `api_url`, without credentials.
    pub fn new(api_url: &str) -> Result<Client, OpenError> {
        let uri: Uri = api_url.parse().map_err(|e| OpenError::ApiUrl {
            api_url: api_url.to_owned(),
            cause: with_causes(&e),
        })?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(OpenError::ApiUrl {
                api_url: api_url.to_owned(),
                cause: "it names no scheme and host (e.g. https://api.github.com)".to_owned(),
            });
        };
        // The process's provider when one is installed, else ring.
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // A request is written whole, then its answer awaited: nothing to gain from Nagle.
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(|e| OpenError::TlsRoots {
                cause: with_causes(&e),
            })?
            // Plain HTTP too: a GitHub Enterprise Server behind a proxy, or a test's server.
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build::<_, Full<Bytes>>(connector);
        Ok(Client {
            pool,
            base: Arc::new(Base {
                scheme: scheme.clone(),
                authority: authority.clone(),
                path: uri.path().trim_end_matches('/').to_owned(),
            }),
            bearer: None,
        })
    }

    /// This client's pool and base, sending `token` as its bearer.
    pub fn with_bearer(&self, token: &str) -> Result<Client, OpenError> {
        let mut bearer =
            HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| OpenError::Client {
                cause: "the token holds characters no HTTP header may carry".to_owned(),
            })?;
        bearer.set_sensitive(true);
        Ok(Client {
            bearer: Some(bearer),
            ..self.clone()
        })
    }

    /// Sends one request to `path` (below the base URL, or already under its path, as a
    /// `Link` header's next page is) with a JSON `body`, and reads the whole answer. Not
    /// bounded in time here: the caller bounds it with [`REQUEST_TIMEOUT`].
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<Response<Bytes>, Error> {
        let path = if path.starts_with(&self.base.path) {
            path.to_owned()
        } else {
            format!("{}{path}", self.base.path)
        };
        let uri = Uri::builder()
            .scheme(self.base.scheme.clone())
            .authority(self.base.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(Error::Url)?;
        let mut request = Request::builder().method(method).uri(uri);
        let headers = request
            .headers_mut()
            .expect("a request with a valid method");
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_VALUE));
        headers.insert(API_VERSION_HEADER, HeaderValue::from_static(API_VERSION));
        if let Some(bearer) = &self.bearer {
            headers.insert(AUTHORIZATION, bearer.clone());
        }
        let body = match json {
            Some(json) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Full::new(Bytes::from(json))
            }
            None => {
                headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
                Full::new(Bytes::new())
            }
        };
        let request = request.body(body).map_err(Error::Url)?;
        let (parts, body) = self.pool.request(request).await?.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Response::from_parts(parts, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_url_without_a_host_is_refused_with_an_example() {
        let Err(OpenError::ApiUrl { cause, .. }) = Client::new("/api/v3") else {
            panic!("a relative URL was taken");
        };
        assert!(cause.contains("https://api.github.com"), "{cause}");
    }

    #[tokio::test]
    async fn a_bearer_is_sensitive_and_shares_the_pool() {
        let client = Client::new("http://127.0.0.1:9/api/v3/").unwrap();
        assert_eq!(client.base.path, "/api/v3");
        let with = client.with_bearer("ghs_test").unwrap();
        let bearer = with.bearer.as_ref().unwrap();
        assert!(bearer.is_sensitive());
        assert_eq!(bearer, "Bearer ghs_test");
        assert!(Arc::ptr_eq(&client.base, &with.base));
        assert!(client.with_bearer("bad\ntoken").is_err());
    }
}
