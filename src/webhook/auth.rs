//! Decides whether a webhook request carries a valid credential for one of the secrets in
//! `ROWBRANCH_WEBHOOK_SECRET`: a bearer token, a Standard Webhooks signature or a GitHub-style
//! `X-Hub-Signature-256`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::header::AUTHORIZATION;
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

const ENV_VAR: &str = "ROWBRANCH_WEBHOOK_SECRET";
const MIN_SECRET_CHARS: usize = 24;
const WHSEC_PREFIX: &str = "whsec_";
/// Supabase shows Standard Webhooks secrets as `v1,whsec_…`; the `v1,` is not part of the key.
const DISPLAY_VERSION_PREFIX: &str = "v1,";
/// How far a Standard Webhooks timestamp may be from `now`, either way, before it counts as a
/// replay.
const TIMESTAMP_TOLERANCE_SECS: u64 = 5 * 60;

const WEBHOOK_ID: &str = "webhook-id";
const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
const WEBHOOK_SIGNATURE: &str = "webhook-signature";
const HUB_SIGNATURE: &str = "x-hub-signature-256";

/// The configured webhook secrets. Never printable: Debug prints only the count.
#[derive(Clone)]
pub struct WebhookSecrets {
    secrets: Vec<Secret>,
}

/// One configured secret, with what each check needs precomputed.
#[derive(Clone)]
struct Secret {
    /// The secret as configured, less a `v1,` before `whsec_`: the bearer token and hub key.
    text: String,
    /// SHA-256 of `text`: bearer tokens are compared by digest so that neither the content nor
    /// the length of the secret shows in the comparison's timing.
    text_digest: [u8; 32],
    /// For a `whsec_` secret, the base64-decoded rest: the Standard Webhooks HMAC key.
    whsec_key: Option<Vec<u8>>,
}

/// A problem with `ROWBRANCH_WEBHOOK_SECRET`, worded for whoever sets it. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("{var} is empty: set it to one or more secrets separated by spaces", var = ENV_VAR)]
    Empty,
    #[error(
        "secret {position} of {count} in {var} has {chars} characters, fewer than the \
         {min} required: use a longer random secret, e.g. the output of `openssl rand -hex 32`",
        var = ENV_VAR,
        min = MIN_SECRET_CHARS
    )]
    TooShort {
        position: usize,
        count: usize,
        chars: usize,
    },
    #[error(
        "secret {position} of {count} in {var} starts with whsec_ but the rest is not valid \
         base64 (standard alphabet, with padding): copy the whole secret exactly as the \
         sender shows it",
        var = ENV_VAR
    )]
    InvalidWhsecBase64 { position: usize, count: usize },
    /// Only from [`standard_webhooks_signature`]: verification simply skips such secrets.
    #[error("a Standard Webhooks signature needs a secret that starts with whsec_")]
    NotWhsec,
}

/// Why a request was refused, for the server's debug log; the client only ever learns "401".
/// Never contains a header value or a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no credentials: none of Authorization, webhook-signature or X-Hub-Signature-256 was sent"
    )]
    NoCredentials,
    #[error("the {0} header is not visible ASCII text")]
    UnreadableHeader(&'static str),
    #[error("the Authorization header does not use the Bearer scheme")]
    NotBearer,
    #[error("the bearer token matches no configured secret")]
    BadBearer,
    #[error("a webhook-signature header came without a {0} header")]
    MissingHeader(&'static str),
    #[error("the webhook-timestamp header is not a whole number of unix seconds")]
    BadTimestamp,
    #[error(
        "the webhook-timestamp is more than 5 minutes in the past: a replayed request, or \
         clocks out of step"
    )]
    StaleTimestamp,
    #[error("the webhook-timestamp is more than 5 minutes in the future: clocks out of step")]
    FutureTimestamp,
    #[error("Standard Webhooks headers were sent but no configured secret starts with whsec_")]
    NoStandardWebhooksSecret,
    #[error("no v1 entry of the webhook-signature header matches a configured whsec_ secret")]
    BadSignature,
    #[error("the X-Hub-Signature-256 header is not `sha256=` followed by 64 hex digits")]
    MalformedHubSignature,
    #[error("the X-Hub-Signature-256 signature matches no configured secret")]
    BadHubSignature,
}

