//! A minimal Server-Sent Events reader over a reqwest response, for tests.

use futures::StreamExt;

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// `data` parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null)
    }
}

/// Reads events from a `text/event-stream` response; comments (heartbeats) are skipped.
pub struct SseStream {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl SseStream {
    pub fn new(resp: reqwest::Response) -> Self {
        SseStream {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next event, or `None` when the stream ends.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                let mut ev = SseEvent {
                    id: None,
                    event: None,
                    data: String::new(),
                };
                let mut has_field = false;
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    let (field, value) = match line.split_once(':') {
                        Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                        None => (line, ""),
                    };
                    has_field = true;
                    match field {
                        "id" => ev.id = Some(value.to_string()),
                        "event" => ev.event = Some(value.to_string()),
                        "data" => {
                            if !ev.data.is_empty() {
                                ev.data.push('\n');
                            }
                            ev.data.push_str(value);
                        }
                        _ => {}
                    }
                }
                if has_field && (ev.id.is_some() || !ev.data.is_empty()) {
                    return Some(ev);
                }
                continue;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self
                    .buf
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
                Some(Err(_)) | None => return None,
            }
        }
    }
}
