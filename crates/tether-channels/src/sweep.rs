//! Hourly clean-up of one channel's rows that would otherwise only grow: dedupe keys
//! older than two days (the platforms redeliver within hours: Feishu over about 7 h,
//! Telegram's webhook retries for less, and polling never repeats a confirmed update;
//! Feishu replays after that are refused by their stale timestamp) and expired pairing
//! codes.

use std::time::Duration;

use tether_store::now_ms;

use crate::core::SharedCore;
use crate::pairing::CODE_TTL_MS;

/// How long an inbound dedupe key is kept.
pub(crate) const DEDUPE_KEEP: Duration = Duration::from_secs(48 * 3600);
const EVERY: Duration = Duration::from_secs(3600);

pub(crate) async fn run(core: SharedCore) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let keep_ms = i64::try_from(DEDUPE_KEEP.as_millis()).unwrap_or(i64::MAX);
        match core
            .store
            .channels()
            .prune_inbound(core.name(), now_ms() - keep_ms)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(channel = core.name(), "forgot {n} old inbound dedupe keys"),
            Err(e) => tracing::warn!(channel = core.name(), "cannot prune dedupe keys: {e}"),
        }
        if let Err(e) = core
            .store
            .channels()
            .prune_pairings(core.name(), now_ms() - CODE_TTL_MS)
            .await
        {
            tracing::warn!(channel = core.name(), "cannot prune pairing codes: {e}");
        }
    }
}
