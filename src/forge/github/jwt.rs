//! The App's JWT, made by jsonwebtoken with ring (jsonwebtoken 9, whose backend is ring: later
//! majors sign with aws-lc, a C build this project keeps out, or RustCrypto's `rsa`,
//! RUSTSEC-2023-0071 with no fixed release; SECURITY.md). The token is what GitHub documents:
//! RS256, `iat` 60 s in the past for clock drift, `exp` 9 minutes ahead (GitHub takes at most
//! 10), `iss` the App's id.
//! (https://docs.github.com/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app)

use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// How far back `iat` is set, for a clock a little ahead of GitHub's.
const ISSUED_BEFORE: u64 = 60;
/// How long a JWT lives from now (GitHub refuses more than 10 minutes).
const LIFETIME: u64 = 9 * 60;

/// Where a new key comes from, for every message about a key that cannot sign.
pub const NEW_KEY: &str = "the App's settings page on GitHub → Private keys → Generate a \
     private key gives a .pem file whose text starts with -----BEGIN RSA PRIVATE KEY----- (or \
     -----BEGIN PRIVATE KEY-----)";

/// The App's private key cannot be used: what is wrong with it, then where a good one comes
/// from. Never holds the key's text.
#[derive(Debug, thiserror::Error)]
#[error("{problem}: {NEW_KEY}")]
pub struct KeyError {
    /// What is wrong, without the remedy (`doctor` prints that on its own line).
    pub problem: String,
}

/// The App's id and private key: signs its JWTs. Never prints the key.
pub struct AppKey {
    app_id: u64,
    key: EncodingKey,
}

impl AppKey {
    /// The key from its PEM text (`-----BEGIN RSA PRIVATE KEY-----`, as GitHub hands it out,
    /// or `-----BEGIN PRIVATE KEY-----`), proved by signing a JWT as every request will: a
    /// public key, or a key of another kind, would otherwise fail only at the first request.
    /// The error never holds the key's text (jsonwebtoken's errors name a kind, not a line).
    pub fn new(app_id: u64, pem: &str) -> Result<AppKey, KeyError> {
        let problem = |problem: String| KeyError { problem };
        if !pem.contains("PRIVATE KEY-----") {
            return Err(problem(match pem.contains("PUBLIC KEY-----") {
                true => "the GitHub App private key cannot sign the App's JWT (no private key in \
                         it): it is a public key, and GitHub needs the App's private key"
                    .to_owned(),
                false => {
                    "the GitHub App private key does not parse (no private key in it)".to_owned()
                }
            }));
        }
        let key = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| {
            problem(format!(
                "the GitHub App private key does not parse as an RSA private key ({e})"
            ))
        })?;
        let key = AppKey { app_id, key };
        key.jwt_at(jsonwebtoken::get_current_timestamp())?;
        Ok(key)
    }

    /// A JWT that authenticates as the App for 9 minutes from `now` (seconds since the epoch).
    pub fn jwt_at(&self, now: u64) -> Result<String, KeyError> {
        let claims = serde_json::json!({
            "iat": now.saturating_sub(ISSUED_BEFORE),
            "exp": now + LIFETIME,
            "iss": self.app_id,
        });
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key).map_err(|e| {
            KeyError {
                problem: format!(
                    "the GitHub App private key cannot sign the App's JWT ({e}): it is not an \
                     RSA private key GitHub takes"
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use jsonwebtoken::DecodingKey;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
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
        let public = DecodingKey::from_rsa_pem(PUBLIC_PEM.as_bytes()).unwrap();
        let (signed, signature) = jwt.rsplit_once('.').unwrap();
        assert!(
            jsonwebtoken::crypto::verify(signature, signed.as_bytes(), &public, Algorithm::RS256)
                .unwrap(),
            "the signature verifies"
        );
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
        let public = AppKey::new(1, PUBLIC_PEM).err().unwrap().problem;
        assert!(public.contains("cannot sign the App's JWT"), "{public}");
        assert!(public.contains("it is a public key"), "{public}");
        let broken = "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n";
        let problem = AppKey::new(1, broken).err().unwrap().problem;
        assert!(
            problem.starts_with("the GitHub App private key does not parse"),
            "{problem}"
        );
        assert!(!problem.contains("not a key"), "{problem}");
        let nothing = AppKey::new(1, "hello").err().unwrap().problem;
        assert!(
            nothing.contains("does not parse (no private key in it)"),
            "{nothing}"
        );
    }
}
