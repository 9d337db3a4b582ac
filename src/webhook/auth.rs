//! Decides whether a webhook request carries a valid credential for one of the secrets in
//! `ROWBRANCH_WEBHOOK_SECRET`, under the schemes `[webhook] accept` lists: a bearer token, a
//! Standard Webhooks signature (under its `webhook-*` header names or Svix's `svix-*` ones) or
//! a GitHub-style `X-Hub-Signature-256`.
//!
//! A secret that starts with `whsec_` is a signing key: it signs, and is never accepted as a
//! bearer token, so that a setup that signs cannot be made to take unsigned deliveries that
//! never expire by sending the key itself.
//!
//! What the headers alone decide is decided before the body is read
//! ([`WebhookSecrets::judge_head`]): a bearer token, the form and freshness of a signature, a
//! scheme that is not accepted. A request may carry several credentials and one valid is
//! enough, so its body is read whenever a well-formed signature is among them, and only then
//! does [`Pending::verify`] give the last word. Only the first value of each header is read.

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
/// The longest `webhook-id` taken: ids are short (`msg_` and a few dozen characters), and one
/// that is not can only be a sender's mistake or a probe.
const MAX_ID_BYTES: usize = 256;
/// An HMAC-SHA256 is 32 bytes: a signature that decodes to any other length cannot match.
const MAC_BYTES: usize = 32;

const WEBHOOK_ID: &str = "webhook-id";
const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
const WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// Svix's names for the same three headers, which its libraries send unless the account has
/// them renamed to `webhook-*`; the scheme is the same
/// (https://docs.svix.com/receiving/verifying-payloads/how-manual).
const SVIX_ID: &str = "svix-id";
const SVIX_TIMESTAMP: &str = "svix-timestamp";
const SVIX_SIGNATURE: &str = "svix-signature";
const HUB_SIGNATURE: &str = "x-hub-signature-256";

/// Each scheme with the header that carries it (and that header's other name), in the order a
/// request's refusal is reported when none of its credentials is valid (Standard Webhooks,
/// `X-Hub-Signature-256`, `Authorization`): a stray Authorization header next to a signature
/// says less about what went wrong.
const CARRIERS: [(Scheme, &str, &str); 3] = [
    (Scheme::StandardWebhooks, WEBHOOK_SIGNATURE, SVIX_SIGNATURE),
    (Scheme::HubSignature, HUB_SIGNATURE, HUB_SIGNATURE),
    (Scheme::Bearer, "authorization", "authorization"),
];

crate::reason::named_set! {
    /// A way of carrying a credential: the values `[webhook] accept` takes.
    pub enum Scheme {
        /// `Authorization: Bearer <secret>`, for a secret that does not start with `whsec_`.
        Bearer => "bearer",
        /// `webhook-id`, `webhook-timestamp` and `webhook-signature` (or their `svix-` forms),
        /// for a `whsec_` secret.
        StandardWebhooks => "standard-webhooks",
        /// `X-Hub-Signature-256`, keyed with any secret's text.
        HubSignature => "hub-signature",
    }
}

/// The configured webhook secrets and the schemes they are taken under. Never printable:
/// Debug prints only the count.
#[derive(Clone)]
pub struct WebhookSecrets {
    secrets: Vec<Secret>,
    accept: Vec<Scheme>,
}

/// One configured secret, with what each check needs precomputed.
#[derive(Clone)]
struct Secret {
    /// The secret as configured, less a `v1,` before `whsec_`: the bearer token and hub key.
    text: String,
    /// For a `whsec_` secret, the base64-decoded rest: the Standard Webhooks HMAC key. Such a
    /// secret is a signing key, never a bearer token.
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
}

