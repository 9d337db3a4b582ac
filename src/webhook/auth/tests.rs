//! The credential checks against the published Standard Webhooks vectors and GitHub's example,
//! and each refusal with its reason.

use super::*;
use http::{HeaderName, HeaderValue};
use std::time::Duration;

/// Standard Webhooks' published test vectors and GitHub's documented example.
const VECTORS: &str = include_str!("../../../tests/fixtures/standard-webhooks-vectors.json");

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
    /// GitHub's example secret contains spaces, so it cannot go through `parse`: it is taken
    /// whole, under every scheme.
    fn configured(&self) -> WebhookSecrets {
        WebhookSecrets {
            secrets: vec![Secret::parse(&self.secret, 1, 1).expect("a valid secret")],
            accept: Scheme::ALL.to_vec(),
        }
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

/// One `webhook-signature` entry, `v1,<base64>`, under a `whsec_` secret as configured.
fn sw_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let secret = Secret::parse(secret, 1, 1).expect("a valid secret");
    let key = secret.whsec_key.expect("a whsec_ secret");
    let mac = signed_mac(&key, format!("{id}.{timestamp}.").as_bytes(), body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Whether `secrets` take the request whole: the headers' judgement, then the body's.
fn verify(
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

fn secrets(raw: &str) -> WebhookSecrets {
    WebhookSecrets::parse(raw).expect("valid secrets")
}

/// Verifies the first Standard Webhooks vector, with `now` shifted by `skew` seconds.
fn verify_first_sw_vector_with_skew(skew: i64) -> Result<(), AuthError> {
    let v = &sw_vectors()[0];
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp + skew),
    )
}

#[test]
fn both_standard_webhooks_vectors_verify_at_their_timestamp() {
    for v in sw_vectors() {
        let request = sw_headers(&v.id, v.timestamp, &v.signature);
        let result = verify(
            &secrets(&v.secret),
            &request,
            v.payload.as_bytes(),
            at(v.timestamp),
        );
        assert_eq!(result, Ok(()), "vector {}", v.id);
    }
}

#[test]
fn a_generated_secret_is_a_whsec_signing_key_of_32_bytes_and_never_a_bearer_token() {
    let secret = generate_secret().unwrap();
    assert_eq!(secret.len(), 50, "{}", secret.len());
    let configured = secrets(&secret);
    assert_eq!(
        configured.secrets[0].whsec_key.as_ref().map(Vec::len),
        Some(32)
    );
    let now = at(1_700_000_000);
    let signature = sw_signature(&secret, "msg_1", 1_700_000_000, b"{}");
    let signed = sw_headers("msg_1", 1_700_000_000, &signature);
    assert_eq!(verify(&configured, &signed, b"{}", now), Ok(()));
    let bearer = headers(&[("authorization", &format!("Bearer {secret}"))]);
    assert_eq!(
        verify(&configured, &bearer, b"{}", now),
        Err(AuthError::SigningKeyAsBearer)
    );
    assert_ne!(generate_secret().unwrap(), secret);
}

#[test]
fn a_generated_bearer_secret_is_64_hex_digits_and_a_bearer_token() {
    let secret = generate_bearer_secret().unwrap();
    assert_eq!(secret.len(), 64);
    assert!(secret.chars().all(|c| c.is_ascii_hexdigit()), "{secret}");
    let configured = secrets(&secret);
    assert!(configured.can_authenticate(Scheme::Bearer));
    assert!(!configured.can_authenticate(Scheme::StandardWebhooks));
    let bearer = headers(&[("authorization", &format!("Bearer {secret}"))]);
    assert_eq!(verify(&configured, &bearer, b"{}", at(0)), Ok(()));
    assert_ne!(generate_bearer_secret().unwrap(), secret);
}

#[test]
fn a_v1_comma_before_a_whsec_secret_is_stripped() {
    let v = &sw_vectors()[0];
    let configured = secrets(&format!("v1,{}", v.secret));
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    assert_eq!(
        verify(&configured, &request, v.payload.as_bytes(), at(v.timestamp)),
        Ok(())
    );
    // It is a signing key all the same, with or without the `v1,`.
    for token in [v.secret.clone(), format!("v1,{}", v.secret)] {
        let bearer = headers(&[("authorization", &format!("Bearer {token}"))]);
        assert!(verify(&configured, &bearer, b"", at(0)).is_err(), "{token}");
    }
}

#[test]
fn a_v1_comma_before_a_non_whsec_secret_is_kept() {
    let configured = secrets(&format!("v1,{PLAIN_SECRET}"));
    let bearer = headers(&[("authorization", &format!("Bearer v1,{PLAIN_SECRET}"))]);
    assert_eq!(verify(&configured, &bearer, b"", at(0)), Ok(()));
}

#[test]
fn one_matching_entry_among_several_signatures_is_enough() {
    let v = &sw_vectors()[0];
    let wrong = &sw_vectors()[1].signature;
    let header = format!("v2,abc {wrong} v1,not-base64! {}", v.signature);
    let request = sw_headers(&v.id, v.timestamp, &header);
    let result = verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Ok(()));
}

