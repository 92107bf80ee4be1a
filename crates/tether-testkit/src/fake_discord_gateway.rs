//! The fake Discord Gateway (a WebSocket at `/`, as `wss://gateway.discord.gg/?v=10`): Hello with a heartbeat interval,
//! Identify (token and intents checked: 4004 / 4014 otherwise) → READY, Resume → the
//! missed dispatches replayed then RESUMED (an unknown session → op 9), heartbeats
//! ACKed unless a test turns that off. Every dispatch is kept in its session's log, so
//! what is dispatched while tether is disconnected is replayed when it resumes (and,
//! with an overlap, some already-seen ones again: tether must not double them). Tests
//! dispatch messages and button presses, drop the socket, and send op 7 / op 9.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fake_discord::{BOT_ID, BOT_TOKEN, FakeDiscord, Shared, lock};

/// One payload tether sent over the Gateway.
#[derive(Debug, Clone)]
pub struct Op {
    pub op: u64,
    pub d: Value,
    pub at: Instant,
    /// Which connection (1, 2, …) it came on.
    pub conn: u64,
}

enum Control {
    Frame(Value),
    /// Drop the TCP connection without a close frame.
    Drop,
}

struct Live {
    conn: u64,
    session: Option<String>,
    tx: mpsc::UnboundedSender<Control>,
}

#[derive(Default)]
pub(crate) struct GatewayState {
    pub url: String,
    pub heartbeat_ms: u64,
    pub ack: bool,
    /// Session id → its dispatches (frames with `s` = index + 1).
    sessions: HashMap<String, Vec<Value>>,
    /// The session dispatches go to (the last one identified).
    current: Option<String>,
    live: Option<Live>,
    pub ops: Vec<Op>,
    /// Interaction id → token (for the callback route).
    pub tokens: HashMap<String, String>,
    /// On resume, also replay this many dispatches the client already had.
    overlap: usize,
    /// Dispatches sent again on resumes that the client had already acknowledged by
    /// its `seq`.
    repeated: usize,
    connections: u64,
}

pub(crate) async fn upgrade(ws: WebSocketUpgrade, State(s): State<Shared>) -> Response {
    ws.on_upgrade(move |socket| connection(s, socket))
}

fn text(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

async fn connection(s: Shared, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (conn, hb) = {
        let mut g = lock(&s);
        g.gateway.connections += 1;
        (g.gateway.connections, g.gateway.heartbeat_ms)
    };
    let hello = json!({"op": 10, "d": {"heartbeat_interval": hb}, "s": null, "t": null});
    if socket.send(text(&hello)).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let (frames, close) = handle(&s, conn, &tx, t.as_str());
                    for f in frames {
                        if socket.send(text(&f)).await.is_err() {
                            break;
                        }
                    }
                    if let Some(code) = close {
                        let frame = CloseFrame { code, reason: "".into() };
                        let _ = socket.send(Message::Close(Some(frame))).await;
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            ctl = rx.recv() => match ctl {
                Some(Control::Frame(v)) => {
                    if socket.send(text(&v)).await.is_err() {
                        break;
                    }
                }
                Some(Control::Drop) | None => break,
            },
        }
    }
    let mut g = lock(&s);
    if g.gateway.live.as_ref().is_some_and(|l| l.conn == conn) {
        g.gateway.live = None;
    }
}

