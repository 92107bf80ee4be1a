//! Firing a schedule's run (issue 30), on whichever node claimed its timer: the last
//! run's outcome counted (failures in a row pause the schedule, with a status line), the
//! missed-run policy applied to a run found late, then the prompt sent as the schedule's
//! owner with the timer's id as the turn id — so a second sending (its node died before
//! the timer was marked) is the same turn — and, in one store transaction, the next run
//! added and this one marked fired.

use tether_core::schedule::{self as rules, Missed, When};
use tether_proto::{MessageRole, SendMessage, TurnId, TurnStatus};
use tether_store::{ScheduleRow, Timer};

use crate::Runtime;
use crate::call::{Command, Principal};

async fn status_line(rt: &Runtime, s: &ScheduleRow, text: &str) {
    let added = rt
        .ctx()
        .store
        .events()
        .add_message(&s.conversation_id, MessageRole::Status, text, None, None)
        .await;
    if let Err(e) = added {
        tracing::warn!(schedule = s.id, error = %e, "cannot post a schedule's status line");
    }
}

/// Whether the run of turn `id` failed (`None`: it has not ended, or is unknown).
async fn failed(rt: &Runtime, id: &str) -> Option<bool> {
    let turn = rt
        .ctx()
        .store
        .conversations()
        .get_turn(&TurnId::from(id.to_owned()))
        .await
        .ok()
        .flatten()?;
    match turn.status {
        TurnStatus::Failed | TurnStatus::Interrupted => Some(true),
        TurnStatus::Completed | TurnStatus::Cancelled => Some(false),
        TurnStatus::Queued
        | TurnStatus::Running
        | TurnStatus::WaitingApproval
        | TurnStatus::WaitingUser => None,
    }
}

/// Why the schedule's owner may no longer run it, if so (a store that cannot say is not
/// taken for a no: the run goes on, as the send is checked where it runs).
async fn owner_gone(rt: &Runtime, s: &ScheduleRow) -> Option<String> {
    let id = s.owner_id.as_ref()?;
    let person = match rt.ctx().store.people().get_person(id).await {
        Ok(p) => p,
        Err(_) => return None,
    };
    let Some(p) = person else {
        return Some(format!("its owner {} no longer exists", s.owner_name));
    };
    if p.disabled {
        return Some(format!("its owner {} was disabled", p.name));
    }
    let who = crate::Identity {
        person: p.id.clone(),
        name: p.name.clone(),
        role: p.role,
        scopes: tether_proto::TokenScope::ALL.to_vec(),
    };
    match rt
        .acting_as(who)
        .people()
        .may_on(&s.conversation_id, tether_core::Action::Write)
        .await
    {
        Err(crate::RuntimeError::Denied(_) | crate::RuntimeError::NotFound { .. }) => {
            Some(format!(
                "its owner {} may no longer write to the conversation",
                p.name
            ))
        }
        Ok(()) | Err(_) => None,
    }
}

