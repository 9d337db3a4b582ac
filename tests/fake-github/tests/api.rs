//! Tests of the fake itself, over HTTP as a client sees it: it must behave as GitHub
//! documents before rowbranch's tests lean on it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use fake_github::{
    sign_jwt_with, sign_test_jwt, Auth, FakeGithub, Fault, Op, PullState, TEST_APP_PUBLIC_KEY_PEM,
};
use serde_json::{json, Value};

mod common;
use common::Answer;

/// A second RSA key, generated for this test only and trusted by nothing: JWTs signed with
/// it must be refused.
const OTHER_TEST_ONLY_KEY_PEM: &str = "\
-----BEGIN RSA PRIVATE KEY-----\n\
MIIEpAIBAAKCAQEA2EsKnxt1kV/F4ljF3yOrm7ZWXOBRh0QzR5uzJ9ZND9eWuXgz\n\
qRHo8lwLQfONPYfA8qm89//JvDAsE/NO73UGibiJvtMuHlv4gO2JcwW+oJWD2oq+\n\
PR+Is+/7QUbILdExbES7rIALch4GMA0dqnl81gKISdZeEJ79d3yTRB7JenEHQDGV\n\
EE1XJslBaPq+5pLM2R2oUTCPzuUHljbA8T6VuGceQo1Ht4xxLI1+r4OQtQXXSYUh\n\
4zGnqQ7AcP0aU8LEPoAcgloo3Pto+E0tTw/R215k5zLO27U7dfZceNpZZAUtLgLg\n\
2iHSAUSPX7p+RKCneRI5XAxy7bZGBX+KbwXdjQIDAQABAoIBAAXIX9TS1EkE4VKv\n\
YpRC17bhNZw5vRmbjQQYRBPHwCYGcrertd81JOAR7j/JpgLj9cMnHu/BzXV0E5bx\n\
oDB5FanUnrjU3Dygjdt4k6kDxCMhTDX+vp5TZla/5EehqlQbQzHXVpiCkIvGWg5V\n\
KMVi28pm+pjVcTdgNiZIf4bIjJodjedNpOxlKZpfPl8Ub6LF27qaVn0PXl2woLM7\n\
QTv1HNDWtp3p+ZegTf9yaqeCKBW4Mokvo+eA/qO89tnzOdBIYQVxImky3Q2iiQuF\n\
FymWsmdxS40pzvQQmLx2vL84Rjsa9yo668fm3QGXujDGExxRVAhI0/39rC1JGd8d\n\
a2iLfMsCgYEA9Lv7cHqd3FguUC7O4woG8hDXkZFsJUhyiuWOX0zkMniaDaLoYS7v\n\
by+gKxI8ZVGF5853Aoy+3ewLHQDvMbPJKhMXdCTHGl/kiuRXlul5qucH6ZrTQAUj\n\
2ctd4YGrjCQInHkYZHrY9+qzjYl+nVAZAPWFJfU5Nxk4BqyKgygeJbcCgYEA4j/m\n\
iAcTGV/bGG73t3Nsu+lCZgaf5pV/Ntkipt1bOXItuEKij9q3BUmMFD18N1zut/pV\n\
3vtXqiVLJMb/8QZRUW9+yioa/qLxHy8XNrJDbvz0CD8yE/VKkvfKovSyKD38SEJC\n\
gyroxu41FxhOvj8mUV3zELNooC+SwJHresDxNtsCgYEA6Iq2H+pilTw0xXu0mYat\n\
ktTuACNt3v8310LIRUWKj2qI9uwUYkN2vu9CAasSODN+SQSlkIar1bKz3JtGrLNo\n\
MdJyNqm7hhQX1OGjWIIAWaOsoQu8Ltizd/8E9YGAv2h9xjBKPS99ehRJB/PdmxzA\n\
pWilW6vm8bPEyJKqCnXUL4ECgYB6UeHpGSoSRejGRPhYjmbzESF814gLujeVB7/c\n\
R0DSxhBB1oTdEXpxuVmqd7N4mx3VCdrzOyAiNRdzQsONI8VDKex6kFkX4jBKk8MR\n\
Jz+d+dRVwRTqBWvUGXPMtk67wwdqaahcEg7XvmGlotavtKSayRhopxahxBarVjjh\n\
nP7MkQKBgQDJOQGhgr/HNnVzH97clYU2tBQIFGHRPhulitIvEiESmN1jM5OaiYsx\n\
bg7DP9PkTd5TCfrZWh9314Rbm1nuJOMVBJDkmg+OEbkUq4G8t3Qio9Ww82EwPxKs\n\
M8G7Nn7q1E7RDjQ29J7kZa98gQHfP+suuKFBsoXDMxYII8DJUe0cTw==\n\
-----END RSA PRIVATE KEY-----\n";

const REPO: &str = "acme/widgets";
const OTHER_REPO: &str = "acme/gadgets";
const INSTALLATION: u64 = 77;

/// A client of the fake that sends the same credentials (or none) with each request.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    /// The fake's URL, which a path is relative to.
    base: String,
    auth: Option<String>,
}

impl Client {
    /// A client without credentials.
    fn anonymous(fake: &FakeGithub) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: fake.url(),
            auth: None,
        }
    }

    /// A client that sends `auth` as its `Authorization`.
    fn with(fake: &FakeGithub, auth: &str) -> Client {
        Client {
            auth: Some(auth.to_owned()),
            ..Client::anonymous(fake)
        }
    }

    /// The App itself: a JWT the fake accepts.
    fn app(fake: &FakeGithub) -> Client {
        Client::with(fake, &format!("Bearer {}", fake.app_jwt()))
    }

    /// The same client over `http` (one with a timeout, say).
    fn over(self, http: reqwest::Client) -> Client {
        Client { http, ..self }
    }

    /// `method` of `path` (below the fake's URL, or a whole URL), with `body` as JSON.
    async fn try_send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Answer, reqwest::Error> {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self
            .http
            .request(method, url)
            // Without one the fake, like GitHub, answers 403.
            .header("user-agent", "fake-github-tests")
            .header("accept", "application/vnd.github+json");
        if let Some(auth) = &self.auth {
            request = request.header("authorization", auth);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).expect("json"));
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        self.try_send(method, path, body)
            .await
            .expect("the fake answers")
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send("POST", path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send("DELETE", path, None).await
    }

    /// Mints an installation token through the API, with `body`; a client that sends it.
    async fn mint(&self, body: Option<Value>) -> Client {
        let answer = self.send("POST", &tokens_path(INSTALLATION), body).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        let token = answer.body["token"].as_str().expect("a token");
        Client {
            auth: Some(format!("token {token}")),
            ..self.clone()
        }
    }
}

