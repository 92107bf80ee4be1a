//! Newline-delimited JSON over an agent's stdio, shared by the JSON-RPC connection
//! ([`crate::jsonrpc`]) and Claude's stream-json link: reading one JSON object per line
//! with a bounded line buffer, skipping (and logging) what is not one ([`LineReader`]);
//! writing one message per line ([`LineWriter`]); and our own requests waiting for their
//! answers until the agent's output ends ([`Requests`]).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::jsonrpc::CloseInfo;

/// The longest line read from an agent (32 MiB); longer ones are skipped, so an agent that
/// prints endless output without a newline cannot make tether buffer all of it.
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// Line buffer capacity kept between lines.
const KEEP_CAPACITY: usize = 256 * 1024;

/// How long a request whose write failed waits for the reader to report the closed pipe.
pub(crate) const WRITE_FAILURE_WAIT: Duration = Duration::from_secs(2);

/// What [`read_line_capped`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineRead {
    /// End of input, nothing read.
    Eof,
    /// A line (without a newline at the very end of the input) is in the buffer.
    Line,
    /// A line of this many bytes (newline included) was longer than the cap and dropped.
    TooLong(usize),
}

/// Reads one `\n`-terminated line into `buf` (cleared first), keeping at most `max` bytes
/// in memory: a longer line is consumed and dropped.
pub(crate) async fn read_line_capped(
    reader: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    // Do not keep the memory of one huge line for the rest of the session.
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(KEEP_CAPACITY);
    }
    let mut total = 0usize;
    let mut too_long = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(match (total, too_long) {
                (0, _) => LineRead::Eof,
                (_, true) => LineRead::TooLong(total),
                (_, false) => LineRead::Line,
            });
        }
        let (n, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        total = total.saturating_add(n);
        if total > max {
            too_long = true;
            buf.clear();
        } else {
            buf.extend_from_slice(&chunk[..n]);
        }
        reader.consume(n);
        if done {
            return Ok(if too_long {
                LineRead::TooLong(total)
            } else {
                LineRead::Line
            });
        }
    }
}

/// Reads an agent's output as one JSON object per line.
pub(crate) struct LineReader<R> {
    reader: BufReader<R>,
    buf: Vec<u8>,
    /// Who writes, for the log (`agent`, `claude`).
    peer: &'static str,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(reader: R, peer: &'static str) -> Self {
        LineReader {
            reader: BufReader::new(reader),
            buf: Vec::new(),
            peer,
        }
    }

    /// The next JSON object; blank lines are skipped, and so (with a warning) are lines
    /// over [`MAX_LINE`] and lines that are not a JSON object. `None` at the end of the
    /// output or when reading fails.
    pub async fn next_object(&mut self) -> Option<Map<String, Value>> {
        let peer = self.peer;
        loop {
            match read_line_capped(&mut self.reader, &mut self.buf, MAX_LINE).await {
                Ok(LineRead::Eof) => return None,
                Ok(LineRead::Line) => {}
                Ok(LineRead::TooLong(len)) => {
                    tracing::warn!(len, "skipping an over-long line from {peer}");
                    continue;
                }
                Err(e) => {
                    tracing::warn!("reading agent output: {e}");
                    return None;
                }
            }
            let bytes = self.buf.trim_ascii();
            if bytes.is_empty() {
                continue;
            }
            // The parser checks the UTF-8 of what it reads: a valid line is scanned once.
            // Only a line it refuses is read again with invalid bytes replaced (an agent's
            // stray byte in a string does not cost its message).
            if let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(bytes) {
                return Some(message);
            }
            let line = String::from_utf8_lossy(bytes);
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(message)) => return Some(message),
                _ => {
                    // Escaped: an agent's control characters never reach the log raw.
                    let cut: String = line.chars().take(200).collect();
                    tracing::warn!(line = %cut.escape_debug(), "skipping non-JSON line from {peer}");
                }
            }
        }
    }
}

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Writes messages to an agent's stdin, one per line, until closed.
pub(crate) struct LineWriter(tokio::sync::Mutex<Option<Writer>>);

impl LineWriter {
    pub fn new(writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        LineWriter(tokio::sync::Mutex::new(Some(Box::new(writer))))
    }

    /// Writes `message` and a newline, and flushes.
    pub async fn send(&self, message: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut writer = self.0.lock().await;
        let Some(w) = writer.as_mut() else {
            return Err("connection closed".to_owned());
        };
        let result = async {
            w.write_all(&line).await?;
            w.flush().await
        }
        .await;
        result.map_err(|e| format!("writing to agent: {e}"))
    }

    /// Closes the agent's stdin (it sees end of input). Later sends fail.
    pub async fn close(&self) {
        if let Some(mut writer) = self.0.lock().await.take() {
            let _ = writer.shutdown().await;
        }
    }
}

/// The error of a request whose answer never came because the agent's output ended.
pub(crate) trait ClosedError {
    fn closed(info: CloseInfo) -> Self;
}

type Reply<E> = Result<Value, E>;

struct Pending<K, E> {
    waiting: HashMap<K, oneshot::Sender<Reply<E>>>,
    closed: Option<CloseInfo>,
}

/// Our requests waiting for their answers, by id; all fail once the output has ended.
pub(crate) struct Requests<K, E>(Mutex<Pending<K, E>>);

