//! The Discord Gateway connection: `GET /gateway/bot` for the URL, then over the
//! WebSocket: Hello (op 10) → Identify (op 2, with [`INTENTS`]) or Resume (op 6, session
//! id and last sequence number) → dispatches (op 0) handed to the worker in order.
//! Heartbeats (op 1) go every `heartbeat_interval`, the first after a random fraction of
//! it (jitter, so many clients do not beat in step); a heartbeat whose ACK (op 11) has
//! not come back by the next one means a dead ("zombied") connection: it is closed and
//! resumed. A dropped socket and op 7 (Reconnect) resume at `resume_gateway_url`; op 9
//! (Invalid Session) resumes when Discord says it may, else identifies afresh after 1–5
//! seconds. Discord replays what was missed on resume; the worker drops repeats by
//! message id, so nothing is lost or doubled.
//!
//! [`INTENTS`]: super::INTENTS

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rand::Rng;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::wire::{Frame, Hello, Ready};
use super::{Discord, INTENTS};
use crate::json::parse;

/// How long the connection, Hello, and each write may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);

/// A connection that ends sooner than this after it opened counts as a failure (backoff).
const QUICK_DEATH: Duration = Duration::from_secs(1);

/// A Gateway session that can be resumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Session {
    pub session_id: String,
    pub resume_url: String,
    /// The last sequence number received.
    pub seq: i64,
}

/// One dispatch (op 0) with the session state as of it (for the worker to store once
/// the dispatch is recorded).
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub kind: String,
    pub data: Value,
    pub session: Option<Session>,
}

/// How a connection ended.
#[derive(Debug)]
enum End {
    /// Reconnect and resume the session.
    Resume(String),
    /// The session is gone: identify afresh after the wait.
    Fresh(Duration, String),
    /// Could not connect or talk: back off.
    Failed(String),
    /// The token or the intents are refused: retrying soon cannot help.
    Fatal(String),
}