fn jwt_with(claims: &Value) -> String {
    format!("Bearer {}", sign_test_jwt(claims))
}

fn now_secs() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.expect("the clock is past 1970").as_secs() as i64
}

/// A fake with `acme/widgets` and `acme/gadgets`, both under installation 77.
async fn fake_with_repos() -> FakeGithub {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO);
    fake.add_repo(OTHER_REPO);
    fake.install(REPO, INSTALLATION);
    fake.install(OTHER_REPO, INSTALLATION);
    fake
}

/// `fake_with_repos` and a client holding an unnarrowed installation token.
async fn fake_and_token() -> (FakeGithub, Client) {
    let fake = fake_with_repos().await;
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    (fake, token)
}

/// `/repos/{repo}{rest}`.
fn repo(repo: &str, rest: &str) -> String {
    format!("/repos/{repo}{rest}")
}

fn tokens_path(installation: u64) -> String {
    format!("/app/installations/{installation}/access_tokens")
}

/// The ref-creating body for branch `name` at `sha`.
fn new_ref(name: &str, sha: &str) -> Value {
    json!({"ref": format!("refs/heads/{name}"), "sha": sha})
}

#[tokio::test]
async fn a_jwt_signed_with_another_key_is_refused() {
    let fake = fake_with_repos().await;
    let now = now_secs();
    let claims = json!({"iat": now - 60, "exp": now + 540, "iss": fake.app_id()});
    let forged = sign_jwt_with(OTHER_TEST_ONLY_KEY_PEM, &claims);
    let answer = Client::with(&fake, &format!("Bearer {forged}"))
        .get("/app")
        .await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.message(), "A JSON web token could not be decoded");

    // The public key used as an HMAC secret (algorithm confusion) is no better.
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let hmac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, TEST_APP_PUBLIC_KEY_PEM.as_bytes());
    let tag = ring::hmac::sign(&hmac, signed.as_bytes());
    let confused = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag));
    let answer = Client::with(&fake, &format!("Bearer {confused}"))
        .get(&repo(REPO, "/installation"))
        .await;
    assert_eq!(answer.status, 401);
    assert!(fake.jwt_requests().is_empty());
    assert_eq!(
        fake.requests()[0].auth,
        Auth::Rejected(answer.message().to_owned())
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_request_without_a_user_agent_is_refused_and_headers_are_recorded() {
    let fake = fake_with_repos().await;
    let jwt = format!("Bearer {}", fake.app_jwt());
    let bare = reqwest::Client::new()
        .get(format!("{}/app", fake.url()))
        .header("authorization", &jwt)
        .send()
        .await
        .expect("the fake answers");
    assert_eq!(bare.status().as_u16(), 403);
    assert!(bare.text().await.unwrap().contains("User-Agent"));
    let answer = Client::app(&fake).get("/app").await;
    assert_eq!(answer.status, 200);
    let requests = fake.requests();
    assert_eq!(requests[0].status, Some(403));
    assert_eq!(requests[0].header("user-agent"), None);
    assert_eq!(requests[1].header("User-Agent"), Some("fake-github-tests"));
    assert_eq!(
        requests[1].header_values("accept"),
        ["application/vnd.github+json"]
    );
    assert_eq!(
        requests[1].header("authorization"),
        None,
        "the credential is not recorded"
    );
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_jwt_whose_exp_is_twenty_minutes_ahead_is_refused() {
    let fake = fake_with_repos().await;
    let now = now_secs();
    let id = json!(fake.app_id());
    let too_long = "'Expiration time' claim ('exp') is too far in the future";
    for (claims, message) in [
        (
            json!({"iat": now, "exp": now + 20 * 60, "iss": id}),
            Some(too_long),
        ),
        // Expired, issued in the future, issued by another App.
        (json!({"iat": now - 700, "exp": now - 100, "iss": id}), None),
        (json!({"iat": now + 300, "exp": now + 500, "iss": id}), None),
        (json!({"iat": now - 60, "exp": now + 540, "iss": 1}), None),
    ] {
        let answer = Client::with(&fake, &jwt_with(&claims)).get("/app").await;
        assert_eq!(answer.status, 401, "{claims}");
        if let Some(message) = message {
            assert_eq!(answer.message(), message);
        }
    }
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_valid_jwt_reads_the_app_with_a_numeric_or_string_issuer() {
    let fake = fake_with_repos().await;
    fake.set_app_id(123456);
    let now = now_secs();
    for iss in [json!(123456), json!("123456"), json!(fake.client_id())] {
        let jwt = jwt_with(&json!({"iat": now - 60, "exp": now + 540, "iss": iss}));
        let answer = Client::with(&fake, &jwt).get("/app").await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        assert_eq!(answer.body["id"], 123456);
        assert_eq!(answer.body["slug"], "rowbranch-test");
    }
    // An installation token is not a JWT.
    let token = fake.issue_token(INSTALLATION, None);
    let answer = Client::with(&fake, &format!("token {token}"))
        .get("/app")
        .await;
    assert_eq!(answer.status, 401);
    assert_eq!(fake.jwt_requests().len(), 3);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_account_is_a_user_an_organization_or_the_apps_bot_and_others_404() {
    let fake = fake_with_repos().await;
    fake.add_account("octo-cat", "User");
    fake.add_account("Big-Org", "Organization");
    // No credentials needed: the endpoint is public.
    let anyone = Client::anonymous(&fake);
    for (login, kind, canonical) in [
        ("octo-cat", "User", "octo-cat"),
        ("OCTO-CAT", "User", "octo-cat"),
        ("big-org", "Organization", "Big-Org"),
        // The owner of a repository that was not added as an account is an organization.
        ("acme", "Organization", "acme"),
        ("rowbranch-test[bot]", "Bot", "rowbranch-test[bot]"),
    ] {
        let answer = anyone.get(&format!("/users/{login}")).await;
        assert_eq!(answer.status, 200, "{login}: {:?}", answer.body);
        assert_eq!(answer.body["type"], kind, "{login}");
        assert_eq!(answer.body["login"], canonical, "{login}");
    }
    let answer = anyone.get("/users/nobody-here").await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.message(), "Not Found");
    assert_eq!(
        answer.body["documentation_url"],
        "https://docs.github.com/rest/users/users#get-a-user"
    );

    // The repository's owner and the installation's account carry the same type.
    fake.add_account("acme", "User");
    let answer = Client::app(&fake).get(&repo(REPO, "/installation")).await;
    assert_eq!(answer.body["account"]["type"], "User");
    assert_eq!(answer.body["target_type"], "User");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_manifest_code_for_a_renamed_app_gives_that_slug_then_and_afterwards() {
    let fake = fake_with_repos().await;
    fake.add_manifest_code_for_app("code-1", "Rowbranch Acme 2", "rowbranch-acme-2");
    let anyone = Client::anonymous(&fake);
    let conversion = "/app-manifests/code-1/conversions";
    let answer = anyone.send("POST", conversion, None).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_eq!(answer.body["slug"], "rowbranch-acme-2");
    assert_eq!(answer.body["name"], "Rowbranch Acme 2");
    assert_eq!(answer.body["id"], fake.app_id());
    assert!(answer.body["pem"].as_str().unwrap().contains("PRIVATE KEY"));
    // The code works once.
    assert_eq!(anyone.send("POST", conversion, None).await.status, 404);
    // The App keeps that slug, and its bot is found by it.
    let app = Client::app(&fake).get("/app").await;
    assert_eq!(app.body["slug"], "rowbranch-acme-2");
    assert_eq!(fake.app_slug(), "rowbranch-acme-2");
    let bot = anyone.get("/users/rowbranch-acme-2[bot]").await;
    assert_eq!(bot.body["type"], "Bot");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn the_repository_installation_is_found_or_404s_when_the_app_is_not_installed() {
    let fake = fake_with_repos().await;
    fake.add_repo("acme/elsewhere");
    let app = Client::app(&fake);
    let answer = app.get(&repo(REPO, "/installation")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["id"], INSTALLATION);
    assert_eq!(answer.body["account"]["login"], "acme");
    assert_eq!(answer.body["permissions"]["contents"], "write");
    assert_eq!(answer.body["repository_selection"], "selected");
    let elsewhere = app.get(&repo("acme/elsewhere", "/installation")).await;
    assert_eq!(elsewhere.status, 404);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_installation_on_all_repositories_covers_the_owners_repositories_added_later() {
    let fake = FakeGithub::start().await;
    fake.install_on_all_repositories("acme", INSTALLATION);
    fake.add_repo(REPO);
    fake.add_repo(OTHER_REPO);
    fake.add_repo("elsewhere/tools");
    let app = Client::app(&fake);
    let found = app.get(&repo(REPO, "/installation")).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.body["id"], INSTALLATION);
    assert_eq!(found.body["repository_selection"], "all");
    let other_owner = app.get(&repo("elsewhere/tools", "/installation")).await;
    assert_eq!(other_owner.status, 404);

    // Unnarrowed, a token reaches every repository of the owner and says "all".
    let wide = app.send("POST", &tokens_path(INSTALLATION), None).await;
    assert_eq!(wide.status, 201);
    assert_eq!(wide.body["repository_selection"], "all");
    let wide = Client::with(
        &fake,
        &format!("token {}", wide.body["token"].as_str().expect("a token")),
    );
    for (name, status) in [(REPO, 200), (OTHER_REPO, 200), ("elsewhere/tools", 404)] {
        assert_eq!(wide.get(&repo(name, "")).await.status, status, "{name}");
    }
    // Narrowed to one, it says "selected" and reaches only that one.
    let body = json!({"repositories": ["widgets"]});
    let narrow = app.post(&tokens_path(INSTALLATION), body).await;
    assert_eq!(narrow.status, 201);
    assert_eq!(narrow.body["repository_selection"], "selected");
    assert_eq!(narrow.body["repositories"][0]["full_name"], REPO);
    let narrow = Client::with(
        &fake,
        &format!("token {}", narrow.body["token"].as_str().expect("a token")),
    );
    assert_eq!(narrow.get(&repo(REPO, "")).await.status, 200);
    assert_eq!(narrow.get(&repo(OTHER_REPO, "")).await.status, 404);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_minted_token_works_on_its_repository_and_404s_on_another_when_narrowed() {
    let fake = fake_with_repos().await;
    let app = Client::app(&fake);
    let narrowed = json!({"repositories": ["widgets"]});
    let answer = app.post(&tokens_path(INSTALLATION), narrowed).await;
    assert_eq!(answer.status, 201);
    let token = answer.body["token"].as_str().expect("token");
    assert!(token.starts_with("ghs_"));
    assert_eq!(answer.body["repository_selection"], "selected");
    let expires = answer.body["expires_at"].as_str().expect("expires_at");
    assert_eq!(expires.len(), "2026-12-02T13:00:00Z".len());
    assert!(expires.ends_with('Z'));
    assert_eq!(fake.token_mints(), 1);
    let minted = fake.tokens();
    assert_eq!(minted[0].installation_id, INSTALLATION);
    assert_eq!(minted[0].repositories.as_ref().map(|r| r.len()), Some(1));

    for scheme in ["token", "Bearer"] {
        let client = Client::with(&fake, &format!("{scheme} {token}"));
        let own = client.get(&repo(REPO, "")).await;
        assert_eq!(own.status, 200);
        assert_eq!(own.body["full_name"], REPO);
        assert_eq!(own.body["default_branch"], "main");
        assert_eq!(own.body["private"], true);
        let other = client.get(&repo(OTHER_REPO, "")).await;
        assert_eq!(other.status, 404);
        assert_eq!(other.message(), "Not Found");
    }

    // Unnarrowed, the same installation reaches both; an unknown installation is 404.
    let wide = app.mint(Some(json!({}))).await;
    assert_eq!(wide.get(&repo(OTHER_REPO, "")).await.status, 200);
    let unknown = app.send("POST", &tokens_path(999), None).await;
    assert_eq!(unknown.status, 404);
    // Narrowing to a repository outside the installation is refused.
    fake.add_repo("acme/private-stuff");
    let outside = json!({"repositories": ["private-stuff"]});
    let answer = app.post(&tokens_path(INSTALLATION), outside).await;
    assert_eq!(answer.status, 422);
    assert_eq!(fake.token_mints(), 2);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn without_credentials_a_private_repository_is_404_for_reads_and_writes() {
    let fake = fake_with_repos().await;
    let anyone = Client::anonymous(&fake);
    let read = anyone.get(&repo(REPO, "")).await;
    assert_eq!((read.status, read.message()), (404, "Not Found"));
    let dispatch = json!({"event_type": "go"});
    let write = anyone.post(&repo(REPO, "/dispatches"), dispatch).await;
    assert_eq!((write.status, write.message()), (404, "Not Found"));
    assert!(fake.dispatches(REPO).is_empty());
    let log = fake.requests();
    assert!(log.iter().all(|r| r.auth == Auth::Anonymous), "{log:?}");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_expired_token_gets_401_bad_credentials() {
    let (fake, token) = fake_and_token().await;
    let main = repo(REPO, "/git/ref/heads/main");
    assert_eq!(token.get(&main).await.status, 200);
    fake.expire_tokens();
    let answer = token.get(&main).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.message(), "Bad credentials");
    let unknown = Client::with(&fake, "token ghs_nonsense").get(&main).await;
    assert_eq!(unknown.status, 401);

    // A short lifetime runs out by itself.
    fake.set_token_ttl(Duration::from_millis(300));
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    assert_eq!(token.get(&main).await.status, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(token.get(&main).await.status, 401);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_missing_permission_gets_403_resource_not_accessible() {
    let fake = fake_with_repos().await;
    fake.set_installation_permissions(INSTALLATION, &[("contents", "read")]);
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let answer = token
        .post(&repo(REPO, "/git/refs"), new_ref("x", &sha))
        .await;
    assert_eq!(answer.status, 403);
    assert_eq!(answer.message(), "Resource not accessible by integration");
    assert_eq!(
        answer.header("x-accepted-github-permissions"),
        Some("contents=write")
    );
    assert_eq!(token.get(&repo(REPO, "/pulls")).await.status, 403);
    let main = repo(REPO, "/git/ref/heads/main");
    assert_eq!(token.get(&main).await.status, 200);
    assert_eq!(fake.refs(REPO), vec!["main"]);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn creating_a_ref_twice_gives_201_then_422_reference_already_exists() {
    let (fake, token) = fake_and_token().await;
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let refs = repo(REPO, "/git/refs");
    let body = new_ref("feedback/42", &sha);
    let first = token.post(&refs, body.clone()).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body["ref"], "refs/heads/feedback/42");
    assert_eq!(first.body["object"]["sha"], sha.as_str());
    assert_eq!(first.body["object"]["type"], "commit");
    let second = token.post(&refs, body).await;
    assert_eq!(second.status, 422);
    assert_eq!(second.message(), "Reference already exists");
    assert_eq!(fake.refs(REPO), vec!["feedback/42", "main"]);
    assert_eq!(fake.writes().len(), 2);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn of_fifty_concurrent_creates_exactly_one_gets_201() {
    let (fake, token) = fake_and_token().await;
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (token, body) = (token.clone(), new_ref("race", &sha));
        set.spawn(async move { token.post(&repo(REPO, "/git/refs"), body).await.status });
    }
    let statuses = set.join_all().await;
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == 422).count(), 49);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn create_ref_refuses_an_unknown_sha_a_bad_name_and_an_empty_repository() {
    let fake = fake_with_repos().await;
    fake.add_empty_repo("acme/empty");
    fake.install("acme/empty", INSTALLATION);
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let unknown = "0123456789012345678901234567890123456789";
    for (target, body, status, message) in [
        (REPO, new_ref("x", unknown), 422, "Object does not exist"),
        (
            REPO,
            json!({"ref": "heads/x", "sha": sha}),
            422,
            "heads/x is not a valid ref name.",
        ),
        (
            "acme/empty",
            new_ref("x", &sha),
            409,
            "Git Repository is empty.",
        ),
    ] {
        let answer = token.post(&repo(target, "/git/refs"), body).await;
        assert_eq!((answer.status, answer.message()), (status, message));
    }
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn get_ref_is_an_exact_match_and_delete_ref_gives_204_then_422() {
    let (fake, token) = fake_and_token().await;
    fake.create_branch(REPO, "feedback/420-x", "main");
    let missing = token.get(&repo(REPO, "/git/ref/heads/feedback/42")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.message(), "Not Found");
    assert!(missing.body["documentation_url"].is_string());
    let found = token
        .get(&repo(REPO, "/git/ref/heads/feedback/420-x"))
        .await;
    assert_eq!(found.status, 200);
    assert_eq!(found.body["ref"], "refs/heads/feedback/420-x");

    let branch = repo(REPO, "/git/refs/heads/feedback/420-x");
    let deleted = token.delete(&branch).await;
    assert_eq!(deleted.status, 204);
    assert_eq!(deleted.body, Value::String(String::new()));
    let again = token.delete(&branch).await;
    assert_eq!(
        (again.status, again.message()),
        (422, "Reference does not exist")
    );
    assert_eq!(fake.refs(REPO), vec!["main"]);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_default_branch_other_than_main_is_reported_read_from_and_not_deletable() {
    let (fake, token) = fake_and_token().await;
    let main = fake.branch_sha(REPO, "main").expect("main");
    fake.create_branch(REPO, "trunk", "main");
    fake.set_default_branch(REPO, "trunk");
    let answer = token.get(&repo(REPO, "")).await;
    assert_eq!(answer.body["default_branch"], "trunk");

    // Workflows land on the default branch, contents are read from it, pulls go into it.
    let trunk = fake.add_workflow(REPO, "rowbranch.yml", "name: rowbranch\n");
    assert_eq!(fake.branch_sha(REPO, "trunk"), Some(trunk.clone()));
    assert_eq!(fake.branch_sha(REPO, "main"), Some(main));
    let path = "/contents/.github/workflows/rowbranch.yml";
    assert_eq!(token.get(&repo(REPO, path)).await.status, 200);
    let on_main = repo(REPO, &format!("{path}?ref=main"));
    assert_eq!(token.get(&on_main).await.status, 404);
    fake.add_pull(REPO, "feedback/1", PullState::Open, false);
    let pulls = token.get(&repo(REPO, "/pulls")).await;
    assert_eq!(pulls.body[0]["base"]["ref"], "trunk");
    assert_eq!(pulls.body[0]["base"]["sha"], trunk.as_str());

    // The default branch cannot be deleted; `main` now can.
    for (branch, status) in [("trunk", 422), ("main", 204)] {
        let answer = token
            .delete(&repo(REPO, &format!("/git/refs/heads/{branch}")))
            .await;
        assert_eq!(answer.status, status, "{branch}");
    }
    assert_eq!(fake.refs(REPO), vec!["trunk"]);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn matching_refs_for_prefix_42_returns_42_and_420_x() {
    let (fake, token) = fake_and_token().await;
    for b in ["feedback/42", "feedback/420-x", "feedback/5", "other/42"] {
        fake.create_branch(REPO, b, "main");
    }
    let path = repo(REPO, "/git/matching-refs/heads/feedback/42?per_page=1");
    let answer = token.get(&path).await;
    assert_eq!(answer.status, 200);
    let names: Vec<&str> = answer
        .list()
        .iter()
        .map(|r| r["ref"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        vec!["refs/heads/feedback/42", "refs/heads/feedback/420-x"]
    );
    let none = token
        .get(&repo(REPO, "/git/matching-refs/heads/nothing"))
        .await;
    assert_eq!((none.status, none.body.clone()), (200, json!([])));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn pulls_with_a_head_without_owner_return_every_pull_while_owner_head_filters() {
    let (fake, token) = fake_and_token().await;
    fake.create_branch(REPO, "feedback/1", "main");
    let one = fake.add_pull(REPO, "feedback/1", PullState::Closed, true);
    fake.add_pull(REPO, "feedback/2", PullState::Open, false);
    fake.add_pull(REPO, "feedback/10", PullState::Closed, false);

    let all = token
        .get(&repo(REPO, "/pulls?head=feedback/1&state=all"))
        .await;
    assert_eq!(all.list().len(), 3);

    let filtered = token
        .get(&repo(REPO, "/pulls?head=acme:feedback/1&state=all"))
        .await;
    let list = filtered.list();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["number"], one);
    assert_eq!(list[0]["state"], "closed");
    assert!(list[0]["merged_at"].is_string());
    assert_eq!(list[0]["head"]["label"], "acme:feedback/1");
    assert_eq!(list[0]["head"]["ref"], "feedback/1");
    assert_eq!(list[0]["base"]["ref"], "main");

    // `state` defaults to open.
    let open = token.get(&repo(REPO, "/pulls")).await;
    assert_eq!(open.list().len(), 1);
    assert_eq!(open.body[0]["merged_at"], Value::Null);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_pull_request_merged_later_stays_listed_after_someone_deletes_its_branch() {
    let (fake, token) = fake_and_token().await;
    fake.create_branch(REPO, "feedback/3", "main");
    let head = fake.push_commit(REPO, "feedback/3");
    let number = fake.add_pull(REPO, "feedback/3", PullState::Open, false);
    fake.set_pull_state(REPO, number, PullState::Closed, true);
    fake.delete_branch(REPO, "feedback/3");
    assert_eq!(fake.refs(REPO), vec!["main"]);
    let gone = token.get(&repo(REPO, "/git/ref/heads/feedback/3")).await;
    assert_eq!(gone.status, 404);

    let listed = token
        .get(&repo(REPO, "/pulls?head=acme:feedback/3&state=all"))
        .await;
    let list = listed.list();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["number"], number);
    assert_eq!(list[0]["state"], "closed");
    assert!(list[0]["merged_at"].is_string());
    assert!(list[0]["closed_at"].is_string());
    assert_eq!(list[0]["head"]["ref"], "feedback/3");
    assert_eq!(list[0]["head"]["sha"], head.as_str());
    let open = repo(REPO, "/pulls");
    assert_eq!(token.get(&open).await.body, json!([]));
    let pulls = fake.pulls(REPO);
    assert_eq!(pulls[0].state, PullState::Closed);
    assert!(pulls[0].merged_at.is_some());
    assert_eq!(pulls[0].closed_at, pulls[0].merged_at);
    assert!(pulls[0].updated_at >= pulls[0].created_at);

    // Reopened, it is open and unmerged again.
    fake.set_pull_state(REPO, number, PullState::Open, false);
    let reopened = token.get(&open).await;
    assert_eq!(reopened.body[0]["number"], number);
    assert_eq!(reopened.body[0]["merged_at"], Value::Null);
    assert_eq!(reopened.body[0]["closed_at"], Value::Null);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn listing_pulls_paginates_with_an_absolute_link_header() {
    let (fake, token) = fake_and_token().await;
    for i in 0..5 {
        fake.add_pull(REPO, &format!("b/{i}"), PullState::Open, false);
    }
    let mut url = repo(REPO, "/pulls?state=all&per_page=2");
    let mut numbers = Vec::new();
    let mut pages = 0;
    loop {
        let answer = token.get(&url).await;
        assert_eq!(answer.status, 200);
        pages += 1;
        numbers.extend(
            answer
                .list()
                .iter()
                .map(|p| p["number"].as_u64().unwrap_or(0)),
        );
        let Some(link) = answer.header("link") else {
            break;
        };
        let next = link.split(", ").find(|l| l.ends_with("rel=\"next\""));
        let Some(next) = next else { break };
        let target = next.split(['<', '>']).nth(1).expect("<url>").to_owned();
        assert!(target.starts_with(&fake.url()), "{target}");
        url = target;
    }
    assert_eq!(pages, 3);
    assert_eq!(numbers, vec![5, 4, 3, 2, 1], "newest first");
    let big = token
        .get(&repo(REPO, "/pulls?state=all&per_page=500"))
        .await;
    assert_eq!(big.list().len(), 5);
    assert!(big.header("link").is_none());
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn compare_after_push_commit_is_ahead_by_one() {
    let (fake, token) = fake_and_token().await;
    fake.create_branch(REPO, "feedback/7", "main");
    let compare = repo(REPO, "/compare/main...feedback/7");
    let same = token.get(&compare).await;
    assert_eq!(same.body["status"], "identical");
    fake.push_commit(REPO, "feedback/7");
    let ahead = token.get(&compare).await;
    assert_eq!(ahead.status, 200);
    assert_eq!(ahead.body["status"], "ahead");
    assert_eq!(ahead.body["ahead_by"], 1);
    assert_eq!(ahead.body["behind_by"], 0);
    assert_eq!(ahead.body["total_commits"], 1);
    fake.push_commit(REPO, "main");
    let diverged = token.get(&compare).await;
    assert_eq!(diverged.body["status"], "diverged");
    assert_eq!(diverged.body["behind_by"], 1);
    let reverse = token.get(&repo(REPO, "/compare/feedback/7...main")).await;
    assert_eq!(
        (
            reverse.body["ahead_by"].clone(),
            reverse.body["behind_by"].clone()
        ),
        (json!(1), json!(1))
    );
    let unknown = token.get(&repo(REPO, "/compare/main...nope")).await;
    assert_eq!(unknown.status, 404);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_dispatch_with_eleven_payload_keys_is_422_and_a_valid_one_is_recorded() {
    let (fake, token) = fake_and_token().await;
    let dispatches = repo(REPO, "/dispatches");
    let eleven: serde_json::Map<String, Value> =
        (0..11).map(|i| (format!("k{i}"), json!(i))).collect();
    let answer = token
        .post(
            &dispatches,
            json!({"event_type": "go", "client_payload": eleven}),
        )
        .await;
    assert_eq!(answer.status, 422);
    assert!(
        answer.message().contains("No more than 10 properties"),
        "{}",
        answer.message()
    );
    for bad in [
        json!({"client_payload": {}}),
        json!({"event_type": ""}),
        json!({"event_type": "x".repeat(101)}),
        json!({"event_type": "go", "client_payload": "text"}),
        json!({"event_type": "go", "client_payload": {"big": "y".repeat(70_000)}}),
    ] {
        assert_eq!(token.post(&dispatches, bad).await.status, 422);
    }
    assert!(fake.dispatches(REPO).is_empty());

    let good = json!({"event_type": "rowbranch", "client_payload": {"branch": "feedback/1"}});
    assert_eq!(token.post(&dispatches, good).await.status, 204);
    let dispatched = fake.dispatches(REPO);
    assert_eq!(dispatched.len(), 1);
    assert_eq!(dispatched[0].event_type, "rowbranch");
    assert_eq!(
        dispatched[0].client_payload,
        json!({"branch": "feedback/1"})
    );
    assert_eq!(dispatched[0].installation_id, Some(INSTALLATION));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_applied_then_502_on_create_ref_leaves_the_ref_created() {
    let (fake, token) = fake_and_token().await;
    fake.inject(Op::CreateRef, Fault::AppliedThen(502), 1);
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let refs = repo(REPO, "/git/refs");
    let body = new_ref("feedback/9", &sha);
    let answer = token.post(&refs, body.clone()).await;
    assert_eq!(answer.status, 502);
    assert!(answer
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/html"));
    assert_eq!(fake.branch_sha(REPO, "feedback/9"), Some(sha));
    let again = token.post(&refs, body).await;
    assert_eq!(
        (again.status, again.message()),
        (422, "Reference already exists")
    );
    assert_eq!(fake.pending_faults(), 0);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn drop_after_apply_closes_the_connection_without_an_answer_but_applies() {
    let (fake, token) = fake_and_token().await;
    fake.inject(Op::Dispatch, Fault::DropAfterApply, 1);
    fake.inject(Op::CreateRef, Fault::DropBeforeApply, 1);
    let dispatch = Some(json!({"event_type": "go"}));
    let result = token
        .try_send("POST", &repo(REPO, "/dispatches"), dispatch)
        .await;
    assert!(result.is_err(), "no answer expected");
    assert_eq!(fake.dispatches(REPO).len(), 1, "applied all the same");
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let create = Some(new_ref("lost", &sha));
    let result = token
        .try_send("POST", &repo(REPO, "/git/refs"), create)
        .await;
    assert!(result.is_err(), "no answer expected");
    assert_eq!(fake.refs(REPO), vec!["main"], "not applied");

    let writes = fake.writes();
    assert_eq!(writes.len(), 2, "sent once each, not retried");
    assert!(writes.iter().all(|w| w.dropped && w.status.is_none()));
    // The server goes on answering on fresh connections.
    let answer = token.get(&repo(REPO, "/git/ref/heads/main")).await;
    assert_eq!(answer.status, 200);
    fake.assert_no_unexpected();
}

#[tokio::test(start_paused = true)]
async fn delay_after_apply_applies_at_once_and_answers_late() {
    let (fake, token) = fake_and_token().await;
    let sha = fake.branch_sha(REPO, "main").expect("main");
    let refs = repo(REPO, "/git/refs");
    let fault = Fault::DelayAfterApply(Duration::from_secs(60));
    fake.inject(Op::CreateRef, fault.clone(), 2);
    let started = tokio::time::Instant::now();
    let pending = {
        let (token, refs, body) = (token.clone(), refs.clone(), new_ref("feedback/8", &sha));
        tokio::spawn(async move { token.post(&refs, body).await })
    };
    for _ in 0..1000 {
        if fake.branch_sha(REPO, "feedback/8").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.branch_sha(REPO, "feedback/8"), Some(sha.clone()));
    assert!(!pending.is_finished(), "answered before the delay ran out");
    let answer = pending.await.expect("join");
    assert_eq!(answer.status, 201);
    assert!(started.elapsed() >= Duration::from_secs(60));

    // A client that gives up sooner gets no answer; the ref is created all the same.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a client");
    let body = Some(new_ref("feedback/9", &sha));
    let result = token.over(impatient).try_send("POST", &refs, body).await;
    assert!(result.is_err(), "no answer within the client's timeout");
    assert_eq!(fake.branch_sha(REPO, "feedback/9"), Some(sha));
    let log = fake.requests_for(Op::CreateRef);
    assert!(log.iter().all(|r| r.fault == Some(fault.clone())));
    assert_eq!(fake.pending_faults(), 0);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn rate_limit_faults_answer_like_github() {
    let (fake, token) = fake_and_token().await;
    let main = repo(REPO, "/git/ref/heads/main");
    for fault in [
        Fault::SecondaryRateLimit {
            retry_after_secs: 7,
        },
        Fault::PrimaryRateLimit { reset_in_secs: 30 },
        Fault::TooManyRequests {
            retry_after_secs: 3,
        },
        Fault::Status(500),
        Fault::Unprocessable("Reference update failed".into()),
    ] {
        fake.inject(Op::GetRef, fault, 1);
    }

    let secondary = token.get(&main).await;
    assert_eq!(secondary.status, 403);
    assert!(secondary
        .message()
        .starts_with("You have exceeded a secondary rate limit"));
    assert_eq!(secondary.header("retry-after"), Some("7"));
    let primary = token.get(&main).await;
    assert_eq!(primary.status, 403);
    assert!(primary.message().starts_with(&format!(
        "API rate limit exceeded for installation ID {INSTALLATION}"
    )));
    assert_eq!(primary.header("x-ratelimit-remaining"), Some("0"));
    let reset: i64 = primary
        .header("x-ratelimit-reset")
        .and_then(|v| v.parse().ok())
        .expect("reset");
    assert!((reset - now_secs() - 30).abs() <= 2);
    let too_many = token.get(&main).await;
    assert_eq!(
        (too_many.status, too_many.header("retry-after")),
        (429, Some("3"))
    );
    let server = token.get(&main).await;
    assert_eq!((server.status, server.message()), (500, "Server Error"));
    let failed = token.get(&main).await;
    assert_eq!(
        (failed.status, failed.message()),
        (422, "Reference update failed")
    );
    assert_eq!(token.get(&main).await.status, 200);
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn rate_limit_headers_count_down_per_installation_and_run_out() {
    let fake = fake_with_repos().await;
    fake.set_rate_limit(3);
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let answer = token.get(&repo(REPO, "")).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("x-ratelimit-limit"), Some("3"));
        assert!(answer
            .header("x-ratelimit-reset")
            .and_then(|v| v.parse::<i64>().ok())
            .is_some());
        let left = answer.header("x-ratelimit-remaining").unwrap_or("");
        remaining.push(left.to_owned());
    }
    assert_eq!(remaining, vec!["2", "1", "0"]);
    let refused = token.get(&repo(REPO, "")).await;
    assert_eq!(refused.status, 403);
    assert!(refused.message().starts_with("API rate limit exceeded"));
    // Other answers carry the headers too.
    let unexpected = Client::anonymous(&fake).get("/x").await;
    assert!(unexpected.header("x-ratelimit-remaining").is_some());
    fake.with_state(|s| s.unexpected.clear());
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_delayed_request_does_not_hold_up_others() {
    let (fake, token) = fake_and_token().await;
    fake.inject(Op::GetRef, Fault::Delay(Duration::from_millis(600)), 1);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let slow = {
        let (token, order) = (token.clone(), order.clone());
        tokio::spawn(async move {
            let status = token.get(&repo(REPO, "/git/ref/heads/main")).await.status;
            order.lock().expect("lock").push("slow");
            status
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    let quick = token.get(&repo(REPO, "")).await;
    order.lock().expect("lock").push("quick");
    assert_eq!(quick.status, 200);
    assert_eq!(slow.await.expect("join"), 200);
    assert_eq!(*order.lock().expect("lock"), vec!["quick", "slow"]);
    assert!(started.elapsed() < Duration::from_millis(600));
    let log = fake.requests_for(Op::GetRef);
    assert_eq!(log[0].fault, Some(Fault::Delay(Duration::from_millis(600))));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn contents_list_the_workflows_directory_and_return_files_in_wrapped_base64() {
    let (fake, token) = fake_and_token().await;
    let yaml = format!(
        "name: rowbranch\non:\n  repository_dispatch:\n{}",
        "# padding\n".repeat(20)
    );
    fake.add_workflow(REPO, "rowbranch.yml", &yaml);
    fake.add_workflow(REPO, ".github/workflows/ci.yml", "name: ci\n");
    let dir = token.get(&repo(REPO, "/contents/.github/workflows")).await;
    assert_eq!(dir.status, 200);
    let names: Vec<&str> = dir
        .list()
        .iter()
        .map(|e| e["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, vec!["ci.yml", "rowbranch.yml"]);
    assert_eq!(dir.body[1]["type"], "file");
    assert_eq!(dir.body[1]["path"], ".github/workflows/rowbranch.yml");

    let path = "/contents/.github/workflows/rowbranch.yml?ref=main";
    let file = token.get(&repo(REPO, path)).await;
    assert_eq!(file.body["encoding"], "base64");
    let content = file.body["content"].as_str().expect("content");
    assert!(content.lines().all(|l| l.len() <= 60));
    assert!(content.lines().count() > 1);
    let decoded = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        content.replace('\n', ""),
    )
    .expect("base64");
    assert_eq!(decoded, yaml.as_bytes());
    let missing = token.get(&repo(REPO, "/contents/nope.yml")).await;
    assert_eq!(missing.status, 404);
    let before = fake.create_branch(REPO, "old", "main");
    assert_eq!(fake.branch_sha(REPO, "old"), Some(before));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_unexpected_request_is_answered_501_and_recorded() {
    let fake = fake_with_repos().await;
    let answer = Client::anonymous(&fake).get("/x").await;
    assert_eq!(answer.status, 501);
    assert_eq!(answer.message(), "fake GitHub: unexpected request GET /x");
    assert_eq!(fake.unexpected(), vec!["GET /x"]);
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fake.assert_no_unexpected()));
    assert!(result.is_err());
}

#[tokio::test]
#[should_panic(expected = "unexpected request")]
async fn assert_no_unexpected_panics_after_an_unexpected_request() {
    let (fake, token) = fake_and_token().await;
    token.send("PUT", &repo(REPO, "/git/refs"), None).await;
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_path_prefix_is_served_like_github_enterprise() {
    let fake = FakeGithub::start_with_path_prefix("/api/v3").await;
    fake.add_repo(REPO);
    fake.install(REPO, INSTALLATION);
    assert!(fake.url().ends_with("/api/v3"));
    let token = Client::app(&fake).mint(Some(json!({}))).await;
    assert_eq!(token.get(&repo(REPO, "")).await.status, 200);
    let root = fake.url().trim_end_matches("/api/v3").to_owned();
    let outside = token.get(&format!("{root}/repos/{REPO}")).await;
    assert_eq!(outside.status, 501);
    assert_eq!(fake.unexpected().len(), 1);
}

#[tokio::test]
async fn octocrab_reads_and_writes_through_the_fake() {
    use octocrab::models::repos::Object;
    use octocrab::params::repos::Reference;

    let fake = fake_with_repos().await;
    fake.add_workflow(REPO, "rowbranch.yml", "name: rowbranch\n");
    fake.add_pull(REPO, "feedback/1", PullState::Closed, true);
    // The App's JWT as rowbranch signs it, and a token minted with it, as octocrab sends them.
    let app = octocrab::Octocrab::builder()
        .base_uri(fake.url())
        .expect("uri")
        .user_access_token(fake.app_jwt())
        .build()
        .expect("client");
    let me = app.current().app().await.expect("GET /app");
    assert_eq!(me.slug.as_deref(), Some("rowbranch-test"));
    let installation = app
        .apps()
        .get_repository_installation("acme", "widgets")
        .await
        .expect("installation");
    assert_eq!(installation.id.0, INSTALLATION);
    let minted: Value = app
        .post(tokens_path(installation.id.0), Some(&json!({})))
        .await
        .expect("a token");
    let gh = app
        .user_access_token(minted["token"].as_str().expect("a token").to_owned())
        .expect("installation client");
    let repos = gh.repos("acme", "widgets");
    let repo = repos.get().await.expect("repo");
    assert_eq!(repo.default_branch.as_deref(), Some("main"));
    let main = repos
        .get_ref(&Reference::Branch("main".into()))
        .await
        .expect("ref");
    let Object::Commit { sha, .. } = main.object else {
        panic!("a commit")
    };
    repos
        .create_ref(&Reference::Branch("feedback/2".into()), sha.clone())
        .await
        .expect("create");
    let matching = repos
        .list_matching_refs("heads/feedback/")
        .await
        .expect("matching");
    assert_eq!(matching.len(), 1);
    repos
        .create_dispatch("rowbranch")
        .client_payload(json!({"branch": "feedback/2"}))
        .send()
        .await
        .expect("dispatch");
    let page = gh
        .pulls("acme", "widgets")
        .list()
        .state(octocrab::params::State::All)
        .head("acme:feedback/1")
        .send()
        .await
        .expect("pulls");
    assert_eq!(page.items.len(), 1);
    assert!(page.items[0].merged_at.is_some());
    fake.push_commit(REPO, "feedback/2");
    let comparison = repos
        .compare_commits("main", "feedback/2")
        .send()
        .await
        .expect("compare");
    assert_eq!(comparison.ahead_by, 1);
    let mut dir = repos
        .get_content()
        .path(".github/workflows")
        .r#ref("main")
        .send()
        .await
        .expect("contents");
    let items = dir.take_items();
    assert_eq!(items[0].name, "rowbranch.yml");
    let mut file = repos
        .get_content()
        .path(".github/workflows/rowbranch.yml")
        .send()
        .await
        .expect("file");
    assert_eq!(
        file.take_items()[0].decoded_content().as_deref(),
        Some("name: rowbranch\n")
    );
    repos
        .delete_ref(&Reference::Branch("feedback/2".into()))
        .await
        .expect("delete");
    assert_eq!(fake.token_mints(), 1);
    assert_eq!(fake.dispatches(REPO).len(), 1);
    fake.assert_no_unexpected();
}

#[tokio::test(start_paused = true)]
async fn under_a_paused_clock_an_injected_delay_passes_in_tokio_time_only() {
    let (fake, token) = fake_and_token().await;
    fake.inject(Op::GetRef, Fault::Delay(Duration::from_secs(30)), 1);
    let started = tokio::time::Instant::now();
    let wall = std::time::Instant::now();
    let main = repo(REPO, "/git/ref/heads/main");
    assert_eq!(token.get(&main).await.status, 200);
    assert!(started.elapsed() >= Duration::from_secs(30));
    assert!(wall.elapsed() < Duration::from_secs(10));
    assert_eq!(token.get(&main).await.status, 200);
    let log = fake.requests_for(Op::GetRef);
    assert!(log[1].at_tokio - log[0].at_tokio >= Duration::from_secs(30));
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn a_slow_down_delays_every_request_of_its_operations_and_in_flight_counts_them() {
    let (fake, token) = fake_and_token().await;
    fake.slow_down(&[Op::GetRepo], Duration::from_millis(300));
    let start = std::time::Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let token = token.clone();
            tokio::spawn(async move { token.get(&repo(REPO, "")).await })
        })
        .collect();
    for answer in calls {
        assert_eq!(answer.await.expect("a call").status, 200);
    }
    assert!(start.elapsed() >= Duration::from_millis(300), "delayed");
    let seen = fake.in_flight();
    assert_eq!(seen.max_tokens, 5, "five token requests were open at once");
    assert_eq!(
        (seen.tokens, seen.all),
        (0, 0),
        "none open after the answers"
    );
    assert_eq!(fake.answered(), 6, "the mint and the five reads");
    fake.slow_down(&[Op::GetRepo], Duration::ZERO);
    let start = std::time::Instant::now();
    assert_eq!(token.get(&repo(REPO, "")).await.status, 200);
    assert!(
        start.elapsed() < Duration::from_millis(300),
        "no longer delayed"
    );
}