impl AuthError {
    /// The kind of refusal, for the log (never more: the log names no header value): a missing
    /// credential, a wrong secret, a stale (or future) timestamp, or a bad signature.
    pub fn kind(&self) -> &'static str {
        match self {
            AuthError::NoCredentials => "missing",
            AuthError::NotBearer | AuthError::BadBearer | AuthError::NoStandardWebhooksSecret => {
                "wrong_secret"
            }
            AuthError::BadTimestamp | AuthError::StaleTimestamp | AuthError::FutureTimestamp => {
                "stale_timestamp"
            }
            AuthError::UnreadableHeader(_)
            | AuthError::MissingHeader(_)
            | AuthError::BadSignature
            | AuthError::MalformedHubSignature
            | AuthError::BadHubSignature => "bad_signature",
        }
    }
}

impl WebhookSecrets {
    /// Parses the value of ROWBRANCH_WEBHOOK_SECRET.
    ///
    /// Secrets are separated by whitespace, so a new one can be added before the old one is
    /// removed. A `v1,` in front of `whsec_` is dropped; every secret needs at least 24
    /// characters, and the part after `whsec_` must be standard, padded base64.
    pub fn parse(raw: &str) -> Result<WebhookSecrets, SecretError> {
        let raw_secrets: Vec<&str> = raw.split_whitespace().collect();
        if raw_secrets.is_empty() {
            return Err(SecretError::Empty);
        }
        WebhookSecrets::from_list(&raw_secrets)
    }

    /// Builds from secrets already split apart. Kept private: the variable is the only source,
    /// but tests need it for GitHub's example secret, which contains spaces.
    fn from_list(raw_secrets: &[&str]) -> Result<WebhookSecrets, SecretError> {
        let count = raw_secrets.len();
        let secrets = raw_secrets
            .iter()
            .enumerate()
            .map(|(index, raw)| Secret::parse(raw, index + 1, count))
            .collect::<Result<_, _>>()?;
        Ok(WebhookSecrets { secrets })
    }

    /// How many secrets are configured.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Always false for parsed secrets: `parse` refuses an empty variable.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// Checks a request's credentials against every secret.
    ///
    /// Accepts if any secret accepts any credential the request carries. Every credential
    /// present is checked; when all fail, the error is that of the first one in the order
    /// Standard Webhooks, `X-Hub-Signature-256`, `Authorization`, since a stray Authorization
    /// header next to a signature says less about what went wrong. Only the first value of
    /// each header is read.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        let outcomes = [
            self.check_standard_webhooks(headers, body, now),
            self.check_hub_signature(headers, body),
            self.check_bearer(headers),
        ];
        let mut refusal = None;
        // A check is `None` when the request does not carry its headers at all.
        for outcome in outcomes.into_iter().flatten() {
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) => {
                    refusal.get_or_insert(error);
                }
            }
        }
        Err(refusal.unwrap_or(AuthError::NoCredentials))
    }

    /// `Authorization: Bearer <secret>`. The scheme is matched case-insensitively, as HTTP
    /// auth schemes are (RFC 9110 §11.1); the token is matched exactly.
    fn check_bearer(&self, headers: &HeaderMap) -> Option<Result<(), AuthError>> {
        let value = header_str(headers, AUTHORIZATION.as_str())?;
        Some(value.and_then(|value| {
            let token = bearer_token(value).ok_or(AuthError::NotBearer)?;
            let digest = Sha256::digest(token.as_bytes());
            // `any` stops early only on a match, which the caller is told anyway.
            let matched = self
                .secrets
                .iter()
                .any(|secret| bool::from(secret.text_digest[..].ct_eq(&digest[..])));
            matched.then_some(()).ok_or(AuthError::BadBearer)
        }))
    }

    /// `X-Hub-Signature-256: sha256=<hex>`, keyed with each secret's text.
    fn check_hub_signature(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<Result<(), AuthError>> {
        let value = header_str(headers, HUB_SIGNATURE)?;
        Some(value.and_then(|value| {
            let expected = parse_hub_signature(value).ok_or(AuthError::MalformedHubSignature)?;
            let matched = self.secrets.iter().any(|secret| {
                let mut mac = new_mac(secret.text.as_bytes());
                mac.update(body);
                mac.verify_slice(&expected).is_ok()
            });
            matched.then_some(()).ok_or(AuthError::BadHubSignature)
        }))
    }

    /// Standard Webhooks: present as soon as `webhook-signature` is.
    fn check_standard_webhooks(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Option<Result<(), AuthError>> {
        let signature = header_str(headers, WEBHOOK_SIGNATURE)?;
        Some(signature.and_then(|signature| {
            let id = required_header(headers, WEBHOOK_ID)?;
            let timestamp = required_header(headers, WEBHOOK_TIMESTAMP)?;
            self.verify_standard_webhooks(signature, id, timestamp, body, now)
        }))
    }

    fn verify_standard_webhooks(
        &self,
        signature: &str,
        id: &str,
        timestamp: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), AuthError> {
        let mut keys = self
            .secrets
            .iter()
            .filter_map(|s| s.whsec_key.as_deref())
            .peekable();
        if keys.peek().is_none() {
            return Err(AuthError::NoStandardWebhooksSecret);
        }
        check_timestamp(timestamp, now)?;
        let candidates = v1_signatures(signature);
        let matched = keys.any(|key| {
            let mac = signed_content_mac(key, id, timestamp, body);
            candidates
                .iter()
                .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        });
        matched.then_some(()).ok_or(AuthError::BadSignature)
    }
}

impl fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.len() == 1 { "secret" } else { "secrets" };
        write!(f, "WebhookSecrets({} {noun})", self.len())
    }
}