#[test]
fn a_tampered_body_is_refused() {
    let v = &sw_vectors()[0];
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    let body = v.payload.replace("test_user", "admin");
    let result = verify(
        &secrets(&v.secret),
        &request,
        body.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Err(AuthError::BadSignature));
}

#[test]
fn a_wrong_id_is_refused() {
    let v = &sw_vectors()[0];
    let request = sw_headers("msg_other", v.timestamp, &v.signature);
    let result = verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Err(AuthError::BadSignature));
}

#[test]
fn a_right_signature_under_another_version_prefix_is_refused() {
    let v = &sw_vectors()[0];
    let header = v.signature.replacen("v1,", "v1a,", 1);
    let request = sw_headers(&v.id, v.timestamp, &header);
    let result = verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    // With no `v1,` entry at all the header is malformed: refused before the body is read.
    assert_eq!(result, Err(AuthError::MalformedSignature));
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
    let result = verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Err(AuthError::BadTimestamp));
}

#[test]
fn standard_webhooks_headers_without_a_whsec_secret_are_refused() {
    let v = &sw_vectors()[0];
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    let result = verify(
        &secrets(PLAIN_SECRET),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Err(AuthError::NoStandardWebhooksSecret));
}

#[test]
fn a_signature_without_its_id_header_is_refused() {
    let v = &sw_vectors()[0];
    let mut request = sw_headers(&v.id, v.timestamp, &v.signature);
    request.remove(WEBHOOK_ID);
    let result = verify(
        &secrets(&v.secret),
        &request,
        v.payload.as_bytes(),
        at(v.timestamp),
    );
    assert_eq!(result, Err(AuthError::MissingHeader(WEBHOOK_ID)));
}

#[test]
fn the_github_vector_verifies() {
    let v = hub_vector();
    let request = headers(&[("X-Hub-Signature-256", &v.signature)]);
    assert_eq!(
        verify(&v.configured(), &request, v.payload.as_bytes(), at(0)),
        Ok(())
    );
}

#[test]
fn a_hub_signature_with_one_wrong_hex_digit_is_refused() {
    let v = hub_vector();
    let wrong = v.signature.replacen("757107", "757108", 1);
    let request = headers(&[("X-Hub-Signature-256", &wrong)]);
    let result = verify(&v.configured(), &request, v.payload.as_bytes(), at(0));
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
        let result = verify(&v.configured(), &request, v.payload.as_bytes(), at(0));
        assert_eq!(result, Err(AuthError::MalformedHubSignature), "{value}");
    }
}

#[test]
fn a_bearer_token_equal_to_the_secret_is_accepted() {
    let request = headers(&[("authorization", &format!("Bearer {PLAIN_SECRET}"))]);
    assert_eq!(
        verify(&secrets(PLAIN_SECRET), &request, b"{}", at(0)),
        Ok(())
    );
}

