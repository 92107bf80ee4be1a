//! Scheduled turns (issue 30): a schedule belongs to a person and a conversation, and at
//! each run sends its prompt there as a message from that person — into the
//! conversation's queue behind a running turn (never "busy", never dropped), in its
//! continuous session or, if asked, a fresh one. The rules are `tether_core::schedule`;
//! each run is one timer on the durable timer facility (`tether_store::Timers`), so it
//! is claimed by one node, survives restarts and failover, and runs once (its turn id is
//! the timer's id). This file is the facade (API, `/every`, `/at`, `/schedules`);
//! `run.rs` fires a run.

mod run;

use tether_core::Action;
use tether_core::schedule::{self as rules, Missed, When};
use tether_proto::{ConversationId, NewSchedule, ScheduleView, UpdateSchedule};
use tether_store::{NewTimer, SCHEDULE_RUN, ScheduleRow};

use crate::error::{Result, RuntimeError};

pub(crate) use run::fire;

/// The longest prompt (as a message's text).
const MAX_PROMPT_BYTES: usize = 256 * 1024;

/// Scheduled turns: `Runtime::schedules()`.
#[derive(Clone, Copy)]
pub struct Schedules<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

fn bad(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::BadRequest(e.to_string())
}

/// The one `When` of a request's `every`, `cron` and `at` (none: `None`).
fn when_of(every: Option<&str>, cron: Option<&str>, at: Option<&str>) -> Result<Option<When>> {
    let given = [every, cron, at].iter().filter(|w| w.is_some()).count();
    if given > 1 {
        return Err(bad("every, cron, at: give one of them"));
    }
    if let Some(every) = every {
        let (when, rest) = rules::parse_every(&format!("{every} ."))?;
        if rest != "." {
            return Err(bad(format!("every: {every:?} has more than a time in it")));
        }
        return Ok(Some(when));
    }
    if let Some(cron) = cron {
        return Ok(Some(When::from_parts("cron", cron.trim())?));
    }
    if let Some(at) = at {
        let (when, _) = rules::parse_at(&at.replacen('T', " ", 1))?;
        return Ok(Some(when));
    }
    Ok(None)
}

