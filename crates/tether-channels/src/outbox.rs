//! The outbox dispatcher: delivers stored rows, the oldest pending row of each chat first
//! (per-chat order), marks each sent with the platform's message id, and retries failures
//! with exponential backoff (never sooner than the platform's `retry_after`). Rows
//! survive restarts, so a dispatcher started later picks up where the last one stopped.
//! Each row is claimed before it is sent (`claim_outbox`): with two dispatchers on two
//! nodes, each row still goes out once.

use std::time::Duration;

use tether_store::{OutboxRow, OutboxStatus, now_ms};

use crate::channel::{Address, OutMessage, SendError};
use crate::core::SharedCore;

/// How long a sender's claim on the rows it is about to send holds (a claim also ends
/// with its node's lease, so this bounds only a live sender that hangs).
const CLAIM_FOR: Duration = Duration::from_secs(300);
/// Rows claimed at a time (sent one after the other).
const CLAIM_BATCH: u32 = 16;

/// Runs until the task is aborted. Rows are claimed for node `node_id` before they are
/// sent, so a second sender on another node never sends the same row.
pub(crate) async fn run(core: SharedCore, node_id: String) {
    // Claims this node left in an earlier run (crash, restart, an earlier term as the
    // leader) are void: nothing of it is sending now, once an earlier term's last
    // delivery has recorded what became of its row.
    drop(core.delivering.lock().await);
    if let Err(e) = core
        .store
        .channels()
        .release_outbox_claims(core.name(), &node_id)
        .await
    {
        tracing::warn!(
            channel = core.name(),
            "cannot drop earlier outbox claims: {e}"
        );
    }
    let claim_ms = i64::try_from(CLAIM_FOR.as_millis()).unwrap_or(i64::MAX / 2);
    let mut trouble = tether_core::FailureRun::default();
    loop {
        let now = now_ms();
        let claimed = core
            .store
            .channels()
            .claim_outbox(core.name(), &node_id, now, now + claim_ms, CLAIM_BATCH)
            .await;
        let delivered = match claimed {
            Ok(rows) => {
                let failures = trouble.recover();
                if failures > 0 {
                    tracing::info!(channel = core.name(), failures, "the outbox reads again");
                }
                let n = rows.len();
                for row in rows {
                    // A task of its own: a term that ends (its tasks aborted) while a row
                    // is out still records what became of it (issue 33 item 6: aborted
                    // between the platform's answer and the mark, the next term sent the
                    // row again).
                    let core = core.clone();
                    let node_id = node_id.clone();
                    let one = tokio::spawn(async move {
                        let _held = core.delivering.lock().await;
                        if still_ours(&core, &row, &node_id).await {
                            deliver(&core, row).await;
                        }
                    });
                    let _ = one.await;
                }
                n
            }
            Err(e) => {
                if trouble.fail() {
                    tracing::warn!(
                        channel = core.name(),
                        "outbox read failed (retrying quietly): {e}"
                    );
                } else {
                    tracing::debug!(channel = core.name(), "outbox read failed: {e}");
                }
                0
            }
        };
        if delivered > 0 {
            continue;
        }
        let idle = core.tuning.idle_poll;
        let wait = match core.store.channels().next_outbox_due(core.name()).await {
            Ok(Some(at)) => Duration::from_millis((at - now_ms()).clamp(0, i64::MAX) as u64),
            _ => idle,
        }
        .min(idle);
        if wait.is_zero() {
            continue;
        }
        let _ = tokio::time::timeout(wait, core.wake.notified()).await;
    }
}

/// How long this node's lease must still hold when a row goes out: the send reaches the
/// platform well within it, so no other node can claim the row meanwhile.
const SEND_MARGIN_MS: i64 = 500;

/// Whether a claimed row may go out now (issue 33 item 6): on a cluster, the rows of a
/// batch go out one after the other, and a node that stalled past its lease in between
/// (its claims then void, the new leader free to claim and send them) must not send
/// them when it wakes; such a row is let go instead. A store that does not answer
/// decides nothing: the row goes out as claimed.
async fn still_ours(core: &SharedCore, row: &OutboxRow, node_id: &str) -> bool {
    if core.store.topology() == tether_store::Topology::Single {
        return true;
    }
    let confirmed = core
        .store
        .channels()
        .confirm_outbox_claim(row.id, node_id, now_ms() + SEND_MARGIN_MS)
        .await;
    match confirmed {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!(
                channel = core.name(),
                key = row.dedupe_key,
                "not sent: this node's claim on the row lapsed (a stall past its lease)"
            );
            false
        }
        Err(e) => {
            tracing::debug!(channel = core.name(), "cannot confirm an outbox claim: {e}");
            true
        }
    }
}

/// The delay before attempt `attempts + 1`.
pub(crate) fn backoff(core: &SharedCore, attempts: i64, after: Option<Duration>) -> Duration {
    let t = &core.tuning;
    let exp = 2u32.saturating_pow(attempts.clamp(0, 20) as u32);
    let delay = t.retry_base.saturating_mul(exp).min(t.retry_max);
    after.map_or(delay, |a| a.max(delay))
}

