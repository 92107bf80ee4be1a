//! Event callbacks as Feishu sends them: schema 2.0 envelopes for messages, card button
//! presses and the URL check, encrypted (AES-256-CBC, key = SHA-256 of the encrypt key,
//! random IV in front) and signed (`X-Lark-Signature`) when an encrypt key is set.

use std::sync::{Arc, Mutex};

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockEncryptMut, KeyIvInit};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{APP_ID, Shown};

/// Builds event callbacks as Feishu sends them.
#[derive(Debug, Clone)]
pub struct Events {
    pub verification_token: String,
    pub encrypt_key: Option<String>,
    next: Arc<Mutex<u64>>,
}

/// A callback ready to POST: body and headers.
#[derive(Debug, Clone)]
pub struct Sealed {
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

impl Events {
    pub fn new(verification_token: &str, encrypt_key: Option<&str>) -> Events {
        Events {
            verification_token: verification_token.to_string(),
            encrypt_key: encrypt_key.map(str::to_string),
            next: Arc::default(),
        }
    }

    fn event_id(&self) -> String {
        let mut n = self.next.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        format!("ev_{:08}", *n)
    }

    fn envelope(&self, event_type: &str, event: Value) -> Value {
        json!({
            "schema": "2.0",
            "header": {
                "event_id": self.event_id(),
                "token": self.verification_token,
                "create_time": "1700000000000",
                "event_type": event_type,
                "tenant_key": "tenant",
                "app_id": APP_ID,
            },
            "event": event,
        })
    }

    /// A text message; `mention` puts an @-mention of the bot in front.
    pub fn message(
        &self,
        chat_id: &str,
        chat_type: &str,
        open_id: &str,
        text: &str,
        mention: bool,
    ) -> Value {
        let (text, mentions) = if mention {
            (
                format!("@_user_1 {text}"),
                json!([{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "tether", "tenant_key": "tenant"}]),
            )
        } else {
            (text.to_string(), json!([]))
        };
        self.envelope(
            "im.message.receive_v1",
            json!({
                "sender": {"sender_id": {"open_id": open_id, "union_id": "on_x", "user_id": ""},
                           "sender_type": "user", "tenant_key": "tenant"},
                "message": {"message_id": format!("om_in_{}", self.event_id()), "root_id": "",
                            "parent_id": "", "create_time": "1700000000000",
                            "chat_id": chat_id, "chat_type": chat_type, "message_type": "text",
                            "content": json!({"text": text}).to_string(), "mentions": mentions},
            }),
        )
    }

    /// A message of another kind (`image`, `file`, `post`) with its content, and the
    /// message id it has (for [`crate::fake_feishu::FakeFeishu::add_resource`]).
    pub fn media_message(
        &self,
        chat_id: &str,
        open_id: &str,
        message_type: &str,
        content: &Value,
    ) -> (Value, String) {
        let message_id = format!("om_media_{}", self.event_id());
        let event = self.envelope(
            "im.message.receive_v1",
            json!({
                "sender": {"sender_id": {"open_id": open_id, "union_id": "on_x", "user_id": ""},
                           "sender_type": "user", "tenant_key": "tenant"},
                "message": {"message_id": message_id, "root_id": "", "parent_id": "",
                            "create_time": "1700000000000", "chat_id": chat_id,
                            "chat_type": "p2p", "message_type": message_type,
                            "content": content.to_string(), "mentions": []},
            }),
        );
        (event, message_id)
    }

    /// A card button press.
    pub fn card_action(&self, open_id: &str, card: &Shown, value: &Value) -> Value {
        self.envelope(
            "card.action.trigger",
            json!({
                "operator": {"tenant_key": "tenant", "open_id": open_id, "user_id": ""},
                "token": "c-token",
                "action": {"value": value, "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": card.message_id, "open_chat_id": card.chat_id},
            }),
        )
    }

    pub fn url_verification(&self, challenge: &str) -> Value {
        json!({"challenge": challenge, "token": self.verification_token, "type": "url_verification"})
    }

    /// The body and headers Feishu would send for `payload` now: encrypted and signed
    /// when an encrypt key is set.
    pub fn seal(&self, payload: &Value) -> Sealed {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        self.seal_at(payload, now)
    }

    /// [`Events::seal`] with the request timestamp `ts` (Unix seconds).
    pub fn seal_at(&self, payload: &Value, ts: u64) -> Sealed {
        let plain = payload.to_string();
        let Some(key) = &self.encrypt_key else {
            return Sealed {
                body: plain.into_bytes(),
                headers: Vec::new(),
            };
        };
        let body = json!({ "encrypt": encrypt(key, &plain) })
            .to_string()
            .into_bytes();
        let (ts, nonce) = (ts.to_string(), format!("nonce{}", self.event_id()));
        let sig = sign(&ts, &nonce, key, &body);
        Sealed {
            body,
            headers: vec![
                ("X-Lark-Request-Timestamp", ts),
                ("X-Lark-Request-Nonce", nonce),
                ("X-Lark-Signature", sig),
            ],
        }
    }
}

/// AES-256-CBC with key SHA-256(encrypt_key), a random IV in front, base64.
pub fn encrypt(encrypt_key: &str, plain: &str) -> String {
    let key = Sha256::digest(encrypt_key.as_bytes());
    let iv: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    let ct = cbc::Encryptor::<aes::Aes256>::new(&key, &iv.into())
        .encrypt_padded_vec_mut::<Pkcs7>(plain.as_bytes());
    let mut all = iv.to_vec();
    all.extend(ct);
    base64::engine::general_purpose::STANDARD.encode(all)
}

/// `X-Lark-Signature`: hex SHA-256 of timestamp + nonce + key + body.
pub fn sign(ts: &str, nonce: &str, key: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("{ts}{nonce}{key}").as_bytes());
    h.update(body);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