/// Why a request was refused. The log names only its [`kind`](AuthError::kind), and the
/// client only ever learns "401"; each variant says what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// None of Authorization, webhook-signature (or svix-signature) or X-Hub-Signature-256 was
    /// sent.
    NoCredentials,
    /// This credential header is not visible ASCII text.
    UnreadableHeader(&'static str),
    /// A credential of this scheme was sent, and `[webhook] accept` does not list it.
    NotAccepted(Scheme),
    /// The Authorization header does not use the Bearer scheme.
    NotBearer,
    /// The bearer token matches no configured secret.
    BadBearer,
    /// The bearer token is a `whsec_` secret, a signing key, which is never accepted as a
    /// bearer token: the sender should sign with it, or have a bearer secret of its own.
    SigningKeyAsBearer,
    /// A Standard Webhooks signature came without this header (or its `svix-` form).
    MissingHeader(&'static str),
    /// The webhook-timestamp header is not a whole number of unix seconds.
    BadTimestamp,
    /// The webhook-timestamp is more than 5 minutes in the past: a replayed request, or clocks
    /// out of step.
    StaleTimestamp,
    /// The webhook-timestamp is more than 5 minutes in the future: clocks out of step.
    FutureTimestamp,
    /// The webhook-id header is empty or longer than 256 bytes.
    MalformedId,
    /// The webhook-signature header has no entry `v1,` followed by the base64 of 32 bytes.
    MalformedSignature,
    /// Standard Webhooks headers were sent but no configured secret starts with `whsec_`.
    NoStandardWebhooksSecret,
    /// No v1 entry of the webhook-signature header matches a configured `whsec_` secret.
    BadSignature,
    /// The X-Hub-Signature-256 header is not `sha256=` followed by 64 hex digits.
    MalformedHubSignature,
    /// The X-Hub-Signature-256 signature matches no configured secret.
    BadHubSignature,
}

impl AuthError {
    /// The kind of refusal, for the log (never more: the log names no header value): a missing
    /// credential, a wrong secret, a scheme refused (not in `[webhook] accept`, or a signing
    /// key sent as a bearer token), a stale (or future) timestamp, or a bad signature.
    pub fn kind(&self) -> &'static str {
        match self {
            AuthError::NoCredentials => "missing",
            AuthError::NotBearer | AuthError::BadBearer | AuthError::NoStandardWebhooksSecret => {
                "wrong_secret"
            }
            AuthError::NotAccepted(_) | AuthError::SigningKeyAsBearer => "refused_scheme",
            AuthError::BadTimestamp | AuthError::StaleTimestamp | AuthError::FutureTimestamp => {
                "stale_timestamp"
            }
            AuthError::UnreadableHeader(_)
            | AuthError::MissingHeader(_)
            | AuthError::MalformedId
            | AuthError::MalformedSignature
            | AuthError::BadSignature
            | AuthError::MalformedHubSignature
            | AuthError::BadHubSignature => "bad_signature",
        }
    }
}

/// The credentials of a request as its headers judged them, for its body to finish, in the
/// order of [`CARRIERS`]: each a refusal already made, or a well-formed, fresh
/// signature for the body to decide.
#[derive(Debug, PartialEq, Eq)]
pub struct Pending(Vec<Judged>);

/// One credential of a request, judged as far as its headers allow: valid whatever the body
/// (`Ok(None)`), a signature for the body to decide, or refused.
type Judged = Result<Option<Signature>, AuthError>;

/// A signature read from its headers, for the body to decide: one scheme's HMAC-SHA256 of
/// `signed` and then the body, which is one of `candidates` when a secret made it.
#[derive(Debug, PartialEq, Eq)]
struct Signature {
    /// `StandardWebhooks`, keyed by the `whsec_` keys, or `HubSignature`, by every secret's text.
    scheme: Scheme,
    /// What comes before the body: `{id}.{timestamp}.` for Standard Webhooks, nothing for
    /// `X-Hub-Signature-256`.
    signed: String,
    /// The MACs the header gives (the `v1` entries, or the hub digest): 32 bytes each.
    candidates: Vec<Vec<u8>>,
}

impl Pending {
    /// Whether the body makes a signature valid. When none does, the refusal is that of the
    /// first credential in [`CARRIERS`]' order.
    pub fn verify(&self, secrets: &WebhookSecrets, body: &[u8]) -> Result<(), AuthError> {
        let outcomes = self.0.iter().map(|judged| match judged {
            Ok(None) => Ok(()),
            Ok(Some(signature)) => secrets.check_signature(signature, body),
            Err(error) => Err(error.clone()),
        });
        // Valid when any is, else refused as the first was.
        let verdict =
            outcomes.reduce(|first, next| first.or_else(|refusal| next.map_err(|_| refusal)));
        verdict.unwrap_or(Err(AuthError::NoCredentials))
    }
}

