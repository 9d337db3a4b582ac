//! Any header values as credentials, over any body: verification never panics and never
//! accepts what no secret signed.
#![no_main]

use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use rowbranch::webhook::auth::WebhookSecrets;

const NAMES: [&str; 5] = [
    "authorization",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-hub-signature-256",
];

fuzz_target!(|data: &[u8]| {
    let secrets = WebhookSecrets::parse(
        "a-plain-test-secret-of-32-characters whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    .unwrap();
    // The input is NUL-separated: one value per credential header, then the body.
    let mut parts = data.split(|b| *b == 0);
    let mut headers = http::HeaderMap::new();
    for name in NAMES {
        if let Some(value) = parts
            .next()
            .and_then(|v| http::HeaderValue::from_bytes(v).ok())
        {
            headers.insert(name, value);
        }
    }
    let body = parts.next().unwrap_or_default();
    // What the headers decide, else what the body decides of the signatures they left open.
    let verdict = match secrets.judge_head(&headers, SystemTime::now()) {
        Ok(None) => Ok(()),
        Ok(Some(pending)) => pending.verify(&secrets, body),
        Err(e) => Err(e),
    };
    assert!(verdict.is_err());
});
