//! People in end-to-end tests (issue 28): requests to a daemon with someone's personal
//! token, and adding a person with a token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::{Daemon, within};

/// Requests to `d` with someone's token.
pub struct Who<'a> {
    pub d: &'a Daemon,
    pub token: String,
}

impl Who<'_> {
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .d
            .client
            .request(method, self.d.url(path))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = within("HTTP request", req.send()).await.unwrap();
        let status = resp.status().as_u16();
        let text = within("HTTP body", resp.text()).await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PATCH, path, Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }
    /// The status of opening an SSE stream (200 streams; the body is not read).
    pub async fn sse_status(&self, path: &str) -> u16 {
        let req = self.d.client.get(self.d.url(path)).bearer_auth(&self.token);
        within("open SSE", req.send())
            .await
            .unwrap()
            .status()
            .as_u16()
    }
    /// Sends `text` to `conv` and waits for its turn to end.
    pub async fn say_and_wait(&self, conv: &str, text: &str) -> Value {
        let (status, out) = self
            .post(
                &format!("/api/v1/conversations/{conv}/messages"),
                json!({ "text": text }),
            )
            .await;
        assert_eq!(status, 200, "say: {out}");
        let (sid, tid) = (&out["session_id"], &out["turn_id"]);
        within("turn ends", async {
            loop {
                // One page of the most a page holds: a test's session has fewer turns.
                let (_, turns) = self
                    .get(&format!("/api/v1/sessions/{}/turns?limit=1000", str(sid)))
                    .await;
                // Ended: a turn queued behind another has not even started.
                let done = turns.as_array().and_then(|a| {
                    a.iter()
                        .find(|t| {
                            t["id"] == *tid
                                && matches!(
                                    t["status"].as_str(),
                                    Some("completed" | "failed" | "cancelled" | "interrupted")
                                )
                        })
                        .cloned()
                });
                if let Some(t) = done {
                    return t;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }
}

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Adds a person with `role` and makes them a token; returns (their id, their handle).
pub async fn person<'a>(owner: &Who<'a>, name: &str, role: &str) -> (String, Who<'a>) {
    let (status, p) = owner
        .post("/api/v1/people", json!({ "name": name, "role": role }))
        .await;
    assert_eq!(status, 201, "add {name}: {p}");
    let id = str(&p["id"]).to_string();
    let (status, t) = owner
        .post(
            "/api/v1/tokens",
            json!({ "name": format!("{name}'s laptop"), "person_id": id }),
        )
        .await;
    assert_eq!(status, 201, "token for {name}: {t}");
    assert!(str(&t["secret"]).starts_with("tth_"), "{t}");
    let who = Who {
        d: owner.d,
        token: str(&t["secret"]).to_string(),
    };
    (id, who)
}
