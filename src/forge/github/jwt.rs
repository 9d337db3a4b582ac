//! The App's JWT, signed here with `ring` (the crypto rustls already uses), so that no RSA
//! implementation other than ring's is built in: octocrab's own App authentication goes
//! through jsonwebtoken, whose backends are aws-lc (a C build this project keeps out) or
//! RustCrypto's `rsa` (RUSTSEC-2023-0071, no fixed release; SECURITY.md). The token is what
//! GitHub documents: RS256, `iat` 60 s in the past for clock drift, `exp` 9 minutes ahead
//! (GitHub takes at most 10), `iss` the App's id.
//! (https://docs.github.com/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app)

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::PrivateKeyDer;

use super::client::KeyError;

/// The JOSE header of every App JWT.
const HEADER: &str = r#"{"alg":"RS256","typ":"JWT"}"#;
/// How far back `iat` is set, for a clock a little ahead of GitHub's.
const ISSUED_BEFORE: u64 = 60;
/// How long a JWT lives from now (GitHub refuses more than 10 minutes).
const LIFETIME: u64 = 9 * 60;

/// The App's id and private key: signs its JWTs. Never prints the key.
pub struct AppKey {
    app_id: u64,
    key: RsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppKey")
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

impl AppKey {
    /// The key from its PEM text (`-----BEGIN RSA PRIVATE KEY-----`, as GitHub hands it out,
    /// or `-----BEGIN PRIVATE KEY-----`), proved by signing a JWT as every request will: a
    /// public key, or a key of another kind, would otherwise fail only at the first request.
    /// The error never holds the key's text.
    pub fn new(app_id: u64, pem: &str) -> Result<AppKey, KeyError> {
        let cannot_sign = |cause: &str, what: &str| KeyError {
            problem: format!(
                "the GitHub App private key cannot sign the App's JWT ({cause}): {what}"
            ),
        };
        let not_rsa = "it is not an RSA private key";
        let der = match PrivateKeyDer::from_pem_slice(pem.as_bytes()) {
            Ok(der) => der,
            Err(pem::Error::NoItemsFound) if pem.contains("PUBLIC KEY-----") => {
                return Err(cannot_sign(
                    "no private key in it",
                    "it is a public key, and GitHub needs the App's private key",
                ))
            }
            Err(e) => {
                // Said in words of our own: some of the library's errors quote a line.
                let why = match e {
                    pem::Error::NoItemsFound => "no private key in it",
                    pem::Error::Base64Decode(_) => {
                        "the text between its BEGIN and END lines is not base64"
                    }
                    pem::Error::MissingSectionEnd { .. } => "its END line is missing",
                    pem::Error::IllegalSectionStart { .. } => "its BEGIN line is malformed",
                    _ => "it is not a PEM file",
                };
                return Err(KeyError {
                    problem: format!("the GitHub App private key does not parse ({why})"),
                });
            }
        };
        let key = match &der {
            PrivateKeyDer::Pkcs1(der) => RsaKeyPair::from_der(der.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(der) => RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()),
            _ => return Err(cannot_sign("an EC key", not_rsa)),
        }
        .map_err(|e| match e.to_string().as_str() {
            "InvalidEncoding" => KeyError {
                problem: "the GitHub App private key does not parse (what its base64 holds is no RSA key)"
                    .to_owned(),
            },
            // TooSmall (under 2048 bits), WrongAlgorithm (a PKCS#8 key of another kind), …
            other => cannot_sign(other, not_rsa),
        })?;
        let key = AppKey {
            app_id,
            key,
            rng: SystemRandom::new(),
        };
        key.jwt()?;
        Ok(key)
    }

    /// A JWT that authenticates as the App for the next 9 minutes.
    pub fn jwt(&self) -> Result<String, KeyError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.jwt_at(now)
    }

    fn jwt_at(&self, now: u64) -> Result<String, KeyError> {
        let claims = format!(
            r#"{{"iat":{},"exp":{},"iss":{}}}"#,
            now.saturating_sub(ISSUED_BEFORE),
            now + LIFETIME,
            self.app_id
        );
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| KeyError {
                problem: "the GitHub App private key could not sign the App's JWT".to_owned(),
            })?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

#[cfg(test)]
mod tests {
    use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
    use serde_json::{json, Value};

    use super::*;

    const PEM: &str = include_str!("../../../tests/fixtures/test-only-app-key.pem");
    const PUBLIC_PEM: &str = include_str!("../../../tests/fixtures/test-only-app-key.pub.pem");

    fn part(jwt: &str, n: usize) -> Vec<u8> {
        URL_SAFE_NO_PAD
            .decode(jwt.split('.').nth(n).unwrap())
            .unwrap()
    }

    #[test]
    fn the_jwt_is_rs256_with_githubs_claims_and_verifies_with_the_public_key() {
        let key = AppKey::new(4242, PEM).unwrap();
        let jwt = key.jwt_at(1_700_000_000).unwrap();
        let header: Value = serde_json::from_slice(&part(&jwt, 0)).unwrap();
        assert_eq!(header, json!({"alg": "RS256", "typ": "JWT"}));
        let claims: Value = serde_json::from_slice(&part(&jwt, 1)).unwrap();
        assert_eq!(
            claims,
            json!({"iat": 1_699_999_940u64, "exp": 1_700_000_540u64, "iss": 4242})
        );
        let public = key.key.public().as_ref().to_vec();
        let (signed, _) = jwt.rsplit_once('.').unwrap();
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
            .verify(signed.as_bytes(), &part(&jwt, 2))
            .expect("the signature verifies");
    }

    #[test]
    fn a_key_in_pkcs8_signs_too() {
        let der = match PrivateKeyDer::from_pem_slice(PEM.as_bytes()).unwrap() {
            PrivateKeyDer::Pkcs1(der) => der.secret_pkcs1_der().to_vec(),
            other => panic!("the fixture is PKCS#1: {other:?}"),
        };
        // PKCS#8 wraps the PKCS#1 key: version 0, rsaEncryption with NULL parameters.
        let algorithm = [
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
            0x00,
        ];
        let mut octets = vec![0x04];
        octets.extend(der_length(der.len()));
        octets.extend(&der);
        let mut body = vec![0x02, 0x01, 0x00];
        body.extend(algorithm);
        body.extend(octets);
        let mut pkcs8 = vec![0x30];
        pkcs8.extend(der_length(body.len()));
        pkcs8.extend(body);
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8)
        );
        assert!(AppKey::new(1, &pem).is_ok());
    }

    fn der_length(len: usize) -> Vec<u8> {
        match len {
            0..=0x7f => vec![len as u8],
            0x80..=0xff => vec![0x81, len as u8],
            _ => vec![0x82, (len >> 8) as u8, len as u8],
        }
    }

    #[test]
    fn a_public_key_or_a_broken_one_is_named_and_never_echoed() {
        let public = AppKey::new(1, PUBLIC_PEM).unwrap_err().problem;
        assert!(public.contains("cannot sign the App's JWT"), "{public}");
        assert!(public.contains("it is a public key"), "{public}");
        let broken = "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n";
        let problem = AppKey::new(1, broken).unwrap_err().problem;
        assert!(
            problem.starts_with("the GitHub App private key does not parse"),
            "{problem}"
        );
        assert!(!problem.contains("not a key"), "{problem}");
        let nothing = AppKey::new(1, "hello").unwrap_err().problem;
        assert!(
            nothing.contains("does not parse (no private key in it)"),
            "{nothing}"
        );
    }
}
