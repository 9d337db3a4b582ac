//! Any input, many times: random and mutated bodies, credentials and headers through the real
//! router, over a forge that records every write. For every input the answer is one of the
//! statuses of SPEC §3, nothing panics, and nothing is written unless the delivery was
//! authenticated and its row's id valid. (`fuzz/` holds the same edges as cargo-fuzz targets.)

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use axum::body::Body;
use http::Request;
use proptest::prelude::*;
use rowbranch::config::Config;
use rowbranch::forge::{Base, Branch, Claim, Forge, ForgeError, Sha};
use rowbranch::identity::{BranchName, BranchPrefix, EventType, RefName, RepoName, RowId, Slug};
use rowbranch::startup::{Application, Launch, Listen, Mode};
use rowbranch::webhook::auth::{hub_signature_256, WebhookSecrets};
use rowbranch::webhook::payload;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::support::sign::{standard_webhooks_signature, verify};

const SUPABASE_INSERT: &str = include_str!("../fixtures/supabase-insert.json");
/// A Standard Webhooks secret (test-only) and a plain one, both configured.
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const PLAIN: &str = "a-plain-test-secret-of-32-characters";

/// A forge that answers at once and records what would be written.
#[derive(Default)]
struct Recording {
    writes: Mutex<Vec<String>>,
}

#[async_trait]
impl Forge for Recording {
    async fn row_branches(
        &self,
        _: &RepoName,
        _: &BranchPrefix,
        _: &RowId,
    ) -> Result<Vec<BranchName>, ForgeError> {
        Ok(Vec::new())
    }
    async fn has_pull_request(&self, _: &RepoName, _: &BranchName) -> Result<bool, ForgeError> {
        Ok(false)
    }
    async fn base(&self, _: &RepoName) -> Result<Base, ForgeError> {
        Ok(Base {
            branch: RefName::parse("main").unwrap(),
            sha: Sha::new("0".repeat(40)),
        })
    }
    async fn claim(&self, _: &RepoName, branch: &BranchName, _: &Sha) -> Result<Claim, ForgeError> {
        self.writes.lock().unwrap().push(format!("claim {branch}"));
        Ok(Claim::Created)
    }
    async fn dispatch(&self, _: &RepoName, _: &EventType, _: &Value) -> Result<(), ForgeError> {
        self.writes.lock().unwrap().push("dispatch".into());
        Ok(())
    }
    async fn release(&self, _: &RepoName, _: &BranchName, _: &Sha) -> Result<(), ForgeError> {
        self.writes.lock().unwrap().push("release".into());
        Ok(())
    }
    async fn prefix_branches(
        &self,
        _: &RepoName,
        _: &BranchPrefix,
    ) -> Result<Vec<Branch>, ForgeError> {
        Ok(Vec::new())
    }
    async fn ahead_by(&self, _: &RepoName, _: &Base, _: &BranchName) -> Result<u64, ForgeError> {
        Ok(0)
    }
}

/// How a generated delivery authenticates.
#[derive(Debug, Clone)]
enum Credential {
    None,
    Bearer,
    WrongBearer,
    Hub,
    StandardWebhooks {
        skew: i64,
    },
    /// Arbitrary values in the credential headers.
    Garbage(Vec<(String, Vec<u8>)>),
}

impl Credential {
    /// Whether the receiver must accept it.
    fn valid(&self) -> bool {
        match self {
            Credential::Bearer | Credential::Hub => true,
            Credential::StandardWebhooks { skew } => skew.abs() <= 300,
            _ => false,
        }
    }
}

fn credential() -> impl Strategy<Value = Credential> {
    let header = prop_oneof![
        Just("authorization".to_owned()),
        Just("webhook-id".to_owned()),
        Just("webhook-timestamp".to_owned()),
        Just("webhook-signature".to_owned()),
        Just("x-hub-signature-256".to_owned()),
    ];
    prop_oneof![
        Just(Credential::None),
        Just(Credential::Bearer),
        Just(Credential::WrongBearer),
        Just(Credential::Hub),
        (-1000i64..1000).prop_map(|skew| Credential::StandardWebhooks { skew }),
        prop::collection::vec((header, prop::collection::vec(any::<u8>(), 0..80)), 1..4)
            .prop_map(Credential::Garbage),
    ]
}

/// A JSON value of any kind, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,20}".prop_map(Value::String),
        "[a-z0-9._-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bodies: the Supabase shape with random parts, the fixture with random bytes changed, or
