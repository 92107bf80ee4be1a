//! Scheduled turns on the wire (issue 30): a schedule sends its prompt to its
//! conversation at each run, in the conversation's session (or a fresh one per run),
//! queued behind a running turn like any message.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A new schedule (`POST /api/v1/schedules`). Exactly one of `every`, `cron` and `at`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NewSchedule {
    pub conversation_id: crate::ConversationId,
    /// A plain form as after `/every`: `2h`, `30m`, `weekday 09:00`, `mon,wed 18:30`.
    #[serde(default)]
    pub every: Option<String>,
    /// A cron expression: five fields (minute hour day-of-month month day-of-week), or
    /// six with seconds first.
    #[serde(default)]
    pub cron: Option<String>,
    /// Once, at this wall-clock time: `2026-12-24T18:00` (or with a space).
    #[serde(default)]
    pub at: Option<String>,
    /// An IANA time zone (`Europe/Berlin`); default: the server's.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// What each run sends.
    pub prompt: String,
    /// Each run in a new session of its own instead of the conversation's (default false).
    #[serde(default)]
    pub fresh_session: bool,
    /// Runs missed while tether was down: `run_once` (default: one run when back) or
    /// `skip`. Never a burst.
    #[serde(default)]
    pub missed: Option<String>,
}

/// A change to a schedule (`PATCH /api/v1/schedules/{id}`): what is given changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UpdateSchedule {
    /// Pause (`true`) or resume (`false`; also clears a pause for failures).
    #[serde(default)]
    pub paused: Option<bool>,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub time_zone: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub fresh_session: Option<bool>,
    #[serde(default)]
    pub missed: Option<String>,
}

/// A schedule as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    pub id: String,
    pub conversation_id: crate::ConversationId,
    /// Whose schedule it is (runs are sent as them).
    pub owner: String,
    /// When, in words (`cron 0 9 * * 1-5`, `every 2h`, `once at 2026-12-24 18:00`).
    pub when: String,
    /// `cron`, `every` (seconds) or `at` (a wall-clock time).
    pub kind: String,
    pub expr: String,
    pub time_zone: String,
    pub prompt: String,
    pub fresh_session: bool,
    pub missed: String,
    /// `active`, `paused` or `done` (a one-off that ran).
    pub state: String,
    /// Failed runs in a row (at `[schedules] max_failures` it pauses).
    pub failures: i64,
    #[serde(default)]
    pub next_run_ms: Option<i64>,
    #[serde(default)]
    pub last_run_ms: Option<i64>,
    /// Why tether paused it.
    #[serde(default)]
    pub note: Option<String>,
    pub created_at_ms: i64,
}

/// Schedules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}