async fn deliver(core: &SharedCore, row: OutboxRow) {
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "channel.send",
        otel.name = "channel send",
        channel = core.name(),
        attempt = row.attempts + 1
    );
    // A part of its turn's trace (issue 31).
    if let Some(tp) = &row.traceparent {
        tether_runtime::trace::join(&span, tp);
    }
    let result = attempt(core, &row).instrument(span).await;
    let store = &core.store;
    let channel = core.name();
    match &result {
        Ok(_) => crate::metrics::message_out(channel),
        Err(Outcome::Failed(SendError::Permanent(_))) => {
            crate::metrics::given_up(channel, "permanent");
        }
        Err(Outcome::Failed(SendError::Retry { .. }))
            if row.attempts + 1 >= i64::from(core.tuning.max_attempts) =>
        {
            crate::metrics::given_up(channel, "retries");
        }
        Err(Outcome::Failed(SendError::Retry { .. })) => crate::metrics::retry(channel),
        Err(Outcome::Skip(_)) => {}
    }
    let mark = match result {
        Ok(remote_id) => Mark::Sent(remote_id),
        Err(Outcome::Skip(why)) => {
            tracing::info!(
                channel = core.name(),
                key = row.dedupe_key,
                "skipped: {why}"
            );
            Mark::Done(OutboxStatus::Skipped, why)
        }
        Err(Outcome::Failed(SendError::Permanent(why))) => {
            tracing::warn!(
                channel = core.name(),
                key = row.dedupe_key,
                "not delivered: {why}"
            );
            Mark::Done(OutboxStatus::Failed, why)
        }
        Err(Outcome::Failed(SendError::Retry { after, reason })) => {
            if row.attempts + 1 >= i64::from(core.tuning.max_attempts) {
                tracing::warn!(
                    channel = core.name(),
                    key = row.dedupe_key,
                    "giving up: {reason}"
                );
                Mark::Done(OutboxStatus::Failed, reason)
            } else {
                let wait = backoff(core, row.attempts, after);
                tracing::info!(
                    channel = core.name(),
                    key = row.dedupe_key,
                    attempt = row.attempts + 1,
                    "send failed ({reason}); retrying in {wait:?}"
                );
                Mark::Retry(now_ms() + wait.as_millis() as i64, reason)
            }
        }
    };
    // The mark is tried until the store takes it (issue 33 item 6): a sent row left
    // unmarked stays claimed until the claim's deadline and then goes out again.
    let mut wait = Duration::from_millis(100);
    let started = std::time::Instant::now();
    loop {
        let channels = store.channels();
        let done = match &mark {
            Mark::Sent(remote_id) => {
                channels
                    .mark_outbox_sent(row.id, row.version, remote_id.as_deref())
                    .await
            }
            Mark::Done(status, why) => channels.mark_outbox_done(row.id, *status, why).await,
            Mark::Retry(next, reason) => channels.mark_outbox_retry(row.id, *next, reason).await,
        };
        match done {
            Ok(()) => return,
            Err(e) if started.elapsed() < MARK_FOR => {
                tracing::debug!(
                    channel = core.name(),
                    "outbox update failed, trying again: {e}"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::warn!(channel = core.name(), "outbox update failed: {e}");
                return;
            }
        }
    }
}

/// How long a sender keeps trying to record what became of a row it sent (the store may
/// be restarting meanwhile).
const MARK_FOR: Duration = Duration::from_secs(60);

/// What becomes of a row after its attempt.
enum Mark {
    Sent(Option<String>),
    Done(OutboxStatus, String),
    Retry(i64, String),
}

enum Outcome {
    Failed(SendError),
    Skip(String),
}

impl From<SendError> for Outcome {
    fn from(e: SendError) -> Self {
        Outcome::Failed(e)
    }
}

/// One delivery attempt: `Some(id)` for a new message, `None` for an edit.
async fn attempt(core: &SharedCore, row: &OutboxRow) -> Result<Option<String>, Outcome> {
    let to: Address = serde_json::from_str(&row.address)
        .map_err(|e| Outcome::Failed(SendError::Permanent(format!("bad address: {e}"))))?;
    let msg: OutMessage = serde_json::from_str(&row.body)
        .map_err(|e| Outcome::Failed(SendError::Permanent(format!("bad body: {e}"))))?;
    match row.op.as_str() {
        "send" => match &msg.file {
            None => Ok(Some(core.channel.send(&to, &msg, &row.dedupe_key).await?)),
            Some(file) => {
                let (_, bytes) = core
                    .runtime
                    .attachment(&file.attachment_id)
                    .await
                    .map_err(|e| Outcome::Failed(SendError::Permanent(e.to_string())))?;
                Ok(Some(
                    core.channel
                        .send_file(&to, &msg, bytes, &row.dedupe_key)
                        .await?,
                ))
            }
        },
        "edit" => {
            let target_key = row.target_key.as_deref().unwrap_or_default();
            let target = core
                .store
                .channels()
                .outbox_row(core.name(), target_key)
                .await
                .map_err(|e| {
                    Outcome::Failed(SendError::Retry {
                        after: None,
                        reason: e.to_string(),
                    })
                })?;
            match target {
                Some(t) if t.status == OutboxStatus::Sent => {
                    let id = t.remote_id.unwrap_or_default();
                    core.channel.edit(&to, &id, &msg).await?;
                    Ok(None)
                }
                Some(t) if t.status == OutboxStatus::Pending => {
                    Err(Outcome::Failed(SendError::Retry {
                        after: None,
                        reason: format!("{target_key} is not sent yet"),
                    }))
                }
                _ => Err(Outcome::Skip(format!("{target_key} was never sent"))),
            }
        }
        other => Err(Outcome::Failed(SendError::Permanent(format!(
            "unknown op {other:?}"
        )))),
    }
}
