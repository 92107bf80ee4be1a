//! A pure description of start-up recovery (architecture.md §6): turns that were running or
//! waiting become `interrupted`, pending approvals and questions `expired` (fail closed),
//! live sessions dormant; bindings are kept, and each affected conversation is told once
//! what happened and how to go on.

use tether_proto::{ApprovalStatus, QuestionStatus, SessionStatus, TurnStatus};

/// What recovery does to a turn (`None`: leave it).
pub fn recover_turn(status: TurnStatus) -> Option<TurnStatus> {
    crate::turn::recover(status)
}

/// Pending approvals expire: nobody can answer the old agent process any more.
pub fn recover_approval(status: ApprovalStatus) -> Option<ApprovalStatus> {
    (status == ApprovalStatus::Pending).then_some(ApprovalStatus::Expired)
}

/// Pending questions expire.
pub fn recover_question(status: QuestionStatus) -> Option<QuestionStatus> {
    (status == QuestionStatus::Pending).then_some(QuestionStatus::Expired)
}

/// Sessions that had (or were getting) a process become dormant; the next turn resumes
/// them from their external id.
pub fn recover_session(status: SessionStatus) -> Option<SessionStatus> {
    match status {
        SessionStatus::Starting | SessionStatus::Live => Some(SessionStatus::Dormant),
        SessionStatus::Dormant | SessionStatus::Closed => None,
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The one message an affected conversation gets after a restart, e.g. "tether
/// restarted: the running turn was interrupted and 1 pending approval expired. Send a
/// message to continue in the same session, or /new to start over."
pub fn restart_notice(
    interrupted_turns: usize,
    expired_approvals: usize,
    expired_questions: usize,
) -> String {
    notice(
        "tether restarted",
        interrupted_turns,
        expired_approvals,
        expired_questions,
    )
}

/// The same notice when another node of a cluster took the conversation over because
/// the node running it went away (issue 12).
pub fn failover_notice(
    interrupted_turns: usize,
    expired_approvals: usize,
    expired_questions: usize,
) -> String {
    notice(
        "the tether node running this conversation went away and another took over",
        interrupted_turns,
        expired_approvals,
        expired_questions,
    )
}

fn notice(
    what_happened: &str,
    interrupted_turns: usize,
    expired_approvals: usize,
    expired_questions: usize,
) -> String {
    let turns = match interrupted_turns {
        0 => None,
        1 => Some("the running turn was interrupted".to_string()),
        n => Some(format!("{n} running turns were interrupted")),
    };
    let mut expired = Vec::new();
    if expired_approvals > 0 {
        expired.push(count(
            expired_approvals,
            "pending approval",
            "pending approvals",
        ));
    }
    if expired_questions > 0 {
        expired.push(count(
            expired_questions,
            "pending question",
            "pending questions",
        ));
    }
    let expired = (!expired.is_empty()).then(|| format!("{} expired", expired.join(" and ")));
    let what = match (turns, expired) {
        (None, None) => String::new(),
        (Some(t), None) => format!(": {t}"),
        (None, Some(e)) => format!(": {e}"),
        (Some(t), Some(e)) if expired_approvals > 0 && expired_questions > 0 => {
            format!(": {t}, and {e}")
        }
        (Some(t), Some(e)) => format!(": {t} and {e}"),
    };
    format!(
        "{what_happened}{what}. Send a message to continue in the same session, \
         or /new to start over."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAIL: &str = ". Send a message to continue in the same session, or /new to start over.";

    #[test]
    fn notice_table() {
        let cases = [
            ((0, 0, 0), "tether restarted"),
            (
                (1, 0, 0),
                "tether restarted: the running turn was interrupted",
            ),
            (
                (2, 0, 0),
                "tether restarted: 2 running turns were interrupted",
            ),
            (
                (1, 1, 0),
                "tether restarted: the running turn was interrupted and 1 pending approval expired",
            ),
            (
                (1, 0, 1),
                "tether restarted: the running turn was interrupted and 1 pending question expired",
            ),
            ((0, 2, 0), "tether restarted: 2 pending approvals expired"),
            ((0, 0, 3), "tether restarted: 3 pending questions expired"),
            (
                (0, 1, 1),
                "tether restarted: 1 pending approval and 1 pending question expired",
            ),
            (
                (1, 2, 1),
                "tether restarted: the running turn was interrupted, \
                 and 2 pending approvals and 1 pending question expired",
            ),
        ];
        for ((t, a, q), head) in cases {
            assert_eq!(
                restart_notice(t, a, q),
                format!("{head}{TAIL}"),
                "{t} {a} {q}"
            );
        }
    }

    #[test]
    fn status_recovery_tables() {
        let turns = [
            (TurnStatus::Queued, Some(TurnStatus::Interrupted)),
            (TurnStatus::Running, Some(TurnStatus::Interrupted)),
            (TurnStatus::WaitingApproval, Some(TurnStatus::Interrupted)),
            (TurnStatus::WaitingUser, Some(TurnStatus::Interrupted)),
            (TurnStatus::Completed, None),
            (TurnStatus::Failed, None),
            (TurnStatus::Cancelled, None),
            (TurnStatus::Interrupted, None),
        ];
        for (s, e) in turns {
            assert_eq!(recover_turn(s), e, "{s}");
        }
        let approvals = [
            (ApprovalStatus::Pending, Some(ApprovalStatus::Expired)),
            (ApprovalStatus::Allowed, None),
            (ApprovalStatus::AllowedAlways, None),
            (ApprovalStatus::Denied, None),
            (ApprovalStatus::Expired, None),
            (ApprovalStatus::Cancelled, None),
        ];
        for (s, e) in approvals {
            assert_eq!(recover_approval(s), e, "{s}");
        }
        let questions = [
            (QuestionStatus::Pending, Some(QuestionStatus::Expired)),
            (QuestionStatus::Answered, None),
            (QuestionStatus::Expired, None),
            (QuestionStatus::Cancelled, None),
        ];
        for (s, e) in questions {
            assert_eq!(recover_question(s), e, "{s}");
        }
        let sessions = [
            (SessionStatus::Starting, Some(SessionStatus::Dormant)),
            (SessionStatus::Live, Some(SessionStatus::Dormant)),
            (SessionStatus::Dormant, None),
            (SessionStatus::Closed, None),
        ];
        for (s, e) in sessions {
            assert_eq!(recover_session(s), e, "{s}");
        }
    }
}