#[test]
fn a_bearer_token_that_is_a_prefix_or_an_extension_of_the_secret_is_refused() {
    let prefix = &PLAIN_SECRET[..PLAIN_SECRET.len() - 1];
    let longer = format!("{PLAIN_SECRET}0");
    for token in [prefix, longer.as_str(), ""] {
        let request = headers(&[("authorization", &format!("Bearer {token}"))]);
        let result = verify(&secrets(PLAIN_SECRET), &request, b"{}", at(0));
        assert_eq!(result, Err(AuthError::BadBearer), "{token:?}");
    }
}

/// Auth schemes are case-insensitive in HTTP, so `bearer` and `BEARER` work too.
#[test]
fn the_bearer_scheme_is_matched_in_any_case() {
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let request = headers(&[("authorization", &format!("{scheme} {PLAIN_SECRET}"))]);
        assert_eq!(
            verify(&secrets(PLAIN_SECRET), &request, b"", at(0)),
            Ok(()),
            "{scheme}"
        );
    }
}

#[test]
fn another_authorization_scheme_is_refused() {
    let request = headers(&[("authorization", &format!("Basic {PLAIN_SECRET}"))]);
    let result = verify(&secrets(PLAIN_SECRET), &request, b"", at(0));
    assert_eq!(result, Err(AuthError::NotBearer));
}

#[test]
fn a_request_signed_with_the_second_of_two_secrets_is_accepted() {
    let v = &sw_vectors()[1];
    let configured = secrets(&format!("{PLAIN_SECRET}\n  {}", v.secret));
    assert_eq!(configured.len(), 2);
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    assert_eq!(
        verify(&configured, &request, v.payload.as_bytes(), at(v.timestamp)),
        Ok(())
    );
    let hub = headers(&[(HUB_SIGNATURE, &hub_signature_256(&v.secret, b"{}"))]);
    assert_eq!(verify(&configured, &hub, b"{}", at(0)), Ok(()));
    let bearer = headers(&[("authorization", &format!("Bearer {PLAIN_SECRET}"))]);
    assert_eq!(verify(&configured, &bearer, b"{}", at(0)), Ok(()));
    // The whsec_ one signs; as a bearer token it is refused, whichever secrets surround it.
    let bearer = headers(&[("authorization", &format!("Bearer {}", v.secret))]);
    assert_eq!(
        verify(&configured, &bearer, b"{}", at(0)),
        Err(AuthError::SigningKeyAsBearer)
    );
}

#[test]
fn one_valid_credential_is_enough_when_another_fails() {
    let v = hub_vector();
    let request = headers(&[
        ("authorization", "Bearer some-other-service-token"),
        (HUB_SIGNATURE, &v.signature),
    ]);
    assert_eq!(
        verify(&v.configured(), &request, v.payload.as_bytes(), at(0)),
        Ok(())
    );
}

#[test]
fn a_request_without_credential_headers_has_no_credentials() {
    let request = headers(&[("content-type", "application/json")]);
    let result = verify(&secrets(PLAIN_SECRET), &request, b"{}", at(0));
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
        headers(&[("authorization", &format!("Bearer {}", v.secret))]),
        sw_headers(&"m".repeat(257), v.timestamp, &v.signature),
        sw_headers(&v.id, v.timestamp, "v1,bm90IGEgbWFj"),
    ]
}

