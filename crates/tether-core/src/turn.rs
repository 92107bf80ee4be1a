//! The turn state machine. Terminal outcomes (completed, failed, cancelled, interrupted)
//! are immutable.

use tether_proto::{ErrorCode, TurnStatus};

/// A transition the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The turn already ended; its outcome never changes.
    #[error("the turn already ended ({from}); it cannot become {to}")]
    AlreadyTerminal { from: TurnStatus, to: TurnStatus },
    /// Not a step the state machine has.
    #[error("a turn cannot go from {from} to {to}")]
    Invalid { from: TurnStatus, to: TurnStatus },
}

impl TransitionError {
    /// The stable wire code: a finished turn has nothing running to act on; any other
    /// invalid step is a bug.
    pub fn code(&self) -> ErrorCode {
        match self {
            TransitionError::AlreadyTerminal { .. } => ErrorCode::NothingRunning,
            TransitionError::Invalid { .. } => ErrorCode::Internal,
        }
    }
}

/// Whether `from → to` is a step of the state machine:
///
/// - queued → running | cancelled | interrupted | failed
/// - running → waiting_approval | waiting_user | completed | failed | cancelled | interrupted
/// - waiting_* → running | waiting_approval | waiting_user | completed | failed | cancelled
///   | interrupted (a waiting state may repeat: several approvals or questions at once)
/// - terminal → nothing
pub fn can_transition(from: TurnStatus, to: TurnStatus) -> bool {
    use TurnStatus as T;
    match from {
        T::Queued => matches!(to, T::Running | T::Cancelled | T::Interrupted | T::Failed),
        T::Running => matches!(
            to,
            T::WaitingApproval
                | T::WaitingUser
                | T::Completed
                | T::Failed
                | T::Cancelled
                | T::Interrupted
        ),
        T::WaitingApproval | T::WaitingUser => !matches!(to, T::Queued),
        T::Completed | T::Failed | T::Cancelled | T::Interrupted => false,
    }
}

/// Checks a transition and returns the new status.
pub fn transition(from: TurnStatus, to: TurnStatus) -> Result<TurnStatus, TransitionError> {
    if from.is_terminal() {
        Err(TransitionError::AlreadyTerminal { from, to })
    } else if can_transition(from, to) {
        Ok(to)
    } else {
        Err(TransitionError::Invalid { from, to })
    }
}

/// What start-up recovery does to a turn: anything not terminal was cut off by the
/// restart and becomes `interrupted`; terminal turns stay as they are (`None`).
pub fn recover(status: TurnStatus) -> Option<TurnStatus> {
    (!status.is_terminal()).then_some(TurnStatus::Interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TurnStatus as T;

    /// Every allowed (from, to) pair; everything else must be rejected.
    const ALLOWED: &[(T, T)] = &[
        (T::Queued, T::Running),
        (T::Queued, T::Cancelled),
        (T::Queued, T::Interrupted),
        (T::Queued, T::Failed),
        (T::Running, T::WaitingApproval),
        (T::Running, T::WaitingUser),
        (T::Running, T::Completed),
        (T::Running, T::Failed),
        (T::Running, T::Cancelled),
        (T::Running, T::Interrupted),
        (T::WaitingApproval, T::Running),
        (T::WaitingApproval, T::WaitingApproval),
        (T::WaitingApproval, T::WaitingUser),
        (T::WaitingApproval, T::Completed),
        (T::WaitingApproval, T::Failed),
        (T::WaitingApproval, T::Cancelled),
        (T::WaitingApproval, T::Interrupted),
        (T::WaitingUser, T::Running),
        (T::WaitingUser, T::WaitingUser),
        (T::WaitingUser, T::WaitingApproval),
        (T::WaitingUser, T::Completed),
        (T::WaitingUser, T::Failed),
        (T::WaitingUser, T::Cancelled),
        (T::WaitingUser, T::Interrupted),
    ];

    #[test]
    fn full_transition_matrix() {
        for &from in T::ALL {
            for &to in T::ALL {
                let expected = if ALLOWED.contains(&(from, to)) {
                    Ok(to)
                } else if from.is_terminal() {
                    Err(TransitionError::AlreadyTerminal { from, to })
                } else {
                    Err(TransitionError::Invalid { from, to })
                };
                assert_eq!(transition(from, to), expected, "{from} -> {to}");
                assert_eq!(can_transition(from, to), expected.is_ok(), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn rejected_examples() {
        let cases = [
            (T::Queued, T::Queued),
            (T::Queued, T::Completed),
            (T::Queued, T::WaitingUser),
            (T::Running, T::Running),
            (T::Running, T::Queued),
            (T::WaitingUser, T::Queued),
        ];
        for (from, to) in cases {
            let err = transition(from, to).err();
            assert_eq!(
                err,
                Some(TransitionError::Invalid { from, to }),
                "{from} -> {to}"
            );
            assert_eq!(err.map(|e| e.code()), Some(ErrorCode::Internal));
        }
        let err = TransitionError::AlreadyTerminal {
            from: T::Completed,
            to: T::Cancelled,
        };
        assert_eq!(err.code(), ErrorCode::NothingRunning);
        assert_eq!(
            err.to_string(),
            "the turn already ended (completed); it cannot become cancelled"
        );
    }

    #[test]
    fn recover_table() {
        let cases = [
            (T::Queued, Some(T::Interrupted)),
            (T::Running, Some(T::Interrupted)),
            (T::WaitingApproval, Some(T::Interrupted)),
            (T::WaitingUser, Some(T::Interrupted)),
            (T::Completed, None),
            (T::Failed, None),
            (T::Cancelled, None),
            (T::Interrupted, None),
        ];
        assert_eq!(cases.len(), T::ALL.len());
        for (status, expected) in cases {
            assert_eq!(recover(status), expected, "{status}");
        }
    }
}
