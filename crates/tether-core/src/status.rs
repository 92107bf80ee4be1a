//! Replies to `/status` and `/sessions`.

use tether_proto::{ApprovalId, ConversationState, QuestionId, SessionId, SessionStatus};

use crate::binding::{Drift, model_label};

/// Length of the short ids shown to people (they may type them back: see
/// [`crate::approval::pick_approval`]).
pub const SHORT_ID_LEN: usize = 8;

/// The first [`SHORT_ID_LEN`] characters of an id.
pub fn short_id(id: &str) -> &str {
    id.char_indices()
        .nth(SHORT_ID_LEN)
        .map_or(id, |(i, _)| &id[..i])
}

/// What `/status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusView {
    /// The bound session's agent, or the agent the next session will use.
    pub agent: String,
    /// Likewise for the model (`None`: the agent's default).
    pub model: Option<String>,
    /// The bound session, if any.
    pub session_id: Option<SessionId>,
    pub session_status: Option<SessionStatus>,
    pub state: ConversationState,
    pub queue_len: usize,
    pub pending_approvals: Vec<ApprovalId>,
    pub pending_questions: Vec<QuestionId>,
    /// A switch of agent or model that the next message will make (see
    /// [`crate::binding::pending_switch`]).
    pub pending_switch: Option<Drift>,
}

/// One row of `/sessions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub id: SessionId,
    pub agent: String,
    pub model: Option<String>,
    pub status: SessionStatus,
    pub created_at_ms: i64,
    /// This is the conversation's bound session.
    pub bound: bool,
}

