//! Lower-case hex, both ways: digests in ids and idempotency keys (turn ids, Discord
//! nonces, Feishu `uuid`s, attachment names), signatures (Slack's `v0=`, Feishu's
//! `X-Lark-Signature`) and Discord's public key and Ed25519 signatures.

/// Lower-case hex of `bytes`.
pub(crate) fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The bytes a hex text stands for (either case); `None` when it is not hex.
pub(crate) fn decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_goes_both_ways() {
        assert_eq!(decode("0aff"), Some(vec![10, 255]));
        assert_eq!(decode("0AFF"), Some(vec![10, 255]));
        assert_eq!(decode("0af"), None);
        assert_eq!(decode("zz"), None);
        assert_eq!(encode(&[10, 255, 0]), "0aff00");
        assert_eq!(decode(&encode(b"tether")), Some(b"tether".to_vec()));
    }
}