/// Runs until the task is aborted; `session` is a stored session to resume first.
pub(crate) async fn run(
    dc: Arc<Discord>,
    mut session: Option<Session>,
    tx: mpsc::UnboundedSender<Dispatch>,
) {
    let mut failures = 0u32;
    loop {
        let url = match &session {
            Some(s) => s.resume_url.clone(),
            None => match dc.rest.call(Method::GET, "/gateway/bot", None).await {
                Ok(v) => match v.url {
                    Some(u) => u,
                    None => {
                        failures += 1;
                        tracing::warn!(channel = "discord", "GET /gateway/bot has no url");
                        tokio::time::sleep(backoff(failures)).await;
                        continue;
                    }
                },
                Err(e) => {
                    failures += 1;
                    tracing::warn!(channel = "discord", "GET /gateway/bot failed: {e}");
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            },
        };
        let began = Instant::now();
        let end = connect(&dc, &url, &mut session, &tx).await;
        match end {
            End::Resume(why) => {
                tracing::info!(channel = "discord", "gateway: {why}; resuming");
                // A connection that keeps dying at once is not hammered.
                if began.elapsed() < QUICK_DEATH {
                    failures += 1;
                    tokio::time::sleep(backoff(failures).min(Duration::from_secs(10))).await;
                } else {
                    failures = 0;
                }
            }
            End::Fresh(wait, why) => {
                tracing::info!(channel = "discord", "gateway: {why}; identifying again");
                session = None;
                tokio::time::sleep(wait).await;
            }
            End::Failed(why) => {
                tracing::warn!(channel = "discord", "gateway: {why}");
                failures += 1;
                // A resume URL that keeps failing: start over with a new session.
                if failures >= 3 {
                    session = None;
                }
                tokio::time::sleep(backoff(failures)).await;
            }
            End::Fatal(why) => {
                tracing::error!(channel = "discord", "the gateway refused tether: {why}");
                session = None;
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    }
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(250 * 2u64.pow(failures.min(7)))
}

fn gateway_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    format!("{base}/?v=10&encoding=json")
}

/// The Identify payload: the token, the intents, and who connects.
fn identify(dc: &Discord) -> Value {
    json!({"op": 2, "d": {
        "token": dc.token,
        "intents": INTENTS,
        "properties": {"os": std::env::consts::OS, "browser": "tether", "device": "tether"},
    }})
}

/// How a close code from Discord ends the connection.
fn closed(code: u16, session: Option<&Session>) -> End {
    let why = format!("closed by the gateway ({code})");
    match code {
        // Authentication failed, invalid shard, sharding required, invalid API version,
        // invalid or disallowed intents.
        4004 | 4010..=4014 => End::Fatal(why),
        // Invalid sequence number, session timed out: a new session.
        4007 | 4009 => End::Fresh(Duration::ZERO, why),
        _ if session.is_some() => End::Resume(why),
        _ => End::Failed(why),
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn send(ws: &mut futures::stream::SplitSink<Ws, Message>, v: &Value) -> Result<(), String> {
    match tokio::time::timeout(STEP_TIMEOUT, ws.send(Message::text(v.to_string()))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("write timed out".to_string()),
    }
}

/// Closes with a code other than 1000/1001, so the session stays resumable.
async fn close_for_resume(ws: &mut futures::stream::SplitSink<Ws, Message>) {
    let frame = CloseFrame {
        code: CloseCode::from(4000),
        reason: "resuming".into(),
    };
    let _ =
        tokio::time::timeout(Duration::from_secs(2), ws.send(Message::Close(Some(frame)))).await;
}

/// One connection, from Hello until it ends.
async fn connect(
    dc: &Discord,
    url: &str,
    session: &mut Option<Session>,
    tx: &mpsc::UnboundedSender<Dispatch>,
) -> End {
    let ws = match tokio::time::timeout(
        STEP_TIMEOUT,
        tokio_tungstenite::connect_async(gateway_url(url)),
    )
    .await
    {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(e)) => return End::Failed(format!("connect: {e}")),
        Err(_) => return End::Failed("connect timed out".to_string()),
    };
    let (mut sink, mut stream) = ws.split();
    let interval = match tokio::time::timeout(STEP_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => {
            let hello: Frame = serde_json::from_str(&t).unwrap_or_default();
            let beat = parse::<Hello>(&hello.d).and_then(|h| h.heartbeat_interval);
            match (hello.op, beat) {
                (Some(10), Some(ms)) if ms > 0 => Duration::from_millis(ms),
                _ => return End::Failed(format!("expected Hello, got {t}")),
            }
        }
        other => return End::Failed(format!("no Hello: {other:?}")),
    };
    let first = match session {
        Some(s) => json!({"op": 6, "d": {
            "token": dc.token, "session_id": s.session_id, "seq": s.seq,
        }}),
        None => identify(dc),
    };
    if let Err(e) = send(&mut sink, &first).await {
        return End::Failed(e);
    }
    let jitter: f64 = rand::thread_rng().gen_range(0.0..1.0);
    let mut next_beat = Instant::now() + interval.mul_f64(jitter);
    let mut acked = true;
    let mut seq: Option<i64> = session.as_ref().map(|s| s.seq);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next_beat) => {
                if !acked {
                    close_for_resume(&mut sink).await;
                    return resume_or_fail(session, "no heartbeat ACK: a dead connection");
                }
                if let Err(e) = send(&mut sink, &json!({"op": 1, "d": seq})).await {
                    return resume_or_fail(session, &e);
                }
                acked = false;
                next_beat += interval;
            }
            frame = stream.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(f))) => {
                        let code = f.map_or(1005, |f| u16::from(f.code));
                        return closed(code, session.as_ref());
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return resume_or_fail(session, &e.to_string()),
                    None => return resume_or_fail(session, "the socket was dropped"),
                };
                let Ok(p) = serde_json::from_str::<Frame>(&text) else {
                    tracing::warn!(channel = "discord", "gateway frame is not JSON");
                    continue;
                };
                match p.op {
                    Some(0) => {
                        if let Some(s) = p.s {
                            seq = Some(seq.map_or(s, |old| old.max(s)));
                        }
                        let kind = p.t.unwrap_or_default();
                        if kind == "READY" {
                            let d = parse::<Ready>(&p.d).unwrap_or_default();
                            if let Some(id) = d.user.id.as_deref() {
                                dc.set_bot_id(id);
                            }
                            *session = match (d.session_id, d.resume_gateway_url) {
                                (Some(session_id), Some(resume_url)) => Some(Session {
                                    session_id,
                                    resume_url,
                                    seq: seq.unwrap_or(0),
                                }),
                                _ => None,
                            };
                            tracing::info!(channel = "discord", "gateway ready");
                        } else if kind == "RESUMED" {
                            tracing::info!(channel = "discord", "gateway session resumed");
                        }
                        if let (Some(s), Some(n)) = (session.as_mut(), seq) {
                            s.seq = n;
                        }
                        let _ = tx.send(Dispatch {
                            kind,
                            data: p.d,
                            session: session.clone(),
                        });
                    }
                    Some(1) => {
                        if let Err(e) = send(&mut sink, &json!({"op": 1, "d": seq})).await {
                            return resume_or_fail(session, &e);
                        }
                    }
                    Some(7) => {
                        close_for_resume(&mut sink).await;
                        return resume_or_fail(session, "op 7: reconnect asked");
                    }
                    Some(9) => {
                        if p.d.as_bool() == Some(true) && session.is_some() {
                            close_for_resume(&mut sink).await;
                            return End::Resume("op 9: invalid session, resumable".to_string());
                        }
                        let _ = sink.close().await;
                        let wait = Duration::from_millis(rand::thread_rng().gen_range(1000..=5000));
                        return End::Fresh(wait, "op 9: invalid session".to_string());
                    }
                    Some(11) => acked = true,
                    _ => {}
                }
            }
        }
    }
}

fn resume_or_fail(session: &Option<Session>, why: &str) -> End {
    if session.is_some() {
        End::Resume(why.to_string())
    } else {
        End::Failed(why.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_decide_between_resume_fresh_and_fatal() {
        let s = Session {
            session_id: "s".into(),
            resume_url: "ws://x".into(),
            seq: 3,
        };
        assert!(matches!(closed(4000, Some(&s)), End::Resume(_)));
        assert!(matches!(closed(4009, Some(&s)), End::Fresh(..)));
        assert!(matches!(closed(4004, Some(&s)), End::Fatal(_)));
        assert!(matches!(closed(4000, None), End::Failed(_)));
        assert_eq!(gateway_url("wss://g/"), "wss://g/?v=10&encoding=json");
    }
}
