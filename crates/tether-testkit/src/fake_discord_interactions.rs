//! Signed Discord HTTP interactions, built as Discord sends them to an Interactions
//! Endpoint URL: `X-Signature-Ed25519` (hex) over `X-Signature-Timestamp` + body, with
//! the app's key pair; and forged ones (another key, a stale timestamp, a tampered
//! body) for tests to POST to the daemon's `/hooks/discord`.

use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

/// A request ready to POST: headers and body.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// The app's key pair (and a stranger's, for forgeries).
pub struct Interactions {
    key: SigningKey,
    stranger: SigningKey,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh key from 32 random bytes (two v4 UUIDs: the OS random source).
fn random_key() -> SigningKey {
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    seed[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    SigningKey::from_bytes(&seed)
}

impl Default for Interactions {
    fn default() -> Self {
        Self::new()
    }
}

impl Interactions {
    pub fn new() -> Interactions {
        Interactions {
            key: random_key(),
            stranger: random_key(),
        }
    }

    /// The public key (hex) for `[channels.discord] public_key`.
    pub fn public_key(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }

    fn sign_with(key: &SigningKey, ts: i64, body: &str) -> SignedRequest {
        let ts = ts.to_string();
        let mut msg = ts.as_bytes().to_vec();
        msg.extend_from_slice(body.as_bytes());
        let sig = key.sign(&msg);
        SignedRequest {
            headers: vec![
                ("x-signature-ed25519", hex(&sig.to_bytes())),
                ("x-signature-timestamp", ts),
            ],
            body: body.to_string(),
        }
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }

    /// Signed now with the app's key.
    pub fn sign(&self, ix: &Value) -> SignedRequest {
        Self::sign_with(&self.key, Self::now(), &ix.to_string())
    }

    /// Signed with the app's key at `secs_ago` seconds in the past.
    pub fn sign_at(&self, ix: &Value, secs_ago: i64) -> SignedRequest {
        Self::sign_with(&self.key, Self::now() - secs_ago, &ix.to_string())
    }

    /// Signed by someone else's key.
    pub fn forge(&self, ix: &Value) -> SignedRequest {
        Self::sign_with(&self.stranger, Self::now(), &ix.to_string())
    }

    /// Signed, then the body changed.
    pub fn tamper(&self, ix: &Value) -> SignedRequest {
        let mut r = self.sign(ix);
        r.body = r.body.replace("custom_id", "custom_iD");
        r
    }

    /// A raw body signed as is (e.g. not JSON).
    pub fn sign_raw(&self, body: &str) -> SignedRequest {
        Self::sign_with(&self.key, Self::now(), body)
    }

    /// Discord's endpoint check.
    pub fn ping() -> Value {
        json!({"id": "1", "type": 1, "application_id": crate::fake_discord::APP_ID, "token": "t", "version": 1})
    }
}
