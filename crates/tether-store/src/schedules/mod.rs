//! Scheduled turns (issue 30; migration 0027 / PostgreSQL 0019): each schedule with its
//! one waiting run, a timer of kind [`SCHEDULE_RUN`] on the durable timer facility
//! (`timers/`), so a run is claimed by one node and survives restarts and failover.
//! Saving a schedule replaces its waiting run and can mark the run that just fired in
//! the same transaction (`sql.rs`).

use tether_proto::{ConversationId, PersonId};

/// The timer kind of a schedule's run.
pub const SCHEDULE_RUN: &str = "schedule_run";

/// A schedule as stored. `kind`/`expr` and `missed` are `tether_core::schedule`'s
/// stored forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    pub id: String,
    pub conversation_id: ConversationId,
    pub owner_id: Option<PersonId>,
    /// Who the runs are sent as (history and approvals name them).
    pub owner_name: String,
    pub kind: String,
    pub expr: String,
    /// An IANA time zone name.
    pub tz: String,
    pub prompt: String,
    /// Each run in a session of its own instead of the conversation's.
    pub fresh_session: bool,
    /// `run_once` or `skip`.
    pub missed: String,
    /// `active`, `paused` or `done` (a one-off that ran).
    pub state: String,
    /// Failed runs in a row.
    pub failures: i64,
    pub next_run_ms: Option<i64>,
    pub last_run_ms: Option<i64>,
    /// The turn of the last run (its outcome is read at the next one).
    pub last_turn_id: Option<String>,
    /// Why it was paused, when tether paused it.
    pub note: Option<String>,
    /// The waiting run.
    pub timer_id: Option<String>,
    /// Intervals count from here.
    pub start_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}