#[test]
fn no_error_message_contains_a_secret_or_a_header_value() {
    let v = &sw_vectors()[0];
    let configured = secrets(&format!("{PLAIN_SECRET} {}", v.secret));
    let mut messages = Vec::new();
    for request in failing_requests(v) {
        let error = verify(&configured, &request, b"body", at(v.timestamp)).unwrap_err();
        // What the error can show: its variant and what it carries.
        let message = format!("{error:?}");
        for value in request.values() {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(!message.contains(value.as_ref()), "{message} shows {value}");
        }
        messages.push(message);
    }
    let plain_only = secrets(PLAIN_SECRET);
    let request = sw_headers(&v.id, v.timestamp, &v.signature);
    messages.push(format!("{:?}", verify(&plain_only, &request, b"", at(0))));
    let bad_timestamp = headers(&[
        (WEBHOOK_SIGNATURE, "v1,x"),
        (WEBHOOK_ID, "i"),
        (WEBHOOK_TIMESTAMP, "t0"),
    ]);
    messages.push(format!(
        "{:?}",
        verify(&configured, &bad_timestamp, b"", at(0))
    ));
    messages.push(SecretError::Empty.to_string());
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
        let signed = sw_signature(&v.secret, &v.id, v.timestamp, v.payload.as_bytes());
        assert_eq!(signed, v.signature);
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
    let signature = sw_signature(whsec, "msg_round_trip", now, body);
    let request = sw_headers("msg_round_trip", now, &signature);
    assert_eq!(verify(&configured, &request, body, at(now)), Ok(()));
    for secret in [PLAIN_SECRET, whsec] {
        let request = headers(&[(HUB_SIGNATURE, &hub_signature_256(secret, body))]);
        assert_eq!(
            verify(&configured, &request, body, at(now)),
            Ok(()),
            "{secret}"
        );
    }
}

/// The configured secrets, taking only `schemes`.
fn accepting(raw: &str, schemes: &[Scheme]) -> WebhookSecrets {
    secrets(raw).accepting(schemes)
}

#[test]
fn a_bearer_alone_is_judged_from_the_headers() {
    let configured = secrets(PLAIN_SECRET);
    let right = headers(&[("authorization", &format!("Bearer {PLAIN_SECRET}"))]);
    assert_eq!(configured.judge_head(&right, at(0)), Ok(None));
    for value in ["nope", "Bearer nope", "Basic x"] {
        let wrong = headers(&[("authorization", value)]);
        assert!(configured.judge_head(&wrong, at(0)).is_err(), "{value}");
    }
    assert_eq!(
        configured.judge_head(&headers(&[]), at(0)),
        Err(AuthError::NoCredentials)
    );
}

#[test]
fn a_wrong_bearer_beside_a_well_formed_signature_waits_for_the_body() {
    let v = hub_vector();
    let request = headers(&[
        ("authorization", "Bearer some-other-service-token"),
        (HUB_SIGNATURE, &v.signature),
    ]);
    assert!(matches!(
        v.configured().judge_head(&request, at(0)),
        Ok(Some(_))
    ));
    // A malformed signature cannot become right: refused unread, with the signature's error.
    let request = headers(&[
        ("authorization", "Bearer some-other-service-token"),
        (HUB_SIGNATURE, "sha256=nothex"),
    ]);
    assert_eq!(
        v.configured().judge_head(&request, at(0)),
        Err(AuthError::MalformedHubSignature)
    );
}

#[test]
fn a_standard_webhooks_signature_is_judged_by_its_form_and_its_time_before_the_body() {
    let v = &sw_vectors()[0];
    let configured = secrets(&v.secret);
    let judge =
        |request: &HeaderMap, skew: i64| configured.judge_head(request, at(v.timestamp + skew));
    assert!(matches!(
        judge(&sw_headers(&v.id, v.timestamp, &v.signature), 0),
        Ok(Some(_))
    ));
    for (request, skew, error) in [
        (
            sw_headers(&v.id, v.timestamp, &v.signature),
            301,
            AuthError::StaleTimestamp,
        ),
        (
            sw_headers(&v.id, v.timestamp, &v.signature),
            -301,
            AuthError::FutureTimestamp,
        ),
        (
            sw_headers("", v.timestamp, &v.signature),
            0,
            AuthError::MalformedId,
        ),
        (
            sw_headers(&"m".repeat(257), v.timestamp, &v.signature),
            0,
            AuthError::MalformedId,
        ),
        (
            sw_headers(&v.id, v.timestamp, "v1,not base64!"),
            0,
            AuthError::MalformedSignature,
        ),
        (
            sw_headers(&v.id, v.timestamp, "v1a,abc= v2,abc="),
            0,
            AuthError::MalformedSignature,
        ),
        // Base64, but of 9 bytes: no HMAC-SHA256.
        (
            sw_headers(&v.id, v.timestamp, "v1,bm90IGEgbWFj"),
            0,
            AuthError::MalformedSignature,
        ),
    ] {
        assert_eq!(judge(&request, skew), Err(error.clone()), "{error:?}");
        assert_eq!(
            verify(
                &configured,
                &request,
                v.payload.as_bytes(),
                at(v.timestamp + skew)
            ),
            Err(error)
        );
    }
    let mut bad_time = sw_headers(&v.id, v.timestamp, &v.signature);
    bad_time.insert(WEBHOOK_TIMESTAMP, HeaderValue::from_static("soon"));
    assert_eq!(judge(&bad_time, 0), Err(AuthError::BadTimestamp));
}