impl WebhookSecrets {
    /// Parses the value of ROWBRANCH_WEBHOOK_SECRET; every scheme is accepted until
    /// [`WebhookSecrets::accepting`] says otherwise.
    ///
    /// Secrets are separated by whitespace, so a new one can be added before the old one is
    /// removed. A `v1,` in front of `whsec_` is dropped; every secret needs at least 24
    /// characters, and the part after `whsec_` must be standard, padded base64.
    pub fn parse(raw: &str) -> Result<WebhookSecrets, SecretError> {
        let raw_secrets: Vec<&str> = raw.split_whitespace().collect();
        if raw_secrets.is_empty() {
            return Err(SecretError::Empty);
        }
        let count = raw_secrets.len();
        let secrets = raw_secrets
            .iter()
            .enumerate()
            .map(|(index, raw)| Secret::parse(raw, index + 1, count))
            .collect::<Result<_, _>>()?;
        Ok(WebhookSecrets {
            secrets,
            accept: Scheme::ALL.to_vec(),
        })
    }

    /// The App's webhook secret (`GITHUB_WEBHOOK_SECRET`), which GitHub signs its events with
    /// under `X-Hub-Signature-256` alone: one secret taken whole, spaces and all, of any
    /// length, since it is whatever the App's settings page holds (the rules of
    /// `ROWBRANCH_WEBHOOK_SECRET`, which rowbranch's own setup makes, do not apply). It is never
    /// taken as a bearer token nor as a Standard Webhooks key.
    pub fn github(secret: &str) -> WebhookSecrets {
        WebhookSecrets {
            secrets: vec![Secret {
                text: secret.to_owned(),
                whsec_key: None,
            }],
            accept: vec![Scheme::HubSignature],
        }
    }

    /// The same secrets, taken only under `schemes` (`[webhook] accept`): a credential of any
    /// other scheme is refused as a wrong one is.
    pub fn accepting(self, schemes: &[Scheme]) -> WebhookSecrets {
        WebhookSecrets {
            accept: schemes.to_vec(),
            ..self
        }
    }

    /// Whether some secret can authenticate a delivery under `scheme`: a bearer token needs a
    /// secret that is not a `whsec_` signing key, a Standard Webhooks signature one that is,
    /// and `X-Hub-Signature-256` any.
    pub fn can_authenticate(&self, scheme: Scheme) -> bool {
        self.keys(scheme).next().is_some()
    }

    /// What a credential of `scheme` is checked against: for a bearer token, the text of each
    /// secret that is not a signing key; for a Standard Webhooks signature, each `whsec_` key;
    /// for `X-Hub-Signature-256`, every secret's text.
    fn keys(&self, scheme: Scheme) -> impl Iterator<Item = &[u8]> {
        self.secrets
            .iter()
            .filter_map(move |secret| match (scheme, &secret.whsec_key) {
                (Scheme::StandardWebhooks, key) => key.as_deref(),
                (Scheme::Bearer, Some(_)) => None,
                _ => Some(secret.text.as_bytes()),
            })
    }

    /// Whether some accepted scheme can authenticate a delivery with some secret: when not,
    /// every delivery is refused, which `serve` warns of and `doctor` says how to fix.
    pub fn can_authenticate_any(&self) -> bool {
        self.accept
            .iter()
            .any(|scheme| self.can_authenticate(*scheme))
    }

    /// `[webhook] accept` as the file writes it: `["bearer", "hub-signature"]`.
    pub fn accept_list(&self) -> String {
        let names: Vec<&str> = self.accept.iter().map(|scheme| scheme.as_str()).collect();
        // A list of plain names prints as TOML writes it.
        format!("{names:?}")
    }

