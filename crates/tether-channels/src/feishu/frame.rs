//! The frames of Feishu's event WebSocket: protobuf `pbbp2.Frame` with string headers, as
//! Feishu's own SDKs define it (read there; the schema is the only thing taken). A frame
//! is a control frame (`method` 0: `ping` from us, `pong` with the client settings from
//! Feishu) or a data frame (`method` 1: an `event` or legacy `card` callback, possibly
//! split into `sum` parts numbered by `seq` under one `message_id`). Each data message is
//! answered by sending its frame back with a JSON payload `{"code": …, "data": …}`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use prost::Message;
use serde_json::{Value, json};

use super::wire::Settings;

pub(crate) const METHOD_CONTROL: i32 = 0;
pub(crate) const METHOD_DATA: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Header {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, required, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Frame {
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<Header>,
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl Frame {
    pub(crate) fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }

    fn header_num(&self, key: &str) -> Option<usize> {
        self.header(key).and_then(|v| v.trim().parse().ok())
    }

    /// Our ping, for the service the endpoint URL named.
    pub(crate) fn ping(service: i32) -> Frame {
        Frame {
            seq_id: 0,
            log_id: 0,
            service,
            method: METHOD_CONTROL,
            headers: vec![Header {
                key: "type".into(),
                value: "ping".into(),
            }],
            payload_encoding: None,
            payload_type: None,
            payload: None,
            log_id_new: None,
        }
    }

    /// The answer to this data frame: the same frame with the handling time and a JSON
    /// payload (`data` is the answer body, base64-encoded as the SDKs send it).
    pub(crate) fn answer(mut self, code: u16, data: Option<&Value>, took: Duration) -> Frame {
        self.headers.push(Header {
            key: "biz_rt".into(),
            value: took.as_millis().to_string(),
        });
        let mut body = json!({ "code": code });
        if let Some(d) = data {
            body["data"] = Value::String(
                base64::engine::general_purpose::STANDARD.encode(d.to_string().as_bytes()),
            );
        }
        self.payload = Some(body.to_string().into_bytes());
        self
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    pub(crate) fn parse(bytes: &[u8]) -> Result<Frame, prost::DecodeError> {
        Frame::decode(bytes)
    }
}

/// The client settings Feishu sends with the endpoint and in every pong (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientConfig {
    pub ping_interval: Duration,
    pub reconnect_interval: Duration,
    pub reconnect_nonce: Duration,
}

impl Default for ClientConfig {
    /// Until Feishu says otherwise: what its SDKs start with.
    fn default() -> Self {
        ClientConfig {
            ping_interval: Duration::from_secs(120),
            reconnect_interval: Duration::from_secs(120),
            reconnect_nonce: Duration::from_secs(30),
        }
    }
}

impl ClientConfig {
    /// Updated from a `ClientConfig` object; absent or nonsensical values keep theirs.
    /// Pings stay between 1 s and 10 minutes apart, whatever is said.
    pub(crate) fn update(&mut self, v: &Settings) {
        let secs = |s: Option<u64>| s.filter(|s| *s > 0).map(Duration::from_secs);
        if let Some(p) = secs(v.ping_interval) {
            self.ping_interval = p.clamp(Duration::from_secs(1), Duration::from_secs(600));
        }
        if let Some(r) = secs(v.reconnect_interval) {
            self.reconnect_interval = r.min(Duration::from_secs(600));
        }
        if let Some(n) = v.reconnect_nonce {
            self.reconnect_nonce = Duration::from_secs(n.min(600));
        }
    }
}

/// Largest message put back together from parts.
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Most parts of one message, and most messages waiting for parts.
const MAX_PARTS: usize = 256;
const MAX_PENDING: usize = 64;
/// Parts of a message that do not all arrive within this are dropped (Feishu delivers
/// the message again, as for any message not answered).
const PART_TTL: Duration = Duration::from_secs(30);

struct Pending {
    parts: Vec<Option<Vec<u8>>>,
    bytes: usize,
    since: Instant,
}

/// Messages split into parts, until every part is in.
#[derive(Default)]
pub(crate) struct Reassembly {
    pending: HashMap<String, Pending>,
}

impl Reassembly {
    /// Adds the frame's part: the whole payload once every part of its message is in,
    /// `Ok(None)` while parts are missing, `Err` for a part that cannot belong to any
    /// message (bad numbering, too big).
    pub(crate) fn add(&mut self, frame: &Frame) -> Result<Option<Vec<u8>>, &'static str> {
        let payload = frame.payload.clone().unwrap_or_default();
        let sum = frame.header_num("sum").unwrap_or(1);
        if sum <= 1 {
            return Ok(Some(payload));
        }
        let seq = frame.header_num("seq").ok_or("a part without its seq")?;
        let id = frame
            .header("message_id")
            .ok_or("a part without its message_id")?;
        if sum > MAX_PARTS || seq >= sum {
            return Err("a part numbered outside its message");
        }
        self.pending.retain(|_, p| p.since.elapsed() < PART_TTL);
        if !self.pending.contains_key(id) && self.pending.len() >= MAX_PENDING {
            return Err("too many messages waiting for their parts");
        }
        let p = self
            .pending
            .entry(id.to_string())
            .or_insert_with(|| Pending {
                parts: vec![None; sum],
                bytes: 0,
                since: Instant::now(),
            });
        if p.parts.len() != sum {
            self.pending.remove(id);
            return Err("parts of one message disagree on their number");
        }
        if p.parts[seq].is_none() {
            p.bytes += payload.len();
            p.parts[seq] = Some(payload);
        }
        if p.bytes > MAX_MESSAGE_BYTES {
            self.pending.remove(id);
            return Err("a message larger than 4 MiB");
        }
        if p.parts.iter().any(Option::is_none) {
            return Ok(None);
        }
        let whole = self
            .pending
            .remove(id)
            .map(|p| p.parts.into_iter().flatten().flatten().collect())
            .unwrap_or_default();
        Ok(Some(whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &str, sum: usize, seq: usize, bytes: &[u8]) -> Frame {
        let mut f = Frame::ping(7);
        f.method = METHOD_DATA;
        f.headers = vec![
            Header {
                key: "message_id".into(),
                value: id.into(),
            },
            Header {
                key: "sum".into(),
                value: sum.to_string(),
            },
            Header {
                key: "seq".into(),
                value: seq.to_string(),
            },
        ];
        f.payload = Some(bytes.to_vec());
        f
    }

    #[test]
    fn frames_survive_the_wire() {
        let f = part("m1", 1, 0, b"{}");
        assert_eq!(Frame::parse(&f.to_bytes()).unwrap(), f);
        assert!(Frame::parse(b"\xff\xff\xff").is_err());
    }

    #[test]
    fn parts_come_together_in_any_order_once() {
        let mut r = Reassembly::default();
        assert_eq!(r.add(&part("m", 3, 2, b"c")), Ok(None));
        assert_eq!(r.add(&part("m", 3, 0, b"a")), Ok(None));
        assert_eq!(r.add(&part("m", 3, 0, b"a")), Ok(None));
        assert_eq!(r.add(&part("m", 3, 1, b"b")), Ok(Some(b"abc".to_vec())));
        assert!(r.pending.is_empty());
        assert!(r.add(&part("m", 3, 3, b"x")).is_err());
        assert!(r.add(&part("m", 100_000, 1, b"x")).is_err());
        assert_eq!(
            r.add(&part("m", 1, 0, b"whole")),
            Ok(Some(b"whole".to_vec()))
        );
    }

    #[test]
    fn answers_carry_code_and_base64_data() {
        let f = part("m", 1, 0, b"{}").answer(200, Some(&json!({"toast": 1})), Duration::ZERO);
        let body: Value = serde_json::from_slice(f.payload.as_deref().unwrap()).unwrap();
        assert_eq!(body["code"], 200);
        let data = base64::engine::general_purpose::STANDARD
            .decode(body["data"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&data).unwrap(),
            json!({"toast": 1})
        );
        assert_eq!(f.header("biz_rt"), Some("0"));
    }
}