/// What the headers refuse, the body could not have saved; what they take, the body confirms.
#[test]
fn the_judgement_of_the_headers_agrees_with_the_verification_of_the_whole() {
    let v = &sw_vectors()[0];
    let configured = secrets(&format!("{PLAIN_SECRET} {}", v.secret));
    let now = at(v.timestamp);
    let mut requests = failing_requests(v);
    requests.push(sw_headers(&v.id, v.timestamp, &v.signature));
    requests.push(headers(&[(
        "authorization",
        &format!("Bearer {PLAIN_SECRET}"),
    )]));
    for request in requests {
        let whole = verify(&configured, &request, v.payload.as_bytes(), now);
        match configured.judge_head(&request, now) {
            Ok(None) => assert_eq!(whole, Ok(()), "{request:?}"),
            Err(error) => assert_eq!(whole, Err(error), "{request:?}"),
            Ok(Some(pending)) => assert_eq!(
                pending.verify(&configured, v.payload.as_bytes()),
                whole,
                "{request:?}"
            ),
        }
    }
}

#[test]
fn svix_header_names_are_standard_webhooks_too() {
    let v = &sw_vectors()[0];
    let timestamp = v.timestamp.to_string();
    let request = headers(&[
        (SVIX_ID, &v.id),
        (SVIX_TIMESTAMP, &timestamp),
        (SVIX_SIGNATURE, &v.signature),
    ]);
    assert!(carries_credentials(&request));
    let configured = secrets(&v.secret).accepting(&[Scheme::StandardWebhooks]);
    let now = at(v.timestamp);
    assert!(matches!(configured.judge_head(&request, now), Ok(Some(_))));
    assert_eq!(
        verify(&configured, &request, v.payload.as_bytes(), now),
        Ok(())
    );
    let tampered = v.payload.replace("test_user", "admin");
    assert_eq!(
        verify(&configured, &request, tampered.as_bytes(), now),
        Err(AuthError::BadSignature)
    );
    // The webhook- names win where both are sent.
    let mut both = request.clone();
    both.insert(WEBHOOK_ID, HeaderValue::from_static("msg_other"));
    assert_eq!(
        verify(&configured, &both, v.payload.as_bytes(), now),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn a_scheme_accept_does_not_list_is_refused_as_a_wrong_secret_is() {
    let v = &sw_vectors()[0];
    let raw = format!("{PLAIN_SECRET} {}", v.secret);
    let now = at(v.timestamp);
    let bearer = headers(&[("authorization", &format!("Bearer {PLAIN_SECRET}"))]);
    let hub = headers(&[(HUB_SIGNATURE, &hub_signature_256(PLAIN_SECRET, b"{}"))]);
    let signed = sw_headers(&v.id, v.timestamp, &v.signature);

    let signatures_only = accepting(&raw, &[Scheme::StandardWebhooks]);
    for (request, scheme) in [(&bearer, Scheme::Bearer), (&hub, Scheme::HubSignature)] {
        let refused = AuthError::NotAccepted(scheme);
        assert_eq!(refused.kind(), "refused_scheme");
        assert_eq!(
            signatures_only.judge_head(request, now),
            Err(refused.clone())
        );
        assert_eq!(verify(&signatures_only, request, b"{}", now), Err(refused));
    }
    assert_eq!(
        verify(&signatures_only, &signed, v.payload.as_bytes(), now),
        Ok(())
    );

    let bearer_only = accepting(&raw, &[Scheme::Bearer]);
    assert_eq!(bearer_only.judge_head(&bearer, now), Ok(None));
    assert_eq!(
        bearer_only.judge_head(&signed, now),
        Err(AuthError::NotAccepted(Scheme::StandardWebhooks))
    );
    // A refused scheme beside an accepted one that is valid: one valid is enough.
    let mut both = signed.clone();
    both.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {PLAIN_SECRET}")).unwrap(),
    );
    assert_eq!(verify(&bearer_only, &both, b"", now), Ok(()));
    assert_eq!(
        verify(&signatures_only, &both, v.payload.as_bytes(), now),
        Ok(())
    );
}

#[test]
fn a_signing_key_as_a_bearer_token_is_a_refused_scheme() {
    let error = AuthError::SigningKeyAsBearer;
    assert_eq!(error.kind(), "refused_scheme");
    let v = &sw_vectors()[0];
    let configured = secrets(&v.secret);
    let bearer = headers(&[("authorization", &format!("Bearer {}", v.secret))]);
    assert_eq!(configured.judge_head(&bearer, at(0)), Err(error));
}

#[test]
fn which_secrets_can_authenticate_which_scheme() {
    let v = &sw_vectors()[0];
    let plain = secrets(PLAIN_SECRET);
    let signing = secrets(&v.secret);
    assert!(plain.can_authenticate(Scheme::Bearer));
    assert!(plain.can_authenticate(Scheme::HubSignature));
    assert!(!plain.can_authenticate(Scheme::StandardWebhooks));
    assert!(!signing.can_authenticate(Scheme::Bearer));
    assert!(signing.can_authenticate(Scheme::HubSignature));
    assert!(signing.can_authenticate(Scheme::StandardWebhooks));
    for &scheme in Scheme::ALL {
        assert_eq!(Scheme::parse(scheme.as_str()), Some(scheme));
    }
    assert_eq!(Scheme::parse("Bearer"), None);
}

/// The App's webhook secret (`GITHUB_WEBHOOK_SECRET`): GitHub's own example, spaces and all,
/// signs under `X-Hub-Signature-256` and under nothing else.
#[test]
fn the_apps_secret_is_taken_whole_and_only_for_a_hub_signature() {
    let v = hub_vector();
    let app = WebhookSecrets::github(&v.secret);
    let body = v.payload.as_bytes();
    let signed = headers(&[("X-Hub-Signature-256", &v.signature)]);
    assert!(matches!(app.judge_head(&signed, at(0)), Ok(Some(_))));
    assert_eq!(verify(&app, &signed, body, at(0)), Ok(()));
    // A near miss, a body changed after signing, and a signature made with another secret (the
    // one of POST /webhook, say).
    let near_miss = v.signature.replacen("757107", "757108", 1);
    let other = hub_signature_256(PLAIN_SECRET, body);
    for (signature, body) in [
        (near_miss.as_str(), body),
        (v.signature.as_str(), b"{\"action\":\"opened\"}".as_slice()),
        (other.as_str(), body),
    ] {
        let request = headers(&[("X-Hub-Signature-256", signature)]);
        assert_eq!(
            verify(&app, &request, body, at(0)),
            Err(AuthError::BadHubSignature),
            "{signature}"
        );
    }
    // Refused from the headers alone, before any body: none, a malformed one, the secret as a
    // bearer token.
    let bearer = format!("Bearer {}", v.secret);
    for request in [
        headers(&[]),
        headers(&[("X-Hub-Signature-256", "sha256=abc")]),
        headers(&[("X-Hub-Signature-256", &v.signature[7..])]),
        headers(&[("authorization", &bearer)]),
    ] {
        assert!(app.judge_head(&request, at(0)).is_err(), "{request:?}");
    }
}