    /// How many secrets are configured.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Always false for parsed secrets: `parse` refuses an empty variable.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// What the headers alone say: whether the request can be refused, or taken, before its
    /// body is read. `Ok(None)`: a credential is valid whatever the body (a bearer token that
    /// matches). `Err`: every credential the request carries is wrong whatever its body (or it
    /// carries none), and it is refused unread. `Ok(Some(..))`: a signature is well formed and
    /// fresh, and none is valid yet; only the body can tell, so it is read and then
    /// [`Pending::verify`] decides, on what the headers decided. Nothing is judged here that
    /// the body could change, so the credentials are judged once.
    pub fn judge_head(
        &self,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Result<Option<Pending>, AuthError> {
        let judged: Vec<Judged> = CARRIERS
            .iter()
            .filter_map(|&(scheme, name, alias)| {
                let value = header(headers, name, alias)?;
                Some(value.and_then(|value| {
                    if !self.accept.contains(&scheme) {
                        return Err(AuthError::NotAccepted(scheme));
                    }
                    match scheme {
                        Scheme::Bearer => self.judge_bearer(value),
                        Scheme::HubSignature => {
                            let expected = parse_hub_signature(value)
                                .ok_or(AuthError::MalformedHubSignature)?;
                            Ok(Some(Signature {
                                scheme,
                                signed: String::new(),
                                candidates: vec![expected],
                            }))
                        }
                        Scheme::StandardWebhooks => {
                            self.judge_standard_webhooks(headers, value, now)
                        }
                    }
                }))
            })
            .collect();
        if judged.contains(&Ok(None)) {
            return Ok(None);
        }
        if judged.iter().any(|j| matches!(j, Ok(Some(_)))) {
            return Ok(Some(Pending(judged)));
        }
        let refusal = judged.into_iter().find_map(Result::err);
        Err(refusal.unwrap_or(AuthError::NoCredentials))
    }

    /// `Authorization: Bearer <secret>`, wholly judged from the header. The scheme is matched
    /// case-insensitively, as HTTP auth schemes are (RFC 9110 §11.1); the token is matched
    /// exactly, against the secrets that are not signing keys.
    fn judge_bearer(&self, value: &str) -> Judged {
        let token = credential(value, "bearer").ok_or(AuthError::NotBearer)?;
        // Every secret is compared, so the timing says nothing of which one matched.
        let (mut bearer, mut signing_key) = (false, false);
        for secret in &self.secrets {
            let equal = same_secret(&secret.text, token);
            if secret.whsec_key.is_some() {
                signing_key |= equal;
            } else {
                bearer |= equal;
            }
        }
        match (bearer, signing_key) {
            (true, _) => Ok(None),
            (false, true) => Err(AuthError::SigningKeyAsBearer),
            (false, false) => Err(AuthError::BadBearer),
        }
    }

    /// Standard Webhooks, present as soon as `webhook-signature` (or `svix-signature`) is: the
    /// headers' form and the timestamp's freshness from the headers, the match with the body.
    fn judge_standard_webhooks(
        &self,
        headers: &HeaderMap,
        signature: &str,
        now: SystemTime,
    ) -> Judged {
        let required =
            |name, svix| header(headers, name, svix).unwrap_or(Err(AuthError::MissingHeader(name)));
        let id = required(WEBHOOK_ID, SVIX_ID)?;
        let timestamp = required(WEBHOOK_TIMESTAMP, SVIX_TIMESTAMP)?;
        if !self.can_authenticate(Scheme::StandardWebhooks) {
            return Err(AuthError::NoStandardWebhooksSecret);
        }
        check_timestamp(timestamp, now)?;
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(AuthError::MalformedId);
        }
        let candidates = v1_signatures(signature);
        if candidates.is_empty() {
            return Err(AuthError::MalformedSignature);
        }
        Ok(Some(Signature {
            scheme: Scheme::StandardWebhooks,
            signed: format!("{id}.{timestamp}."),
            candidates,
        }))
    }