/// One payload from tether: the frames to answer and, maybe, a close code.
fn handle(
    s: &Shared,
    conn: u64,
    tx: &mpsc::UnboundedSender<Control>,
    raw: &str,
) -> (Vec<Value>, Option<u16>) {
    let Ok(p) = serde_json::from_str::<Value>(raw) else {
        return (Vec::new(), Some(4002));
    };
    let op = p["op"].as_u64().unwrap_or(u64::MAX);
    let mut g = lock(s);
    g.gateway.ops.push(Op {
        op,
        d: p["d"].clone(),
        at: Instant::now(),
        conn,
    });
    match op {
        1 => {
            if g.gateway.ack {
                (vec![json!({"op": 11})], None)
            } else {
                (Vec::new(), None)
            }
        }
        2 => {
            if p["d"]["token"] != BOT_TOKEN {
                return (Vec::new(), Some(4004));
            }
            let intents = p["d"]["intents"].as_u64().unwrap_or(0);
            let needed = (1 << 9) | (1 << 12) | (1 << 15);
            if intents & needed != needed {
                return (Vec::new(), Some(4014));
            }
            let id = format!("session-{conn}");
            let ready = json!({"op": 0, "t": "READY", "s": 1, "d": {
                "v": 10, "session_id": id, "resume_gateway_url": g.gateway.url,
                "user": {"id": BOT_ID, "username": "tether-bot", "bot": true},
                "application": {"id": crate::fake_discord::APP_ID},
            }});
            g.gateway.sessions.insert(id.clone(), vec![ready.clone()]);
            g.gateway.current = Some(id.clone());
            g.gateway.live = Some(Live {
                conn,
                session: Some(id),
                tx: tx.clone(),
            });
            (vec![ready], None)
        }
        6 => {
            let id = p["d"]["session_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let seq = p["d"]["seq"].as_u64().unwrap_or(0) as usize;
            let overlap = g.gateway.overlap;
            if p["d"]["token"] != BOT_TOKEN {
                return (Vec::new(), Some(4004));
            }
            let Some(log) = g.gateway.sessions.get_mut(&id) else {
                return (vec![json!({"op": 9, "d": false})], None);
            };
            let from = seq.saturating_sub(overlap).min(log.len());
            let repeated = seq.min(log.len()) - from;
            // What was missed; earlier READY / RESUMED notices are not replayed.
            let mut frames: Vec<Value> = log[from..]
                .iter()
                .filter(|f| !matches!(f["t"].as_str(), Some("READY" | "RESUMED")))
                .cloned()
                .collect();
            let resumed = json!({"op": 0, "t": "RESUMED", "s": log.len() + 1, "d": {}});
            log.push(resumed.clone());
            frames.push(resumed);
            g.gateway.repeated += repeated;
            g.gateway.current = Some(id.clone());
            g.gateway.live = Some(Live {
                conn,
                session: Some(id),
                tx: tx.clone(),
            });
            (frames, None)
        }
        _ => (Vec::new(), None),
    }
}

impl FakeDiscord {
    /// Waits until tether has identified or resumed on a connection that is up; its
    /// session id.
    pub async fn wait_ready(&self) -> String {
        self.wait("the gateway is connected", |f| {
            let g = f.lock();
            g.gateway.live.as_ref().and_then(|l| l.session.clone())
        })
        .await
    }

    /// Dispatches an event to the current session (sent now if tether is connected,
    /// else replayed when it resumes).
    pub fn dispatch(&self, t: &str, d: Value) {
        let mut g = self.lock();
        let Some(session) = g.gateway.current.clone() else {
            panic!("dispatch before tether identified");
        };
        let log = g.gateway.sessions.entry(session.clone()).or_default();
        let frame = json!({"op": 0, "t": t, "s": log.len() + 1, "d": d});
        log.push(frame.clone());
        if let Some(l) = &g.gateway.live
            && l.session.as_deref() == Some(session.as_str())
        {
            let _ = l.tx.send(Control::Frame(frame));
        }
    }

    /// A person's message: in a DM channel (`guild_id` None) or a server channel or
    /// thread. `<@BOT_ID>` in the text is a mention of the bot. Returns the message id.
    pub fn message(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        user_id: &str,
        text: &str,
    ) -> String {
        let id = self.lock().snowflake();
        let mentions: Vec<Value> = if text.contains(&format!("<@{BOT_ID}>")) {
            vec![json!({"id": BOT_ID, "username": "tether-bot", "bot": true})]
        } else {
            Vec::new()
        };
        let mut d = json!({
            "id": id, "channel_id": channel_id, "type": 0, "content": text,
            "author": {"id": user_id, "username": format!("user{user_id}"), "global_name": format!("User {user_id}")},
            "mentions": mentions, "attachments": [],
        });
        if let Some(g) = guild_id {
            d["guild_id"] = json!(g);
        }
        self.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// A person's message with one attachment (`url` from `add_attachment`).
    pub fn message_with_file(
        &self,
        channel_id: &str,
        user_id: &str,
        caption: &str,
        name: &str,
        url: &str,
        size: usize,
    ) -> String {
        let id = self.lock().snowflake();
        let d = json!({
            "id": id, "channel_id": channel_id, "type": 0, "content": caption,
            "author": {"id": user_id, "username": format!("user{user_id}")},
            "mentions": [],
            "attachments": [{"id": "1", "filename": name, "size": size, "url": url, "content_type": "text/plain"}],
        });
        self.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// An interaction payload for a button press (`custom_id`) on `message_id`; the
    /// interaction's id and token are registered for the callback route.
    pub fn button_interaction(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        message_id: &str,
        user_id: &str,
        custom_id: &str,
    ) -> Value {
        let mut g = self.lock();
        let id = g.snowflake();
        let token = format!("itoken-{id}");
        g.gateway.tokens.insert(id.clone(), token.clone());
        let user = json!({"id": user_id, "username": format!("user{user_id}"), "global_name": format!("User {user_id}")});
        let mut ix = json!({
            "id": id, "application_id": crate::fake_discord::APP_ID, "type": 3, "token": token,
            "version": 1, "channel_id": channel_id,
            "message": {"id": message_id, "channel_id": channel_id},
            "data": {"custom_id": custom_id, "component_type": 2},
        });
        match guild_id {
            Some(gid) => {
                ix["guild_id"] = json!(gid);
                ix["member"] = json!({"user": user});
            }
            None => ix["user"] = user,
        }
        ix
    }

    /// Presses a button over the Gateway; returns the interaction id.
    pub fn press(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        message_id: &str,
        user_id: &str,
        custom_id: &str,
    ) -> String {
        let ix = self.button_interaction(channel_id, guild_id, message_id, user_id, custom_id);
        let id = ix["id"].as_str().unwrap_or_default().to_string();
        self.dispatch("INTERACTION_CREATE", ix);
        id
    }

    /// Drops the live connection without a close frame.
    pub fn drop_socket(&self) {
        if let Some(l) = self.lock().gateway.live.take() {
            let _ = l.tx.send(Control::Drop);
        }
    }

    /// Sends a raw payload (op 7 Reconnect, op 9 Invalid Session, …) on the live
    /// connection.
    pub fn send_op(&self, op: u64, d: Value) {
        if let Some(l) = &self.lock().gateway.live {
            let _ = l.tx.send(Control::Frame(json!({"op": op, "d": d})));
        }
    }

    /// Whether heartbeats are ACKed (off: the connection looks dead to tether).
    pub fn set_heartbeat_ack(&self, ack: bool) {
        self.lock().gateway.ack = ack;
    }

    /// The heartbeat interval announced in the next Hello.
    pub fn set_heartbeat_ms(&self, ms: u64) {
        self.lock().gateway.heartbeat_ms = ms;
    }

    /// On the next resumes, also replay `n` dispatches tether already had.
    pub fn set_resume_overlap(&self, n: usize) {
        self.lock().gateway.overlap = n;
    }

    /// Dispatches replayed on resume although tether's `seq` said it had them.
    pub fn repeated(&self) -> usize {
        self.lock().gateway.repeated
    }

    /// Everything tether sent over the Gateway.
    pub fn ops(&self) -> Vec<Op> {
        self.lock().gateway.ops.clone()
    }

    /// Whether a connection is up (identified or resumed).
    pub fn connected(&self) -> bool {
        self.lock().gateway.live.is_some()
    }

    /// Connections opened so far.
    pub fn connections(&self) -> u64 {
        self.lock().gateway.connections
    }
}
