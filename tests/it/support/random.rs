//! Fresh random values for names and secrets, so that tests running at once never share one.

/// `bytes` random bytes in hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("no randomness");
    hex::encode(buf)
}

/// A fresh random secret of 48 hex characters.
pub fn random_secret() -> String {
    random_hex(24)
}

/// A fresh random Standard Webhooks secret: `whsec_` and base64 of 24 random bytes.
pub fn random_whsec() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).expect("no randomness");
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}