fn prompt_of(prompt: &str) -> Result<String> {
    let prompt = prompt.trim();
    if prompt.is_empty() {
        return Err(bad("prompt: a schedule needs a prompt to send"));
    }
    if prompt.starts_with('/') && !prompt.starts_with("//") {
        return Err(bad(
            "prompt: it would run as a tether command; a schedule sends a prompt to the \
             agent (start with // for the agent's own /commands)",
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(bad(format!(
            "prompt: at most {MAX_PROMPT_BYTES} bytes, as any message"
        )));
    }
    Ok(prompt.to_owned())
}

fn missed_of(missed: Option<&str>) -> Result<Missed> {
    match missed {
        None => Ok(Missed::default()),
        Some(m) => {
            Missed::parse(m).ok_or_else(|| bad(format!("missed: {m:?} is not run_once or skip")))
        }
    }
}

pub(crate) fn view(s: &ScheduleRow) -> ScheduleView {
    let when = When::from_parts(&s.kind, &s.expr)
        .map_or_else(|_| format!("{} {}", s.kind, s.expr), |w| w.describe());
    ScheduleView {
        id: s.id.clone(),
        conversation_id: s.conversation_id.clone(),
        owner: s.owner_name.clone(),
        when,
        kind: s.kind.clone(),
        expr: s.expr.clone(),
        time_zone: s.tz.clone(),
        prompt: s.prompt.clone(),
        fresh_session: s.fresh_session,
        missed: s.missed.clone(),
        state: s.state.clone(),
        failures: s.failures,
        next_run_ms: s.next_run_ms,
        last_run_ms: s.last_run_ms,
        note: s.note.clone(),
        created_at_ms: s.created_at_ms,
    }
}

/// The run of schedule `id` due at `due_ms`: its id is the run's turn id, the same
/// whichever node computes it.
pub(crate) fn run_timer(s: &ScheduleRow, due_ms: i64) -> NewTimer {
    NewTimer {
        id: format!("{}-{due_ms}", s.id),
        kind: SCHEDULE_RUN.to_owned(),
        conversation_id: s.conversation_id.clone(),
        account: None,
        due_at_ms: due_ms,
        attempt: 1,
        payload: serde_json::json!({ "schedule_id": s.id }).to_string(),
    }
}

impl Schedules<'_> {
    fn now(&self) -> i64 {
        self.rt.ctx().clock.now_ms()
    }

    /// When and the zone checked against the configured minimum interval; the next run
    /// after now.
    fn plan(&self, when: &When, tz: &str, start_ms: i64) -> Result<Option<i64>> {
        let zone = rules::zone(tz)?;
        let now = self.now();
        let min = self.rt.ctx().config.schedules.min_interval;
        if let Some(gap) = rules::shortest_gap(when, &zone, now)
            && gap < min.as_millis() as i64
        {
            return Err(bad(format!(
                "when: runs {} s apart; the minimum is {} s ([schedules] min_interval_secs)",
                gap / 1000,
                min.as_secs()
            )));
        }
        let next = rules::next_run(when, &zone, start_ms, now);
        if next.is_none() {
            return Err(bad("at: that time has passed"));
        }
        Ok(next)
    }

    /// A new schedule on a conversation the person may write to.
    pub async fn create(&self, new: NewSchedule) -> Result<ScheduleView> {
        let people = self.rt.people();
        people.may_on(&new.conversation_id, Action::Write).await?;
        let me = people.actor();
        let store = &self.rt.ctx().store;
        if store
            .conversations()
            .get_conversation(&new.conversation_id)
            .await?
            .is_none()
        {
            return Err(RuntimeError::NotFound {
                what: "conversation",
                id: new.conversation_id.to_string(),
            });
        }
        let when = when_of(new.every.as_deref(), new.cron.as_deref(), new.at.as_deref())?
            .ok_or_else(|| bad("every, cron, at: say when (one of them)"))?;
        let prompt = prompt_of(&new.prompt)?;
        let missed = missed_of(new.missed.as_deref())?;
        let config = &self.rt.ctx().config.schedules;
        let tz = new
            .time_zone
            .clone()
            .unwrap_or_else(|| config.time_zone.clone());
        let now = self.now();
        let next = self.plan(&when, &tz, now)?;
        let existing = store
            .schedules()
            .schedules_of(Some(&new.conversation_id))
            .await?
            .len();
        if existing >= config.max_per_conversation {
            return Err(bad(format!(
                "conversation_id: it has {existing} schedules already, the most allowed \
                 ([schedules] max_per_conversation)"
            )));
        }
        let (kind, expr) = when.parts();
        let mut row = ScheduleRow {
            id: format!("sch_{}", crate::ids::new_id::<String>()),
            conversation_id: new.conversation_id.clone(),
            owner_id: Some(me.person.clone()),
            owner_name: me.name.clone(),
            kind: kind.to_owned(),
            expr,
            tz,
            prompt,
            fresh_session: new.fresh_session,
            missed: missed.as_str().to_owned(),
            state: "active".to_owned(),
            failures: 0,
            next_run_ms: next,
            last_run_ms: None,
            last_turn_id: None,
            note: None,
            timer_id: None,
            start_ms: now,
            created_at_ms: now,
            updated_at_ms: now,
        };
        let timer = next.map(|due| run_timer(&row, due));
        row.timer_id = timer.as_ref().map(|t| t.id.clone());
        store.schedules().add_schedule(&row, timer.as_ref()).await?;
        Ok(view(&row))
    }

    async fn row(&self, id: &str, action: Action) -> Result<ScheduleRow> {
        let found = self.rt.ctx().store.schedules().schedule(id).await?;
        let Some(row) = found else {
            return Err(RuntimeError::NotFound {
                what: "schedule",
                id: id.to_owned(),
            });
        };
        // One who may not read its conversation is told it does not exist.
        match self
            .rt
            .people()
            .may_on(&row.conversation_id, Action::Read)
            .await
        {
            Ok(()) => {}
            Err(_) => {
                return Err(RuntimeError::NotFound {
                    what: "schedule",
                    id: id.to_owned(),
                });
            }
        }
        self.rt
            .people()
            .may_on(&row.conversation_id, action)
            .await?;
        // Its runs go out as its owner: only they (or an admin) change or delete it.
        if action == Action::Write && self.rt.identity().is_some() {
            let me = self.rt.people().actor();
            if row.owner_id.as_ref() != Some(&me.person) && !me.sees_all() {
                return Err(RuntimeError::Denied(tether_core::authz::Denied::Forbidden));
            }
        }
        Ok(row)
    }

    /// The schedules of a conversation (or every one the person may read).
    pub async fn list(&self, conversation: Option<&ConversationId>) -> Result<Vec<ScheduleView>> {
        if let Some(c) = conversation {
            self.rt.people().may_on(c, Action::Read).await?;
        }
        let rows = self
            .rt
            .ctx()
            .store
            .schedules()
            .schedules_of(conversation)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            if conversation.is_some()
                || self
                    .rt
                    .people()
                    .may_on(&r.conversation_id, Action::Read)
                    .await
                    .is_ok()
            {
                out.push(view(&r));
            }
        }
        Ok(out)
    }

    /// One schedule.
    pub async fn get(&self, id: &str) -> Result<ScheduleView> {
        Ok(view(&self.row(id, Action::Read).await?))
    }

    /// Pauses, resumes or edits a schedule; its next run follows.
    pub async fn update(&self, id: &str, change: UpdateSchedule) -> Result<ScheduleView> {
        let mut row = self.row(id, Action::Write).await?;
        let when = match when_of(
            change.every.as_deref(),
            change.cron.as_deref(),
            change.at.as_deref(),
        )? {
            Some(w) => w,
            None => When::from_parts(&row.kind, &row.expr)?,
        };
        if let Some(p) = &change.prompt {
            row.prompt = prompt_of(p)?;
        }
        if let Some(tz) = &change.time_zone {
            rules::zone(tz)?;
            row.tz = tz.clone();
        }
        if let Some(m) = &change.missed {
            row.missed = missed_of(Some(m))?.as_str().to_owned();
        }
        if let Some(f) = change.fresh_session {
            row.fresh_session = f;
        }
        match change.paused {
            Some(true) => row.state = "paused".to_owned(),
            Some(false) => {
                row.state = "active".to_owned();
                row.failures = 0;
                row.note = None;
            }
            None => {}
        }
        let (kind, expr) = when.parts();
        if (kind, expr.as_str()) != (row.kind.as_str(), row.expr.as_str()) {
            // A new rhythm counts from now.
            row.start_ms = self.now();
        }
        row.kind = kind.to_owned();
        row.expr = expr;
        let timer = if row.state == "active" {
            let next = self.plan(&when, &row.tz, row.start_ms)?;
            row.next_run_ms = next;
            next.map(|due| run_timer(&row, due))
        } else {
            row.next_run_ms = None;
            None
        };
        row.timer_id = timer.as_ref().map(|t| t.id.clone());
        let saved = self
            .rt
            .ctx()
            .store
            .schedules()
            .save_schedule(&row, timer.as_ref(), None)
            .await?;
        if !saved {
            return Err(RuntimeError::NotFound {
                what: "schedule",
                id: id.to_owned(),
            });
        }
        Ok(view(&row))
    }

    /// Deletes a schedule (its waiting run with it).
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.row(id, Action::Write).await?;
        self.rt.ctx().store.schedules().delete_schedule(id).await?;
        Ok(())
    }

    /// `/every <when> <prompt>` and `/at <day> <time> <prompt>` in conversation `conv`:
    /// the reply.
    pub(crate) async fn command_add(
        &self,
        conv: &ConversationId,
        spec: &str,
        once: bool,
    ) -> Result<String> {
        let (when, prompt) = if once {
            rules::parse_at(spec)?
        } else {
            rules::parse_every(spec)?
        };
        let (every, cron, at) = match &when {
            When::Every { .. } | When::Cron(_) => {
                let (kind, expr) = when.parts();
                if kind == "every" {
                    (Some(format!("{expr}s")), None, None)
                } else {
                    (None, Some(expr), None)
                }
            }
            When::At(_) => (None, None, Some(when.parts().1)),
        };
        let made = self
            .create(NewSchedule {
                conversation_id: conv.clone(),
                every,
                cron,
                at,
                prompt,
                ..NewSchedule::default()
            })
            .await?;
        Ok(format!(
            "⏰ Scheduled {} ({}): {} — next run {}. /schedules lists them.",
            made.id,
            made.when,
            made.prompt,
            next_text(&made)
        ))
    }

    /// `/schedules [pause|resume|delete <id>]` in conversation `conv`: the reply.
    pub(crate) async fn command_list(
        &self,
        conv: &ConversationId,
        action: Option<(String, String)>,
    ) -> Result<String> {
        if let Some((verb, id)) = action {
            let own = self.row(&id, Action::Write).await?;
            if &own.conversation_id != conv {
                return Err(RuntimeError::NotFound {
                    what: "schedule",
                    id,
                });
            }
            let done = match verb.as_str() {
                "delete" => {
                    self.delete(&id).await?;
                    "deleted".to_owned()
                }
                pause_or_resume => {
                    let paused = pause_or_resume == "pause";
                    let change = UpdateSchedule {
                        paused: Some(paused),
                        ..UpdateSchedule::default()
                    };
                    let v = self.update(&id, change).await?;
                    if paused {
                        "paused".to_owned()
                    } else {
                        format!("resumed; next run {}", next_text(&v))
                    }
                }
            };
            return Ok(format!("Schedule {id} {done}."));
        }
        let all = self.list(Some(conv)).await?;
        if all.is_empty() {
            return Ok("No schedules here. /every weekday 09:00 <prompt> makes one.".to_owned());
        }
        let mut out = String::from("Schedules:\n");
        for s in &all {
            out.push_str(&format!(
                "{} — {} ({}) — {} — {}{}\n",
                s.id,
                s.when,
                s.time_zone,
                s.state,
                s.prompt.chars().take(80).collect::<String>(),
                match s.next_run_ms {
                    Some(_) => format!(" — next {}", next_text(s)),
                    None => String::new(),
                }
            ));
        }
        Ok(out.trim_end().to_owned())
    }
}

/// The next run in the schedule's own zone: "2026-12-07 09:00 CET".
fn next_text(s: &ScheduleView) -> String {
    let Some(ms) = s.next_run_ms else {
        return "none".to_owned();
    };
    match (
        jiff::Timestamp::from_millisecond(ms),
        rules::zone(&s.time_zone),
    ) {
        (Ok(t), Ok(z)) => t.to_zoned(z).strftime("%Y-%m-%d %H:%M %Z").to_string(),
        _ => format!("at {ms} ms"),
    }
}