fn short_list<T: AsRef<str>>(ids: &[T]) -> String {
    ids.iter()
        .map(|id| short_id(id.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `/status` reply.
pub fn status_text(view: &StatusView) -> String {
    let model = model_label(view.model.as_deref());
    let mut lines = vec![format!("state: {}", view.state)];
    match &view.session_id {
        Some(id) => {
            let status = view.session_status.map_or("", SessionStatus::as_str);
            let status = if status.is_empty() {
                String::new()
            } else {
                format!(", {status}")
            };
            lines.push(format!(
                "session: {} ({}, model {model}{status})",
                short_id(id),
                view.agent
            ));
        }
        None => lines.push(format!(
            "session: none; the next message starts a new {} session (model {model})",
            view.agent
        )),
    }
    if let Some(switch) = &view.pending_switch {
        let what = match switch {
            Drift::Agent { from, to } => format!("agent {from} → {to}"),
            Drift::Model { from, to } => format!(
                "model {} → {}",
                model_label(from.as_deref()),
                model_label(to.as_deref())
            ),
        };
        lines.push(format!(
            "pending switch: {what} (the next message starts a new session)"
        ));
    }
    lines.push(match view.queue_len {
        0 => "queue: empty".to_string(),
        1 => "queue: 1 message waiting".to_string(),
        n => format!("queue: {n} messages waiting"),
    });
    match view.pending_approvals.as_slice() {
        [] => {}
        [one] => lines.push(format!(
            "pending approval: {} (answer with /approve or /deny)",
            short_id(one)
        )),
        many => lines.push(format!(
            "pending approvals: {} (answer with /approve <id> or /deny <id>)",
            short_list(many)
        )),
    }
    match view.pending_questions.as_slice() {
        [] => {}
        [one] => lines.push(format!(
            "pending question: {} (reply with a message to answer it)",
            short_id(one)
        )),
        many => lines.push(format!(
            "pending questions: {} (reply with a message to answer)",
            short_list(many)
        )),
    }
    lines.join("\n")
}

/// The `/sessions` reply: one line per session, in the order given.
pub fn sessions_text(rows: &[SessionRow]) -> String {
    if rows.is_empty() {
        return "no sessions yet: the next message starts one".to_string();
    }
    let mut lines = vec!["sessions:".to_string()];
    for row in rows {
        let mut line = format!(
            "{}  {}  model {}  {}  {}",
            short_id(&row.id),
            row.agent,
            model_label(row.model.as_deref()),
            row.status,
            format_utc(row.created_at_ms)
        );
        if row.bound {
            line.push_str("  (bound)");
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM UTC`.
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        of_day / 3600,
        of_day % 3600 / 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConversationState as C;

    fn ids<T: for<'a> From<&'a str>>(v: &[&str]) -> Vec<T> {
        v.iter().map(|s| T::from(s)).collect()
    }

    fn view() -> StatusView {
        StatusView {
            agent: "codex".into(),
            model: None,
            session_id: Some("0190abcd-1234-5678".into()),
            session_status: Some(SessionStatus::Live),
            state: C::BoundIdle,
            queue_len: 0,
            pending_approvals: vec![],
            pending_questions: vec![],
            pending_switch: None,
        }
    }

    #[test]
    fn short_id_table() {
        let cases = [
            ("", ""),
            ("abc", "abc"),
            ("01234567", "01234567"),
            ("0123456789", "01234567"),
            ("ééééééééé", "éééééééé"),
        ];
        for (id, short) in cases {
            assert_eq!(short_id(id), short);
        }
    }

    #[test]
    fn status_table() {
        let unbound = StatusView {
            model: Some("o3".into()),
            session_id: None,
            session_status: None,
            state: C::Unbound,
            ..view()
        };
        let busy = StatusView {
            model: Some("gpt-5".into()),
            session_status: Some(SessionStatus::Dormant),
            state: C::BoundWaitingApproval,
            queue_len: 2,
            pending_approvals: ids(&["ab12cd34ef", "99998888x"]),
            pending_questions: ids(&["q1"]),
            ..view()
        };
        let cases = [
            (
                view(),
                "state: bound/idle\nsession: 0190abcd (codex, model default, live)\nqueue: empty",
            ),
            (
                unbound,
                "state: unbound\n\
                 session: none; the next message starts a new codex session (model o3)\n\
                 queue: empty",
            ),
            (
                StatusView {
                    queue_len: 1,
                    pending_approvals: ids(&["ab12cd34ef"]),
                    pending_questions: ids(&["q1", "q2"]),
                    session_status: None,
                    ..view()
                },
                "state: bound/idle\nsession: 0190abcd (codex, model default)\n\
                 queue: 1 message waiting\n\
                 pending approval: ab12cd34 (answer with /approve or /deny)\n\
                 pending questions: q1, q2 (reply with a message to answer)",
            ),
            (
                busy,
                "state: bound/waiting_approval\nsession: 0190abcd (codex, model gpt-5, dormant)\n\
                 queue: 2 messages waiting\n\
                 pending approvals: ab12cd34, 99998888 (answer with /approve <id> or /deny <id>)\n\
                 pending question: q1 (reply with a message to answer it)",
            ),
            (
                StatusView {
                    pending_switch: Some(Drift::Model {
                        from: None,
                        to: Some("o3".into()),
                    }),
                    ..view()
                },
                "state: bound/idle\nsession: 0190abcd (codex, model default, live)\n\
                 pending switch: model default → o3 (the next message starts a new session)\n\
                 queue: empty",
            ),
            (
                StatusView {
                    pending_switch: Some(Drift::Agent {
                        from: "codex".into(),
                        to: "claude".into(),
                    }),
                    ..view()
                },
                "state: bound/idle\nsession: 0190abcd (codex, model default, live)\n\
                 pending switch: agent codex → claude (the next message starts a new session)\n\
                 queue: empty",
            ),
        ];
        for (v, expected) in cases {
            assert_eq!(status_text(&v), expected, "{v:?}");
        }
    }

    #[test]
    fn sessions_table() {
        let row = |id: &str, model: Option<&str>, status, bound| SessionRow {
            id: id.into(),
            agent: "claude".into(),
            model: model.map(String::from),
            status,
            created_at_ms: 1_714_566_896_789,
            bound,
        };
        let cases = [
            (vec![], "no sessions yet: the next message starts one"),
            (
                vec![
                    row("0190abcd-ffff", Some("opus"), SessionStatus::Live, true),
                    row("0190aaaa-ffff", None, SessionStatus::Closed, false),
                ],
                "sessions:\n\
                 0190abcd  claude  model opus  live  2024-05-01 12:34 UTC  (bound)\n\
                 0190aaaa  claude  model default  closed  2024-05-01 12:34 UTC",
            ),
        ];
        for (rows, expected) in cases {
            assert_eq!(sessions_text(&rows), expected);
        }
    }

    #[test]
    fn format_utc_table() {
        let cases = [
            (0, "1970-01-01 00:00 UTC"),
            (59_999, "1970-01-01 00:00 UTC"),
            (60_000, "1970-01-01 00:01 UTC"),
            (-1, "1969-12-31 23:59 UTC"),
            (951_782_400_000, "2000-02-29 00:00 UTC"),
            (1_709_251_199_000, "2024-02-29 23:59 UTC"),
            (1_714_566_896_789, "2024-05-01 12:34 UTC"),
            (4_102_444_800_000, "2100-01-01 00:00 UTC"),
        ];
        for (ms, expected) in cases {
            assert_eq!(format_utc(ms), expected, "{ms}");
        }
    }
}