/// bytes at random.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just(json!("INSERT")),
        Just(json!("UPDATE")),
        Just(json!("DELETE")),
        any_json()
    ];
    let table = prop_oneof![Just(json!("feedbacks")), any_json()];
    let id = prop_oneof![
        (0u64..1000).prop_map(|n| json!(n)),
        "[A-Za-z0-9._-]{1,12}".prop_map(Value::String),
        any_json()
    ];
    let shaped = (kind, table, id, any_json(), any::<bool>()).prop_map(
        |(kind, table, id, text, with_record)| {
            let mut body =
                json!({"type": kind, "table": table, "schema": "public", "old_record": null});
            if with_record {
                body["record"] = json!({"id": id, "message": text});
            }
            body.to_string().into_bytes()
        },
    );
    let mutated = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)
        .prop_map(|edits| {
            let mut bytes = SUPABASE_INSERT.as_bytes().to_vec();
            for (at, byte) in edits {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            bytes
        });
    let truncated = any::<prop::sample::Index>()
        .prop_map(|at| SUPABASE_INSERT.as_bytes()[..at.index(SUPABASE_INSERT.len())].to_vec());
    let random = prop::collection::vec(any::<u8>(), 0..400);
    prop_oneof![shaped, mutated, truncated, random]
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn request(credential: &Credential, content_type: &str, body: &[u8]) -> Request<Body> {
    let mut request = Request::post("/webhook").header("content-type", content_type);
    match credential {
        Credential::None => {}
        Credential::Bearer => request = request.header("authorization", format!("Bearer {PLAIN}")),
        Credential::WrongBearer => {
            request = request.header("authorization", "Bearer not-the-secret-of-this-server")
        }
        Credential::Hub => {
            request = request.header("x-hub-signature-256", hub_signature_256(PLAIN, body))
        }
        Credential::StandardWebhooks { skew } => {
            let at = now() + skew;
            let signature = standard_webhooks_signature(WHSEC, "msg_1", at, body);
            request = request
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", at.to_string())
                .header("webhook-signature", signature);
        }
        Credential::Garbage(headers) => {
            for (name, value) in headers {
                if let Ok(value) = http::HeaderValue::from_bytes(value) {
                    request = request.header(name.as_str(), value);
                }
            }
        }
    }
    request.body(Body::from(body.to_vec())).unwrap()
}

/// Whether the receiver would plan a run for `body` (shape, route, event, id all good).
fn plannable(routes: &rowbranch::pipeline::Routes, body: &[u8]) -> bool {
    payload::parse(body).ok().is_some_and(|event| {
        routes
            .route(false, &event)
            .is_ok_and(|route| route.plan_json(&event.record).is_ok())
    })
}

/// The SPEC §3 statuses (500 would be a bug: this forge never fails).
const STATUSES: [u16; 9] = [200, 202, 400, 401, 408, 413, 415, 422, 503];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn any_delivery_gets_a_contract_status_and_writes_only_when_authenticated_and_valid(
        credential in credential(),
        json_type in any::<bool>(),
        body in body(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let text = "[forge]\nkind = \"local\"\npath = \"unused.git\"\n\n[webhook]\nrespond_within_ms = 5000\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n";
        let secrets = format!("{PLAIN} {WHSEC}");
        let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secrets.clone());
        let config = Config::parse(text, Path::new("rowbranch.toml"), &env).unwrap();
        let routes = rowbranch::pipeline::Routes::compile(&config).unwrap();
        let forge = Arc::new(Recording::default());
        let env = Launch {
            forge: Some(forge.clone()),
            mode: Mode::Serve { listen: Listen::FreePort, warm_up: false },
            ..Launch::process()
        };
        let content_type = if json_type { "application/json" } else { "text/plain" };
        let response = runtime.block_on(async {
            let application = Application::build(config, env).await.unwrap();
            let response = application
                .router()
                .expect("it serves")
                .oneshot(request(&credential, content_type, &body))
                .await
                .unwrap();
            application.pipeline().drain().await;
            response
        });
        let status = response.status().as_u16();
        prop_assert!(STATUSES.contains(&status), "status {}", status);
        let bytes = runtime
            .block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
            .unwrap();
        let answer: Value = serde_json::from_slice(&bytes).expect("every answer is JSON");
        prop_assert!(answer["message"].is_string(), "{}", answer);
        let writes = forge.writes.lock().unwrap().clone();
        if !writes.is_empty() {
            prop_assert!(credential.valid(), "wrote {:?} for {:?}", writes, credential);
            prop_assert!(json_type);
            prop_assert!(plannable(&routes, &body), "wrote {:?} for an unplannable body", writes);
        }
        if credential.valid() && json_type && plannable(&routes, &body) {
            prop_assert_eq!(status, 200);
            prop_assert_eq!(answer["outcome"].as_str(), Some("dispatched"));
            prop_assert_eq!(writes.len(), 2, "one claim and one dispatch: {:?}", writes);
        }
        if !credential.valid() {
            prop_assert!(writes.is_empty());
            if json_type {
                prop_assert_eq!(status, 401);
            }
        }
    }

    #[test]
    fn credential_headers_of_any_bytes_never_verify_and_never_panic(
        headers in prop::collection::vec(("[a-z-]{1,24}", prop::collection::vec(any::<u8>(), 0..120)), 0..6),
        body in prop::collection::vec(any::<u8>(), 0..200),
        skew in any::<i32>(),
    ) {
        let secrets = WebhookSecrets::parse(&format!("{PLAIN} {WHSEC}")).unwrap();
        let mut map = http::HeaderMap::new();
        for name in ["authorization", "webhook-id", "webhook-timestamp", "webhook-signature", "x-hub-signature-256"] {
            for (other, value) in &headers {
                if let Ok(value) = http::HeaderValue::from_bytes(value) {
                    // Random names, and the credential headers themselves, with random values.
                    if let Ok(other) = http::HeaderName::from_bytes(other.as_bytes()) {
                        map.append(other, value.clone());
                    }
                    map.append(name, value);
                }
            }
        }
        let at = SystemTime::now() + std::time::Duration::from_secs(u64::from(skew.unsigned_abs()));
        prop_assert!(verify(&secrets, &map, &body, at).is_err());
    }

    #[test]
    fn names_of_any_text_are_parsed_or_refused_with_a_reason(text in "\\PC{0,120}") {
        let refusals = [
            RowId::parse(&json!(text)).err().map(|e| e.to_string()),
            BranchPrefix::parse(&text).err().map(|e| e.to_string()),
            RepoName::parse(&text).err().map(|e| e.to_string()),
            EventType::parse(&text).err().map(|e| e.to_string()),
        ];
        for reason in refusals.into_iter().flatten() {
            prop_assert!(!reason.is_empty() && reason.len() < 400, "{}", reason);
        }
        if let Some(slug) = Slug::new(&text, 40) {
            prop_assert!(slug.as_str().len() <= 40);
        }
    }
}