impl<K: Hash + Eq + Clone, E: ClosedError> Default for Requests<K, E> {
    fn default() -> Self {
        Requests(Mutex::new(Pending {
            waiting: HashMap::new(),
            closed: None,
        }))
    }
}

impl<K: Hash + Eq + Clone, E: ClosedError> Requests<K, E> {
    fn lock(&self) -> MutexGuard<'_, Pending<K, E>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some` once the agent's output has ended.
    pub fn closed(&self) -> Option<CloseInfo> {
        self.lock().closed.clone()
    }

    /// Registers request `id`, sends it with `send` and waits for its answer. When the
    /// write fails (most likely the process died), the reader's close report (with the
    /// stderr tail) is preferred to the write error if it comes within
    /// [`WRITE_FAILURE_WAIT`]. A caller that stops waiting forgets the request.
    pub async fn call(&self, id: K, send: impl Future<Output = Result<(), E>>) -> Result<Value, E> {
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.lock();
            if let Some(info) = &pending.closed {
                return Err(E::closed(info.clone()));
            }
            pending.waiting.insert(id.clone(), tx);
        }
        let _cleanup = RemoveOnDrop { requests: self, id };
        if let Err(e) = send.await {
            return match tokio::time::timeout(WRITE_FAILURE_WAIT, rx).await {
                Ok(Ok(reply)) => reply,
                _ => Err(e),
            };
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(E::closed(self.closed().unwrap_or(CloseInfo {
                status: "connection dropped".to_owned(),
                stderr_tail: String::new(),
            }))),
        }
    }

    /// Hands `reply` to the waiting request `id`; `false` if none waits (unknown, or the
    /// caller stopped waiting).
    pub fn resolve(&self, id: &K, reply: Reply<E>) -> bool {
        let Some(tx) = self.lock().waiting.remove(id) else {
            return false;
        };
        let _ = tx.send(reply);
        true
    }

    /// The output ended: every waiting request fails, and so will later ones.
    pub fn close(&self, info: CloseInfo) {
        let waiting = {
            let mut pending = self.lock();
            pending.closed = Some(info.clone());
            std::mem::take(&mut pending.waiting)
        };
        for (_, tx) in waiting {
            let _ = tx.send(Err(E::closed(info.clone())));
        }
    }
}

/// Forgets a pending request whose caller stopped waiting.
struct RemoveOnDrop<'a, K: Hash + Eq + Clone, E: ClosedError> {
    requests: &'a Requests<K, E>,
    id: K,
}

impl<K: Hash + Eq + Clone, E: ClosedError> Drop for RemoveOnDrop<'_, K, E> {
    fn drop(&mut self) {
        self.requests.lock().waiting.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(LineRead, String)> {
        // A tiny buffer, so lines span many `fill_buf` chunks.
        let mut reader = BufReader::with_capacity(3, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let r = read_line_capped(&mut reader, &mut buf, max)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            if r == LineRead::Eof {
                return out;
            }
            out.push((r, String::from_utf8_lossy(&buf).into_owned()));
        }
    }

    #[tokio::test]
    async fn long_lines_are_dropped_and_reading_goes_on() {
        let got = lines(b"short\n0123456789abc\nok\n\nlast", 8).await;
        assert_eq!(
            got,
            vec![
                (LineRead::Line, "short\n".to_owned()),
                (LineRead::TooLong(14), String::new()),
                (LineRead::Line, "ok\n".to_owned()),
                (LineRead::Line, "\n".to_owned()),
                (LineRead::Line, "last".to_owned()),
            ]
        );
        assert_eq!(
            lines(b"0123456789", 8).await,
            vec![(LineRead::TooLong(10), String::new())]
        );
        assert_eq!(lines(b"", 8).await, vec![]);
        // Exactly at the cap is kept.
        assert_eq!(
            lines(b"1234567\n", 8).await,
            vec![(LineRead::Line, "1234567\n".to_owned())]
        );
    }

    /// Every object [`LineReader::next_object`] reads from `input`.
    async fn objects(input: &[u8]) -> Vec<Value> {
        let mut reader = LineReader::new(input, "test");
        let mut got = Vec::new();
        while let Some(object) = reader.next_object().await {
            got.push(Value::Object(object));
        }
        got
    }

    #[tokio::test]
    async fn objects_skip_blank_long_and_non_object_lines() {
        let input: &[u8] = b"{\"a\":1}\n\n  \nnot json\n[1,2]\n{\"b\":2}\r\n{\"c\":";
        assert_eq!(
            objects(input).await,
            vec![serde_json::json!({"a": 1}), serde_json::json!({"b": 2})]
        );
    }

    #[tokio::test]
    async fn a_stray_byte_in_a_string_is_replaced_not_skipped() {
        // A lone 0xFF inside a string: not UTF-8, so the parser refuses the raw line;
        // the message still arrives, with the byte replaced.
        let input: &[u8] = b"{\"text\":\"a\xFFb\"}\n{\"ok\":true}\n";
        assert_eq!(
            objects(input).await,
            vec![
                serde_json::json!({"text": "a\u{FFFD}b"}),
                serde_json::json!({"ok": true})
            ]
        );
    }
}