    /// Whether a well-formed signature matches `body` under some secret.
    fn check_signature(&self, signature: &Signature, body: &[u8]) -> Result<(), AuthError> {
        let refusal = match signature.scheme {
            Scheme::StandardWebhooks => AuthError::BadSignature,
            _ => AuthError::BadHubSignature,
        };
        let matched = self.keys(signature.scheme).any(|key| {
            let mac = signed_mac(key, signature.signed.as_bytes(), body);
            (signature.candidates.iter())
                .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        });
        matched.then_some(()).ok_or(refusal)
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
        let whsec_key = (text.strip_prefix(WHSEC_PREFIX))
            .map(|encoded| BASE64.decode(encoded))
            .transpose()
            .map_err(|_| SecretError::InvalidWhsecBase64 { position, count })?;
        Ok(Secret {
            text: text.to_owned(),
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
        .and_then(|v| credential(v, "basic"))
        .and_then(|encoded| BASE64.decode(encoded).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok());
    given.is_some_and(|given| {
        same_secret(password, given.split_once(':').map_or("", |(_, pass)| pass))
    })
}

/// Whether `given` is `secret`, compared by digest in constant time, so that neither the
/// content nor the length of the secret shows in the comparison's timing.
fn same_secret(secret: &str, given: &str) -> bool {
    let (a, b) = (Sha256::digest(secret), Sha256::digest(given));
    bool::from(a[..].ct_eq(&b[..]))
}

/// Whether a request carries any of the credential headers at all: one that carries none is
/// refused before its body is read.
pub fn carries_credentials(headers: &HeaderMap) -> bool {
    CARRIERS
        .iter()
        .any(|(_, name, alias)| headers.contains_key(*name) || headers.contains_key(*alias))
}

/// Drops the `v1,` that Supabase shows before a `whsec_` secret; any other secret is kept whole.
fn strip_display_version(raw: &str) -> &str {
    match raw.strip_prefix(DISPLAY_VERSION_PREFIX) {
        Some(rest) if rest.starts_with(WHSEC_PREFIX) => rest,
        _ => raw,
    }
}

/// The first value of header `name`, else of `alias` (a Standard Webhooks header's Svix form),
/// as text; `None` when the request has neither.
fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
    alias: &'static str,
) -> Option<Result<&'a str, AuthError>> {
    let (name, value) = [name, alias]
        .into_iter()
        .find_map(|name| Some((name, headers.get(name)?)))?;
    Some(
        value
            .to_str()
            .map_err(|_| AuthError::UnreadableHeader(name)),
    )
}

/// The credential of an `Authorization` value under `scheme`, matched case-insensitively as
/// HTTP auth schemes are (RFC 9110 §11.1).
fn credential<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (given, credential) = value.split_once(' ')?;
    // Secrets never contain whitespace, so trimming the token cannot make a wrong one right.
    given
        .eq_ignore_ascii_case(scheme)
        .then(|| credential.trim())
}

/// The 32-byte digest in `sha256=<hex>`, or `None` if the value is not of that form.
fn parse_hub_signature(value: &str) -> Option<Vec<u8>> {
    let digest = hex::decode(value.strip_prefix("sha256=")?).ok()?;
    (digest.len() == 32).then_some(digest)
}

/// The decoded `v1` entries of a `webhook-signature` header. Entries of other versions, and
/// entries that are not the base64 of 32 bytes, cannot match, so they are skipped.
fn v1_signatures(header: &str) -> Vec<Vec<u8>> {
    header
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|signature| BASE64.decode(signature).ok())
        .filter(|mac| mac.len() == MAC_BYTES)
        .collect()
}

fn check_timestamp(raw: &str, now: SystemTime) -> Result<(), AuthError> {
    let sent: i64 = raw.parse().map_err(|_| AuthError::BadTimestamp)?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    if sent.abs_diff(now) <= TIMESTAMP_TOLERANCE_SECS {
        Ok(())
    } else if sent < now {
        Err(AuthError::StaleTimestamp)
    } else {
        Err(AuthError::FutureTimestamp)
    }
}

/// The HMAC of `signed` and then `body`: Standard Webhooks' `{id}.{timestamp}.{body}`, or
/// the body alone for `X-Hub-Signature-256`.
fn signed_mac(key: &[u8], signed: &[u8], body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(signed);
    mac.update(body);
    mac
}

/// The `X-Hub-Signature-256` value for `body`: `sha256=<hex HMAC-SHA256>`, keyed with the
/// secret's text as it would be configured (a `v1,` before `whsec_` is dropped first).
pub fn hub_signature_256(secret: &str, body: &[u8]) -> String {
    let mac = signed_mac(strip_display_version(secret).as_bytes(), b"", body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A fresh signing secret, for `init`'s Vault trigger: a Standard Webhooks secret, `whsec_` and
/// 32 random bytes in base64 (50 characters), whose HMAC key is the 32 bytes. It signs
/// (`X-Hub-Signature-256` too, keyed with the whole text) and is never taken as a bearer token.
pub fn generate_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{WHSEC_PREFIX}{}", BASE64.encode(bytes)))
}

/// A fresh bearer secret, for `init`'s `supabase.sql` and the demo: 32 random bytes in hex (64
/// characters), which can never be taken for a `whsec_` signing key.
pub fn generate_bearer_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests;
