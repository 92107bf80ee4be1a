//! Socket Mode: `apps.connections.open` with the app-level token gives a single-use WSS
//! URL; Slack says `hello`, then sends envelopes (`events_api`, `interactive`,
//! `slash_commands`), each acknowledged with `{"envelope_id": …}` as soon as it is
//! recorded (well within Slack's 3 s; the work happens after). On `disconnect` (Slack
//! rotates connections) or a dropped or silent socket, a new connection is opened;
//! Slack redelivers what was not acknowledged, and the intake's dedupe (event id, then
//! message) keeps a redelivery from doubling a message.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as Frame;

use super::Slack;
use super::intake::{Delivery, Incoming, SlackIntake};
use super::wire::Envelope;

/// The first reconnect delay (doubled per failed attempt up to [`MAX_WAIT`]).
const MIN_WAIT: Duration = Duration::from_millis(250);
const MAX_WAIT: Duration = Duration::from_secs(30);
/// tether pings this often; a socket with nothing read for [`SILENCE`] is given up.
const PING_EVERY: Duration = Duration::from_secs(20);
const SILENCE: Duration = Duration::from_secs(65);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a connection ended.
#[derive(Debug)]
enum Ended {
    /// Slack asked for a new connection (`disconnect`).
    Refresh(String),
    /// Closed, dropped or silent after `hello`.
    Dropped(String),
}

/// Runs until the task is aborted.
pub(crate) async fn run(intake: SlackIntake, slack: Arc<Slack>, app_token: String) {
    let mut wait = MIN_WAIT;
    loop {
        match connect_once(&intake, &slack, &app_token).await {
            // Slack rotates connections; `link_disabled` (Socket Mode turned off for the
            // app) keeps backing off instead of asking again at once.
            Ok(Ended::Refresh(reason)) => {
                tracing::info!(
                    channel = "slack",
                    reason,
                    "socket mode: reconnecting as asked"
                );
                if reason != "link_disabled" {
                    wait = MIN_WAIT;
                }
            }
            Ok(Ended::Dropped(why)) => {
                tracing::warn!(channel = "slack", "socket mode connection lost: {why}");
                wait = MIN_WAIT;
            }
            Err(why) => tracing::warn!(channel = "slack", "socket mode: cannot connect: {why}"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_WAIT);
    }
}

/// One connection, from `apps.connections.open` to its end. `Err`: it never said hello.
async fn connect_once(
    intake: &SlackIntake,
    slack: &Slack,
    app_token: &str,
) -> Result<Ended, String> {
    let url = slack
        .client
        .connections_open(app_token)
        .await
        .map_err(|e| e.to_string())?;
    let (mut ws, _) = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_tungstenite::connect_async(url.as_str()),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| e.to_string())?;
    let mut hello = false;
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        let next = tokio::select! {
            _ = ping.tick() => {
                if let Err(e) = ws.send(Frame::Ping(Vec::new().into())).await {
                    return ended(hello, format!("ping failed: {e}"));
                }
                continue;
            }
            next = tokio::time::timeout(SILENCE, ws.next()) => next,
        };
        let frame = match next {
            Err(_) => return ended(hello, format!("nothing heard for {SILENCE:?}")),
            Ok(None) => return ended(hello, "closed".to_string()),
            Ok(Some(Err(e))) => return ended(hello, e.to_string()),
            Ok(Some(Ok(f))) => f,
        };
        let text = match frame {
            Frame::Text(t) => t.to_string(),
            Frame::Close(c) => return ended(hello, format!("close frame {c:?}")),
            // Pings are answered by the library; pongs and binary frames carry nothing.
            _ => continue,
        };
        let Ok(envelope) = serde_json::from_str::<Envelope>(&text) else {
            tracing::warn!(channel = "slack", "socket mode: a frame that is not JSON");
            continue;
        };
        let kind = match envelope.kind.as_deref().unwrap_or_default() {
            "hello" => {
                hello = true;
                tracing::info!(channel = "slack", "socket mode connected");
                continue;
            }
            "disconnect" => {
                let reason = envelope.reason.unwrap_or_else(|| "unknown".to_string());
                return Ok(Ended::Refresh(reason));
            }
            "events_api" => Some(Delivery::Event),
            "interactive" => Some(Delivery::Interactive),
            "slash_commands" => Some(Delivery::Command),
            other => {
                tracing::debug!(
                    channel = "slack",
                    kind = other,
                    "socket mode: envelope ignored"
                );
                None
            }
        };
        let Some(id) = envelope.envelope_id.as_deref() else {
            continue;
        };
        // An envelope tether does not act on is acknowledged all the same (else Slack
        // would send it again and again).
        let recorded = match kind {
            Some(kind) => {
                let payload = envelope.payload;
                intake.accept(Incoming { kind, payload }).await.map(|_| ())
            }
            None => Ok(()),
        };
        match recorded {
            Ok(()) => {
                let ack = json!({ "envelope_id": id }).to_string();
                if let Err(e) = ws.send(Frame::Text(ack.into())).await {
                    return ended(hello, format!("ack failed: {e}"));
                }
            }
            // Not acknowledged: Slack delivers it again.
            Err(e) => tracing::warn!(channel = "slack", "envelope not recorded: {e}"),
        }
    }
}

fn ended(hello: bool, why: String) -> Result<Ended, String> {
    if hello {
        Ok(Ended::Dropped(why))
    } else {
        Err(why)
    }
}
