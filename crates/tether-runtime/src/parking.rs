//! Turns parked at a vendor's usage limit (issue 29), on the durable timer facility
//! (`tether_store::Timers`). A turn the vendor stopped ends `usage_limit`; the
//! conversation gets one timer at the reset (or, when the vendor does not say, after
//! `[limits] unknown_reset_secs`), staggered after the other sessions parked on the same
//! account, and the account is marked limited until then, so new turns on it park at
//! once instead of asking the vendor again. When the timer fires (on whichever node
//! claims it: a claim lapses if its node dies) tether sends the conversation one
//! message, in the same session; at most `attempts` continuations follow one another,
//! and a reset past the horizon is not waited for. A person's own message cancels the
//! continuation and runs as usual; so does `/cancel`.

use tether_proto::{ConversationId, MessageRole, SendMessage, TurnId};
use tether_store::{CONTINUE_AFTER_LIMIT, NewTimer};

use crate::Runtime;
use crate::call::{Command, Principal};
use crate::ctx::Ctx;

/// The message a continuation sends.
pub(crate) const CONTINUE_TEXT: &str = "The usage limit has reset: continue where you stopped.";

/// `HH:MM UTC` of a Unix ms moment.
fn clock_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02} UTC", secs / 3600, (secs / 60) % 60)
}

/// Up to a quarter of the stagger (so the herd's order holds), so two parkings of one
/// moment do not wake together.
fn jitter_ms(stagger_ms: i64) -> i64 {
    i64::from(uuid::Uuid::new_v4().as_bytes()[0]) * stagger_ms / 1024
}

/// Parks conversation `conv` after its agent hit `account`'s limit (`resets_at_ms` when
/// the vendor said) in turn `turn`; `unsent` is the turn's input when the agent never
/// got it (the continuation sends it then). The status line telling the person what
/// happens.
pub(crate) async fn park(
    ctx: &Ctx,
    conv: &ConversationId,
    turn: Option<&TurnId>,
    agent: &str,
    account: &str,
    resets_at_ms: Option<i64>,
    unsent: Option<&str>,
) -> String {
    match try_park(ctx, conv, turn, agent, account, resets_at_ms, unsent).await {
        Ok(line) => line,
        Err(e) => {
            tracing::error!(%conv, error = %e, "cannot park the conversation");
            format!("⏸ {agent}'s usage limit is reached; send a message to try again ({e}).")
        }
    }
}

async fn try_park(
    ctx: &Ctx,
    conv: &ConversationId,
    turn: Option<&TurnId>,
    agent: &str,
    account: &str,
    resets_at_ms: Option<i64>,
    unsent: Option<&str>,
) -> Result<String, tether_store::StoreError> {
    let limits = ctx.config.usage.limits;
    let now = ctx.clock.now_ms();
    let timers = ctx.store.timers();
    let known = timers
        .conversation_timers(conv, CONTINUE_AFTER_LIMIT)
        .await?;
    // A continuation's turn has its timer's id: that timer is this turn, not another
    // parking (it is marked fired only once its message was sent).
    let this = turn.map(TurnId::as_str);
    if let Some(w) = known
        .iter()
        .find(|t| (t.state == "waiting" || t.state == "claimed") && Some(t.id.as_str()) != this)
    {
        return Ok(format!(
            "⏸ {agent}'s usage limit: I will continue at {} — /cancel to stop.",
            clock_time(w.due_at_ms)
        ));
    }
    // Attempts count along one chain: a continuation stopped again is the next attempt;
    // any other turn (a person's) starts a chain of its own.
    let attempt = known
        .iter()
        .find(|t| Some(t.id.as_str()) == this)
        .map_or(1, |t| t.attempt + 1);
    let reset = resets_at_ms.unwrap_or(now + limits.unknown_reset_wait.as_millis() as i64);
    timers.limit_account(account, reset, agent).await?;
    if attempt > i64::from(limits.attempts) {
        return Ok(format!(
            "⏸ {agent}'s usage limit is still reached after {} continuations; I stop \
             trying — send a message when it has reset.",
            limits.attempts
        ));
    }
    if reset - now > limits.horizon.as_millis() as i64 {
        return Ok(format!(
            "⏸ {agent}'s usage limit resets at {}, too far away to wait for; send a \
             message then.",
            clock_time(reset)
        ));
    }
    let herd = timers.account_timers(account).await?;
    let stagger = limits.stagger.as_millis() as i64;
    let due = reset.max(now) + herd * stagger + jitter_ms(stagger);
    timers
        .add_timer(&NewTimer {
            id: crate::ids::new_id::<String>(),
            kind: CONTINUE_AFTER_LIMIT.to_owned(),
            conversation_id: conv.clone(),
            account: Some(account.to_owned()),
            due_at_ms: due,
            attempt,
            payload: serde_json::json!({ "input": unsent }).to_string(),
        })
        .await?;
    let when = match resets_at_ms {
        Some(r) => format!("resets at {}", clock_time(r)),
        None => "is reached (it did not say until when)".to_owned(),
    };
    Ok(format!(
        "⏸ {agent}'s usage limit {when}; I will continue at {} (attempt {attempt} of {}) — \
         /cancel to stop.",
        clock_time(due),
        limits.attempts
    ))
}

