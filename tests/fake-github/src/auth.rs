//! App JWTs as GitHub checks them, and the test-only key pair. RS256 is ring's, as in
//! rowbranch: no other RSA implementation is built for the tests either.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    RsaKeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256,
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

/// The test-only App key pair; the fake verifies with its public half.
fn test_key() -> &'static RsaKeyPair {
    static KEY: OnceLock<RsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| rsa_key(TEST_APP_PRIVATE_KEY_PEM))
}

/// An RSA private key from its PKCS#1 PEM (`-----BEGIN RSA PRIVATE KEY-----`).
fn rsa_key(pem: &str) -> RsaKeyPair {
    let base64: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = STANDARD.decode(base64).expect("a PEM key is base64");
    RsaKeyPair::from_der(&der).expect("a PKCS#1 RSA private key")
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
    let claims = verified_claims(jwt).ok_or(JWT_DECODE)?;
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

/// The claims of a JWT whose header says RS256 and whose signature the test-only public key
/// verifies; `None` for anything else (another algorithm, another key, not a JWT).
fn verified_claims(jwt: &str) -> Option<Value> {
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).ok();
    let json = |part: &str| serde_json::from_slice::<Value>(&decode(part)?).ok();
    let mut parts = jwt.split('.');
    let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || json(header)?["alg"] != "RS256" {
        return None;
    }
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, test_key().public().as_ref())
        .verify(format!("{header}.{claims}").as_bytes(), &decode(signature)?)
        .ok()?;
    json(claims)
}

/// Signs these claims with the test-only App private key (RS256).
pub fn sign_test_jwt(claims: &Value) -> String {
    sign_jwt(test_key(), claims)
}

/// Signs these claims (RS256) with another PKCS#1 PEM key: a JWT the fake must refuse.
pub fn sign_jwt_with(pem: &str, claims: &Value) -> String {
    sign_jwt(&rsa_key(pem), claims)
}

fn sign_jwt(key: &RsaKeyPair, claims: &Value) -> String {
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .expect("signing a JWT");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}