impl Secret {
    /// `position` and `count` only serve to name the secret in an error.
    fn parse(raw: &str, position: usize, count: usize) -> Result<Secret, SecretError> {
        let text = strip_display_version(raw);
        let chars = text.chars().count();
        if chars < MIN_SECRET_CHARS {
            return Err(SecretError::TooShort {
                position,
                count,
                chars,
            });
        }
        let whsec_key = match text.strip_prefix(WHSEC_PREFIX) {
            None => None,
            Some(encoded) => Some(
                BASE64
                    .decode(encoded)
                    .map_err(|_| SecretError::InvalidWhsecBase64 { position, count })?,
            ),
        };
        Ok(Secret {
            text: text.to_owned(),
            text_digest: Sha256::digest(text.as_bytes()).into(),
            whsec_key,
        })
    }
}

/// Whether the request's `Authorization: Basic …` carries `password` (with any user name), for
/// the status page. Compared in constant time, by digest.
pub fn basic_password_matches(headers: &HeaderMap, password: &str) -> bool {
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, encoded)| BASE64.decode(encoded.trim()).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok());
    let Some(given) = given else {
        return false;
    };
    let given = given.split_once(':').map_or("", |(_, pass)| pass);
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(password.as_bytes()),
    );
    bool::from(a[..].ct_eq(&b[..]))
}

/// Whether a request carries any of the credential headers at all: one that carries none is
/// refused before its body is read.
pub fn carries_credentials(headers: &HeaderMap) -> bool {
    [AUTHORIZATION.as_str(), WEBHOOK_SIGNATURE, HUB_SIGNATURE]
        .iter()
        .any(|name| headers.contains_key(*name))
}

/// Drops the `v1,` that Supabase shows before a `whsec_` secret; any other secret is kept whole.
fn strip_display_version(raw: &str) -> &str {
    match raw.strip_prefix(DISPLAY_VERSION_PREFIX) {
        Some(rest) if rest.starts_with(WHSEC_PREFIX) => rest,
        _ => raw,
    }
}

/// The header's first value as text, or `None` when the request has no such header.
fn header_str<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Option<Result<&'a str, AuthError>> {
    let value = headers.get(name)?;
    Some(
        value
            .to_str()
            .map_err(|_| AuthError::UnreadableHeader(name)),
    )
}

