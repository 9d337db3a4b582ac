//! App JWTs as GitHub checks them, and the test-only key pair.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use octocrab::jsonwebtoken::{
    decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation,
};
use serde_json::Value;

/// The test-only App private key (PKCS#1 PEM); committed, worthless outside tests.
pub const TEST_APP_PRIVATE_KEY_PEM: &str = include_str!("../../fixtures/test-only-app-key.pem");
/// Its public half, with which the fake verifies App JWTs.
pub const TEST_APP_PUBLIC_KEY_PEM: &str = include_str!("../../fixtures/test-only-app-key.pub.pem");

pub(crate) const JWT_DECODE: &str = "A JSON web token could not be decoded";
pub(crate) const JWT_EXP_TOO_FAR: &str = "'Expiration time' claim ('exp') is too far in the future";
pub(crate) const JWT_EXPIRED: &str = "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
pub(crate) const JWT_IAT: &str =
    "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
pub(crate) const JWT_DOC: &str = "https://docs.github.com/rest";

/// Clock skew GitHub tolerates on `iat`, and slack on the 10-minute lifetime.
const IAT_SKEW_SECS: i64 = 60;
const MAX_LIFETIME_SECS: i64 = 600;
const LIFETIME_SLACK_SECS: i64 = 10;

fn decoding_key() -> &'static DecodingKey {
    static KEY: OnceLock<DecodingKey> = OnceLock::new();
    KEY.get_or_init(|| {
        DecodingKey::from_rsa_pem(TEST_APP_PUBLIC_KEY_PEM.as_bytes())
            .expect("the test-only public key parses")
    })
}

pub(crate) fn epoch_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Checks an App JWT the way GitHub does; `Err` carries GitHub's 401 message.
pub(crate) fn verify_jwt(
    jwt: &str,
    app_id: u64,
    client_id: &str,
    now: SystemTime,
) -> Result<(), &'static str> {
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims = HashSet::new();
    let data = decode::<Value>(jwt, decoding_key(), &validation).map_err(|_| JWT_DECODE)?;
    let claims = data.claims;
    let number = |name: &str| {
        claims
            .get(name)
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
    };
    let now = epoch_secs(now);
    let iat = number("iat").ok_or(JWT_IAT)?;
    let exp = number("exp").ok_or(JWT_EXPIRED)?;
    if iat > now + IAT_SKEW_SECS {
        return Err(JWT_IAT);
    }
    if exp <= now {
        return Err(JWT_EXPIRED);
    }
    let max = MAX_LIFETIME_SECS + LIFETIME_SLACK_SECS;
    if exp - iat > max || exp - now > max {
        return Err(JWT_EXP_TOO_FAR);
    }
    let issuer_ok = match claims.get("iss") {
        Some(Value::Number(n)) => n.as_u64() == Some(app_id),
        Some(Value::String(s)) => s.trim() == app_id.to_string() || s == client_id,
        _ => false,
    };
    if !issuer_ok {
        return Err(JWT_DECODE);
    }
    Ok(())
}

/// Signs these claims with the test-only App private key (RS256).
pub fn sign_test_jwt(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(TEST_APP_PRIVATE_KEY_PEM.as_bytes())
        .expect("the test-only private key parses");
    encode(&Header::new(Algorithm::RS256), claims, &key).expect("signing a JWT")
}