/// Fires run `t` (claimed by this node).
pub(crate) async fn fire(rt: &Runtime, t: &Timer) {
    let ctx = rt.ctx();
    let store = &ctx.store;
    let id = serde_json::from_str::<serde_json::Value>(&t.payload)
        .ok()
        .and_then(|p| p.get("schedule_id")?.as_str().map(str::to_owned));
    let found = match id {
        Some(id) => store.schedules().schedule(&id).await,
        None => Ok(None),
    };
    let mut s = match found {
        Ok(Some(s)) if s.state == "active" && s.timer_id.as_deref() == Some(t.id.as_str()) => s,
        Ok(_) => {
            // Deleted, paused or moved on since: nothing to run.
            let _ = store.timers().fire_timer(&t.id).await;
            return;
        }
        Err(e) => {
            tracing::warn!(timer = t.id, error = %e, "cannot read a schedule; its run waits");
            return;
        }
    };
    let config = &ctx.config.schedules;
    let now = ctx.clock.now_ms();
    let Ok(when) = When::from_parts(&s.kind, &s.expr) else {
        let _ = store.timers().fire_timer(&t.id).await;
        return;
    };
    let Ok(zone) = rules::zone(&s.tz) else {
        let _ = store.timers().fire_timer(&t.id).await;
        return;
    };
    // The last run's outcome (its turn has ended by now, or it is still queued/running
    // and counts at the run after).
    if let Some(last) = s.last_turn_id.clone()
        && let Some(f) = failed(rt, &last).await
    {
        let (n, pause) = rules::after_run(
            u32::try_from(s.failures).unwrap_or(u32::MAX),
            f,
            config.max_failures,
        );
        s.failures = i64::from(n);
        s.last_turn_id = None;
        if pause {
            s.state = "paused".to_owned();
            s.next_run_ms = None;
            s.note = Some(format!("paused after {n} failed runs in a row"));
            let text = format!(
                "⏰ Schedule {} paused after {n} failed runs in a row; `/schedules resume {}` \
                 runs it again.",
                s.id, s.id
            );
            if save(rt, &s, None, &t.id).await {
                status_line(rt, &s, &text).await;
            }
            return;
        }
    }
    // The runs are the owner's: one who was disabled, removed or lost the right to write
    // to the conversation pauses them.
    if let Some(why) = owner_gone(rt, &s).await {
        s.state = "paused".to_owned();
        s.next_run_ms = None;
        s.note = Some(why.clone());
        if save(rt, &s, None, &t.id).await {
            status_line(rt, &s, &format!("⏰ Schedule {} paused: {why}.", s.id)).await;
        }
        return;
    }
    let policy = Missed::parse(&s.missed).unwrap_or_default();
    // Lateness from the run's own time (a run given back to wait has a later `due_at`).
    let due = s.next_run_ms.unwrap_or(t.due_at_ms).min(t.due_at_ms);
    let missed_after = config.missed_after.as_millis() as i64;
    let run = rules::runs(policy, due, now, missed_after);
    if run {
        let late = now - due > missed_after;
        let note = if late {
            " (missed while tether was down)"
        } else {
            ""
        };
        let text = if s.fresh_session {
            format!("/new {}", s.prompt)
        } else {
            s.prompt.clone()
        };
        let message = SendMessage {
            text,
            ..SendMessage::default()
        };
        let turn_id = TurnId::from(t.id.clone());
        let command = Command::send(&s.conversation_id, message, Some(&turn_id));
        let sent: crate::error::Result<tether_proto::MessageOutcome> = rt
            .call_as(command, Principal::person(s.owner_name.clone()))
            .await;
        match sent {
            Ok(_) => {
                s.last_run_ms = Some(now);
                s.last_turn_id = Some(t.id.clone());
                let text = format!("⏰ Scheduled run of {} — {}{note}", s.id, when.describe());
                status_line(rt, &s, &text).await;
            }
            Err(e)
                if crate::timer_retry::passing(&e)
                    && now - due < crate::timer_retry::GIVE_UP_MS =>
            {
                // Its node away or the conversation changing hands: the run waits a
                // moment and is sent again (as the same turn).
                tracing::info!(schedule = s.id, error = %e, "a scheduled run waits to be sent again");
                crate::timer_retry::retry(rt, &t.id).await;
                return;
            }
            Err(e) => {
                tracing::warn!(schedule = s.id, error = %e, "a scheduled run could not start");
                let (n, pause) = rules::after_run(
                    u32::try_from(s.failures).unwrap_or(u32::MAX),
                    true,
                    config.max_failures,
                );
                s.failures = i64::from(n);
                status_line(
                    rt,
                    &s,
                    &format!("⏰ Schedule {}: the run could not start: {e}", s.id),
                )
                .await;
                if pause {
                    s.state = "paused".to_owned();
                    s.next_run_ms = None;
                    s.note = Some(format!("paused after {n} failed runs in a row"));
                    save(rt, &s, None, &t.id).await;
                    return;
                }
            }
        }
    } else {
        status_line(
            rt,
            &s,
            &format!(
                "⏰ Schedule {}: a run missed while tether was down was skipped (its policy).",
                s.id
            ),
        )
        .await;
    }
    // The next run counts from now: missed runs never come as a burst.
    let next = rules::next_run(&when, &zone, s.start_ms, now.max(t.due_at_ms));
    let timer = next.map(|due| super::run_timer(&s, due));
    s.next_run_ms = next;
    if next.is_none() {
        s.state = "done".to_owned();
    }
    save(rt, &s, timer.as_ref(), &t.id).await;
}

/// Saves the schedule with its next run and marks `fired`; false when it could not.
async fn save(
    rt: &Runtime,
    s: &ScheduleRow,
    next: Option<&tether_store::NewTimer>,
    fired: &str,
) -> bool {
    let mut s = s.clone();
    s.timer_id = next.map(|t| t.id.clone());
    match rt
        .ctx()
        .store
        .schedules()
        .save_schedule(&s, next, Some(fired))
        .await
    {
        Ok(saved) => saved,
        Err(e) => {
            // The claim lapses and another node (or this one) fires the run again: the
            // same turn id, so the prompt is not sent twice.
            tracing::warn!(schedule = s.id, error = %e, "cannot save a schedule's next run");
            false
        }
    }
}