fn required_header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, AuthError> {
    header_str(headers, name).unwrap_or(Err(AuthError::MissingHeader(name)))
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    // Secrets never contain whitespace, so trimming the token cannot make a wrong one right.
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The 32-byte digest in `sha256=<hex>`, or `None` if the value is not of that form.
fn parse_hub_signature(value: &str) -> Option<Vec<u8>> {
    let digest = hex::decode(value.strip_prefix("sha256=")?).ok()?;
    (digest.len() == 32).then_some(digest)
}

/// The decoded `v1` entries of a `webhook-signature` header. Entries of other versions, and
/// entries that are not base64, cannot match, so they are skipped.
fn v1_signatures(header: &str) -> Vec<Vec<u8>> {
    header
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|signature| BASE64.decode(signature).ok())
        .collect()
}

fn check_timestamp(raw: &str, now: SystemTime) -> Result<(), AuthError> {
    let sent: i64 = raw.parse().map_err(|_| AuthError::BadTimestamp)?;
    let now = unix_seconds(now);
    if sent.abs_diff(now) <= TIMESTAMP_TOLERANCE_SECS {
        Ok(())
    } else if sent < now {
        Err(AuthError::StaleTimestamp)
    } else {
        Err(AuthError::FutureTimestamp)
    }
}

fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// The HMAC of Standard Webhooks' signed content, `{id}.{timestamp}.{body}`.
fn signed_content_mac(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
    let mut mac = new_mac(key);
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `X-Hub-Signature-256` value for `body`: `sha256=<hex HMAC-SHA256>`, keyed with the
/// secret's text as it would be configured (a `v1,` before `whsec_` is dropped first).
pub fn hub_signature_256(secret: &str, body: &[u8]) -> String {
    let mut mac = new_mac(strip_display_version(secret).as_bytes());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// One `webhook-signature` entry, `v1,<base64>`, for a Standard Webhooks request.
///
/// `secret` is a `whsec_` secret, optionally with Supabase's `v1,` in front, and must pass the
/// same checks as in [`WebhookSecrets::parse`] (errors name it "secret 1 of 1").
pub fn standard_webhooks_signature(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, SecretError> {
    let key = Secret::parse(secret, 1, 1)?
        .whsec_key
        .ok_or(SecretError::NotWhsec)?;
    let mac = signed_content_mac(&key, id, &timestamp.to_string(), body);
    Ok(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())))
}

/// A fresh random secret for `init` and the demo: a Standard Webhooks secret, `whsec_` and 32
/// random bytes in base64 (50 characters), so that one secret serves a signing trigger (its
/// HMAC key is the 32 bytes) as well as a bearer header or an `X-Hub-Signature-256` (whose
/// secret is the whole text).
pub fn generate_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{WHSEC_PREFIX}{}", BASE64.encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};
    use std::time::Duration;

    /// Standard Webhooks' published test vectors and GitHub's documented example.
    const VECTORS: &str = include_str!("../../tests/fixtures/standard-webhooks-vectors.json");

    const PLAIN_SECRET: &str = "plain-secret-0123456789abcdef";

    struct SwVector {
        secret: String,
        id: String,
        timestamp: i64,
        payload: String,
        signature: String,
    }

    struct HubVector {
        secret: String,
        payload: String,
        signature: String,
    }

    impl HubVector {
        /// GitHub's example secret contains spaces, so it cannot go through `parse`.
        fn configured(&self) -> WebhookSecrets {
            WebhookSecrets::from_list(&[self.secret.as_str()]).expect("a valid secret")
        }
    }

    fn vectors() -> serde_json::Value {
        serde_json::from_str(VECTORS).expect("the vectors are valid JSON")
    }

    fn sw_vectors() -> Vec<SwVector> {
        let all = vectors();
        let text = |v: &serde_json::Value, key: &str| v[key].as_str().unwrap().to_owned();
        all["standard_webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| SwVector {
                secret: text(v, "secret"),
                id: text(v, "id"),
                timestamp: v["timestamp"].as_i64().unwrap(),
                payload: text(v, "payload"),
                signature: text(v, "signature"),
            })
            .collect()
    }

    fn hub_vector() -> HubVector {
        let v = &vectors()["github_hub_signature_256"][0];
        let text = |key: &str| v[key].as_str().unwrap().to_owned();
        HubVector {
            secret: text("secret"),
            payload: text("payload"),
            signature: text("signature"),
        }
    }

    fn at(unix_seconds: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix_seconds.try_into().unwrap())
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn sw_headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
        let timestamp = timestamp.to_string();
        headers(&[
            (WEBHOOK_ID, id),
            (WEBHOOK_TIMESTAMP, &timestamp),
            (WEBHOOK_SIGNATURE, signature),
        ])
    }

    fn secrets(raw: &str) -> WebhookSecrets {
        WebhookSecrets::parse(raw).expect("valid secrets")
    }

    /// Verifies the first Standard Webhooks vector, with `now` shifted by `skew` seconds.
    fn verify_first_sw_vector_with_skew(skew: i64) -> Result<(), AuthError> {
        let v = &sw_vectors()[0];
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp + skew))
    }

    #[test]
    fn both_standard_webhooks_vectors_verify_at_their_timestamp() {
        for v in sw_vectors() {
            let request = sw_headers(&v.id, v.timestamp, &v.signature);
            let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
            assert_eq!(result, Ok(()), "vector {}", v.id);
        }
    }

    #[test]
    fn a_generated_secret_is_a_whsec_secret_of_32_bytes_and_a_bearer_secret_too() {
        let secret = generate_secret().unwrap();
        assert_eq!(secret.len(), 50, "{}", secret.len());
        let configured = secrets(&secret);
        assert_eq!(
            configured.secrets[0].whsec_key.as_ref().map(Vec::len),
            Some(32)
        );
        let now = at(1_700_000_000);
        let bearer = headers(&[("authorization", &format!("Bearer {secret}"))]);
        assert_eq!(configured.verify(&bearer, b"{}", now), Ok(()));
        let signature =
            standard_webhooks_signature(&secret, "msg_1", 1_700_000_000, b"{}").unwrap();
        let signed = sw_headers("msg_1", 1_700_000_000, &signature);
        assert_eq!(configured.verify(&signed, b"{}", now), Ok(()));
        assert_ne!(generate_secret().unwrap(), secret);
    }

    #[test]
    fn a_v1_comma_before_a_whsec_secret_is_stripped() {
        let v = &sw_vectors()[0];
        let configured = secrets(&format!("v1,{}", v.secret));
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        assert_eq!(
            configured.verify(&request, v.payload.as_bytes(), at(v.timestamp)),
            Ok(())
        );
        let bearer = headers(&[("authorization", &format!("Bearer {}", v.secret))]);
        assert_eq!(configured.verify(&bearer, b"", at(0)), Ok(()));
    }

    #[test]
    fn a_v1_comma_before_a_non_whsec_secret_is_kept() {
        let configured = secrets(&format!("v1,{PLAIN_SECRET}"));
        let bearer = headers(&[("authorization", &format!("Bearer v1,{PLAIN_SECRET}"))]);
        assert_eq!(configured.verify(&bearer, b"", at(0)), Ok(()));
    }

    #[test]
    fn one_matching_entry_among_several_signatures_is_enough() {
        let v = &sw_vectors()[0];
        let wrong = &sw_vectors()[1].signature;
        let header = format!("v2,abc {wrong} v1,not-base64! {}", v.signature);
        let request = sw_headers(&v.id, v.timestamp, &header);
        let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Ok(()));
    }

    #[test]
    fn a_tampered_body_is_refused() {
        let v = &sw_vectors()[0];
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        let body = v.payload.replace("test_user", "admin");
        let result = secrets(&v.secret).verify(&request, body.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::BadSignature));
    }

    #[test]
    fn a_wrong_id_is_refused() {
        let v = &sw_vectors()[0];
        let request = sw_headers("msg_other", v.timestamp, &v.signature);
        let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::BadSignature));
    }

    #[test]
    fn a_right_signature_under_another_version_prefix_is_refused() {
        let v = &sw_vectors()[0];
        let header = v.signature.replacen("v1,", "v1a,", 1);
        let request = sw_headers(&v.id, v.timestamp, &header);
        let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::BadSignature));
    }

    #[test]
    fn a_timestamp_301_seconds_in_the_past_is_refused() {
        assert_eq!(
            verify_first_sw_vector_with_skew(301),
            Err(AuthError::StaleTimestamp)
        );
    }

    #[test]
    fn a_timestamp_301_seconds_in_the_future_is_refused() {
        assert_eq!(
            verify_first_sw_vector_with_skew(-301),
            Err(AuthError::FutureTimestamp)
        );
    }

    #[test]
    fn a_timestamp_299_seconds_either_way_is_accepted() {
        assert_eq!(verify_first_sw_vector_with_skew(299), Ok(()));
        assert_eq!(verify_first_sw_vector_with_skew(-299), Ok(()));
    }

    #[test]
    fn a_timestamp_that_is_not_a_number_is_refused() {
        let v = &sw_vectors()[0];
        let mut request = sw_headers(&v.id, v.timestamp, &v.signature);
        request.insert(WEBHOOK_TIMESTAMP, HeaderValue::from_static("yesterday"));
        let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::BadTimestamp));
    }

    #[test]
    fn standard_webhooks_headers_without_a_whsec_secret_are_refused() {
        let v = &sw_vectors()[0];
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        let result = secrets(PLAIN_SECRET).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::NoStandardWebhooksSecret));
    }

    #[test]
    fn a_signature_without_its_id_header_is_refused() {
        let v = &sw_vectors()[0];
        let mut request = sw_headers(&v.id, v.timestamp, &v.signature);
        request.remove(WEBHOOK_ID);
        let result = secrets(&v.secret).verify(&request, v.payload.as_bytes(), at(v.timestamp));
        assert_eq!(result, Err(AuthError::MissingHeader(WEBHOOK_ID)));
    }

    #[test]
    fn the_github_vector_verifies() {
        let v = hub_vector();
        let request = headers(&[("X-Hub-Signature-256", &v.signature)]);
        assert_eq!(
            v.configured().verify(&request, v.payload.as_bytes(), at(0)),
            Ok(())
        );
    }

    #[test]
    fn a_hub_signature_with_one_wrong_hex_digit_is_refused() {
        let v = hub_vector();
        let wrong = v.signature.replacen("757107", "757108", 1);
        let request = headers(&[("X-Hub-Signature-256", &wrong)]);
        let result = v.configured().verify(&request, v.payload.as_bytes(), at(0));
        assert_eq!(result, Err(AuthError::BadHubSignature));
    }

    #[test]
    fn a_hub_signature_without_sha256_or_not_in_hex_is_malformed() {
        let v = hub_vector();
        let bare_hex = v.signature.trim_start_matches("sha256=").to_owned();
        let not_hex = format!("sha256={}", "zz".repeat(32));
        let short = format!("sha256={}", &bare_hex[..62]);
        for value in [bare_hex, not_hex, short] {
            let request = headers(&[("X-Hub-Signature-256", &value)]);
            let result = v.configured().verify(&request, v.payload.as_bytes(), at(0));
            assert_eq!(result, Err(AuthError::MalformedHubSignature), "{value}");
        }
    }

    #[test]
    fn a_bearer_token_equal_to_the_secret_is_accepted() {
        let request = headers(&[("authorization", &format!("Bearer {PLAIN_SECRET}"))]);
        assert_eq!(secrets(PLAIN_SECRET).verify(&request, b"{}", at(0)), Ok(()));
    }

    #[test]
    fn a_bearer_token_that_is_a_prefix_or_an_extension_of_the_secret_is_refused() {
        let prefix = &PLAIN_SECRET[..PLAIN_SECRET.len() - 1];
        let longer = format!("{PLAIN_SECRET}0");
        for token in [prefix, longer.as_str(), ""] {
            let request = headers(&[("authorization", &format!("Bearer {token}"))]);
            let result = secrets(PLAIN_SECRET).verify(&request, b"{}", at(0));
            assert_eq!(result, Err(AuthError::BadBearer), "{token:?}");
        }
    }

    /// Auth schemes are case-insensitive in HTTP, so `bearer` and `BEARER` work too.
    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for scheme in ["bearer", "BEARER", "BeArEr"] {
            let request = headers(&[("authorization", &format!("{scheme} {PLAIN_SECRET}"))]);
            assert_eq!(
                secrets(PLAIN_SECRET).verify(&request, b"", at(0)),
                Ok(()),
                "{scheme}"
            );
        }
    }

    #[test]
    fn another_authorization_scheme_is_refused() {
        let request = headers(&[("authorization", &format!("Basic {PLAIN_SECRET}"))]);
        let result = secrets(PLAIN_SECRET).verify(&request, b"", at(0));
        assert_eq!(result, Err(AuthError::NotBearer));
    }

    #[test]
    fn a_request_signed_with_the_second_of_two_secrets_is_accepted() {
        let v = &sw_vectors()[1];
        let configured = secrets(&format!("{PLAIN_SECRET}\n  {}", v.secret));
        assert_eq!(configured.len(), 2);
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        assert_eq!(
            configured.verify(&request, v.payload.as_bytes(), at(v.timestamp)),
            Ok(())
        );
        let hub = headers(&[(HUB_SIGNATURE, &hub_signature_256(&v.secret, b"{}"))]);
        assert_eq!(configured.verify(&hub, b"{}", at(0)), Ok(()));
        let bearer = headers(&[("authorization", &format!("Bearer {}", v.secret))]);
        assert_eq!(configured.verify(&bearer, b"{}", at(0)), Ok(()));
    }

    #[test]
    fn one_valid_credential_is_enough_when_another_fails() {
        let v = hub_vector();
        let request = headers(&[
            ("authorization", "Bearer some-other-service-token"),
            (HUB_SIGNATURE, &v.signature),
        ]);
        assert_eq!(
            v.configured().verify(&request, v.payload.as_bytes(), at(0)),
            Ok(())
        );
    }

    #[test]
    fn a_request_without_credential_headers_has_no_credentials() {
        let request = headers(&[("content-type", "application/json")]);
        let result = secrets(PLAIN_SECRET).verify(&request, b"{}", at(0));
        assert_eq!(result, Err(AuthError::NoCredentials));
    }

    #[test]
    fn an_empty_or_blank_variable_is_an_error_that_says_so() {
        for raw in ["", " \n\t "] {
            let error = WebhookSecrets::parse(raw).unwrap_err();
            assert_eq!(error, SecretError::Empty);
            assert!(error
                .to_string()
                .contains("ROWBRANCH_WEBHOOK_SECRET is empty"));
        }
    }

    #[test]
    fn a_secret_shorter_than_24_characters_is_an_error_naming_its_position() {
        let short = "short-secret-23-chars-x";
        assert_eq!(short.len(), 23);
        let raw = format!("{PLAIN_SECRET} {short} {PLAIN_SECRET}");
        let error = WebhookSecrets::parse(&raw).unwrap_err();
        assert!(matches!(
            error,
            SecretError::TooShort {
                position: 2,
                count: 3,
                ..
            }
        ));
        let message = error.to_string();
        assert!(message.contains("secret 2 of 3"), "{message}");
        assert!(!message.contains(short), "{message}");
        assert_eq!(secrets(&format!("{short}x")).len(), 1);
    }

    /// Whitespace separates secrets, so a secret cannot contain any: GitHub's example splits.
    #[test]
    fn a_secret_with_spaces_is_read_as_several_secrets() {
        let error = WebhookSecrets::parse(&hub_vector().secret).unwrap_err();
        assert!(matches!(
            error,
            SecretError::TooShort {
                position: 1,
                count: 5,
                ..
            }
        ));
    }

    #[test]
    fn a_whsec_secret_that_is_not_base64_is_an_error() {
        let bad = "whsec_this is not base64!!!";
        for raw in [
            bad.replace(' ', "-"),
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7o".to_owned(),
        ] {
            let error = WebhookSecrets::parse(&format!("{PLAIN_SECRET} {raw}")).unwrap_err();
            assert_eq!(
                error,
                SecretError::InvalidWhsecBase64 {
                    position: 2,
                    count: 2
                }
            );
            assert!(!error.to_string().contains(&raw));
            assert!(error.to_string().contains("secret 2 of 2"));
        }
    }

    #[test]
    fn debug_of_the_secrets_shows_only_the_count() {
        let v = &sw_vectors()[0];
        let configured = secrets(&format!("{PLAIN_SECRET} {}", v.secret));
        let debug = format!("{configured:?} {configured:#?}");
        assert_eq!(format!("{configured:?}"), "WebhookSecrets(2 secrets)");
        assert!(!debug.contains(PLAIN_SECRET) && !debug.contains(&v.secret));
        assert!(!debug.contains(v.secret.trim_start_matches(WHSEC_PREFIX)));
        assert_eq!(
            format!("{:?}", secrets(PLAIN_SECRET)),
            "WebhookSecrets(1 secret)"
        );
    }

    /// Requests that fail each check, to show every refusal's message.
    fn failing_requests(v: &SwVector) -> Vec<HeaderMap> {
        let mut unreadable = HeaderMap::new();
        unreadable.insert(
            AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer \xff").unwrap(),
        );
        vec![
            headers(&[]),
            unreadable,
            headers(&[("authorization", &format!("Basic {}", v.secret))]),
            headers(&[("authorization", &format!("Bearer {}x", v.secret))]),
            headers(&[(WEBHOOK_SIGNATURE, &v.signature)]),
            sw_headers(&v.id, v.timestamp + 1000, &v.signature),
            sw_headers(&v.id, v.timestamp - 1000, &v.signature),
            sw_headers("msg_forged_id_value", v.timestamp, &v.signature),
            headers(&[(HUB_SIGNATURE, "sha1=0123456789")]),
            headers(&[(HUB_SIGNATURE, &format!("sha256={}", "ab".repeat(32)))]),
        ]
    }

    #[test]
    fn no_error_message_contains_a_secret_or_a_header_value() {
        let v = &sw_vectors()[0];
        let configured = secrets(&format!("{PLAIN_SECRET} {}", v.secret));
        let mut messages = Vec::new();
        for request in failing_requests(v) {
            let error = configured
                .verify(&request, b"body", at(v.timestamp))
                .unwrap_err();
            let message = error.to_string();
            for value in request.values() {
                let value = String::from_utf8_lossy(value.as_bytes());
                assert!(!message.contains(value.as_ref()), "{message} shows {value}");
            }
            messages.push(message);
        }
        let plain_only = secrets(PLAIN_SECRET);
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        messages.push(
            plain_only
                .verify(&request, b"", at(0))
                .unwrap_err()
                .to_string(),
        );
        let bad_timestamp = headers(&[
            (WEBHOOK_SIGNATURE, "v1,x"),
            (WEBHOOK_ID, "i"),
            (WEBHOOK_TIMESTAMP, "t0"),
        ]);
        messages.push(
            configured
                .verify(&bad_timestamp, b"", at(0))
                .unwrap_err()
                .to_string(),
        );
        messages.push(SecretError::Empty.to_string());
        messages.push(SecretError::NotWhsec.to_string());
        for message in &messages {
            assert!(!message.contains(PLAIN_SECRET), "{message}");
            assert!(
                !message.contains(v.secret.trim_start_matches(WHSEC_PREFIX)),
                "{message}"
            );
        }
    }

    #[test]
    fn the_signing_helpers_reproduce_the_reference_vectors() {
        for v in sw_vectors() {
            let signed =
                standard_webhooks_signature(&v.secret, &v.id, v.timestamp, v.payload.as_bytes());
            assert_eq!(signed.unwrap(), v.signature);
        }
        let v = hub_vector();
        assert_eq!(
            hub_signature_256(&v.secret, v.payload.as_bytes()),
            v.signature
        );
    }

    #[test]
    fn the_signing_helpers_round_trip_with_verify() {
        let whsec = "v1,whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let configured = secrets(&format!("{PLAIN_SECRET} {whsec}"));
        let body = br#"{"type":"INSERT","record":{"id":7}}"#;
        let now = 1_700_000_000;
        let signature = standard_webhooks_signature(whsec, "msg_round_trip", now, body).unwrap();
        let request = sw_headers("msg_round_trip", now, &signature);
        assert_eq!(configured.verify(&request, body, at(now)), Ok(()));
        for secret in [PLAIN_SECRET, whsec] {
            let request = headers(&[(HUB_SIGNATURE, &hub_signature_256(secret, body))]);
            assert_eq!(
                configured.verify(&request, body, at(now)),
                Ok(()),
                "{secret}"
            );
        }
    }

    #[test]
    fn standard_webhooks_signing_needs_a_whsec_secret() {
        let result = standard_webhooks_signature(PLAIN_SECRET, "msg", 0, b"");
        assert_eq!(result, Err(SecretError::NotWhsec));
    }
}
