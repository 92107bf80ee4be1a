//! Approvals and questions: resolving them (the first answer wins), expiring them, and
//! picking which one `/approve [id]` or `/deny [id]` means.

use tether_proto::{ApprovalId, ApprovalStatus, Decision, ErrorCode, QuestionStatus};

/// Shortest id prefix accepted in place of a full id.
pub const MIN_ID_PREFIX: usize = 4;

/// Why an approval or question could not be resolved or picked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("this approval was already answered or closed: {status}")]
    AlreadyResolved { status: ApprovalStatus },
    #[error("this question was already answered or closed: {status}")]
    QuestionAlreadyResolved { status: QuestionStatus },
    #[error("no pending approval has the id {id}")]
    NotPending { id: String },
    #[error("{count} approvals are pending: say which one, e.g. /approve <id> (see /status)")]
    Ambiguous { count: usize },
    #[error("{count} pending approvals start with {prefix}: give more of the id")]
    AmbiguousPrefix { prefix: String, count: usize },
    #[error("no approval is pending")]
    NonePending,
}

impl ResolveError {
    /// The stable wire code. A bare `/approve` with zero or several pending approvals is
    /// `ambiguous_approval` (as `ErrorCode` documents it); an id that matches no pending
    /// approval is `not_found` (the store can tell "already resolved" apart).
    pub fn code(&self) -> ErrorCode {
        match self {
            ResolveError::AlreadyResolved { .. } => ErrorCode::ApprovalAlreadyResolved,
            ResolveError::QuestionAlreadyResolved { .. } => ErrorCode::QuestionAlreadyResolved,
            ResolveError::NotPending { .. } => ErrorCode::NotFound,
            ResolveError::Ambiguous { .. }
            | ResolveError::AmbiguousPrefix { .. }
            | ResolveError::NonePending => ErrorCode::AmbiguousApproval,
        }
    }
}

/// Applies a person's decision to an approval. Only a pending approval can be answered.
pub fn resolve_approval(
    current: ApprovalStatus,
    decision: Decision,
) -> Result<ApprovalStatus, ResolveError> {
    match current {
        ApprovalStatus::Pending => Ok(match decision {
            Decision::Allow => ApprovalStatus::Allowed,
            Decision::AllowAlways => ApprovalStatus::AllowedAlways,
            Decision::Deny => ApprovalStatus::Denied,
        }),
        ApprovalStatus::Allowed
        | ApprovalStatus::AllowedAlways
        | ApprovalStatus::Denied
        | ApprovalStatus::Expired
        | ApprovalStatus::Cancelled => Err(ResolveError::AlreadyResolved { status: current }),
    }
}

/// A pending approval whose deadline has come (`now_ms >= deadline_ms`) expires.
pub fn expire(current: ApprovalStatus, now_ms: i64, deadline_ms: i64) -> Option<ApprovalStatus> {
    (current == ApprovalStatus::Pending && now_ms >= deadline_ms).then_some(ApprovalStatus::Expired)
}

/// A pending approval of a turn that ended (stopped, failed, ...) is cancelled.
pub fn cancel_approval(current: ApprovalStatus) -> Option<ApprovalStatus> {
    (current == ApprovalStatus::Pending).then_some(ApprovalStatus::Cancelled)
}

/// Answers a question. Only a pending question can be answered.
pub fn resolve_question(current: QuestionStatus) -> Result<QuestionStatus, ResolveError> {
    match current {
        QuestionStatus::Pending => Ok(QuestionStatus::Answered),
        QuestionStatus::Answered | QuestionStatus::Expired | QuestionStatus::Cancelled => {
            Err(ResolveError::QuestionAlreadyResolved { status: current })
        }
    }
}

/// A pending question whose deadline has come (`now_ms >= deadline_ms`) expires.
pub fn expire_question(
    current: QuestionStatus,
    now_ms: i64,
    deadline_ms: i64,
) -> Option<QuestionStatus> {
    (current == QuestionStatus::Pending && now_ms >= deadline_ms).then_some(QuestionStatus::Expired)
}

/// A pending question of a turn that ended is cancelled.
pub fn cancel_question(current: QuestionStatus) -> Option<QuestionStatus> {
    (current == QuestionStatus::Pending).then_some(QuestionStatus::Cancelled)
}

