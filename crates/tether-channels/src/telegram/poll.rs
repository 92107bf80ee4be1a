//! Long polling: `getUpdates` with a timeout from the stored offset; each new update is
//! recorded durably (dedupe by `update_id`, raw update kept until handled) and queued,
//! then the offset is stored, so a restart neither loses nor repeats an update. Each
//! update is parsed alone: one that does not fit the types is logged and skipped (the
//! offset moves past it) instead of stalling the batch.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Telegram;
use super::api::Update;
use super::updates::{Incoming, UpdatesIntake};

const OFFSET_KEY: &str = "update_offset";

pub(crate) async fn run(intake: UpdatesIntake, tg: Arc<Telegram>, timeout: Duration) {
    let core = intake.core().clone();
    let mut offset: i64 = match core
        .store
        .channels()
        .channel_state("telegram", OFFSET_KEY)
        .await
    {
        Ok(v) => v.and_then(|v| v.parse().ok()).unwrap_or(0),
        Err(e) => {
            tracing::warn!(channel = "telegram", "cannot read the update offset: {e}");
            0
        }
    };
    let mut failures = 0u32;
    loop {
        let body = json!({
            "offset": offset,
            "timeout": timeout.as_secs(),
            "allowed_updates": ["message", "callback_query"],
        });
        let got: Result<Vec<Value>, _> = tg
            .bot
            .call("getUpdates", &body, timeout + Duration::from_secs(15))
            .await;
        let updates = match got {
            Ok(u) => {
                failures = 0;
                u
            }
            Err(e) => {
                failures += 1;
                let wait = Duration::from_millis(250 * 2u64.pow(failures.min(7)));
                let hint = if e.to_string().contains(" 409 ") {
                    " (a webhook is set for this bot: delete it, or use mode = \"webhook\")"
                } else {
                    ""
                };
                tracing::warn!(
                    channel = "telegram",
                    "getUpdates failed ({e}){hint}; retrying in {wait:?}"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        if updates.iter().all(|u| u["update_id"].as_i64().is_none()) {
            if !updates.is_empty() {
                // Nothing to confirm: Telegram would send the same batch again.
                tracing::warn!(channel = "telegram", "updates without an update_id");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            continue;
        }
        let before = offset;
        for raw in updates {
            let id = raw["update_id"].as_i64();
            match serde_json::from_value::<Update>(raw.clone()) {
                Ok(update) => {
                    let incoming = Incoming {
                        update,
                        raw: raw.to_string(),
                    };
                    if intake.accept(incoming).await.is_err() {
                        // Not recorded: fetch it again rather than confirm it.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        break;
                    }
                }
                Err(e) => tracing::warn!(
                    channel = "telegram",
                    update = id,
                    "update skipped, it does not fit the Bot API types: {e}"
                ),
            }
            if let Some(id) = id {
                offset = offset.max(id + 1);
            }
        }
        if offset == before {
            continue;
        }
        if let Err(e) = core
            .store
            .channels()
            .set_channel_state("telegram", OFFSET_KEY, &offset.to_string())
            .await
        {
            tracing::warn!(channel = "telegram", "cannot store the update offset: {e}");
        }
    }
}
