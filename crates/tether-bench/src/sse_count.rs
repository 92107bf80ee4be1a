//! A lean SSE reader for the fan-out and ingest figures: with a thousand streams the
//! bench's own parsing must stay cheap next to the daemon's work, so it does not build
//! JSON values. Per event it reads the `id:` and `event:` lines and the envelope's
//! `"at_ms":` from the data line (found with `memchr::memmem`, whose searchers are built
//! once, not per event), and stamps the event with the wall-clock time its bytes were
//! read from the socket.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use memchr::memmem;

/// One event as the counting reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen<'a> {
    pub id: i64,
    pub kind: &'a str,
    /// The envelope's `at_ms` (when the store appended it, in the commit's transaction).
    pub at_ms: i64,
    /// The whole `data:` line (for a closer look at the one event that ends the read).
    pub data: &'a str,
}

/// Microseconds since the Unix epoch now.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Reads `resp` as `text/event-stream` and calls `on_event(event, arrival_us)` for each
/// event until it returns `false` (then `Ok(true)`), or the stream ends (`Ok(false)`).
pub async fn read_events(
    resp: reqwest::Response,
    mut on_event: impl FnMut(&Seen<'_>, i64) -> bool,
) -> reqwest::Result<bool> {
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let sep = &*BLANK_LINE;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let arrival = now_us();
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = sep.find(&buf[start..]) {
            let block = &buf[start..start + end];
            start += end + 2;
            if let Some(ev) = parse_block(block)
                && !on_event(&ev, arrival)
            {
                return Ok(true);
            }
        }
        buf.drain(..start);
    }
    Ok(false)
}

/// One event block (without its blank line); `None` for comments (heartbeats) or a block
/// without the fields the bench needs.
pub fn parse_block(block: &[u8]) -> Option<Seen<'_>> {
    let text = std::str::from_utf8(block).ok()?;
    let (mut id, mut kind, mut data) = (None, None, None);
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("event:") {
            kind = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("data:") {
            data = Some(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    let data = data?;
    Some(Seen {
        id: id?,
        kind: kind?,
        at_ms: int_after(data, &AT_MS)?,
        data,
    })
}

/// The end of an SSE event block.
static BLANK_LINE: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\n\n"));
/// The envelope's `at_ms` key.
static AT_MS: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"at_ms\":"));

/// The integer after `key` (e.g. `"at_ms":`) in a JSON text, without parsing the rest.
#[cfg(test)]
fn json_int(data: &str, key: &str) -> Option<i64> {
    int_after(data, &memmem::Finder::new(key.as_bytes()))
}

/// [`json_int`] with a searcher built once.
fn int_after(data: &str, key: &memmem::Finder<'_>) -> Option<i64> {
    let at = key.find(data.as_bytes())? + key.needle().len();
    let rest = data[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_event_block() {
        let block = b"id: 42\nevent: message_delta\ndata: {\"id\":42,\"seq\":7,\"at_ms\":1700000000123,\"payload\":{\"type\":\"message_delta\",\"text\":\"x\"}}";
        let ev = parse_block(block).expect("an event");
        assert_eq!(ev.id, 42);
        assert_eq!(ev.kind, "message_delta");
        assert_eq!(ev.at_ms, 1_700_000_000_123);
        assert_eq!(json_int(ev.data, "\"seq\":"), Some(7));
        assert_eq!(parse_block(b": keep-alive"), None);
        assert_eq!(parse_block(b"id: 1\r\nevent: x\r\ndata: {}"), None);
    }
}