/// Cancels the conversation's waiting continuation; whether one was waiting.
pub(crate) async fn cancel(ctx: &Ctx, conv: &ConversationId) -> bool {
    match ctx
        .store
        .timers()
        .cancel_timers(conv, CONTINUE_AFTER_LIMIT)
        .await
    {
        Ok(n) => n > 0,
        Err(e) => {
            tracing::warn!(%conv, error = %e, "cannot cancel a parked continuation");
            false
        }
    }
}

/// Fires a due continuation (claimed by this node): the message is sent with the
/// timer's id as its turn id (a second sending, after a node died between sending and
/// marking, is the same turn and is not run again), then the timer is marked fired.
pub(crate) async fn fire(rt: &Runtime, t: &tether_store::Timer) {
    let ctx = rt.ctx();
    // The input of a turn the agent never got, else the continuation's own.
    let unsent = serde_json::from_str::<serde_json::Value>(&t.payload)
        .ok()
        .and_then(|p| p.get("input").and_then(|i| i.as_str()).map(str::to_owned));
    let message = SendMessage {
        text: unsent.unwrap_or_else(|| CONTINUE_TEXT.to_owned()),
        ..SendMessage::default()
    };
    let turn_id = TurnId::from(t.id.clone());
    let command = Command::send(&t.conversation_id, message, Some(&turn_id));
    let sent: crate::error::Result<tether_proto::MessageOutcome> =
        rt.call_as(command, Principal::System).await;
    match sent {
        Ok(_) => {}
        Err(e)
            if crate::timer_retry::passing(&e)
                // A continuation is due within the horizon of its parking.
                && ctx.clock.now_ms() - t.created_at_ms
                    < ctx.config.usage.limits.horizon.as_millis() as i64
                        + crate::timer_retry::GIVE_UP_MS =>
        {
            tracing::info!(conversation = %t.conversation_id, error = %e, "a parked continuation waits to be sent again");
            crate::timer_retry::retry(rt, &t.id).await;
            return;
        }
        Err(e) => {
            tracing::warn!(conversation = %t.conversation_id, error = %e, "a parked continuation could not start");
            let text = format!("⏸ The automatic continuation could not start: {e}");
            let _ = ctx
                .store
                .events()
                .add_message(&t.conversation_id, MessageRole::Status, &text, None, None)
                .await;
        }
    }
    if let Err(e) = ctx.store.timers().fire_timer(&t.id).await {
        tracing::warn!(timer = t.id, error = %e, "cannot mark a timer fired");
    }
}
