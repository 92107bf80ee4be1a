//! Attachments through the HTTP API: a multipart upload written by hand (so a test can
//! send any file name, hostile ones included, byte for byte) and raw downloads.

use serde_json::Value;

use crate::{Daemon, within};

/// A real 1×1 PNG (69 bytes).
pub const PNG_1X1: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// [`PNG_1X1`] in standard base64, as every model API carries it.
pub const PNG_1X1_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

/// Every JSON object anywhere in `v` for which `pred` holds (to find an image block in a
/// recorded model request, wherever the provider nests it).
pub fn find_objects<'a>(
    v: &'a Value,
    pred: &dyn Fn(&serde_json::Map<String, Value>) -> bool,
) -> Vec<&'a serde_json::Map<String, Value>> {
    let mut out = Vec::new();
    match v {
        Value::Object(m) => {
            if pred(m) {
                out.push(m);
            }
            for x in m.values() {
                out.extend(find_objects(x, pred));
            }
        }
        Value::Array(a) => {
            for x in a {
                out.extend(find_objects(x, pred));
            }
        }
        _ => {}
    }
    out
}

/// One part of an upload.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub name: &'a str,
    pub content_type: Option<&'a str>,
    pub bytes: &'a [u8],
}

pub const BOUNDARY: &str = "tether-test-boundary-7f3a9c";

/// A `multipart/form-data` body with one `file` field per part.
pub fn multipart_body(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for p in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        body.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\n",
                p.name
            )
            .as_bytes(),
        );
        if let Some(ct) = p.content_type {
            body.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(p.bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

impl Daemon {
    /// `POST /api/v1/conversations/{conv}/attachments`; (status, JSON body).
    pub async fn upload(&self, conv: &str, parts: &[Part<'_>]) -> (u16, Value) {
        let req = self
            .client
            .post(self.url(&format!("/api/v1/conversations/{conv}/attachments")))
            .bearer_auth(&self.token)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            // A refused upload is answered before its body is read and the server then
            // drops the connection; never pooled, no later request can go out on it.
            .header("connection", "close")
            .body(multipart_body(parts));
        let resp = within("upload", req.send())
            .await
            .unwrap_or_else(|e| panic!("upload: {e}"));
        let status = resp.status().as_u16();
        let text = within("upload body", resp.text()).await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Uploads that must succeed; the attachment ids.
    pub async fn upload_ok(&self, conv: &str, parts: &[Part<'_>]) -> Vec<String> {
        let (status, body) = self.upload(conv, parts).await;
        assert_eq!(status, 201, "upload: {body}");
        body["attachments"]
            .as_array()
            .unwrap_or_else(|| panic!("no attachments in {body}"))
            .iter()
            .map(|a| a["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// A GET answered with raw bytes: (status, content type, bytes).
    pub async fn get_bytes(&self, path: &str) -> (u16, String, Vec<u8>) {
        let req = self.client.get(self.url(path)).bearer_auth(&self.token);
        let resp = within("GET bytes", req.send())
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = within("GET bytes body", resp.bytes())
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default();
        (status, ct, bytes)
    }
}