/// Which pending approval `/approve [id]` / `/deny [id]` means.
///
/// With an id: an exact id, or a unique prefix of at least [`MIN_ID_PREFIX`] characters
/// (case-insensitive, since people type short ids). Without one: the single pending
/// approval, or an error when none or several are pending. An id that names no pending
/// approval but one of `resolved` (the conversation's answered, expired or cancelled
/// ones) is `AlreadyResolved`, as the API answers a second answer.
pub fn pick_approval(
    pending_ids: &[ApprovalId],
    resolved: &[(ApprovalId, ApprovalStatus)],
    requested: Option<&str>,
) -> Result<ApprovalId, ResolveError> {
    let requested = requested.map(str::trim).filter(|r| !r.is_empty());
    let Some(wanted) = requested else {
        return match pending_ids {
            [] => Err(ResolveError::NonePending),
            [only] => Ok(only.clone()),
            more => Err(ResolveError::Ambiguous { count: more.len() }),
        };
    };
    if let Some(exact) = pending_ids.iter().find(|id| id.as_str() == wanted) {
        return Ok(exact.clone());
    }
    if wanted.chars().count() >= MIN_ID_PREFIX {
        let matches: Vec<&ApprovalId> = pending_ids
            .iter()
            .filter(|id| starts_with_ignore_case(id, wanted))
            .collect();
        match matches.as_slice() {
            [] => {}
            [only] => return Ok((*only).clone()),
            more => {
                return Err(ResolveError::AmbiguousPrefix {
                    prefix: wanted.to_string(),
                    count: more.len(),
                });
            }
        }
    }
    if let Some(status) = resolved_status(resolved, wanted) {
        return Err(ResolveError::AlreadyResolved { status });
    }
    Err(ResolveError::NotPending {
        id: wanted.to_string(),
    })
}

/// The status of the one resolved approval `wanted` names (exactly, or as a unique
/// prefix of at least [`MIN_ID_PREFIX`] characters).
fn resolved_status(
    resolved: &[(ApprovalId, ApprovalStatus)],
    wanted: &str,
) -> Option<ApprovalStatus> {
    if let Some((_, status)) = resolved.iter().find(|(id, _)| id == wanted) {
        return Some(*status);
    }
    if wanted.chars().count() < MIN_ID_PREFIX {
        return None;
    }
    match resolved
        .iter()
        .filter(|(id, _)| starts_with_ignore_case(id, wanted))
        .collect::<Vec<_>>()
        .as_slice()
    {
        [(_, status)] => Some(*status),
        _ => None,
    }
}

/// What a request that a person may answer is, for the notices below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Approval,
    Question,
}

impl RequestKind {
    fn word(self) -> &'static str {
        match self {
            RequestKind::Approval => "approval",
            RequestKind::Question => "question",
        }
    }
}

/// The history line when an approval or question expires unanswered: which one, when,
/// after how long, and what the agent was told (`outcome`, e.g. `denied`).
pub fn expired_notice(
    kind: RequestKind,
    id: &str,
    title: &str,
    asked_at_ms: i64,
    expired_at_ms: i64,
    outcome: &str,
) -> String {
    format!(
        "{} {} (\"{title}\") expired at {} after {} without an answer: {outcome}",
        kind.word(),
        crate::short_id(id),
        crate::status::format_utc(expired_at_ms),
        format_wait(expired_at_ms.saturating_sub(asked_at_ms))
    )
}

/// The history line when an approval or question is cancelled because its conversation
/// left the session that asked it (`/new`, `/detach`, a change of agent or model): fail
/// closed, nobody can answer it from the conversation any more.
pub fn left_session_notice(kind: RequestKind, id: &str, title: &str, outcome: &str) -> String {
    format!(
        "{} {} (\"{title}\") cancelled: this conversation left the session that asked it \
         ({outcome})",
        kind.word(),
        crate::short_id(id),
    )
}

