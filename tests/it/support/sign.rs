//! What a sender's credentials are checked with, from the test's side: a Standard Webhooks
//! signature made here, independently of rowbranch, and a request's credentials checked whole
//! (the headers, then the body) as `/webhook`'s door checks them in two steps.

use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use rowbranch::webhook::auth::{AuthError, WebhookSecrets};
use sha2::Sha256;

/// One `webhook-signature` entry, `v1,<base64>`: the HMAC-SHA256 of `{id}.{timestamp}.{body}`
/// keyed with the base64-decoded part of `secret` after `whsec_` (a `v1,` in front, as
/// Supabase shows it, is dropped first).
pub fn standard_webhooks_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let secret = secret.strip_prefix("v1,").unwrap_or(secret);
    let encoded = secret.strip_prefix("whsec_").expect("a whsec_ secret");
    let key = BASE64
        .decode(encoded)
        .expect("a whsec_ secret's key is base64");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes keys of any length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Whether `secrets` take a request with these headers and this body at `now`: what the
/// headers decide, else what the body decides of the signatures they left to it.
pub fn verify(
    secrets: &WebhookSecrets,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(), AuthError> {
    match secrets.judge_head(headers, now)? {
        None => Ok(()),
        Some(pending) => pending.verify(secrets, body),
    }
}
