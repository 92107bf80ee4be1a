//! Long polling: `getUpdates` with a timeout from the stored offset; each new update is
//! recorded (dedupe by `update_id`) and queued, then the offset is stored, so a restart
//! neither loses nor repeats an update.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::Telegram;
use super::api::Update;
use super::updates::accept;
use crate::core::SharedCore;

const OFFSET_KEY: &str = "update_offset";

pub(crate) async fn run(
    core: SharedCore,
    tg: Arc<Telegram>,
    tx: mpsc::UnboundedSender<Update>,
    timeout: Duration,
) {
    let mut offset: i64 = match core.store.channel_state("telegram", OFFSET_KEY).await {
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
        let got: Result<Vec<Update>, _> = tg
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
        let Some(last) = updates.iter().map(|u| u.update_id).max() else {
            continue;
        };
        for u in updates {
            accept(&core, &tx, u).await;
        }
        offset = offset.max(last + 1);
        if let Err(e) = core
            .store
            .set_channel_state("telegram", OFFSET_KEY, &offset.to_string())
            .await
        {
            tracing::warn!(channel = "telegram", "cannot store the update offset: {e}");
        }
    }
}