/// A waiting time for people: `45s`, `30 min`, `2 h 5 min`.
fn format_wait(ms: i64) -> String {
    let secs = (ms.max(0) + 500) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s % 3600 / 60 == 0 => format!("{} h", s / 3600),
        s => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

fn starts_with_ignore_case(id: &str, prefix: &str) -> bool {
    id.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalStatus as A;
    use QuestionStatus as Q;

    #[test]
    fn resolve_approval_table() {
        for &decision in Decision::ALL {
            let expected = match decision {
                Decision::Allow => A::Allowed,
                Decision::AllowAlways => A::AllowedAlways,
                Decision::Deny => A::Denied,
            };
            assert_eq!(resolve_approval(A::Pending, decision), Ok(expected));
            for &status in A::ALL.iter().filter(|s| **s != A::Pending) {
                let err = resolve_approval(status, decision);
                assert_eq!(
                    err,
                    Err(ResolveError::AlreadyResolved { status }),
                    "{status}"
                );
                assert_eq!(
                    err.err().map(|e| e.code()),
                    Some(ErrorCode::ApprovalAlreadyResolved)
                );
            }
        }
    }

    #[test]
    fn resolve_question_table() {
        let cases = [
            (Q::Pending, Ok(Q::Answered)),
            (
                Q::Answered,
                Err(ResolveError::QuestionAlreadyResolved {
                    status: Q::Answered,
                }),
            ),
            (
                Q::Expired,
                Err(ResolveError::QuestionAlreadyResolved { status: Q::Expired }),
            ),
            (
                Q::Cancelled,
                Err(ResolveError::QuestionAlreadyResolved {
                    status: Q::Cancelled,
                }),
            ),
        ];
        assert_eq!(cases.len(), Q::ALL.len());
        for (status, expected) in cases {
            assert_eq!(resolve_question(status), expected, "{status}");
        }
        let err = ResolveError::QuestionAlreadyResolved {
            status: Q::Answered,
        };
        assert_eq!(err.code(), ErrorCode::QuestionAlreadyResolved);
    }

    #[test]
    fn expire_and_cancel_table() {
        // (status, now, deadline, expire, cancel)
        let cases = [
            (A::Pending, 99, 100, None, Some(A::Cancelled)),
            (A::Pending, 100, 100, Some(A::Expired), Some(A::Cancelled)),
            (A::Pending, 101, 100, Some(A::Expired), Some(A::Cancelled)),
            (A::Allowed, 500, 100, None, None),
            (A::AllowedAlways, 500, 100, None, None),
            (A::Denied, 500, 100, None, None),
            (A::Expired, 500, 100, None, None),
            (A::Cancelled, 500, 100, None, None),
        ];
        for (status, now, deadline, expired, cancelled) in cases {
            assert_eq!(expire(status, now, deadline), expired, "{status} {now}");
            assert_eq!(cancel_approval(status), cancelled, "{status}");
        }
        let cases = [
            (Q::Pending, 99, 100, None, Some(Q::Cancelled)),
            (Q::Pending, 100, 100, Some(Q::Expired), Some(Q::Cancelled)),
            (Q::Answered, 500, 100, None, None),
            (Q::Expired, 500, 100, None, None),
            (Q::Cancelled, 500, 100, None, None),
        ];
        for (status, now, deadline, expired, cancelled) in cases {
            assert_eq!(
                expire_question(status, now, deadline),
                expired,
                "{status} {now}"
            );
            assert_eq!(cancel_question(status), cancelled, "{status}");
        }
    }

    #[test]
    fn pick_table() {
        let ids = |v: &[&str]| v.iter().map(|s| ApprovalId::from(*s)).collect::<Vec<_>>();
        let none: Vec<ApprovalId> = vec![];
        let one = ids(&["ab12cd34-0000"]);
        let two = ids(&["ab12cd34-0000", "ab12ef56-1111"]);
        let three = ids(&["ab12cd34-0000", "ab12ef56-1111", "ffff0000-2222"]);
        let ok = |s: &str| Ok(ApprovalId::from(s));
        let not_pending = |s: &str| Err(ResolveError::NotPending { id: s.to_string() });
        type Case<'a> = (
            &'a Vec<ApprovalId>,
            Option<&'a str>,
            Result<ApprovalId, ResolveError>,
        );
        let cases: Vec<Case> = vec![
            (&none, None, Err(ResolveError::NonePending)),
            (&none, Some(""), Err(ResolveError::NonePending)),
            (&none, Some("ab12cd34"), not_pending("ab12cd34")),
            (&one, None, ok("ab12cd34-0000")),
            (&one, Some("  "), ok("ab12cd34-0000")),
            (&one, Some("ab12cd34-0000"), ok("ab12cd34-0000")),
            (&one, Some("ab12"), ok("ab12cd34-0000")),
            (&one, Some("AB12CD"), ok("ab12cd34-0000")),
            (&one, Some("ab1"), not_pending("ab1")),
            (&one, Some("zzzz"), not_pending("zzzz")),
            (
                &one,
                Some("ab12cd34-0000-extra"),
                not_pending("ab12cd34-0000-extra"),
            ),
            (&two, None, Err(ResolveError::Ambiguous { count: 2 })),
            (&three, None, Err(ResolveError::Ambiguous { count: 3 })),
            (&two, Some("ab12ef"), ok("ab12ef56-1111")),
            (&two, Some("ab12cd34-0000"), ok("ab12cd34-0000")),
            (
                &two,
                Some("ab12"),
                Err(ResolveError::AmbiguousPrefix {
                    prefix: "ab12".into(),
                    count: 2,
                }),
            ),
            (&three, Some("ffff"), ok("ffff0000-2222")),
            (&three, Some("é000"), not_pending("é000")),
        ];
        for (pending, requested, expected) in cases {
            assert_eq!(
                pick_approval(pending, &[], requested),
                expected,
                "{pending:?} {requested:?}"
            );
        }
    }

    #[test]
    fn pick_a_resolved_id_is_already_resolved() {
        let pending = vec![ApprovalId::from("ab12cd34-0000")];
        let resolved = vec![
            (ApprovalId::from("ffff0000-2222"), A::Allowed),
            (ApprovalId::from("ffff1111-3333"), A::Expired),
            (ApprovalId::from("99990000-4444"), A::Denied),
        ];
        let already = |status| Err(ResolveError::AlreadyResolved { status });
        let cases = [
            (Some("ffff0000-2222"), already(A::Allowed)),
            (Some("FFFF1111"), already(A::Expired)),
            (Some("9999"), already(A::Denied)),
            (
                Some("ffff"),
                Err(ResolveError::NotPending { id: "ffff".into() }),
            ),
            (
                Some("999"),
                Err(ResolveError::NotPending { id: "999".into() }),
            ),
            (Some("ab12"), Ok("ab12cd34-0000".into())),
            (None, Ok("ab12cd34-0000".into())),
        ];
        for (requested, expected) in cases {
            assert_eq!(
                pick_approval(&pending, &resolved, requested),
                expected,
                "{requested:?}"
            );
        }
        assert_eq!(
            pick_approval(&[], &resolved, None),
            Err(ResolveError::NonePending)
        );
    }

    #[test]
    fn notices() {
        let asked = 1_714_566_000_000;
        assert_eq!(
            expired_notice(
                RequestKind::Approval,
                "ab12cd34ef",
                "rm -rf build",
                asked,
                asked + 1_000,
                "denied"
            ),
            "approval ab12cd34 (\"rm -rf build\") expired at 2024-05-01 12:20 UTC after 1s \
             without an answer: denied"
        );
        assert_eq!(
            expired_notice(
                RequestKind::Question,
                "q1",
                "which branch?",
                asked,
                asked + 1_800_000,
                "no answer was given"
            ),
            "question q1 (\"which branch?\") expired at 2024-05-01 12:50 UTC after 30 min \
             without an answer: no answer was given"
        );
        assert_eq!(
            left_session_notice(RequestKind::Approval, "ab12cd34ef", "deploy", "denied"),
            "approval ab12cd34 (\"deploy\") cancelled: this conversation left the session \
             that asked it (denied)"
        );
        let waits = [
            (0, "0s"),
            (59_400, "59s"),
            (60_000, "1 min"),
            (3_599_000, "59 min"),
            (7_200_000, "2 h"),
            (7_500_000, "2 h 5 min"),
        ];
        for (ms, text) in waits {
            assert_eq!(format_wait(ms), text, "{ms}");
        }
    }

    #[test]
    fn error_codes_and_messages() {
        let cases = [
            (
                ResolveError::AlreadyResolved { status: A::Denied },
                ErrorCode::ApprovalAlreadyResolved,
                "this approval was already answered or closed: denied",
            ),
            (
                ResolveError::NotPending { id: "x1".into() },
                ErrorCode::NotFound,
                "no pending approval has the id x1",
            ),
            (
                ResolveError::Ambiguous { count: 2 },
                ErrorCode::AmbiguousApproval,
                "2 approvals are pending: say which one, e.g. /approve <id> (see /status)",
            ),
            (
                ResolveError::AmbiguousPrefix {
                    prefix: "ab12".into(),
                    count: 2,
                },
                ErrorCode::AmbiguousApproval,
                "2 pending approvals start with ab12: give more of the id",
            ),
            (
                ResolveError::NonePending,
                ErrorCode::AmbiguousApproval,
                "no approval is pending",
            ),
        ];
        for (err, code, text) in cases {
            assert_eq!(err.code(), code, "{err:?}");
            assert_eq!(err.to_string(), text);
        }
    }
}
