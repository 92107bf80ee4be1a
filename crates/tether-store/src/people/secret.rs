//! A personal token's secret: `tth_` and 32 random bytes in hex, shown once; the store
//! keeps its SHA-256 only, by which a request's token is found. The prefix tells a
//! personal token from the bootstrap token (and lets secret scanners find leaked ones).

use rand::RngCore;
use sha2::{Digest, Sha256};

/// What every personal token starts with.
pub const TOKEN_PREFIX: &str = "tth_";

/// A new secret and its hash.
pub fn new_secret() -> (String, String) {
    new_secret_with(TOKEN_PREFIX)
}

/// What a sign-in session's cookie secret starts with.
pub const SESSION_PREFIX: &str = "tts_";

/// A new secret with `prefix` (32 random bytes in hex) and its hash: a sign-in
/// session's cookie, its CSRF token.
pub fn new_secret_with(prefix: &str) -> (String, String) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let secret = format!("{prefix}{}", hex(&bytes));
    let hash = hash_secret(&secret);
    (secret, hash)
}

/// The hash a secret is stored and found by (hex SHA-256).
pub fn hash_secret(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// A new token id (`tok_` and 12 hex digits: shown in lists, never a secret).
pub fn new_token_id() -> String {
    let mut bytes = [0u8; 6];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("tok_{}", hex(&bytes))
}

/// One-time codes (pairing, account links) use letters and digits that cannot be
/// confused (no 0/O, 1/I/L).
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// How long a one-time code is: 31⁸ ≈ 8.5 × 10¹¹ of them.
pub const CODE_LEN: usize = 8;

/// A new one-time code, as stored and typed without its dash.
pub fn new_code() -> String {
    use rand::Rng;
    let mut rng = rand::rngs::OsRng;
    (0..CODE_LEN)
        .map(|_| char::from(CODE_ALPHABET[rng.gen_range(0..CODE_ALPHABET.len())]))
        .collect()
}

/// `ABCD2345` → `ABCD-2345`.
pub fn display_code(code: &str) -> String {
    if code.len() == CODE_LEN {
        format!("{}-{}", &code[..4], &code[4..])
    } else {
        code.to_string()
    }
}

/// What a person typed → the stored spelling (upper case, no separators).
pub fn normalize_code(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_by_its_hash_and_differs_each_time() {
        let (secret, hash) = new_secret();
        assert!(secret.starts_with(TOKEN_PREFIX));
        assert_eq!(secret.len(), TOKEN_PREFIX.len() + 64);
        assert_eq!(hash_secret(&secret), hash);
        assert_ne!(new_secret().0, secret);
        assert!(new_token_id().starts_with("tok_"));
    }
}
