//! Feishu event security: AES-256-CBC decryption of `{"encrypt": ...}` bodies (key =
//! SHA-256 of the encrypt key, IV = the first 16 bytes, PKCS#7 padding) and the
//! `X-Lark-Signature` check (hex SHA-256 of timestamp + nonce + encrypt key + body).

use base64::Engine as _;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, KeyIvInit};
use sha2::{Digest, Sha256};

/// Why an event body could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("not base64")]
    Base64,
    #[error("too short or not whole blocks")]
    Length,
    #[error("bad padding (wrong key or tampered)")]
    Padding,
    #[error("not UTF-8")]
    Utf8,
}

/// Decrypts an `encrypt` field.
pub fn decrypt(encrypt_key: &str, encrypted: &str) -> Result<String, CryptoError> {
    let data = base64::engine::general_purpose::STANDARD
        .decode(encrypted.trim())
        .map_err(|_| CryptoError::Base64)?;
    if data.len() < 32 || data.len() % 16 != 0 {
        return Err(CryptoError::Length);
    }
    let key = Sha256::digest(encrypt_key.as_bytes());
    let (iv, ciphertext) = data.split_at(16);
    let mut buf = ciphertext.to_vec();
    let plain = cbc::Decryptor::<aes::Aes256>::new_from_slices(&key, iv)
        .map_err(|_| CryptoError::Length)?
        .decrypt_padded_mut::<Pkcs7>(&mut buf)
        .map_err(|_| CryptoError::Padding)?;
    String::from_utf8(plain.to_vec()).map_err(|_| CryptoError::Utf8)
}

/// The expected `X-Lark-Signature` of a body.
pub fn signature(timestamp: &str, nonce: &str, encrypt_key: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(timestamp.as_bytes());
    h.update(nonce.as_bytes());
    h.update(encrypt_key.as_bytes());
    h.update(body);
    crate::hex::encode(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example from Feishu's documentation: key "test key", text "hello world".
    #[test]
    fn decrypts_the_documented_example() {
        let got = decrypt("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=");
        assert_eq!(got.as_deref(), Ok("hello world"));
    }

    #[test]
    fn tampering_and_garbage_are_refused() {
        let good = "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=";
        assert!(decrypt("other key", good).is_err());
        assert_eq!(decrypt("test key", "%%%"), Err(CryptoError::Base64));
        assert_eq!(decrypt("test key", "AAAA"), Err(CryptoError::Length));
    }

    #[test]
    fn signatures_are_hex_sha256_of_the_parts() {
        // sha256("" ) is well known; parts are simply concatenated.
        assert_eq!(
            signature("", "", "", b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            signature("1", "2", "3", b"4"),
            signature("", "", "", b"1234")
        );
    }
}
