//! tether-core: the pure domain of tether — command parsing, binding rules (which
//! session a message goes to), derived conversation state, the turn state machine,
//! approval and question resolution, the bounded turn queue, start-up recovery rules and
//! the texts of `/status`, `/sessions` and restart notices.
//!
//! This crate must not do I/O: no tokio, no sqlx, no files, sockets or processes, and no
//! clocks (time is passed in as `now_ms`; [`Clock`] is the port it is read through). Its only tether dependency is `tether-proto`,
//! whose status enums and [`tether_proto::ErrorCode`]s it uses as they are. Every error
//! here has a `code()` giving its stable wire code.

pub mod approval;
pub mod authz;
pub mod binding;
pub mod budget;
pub mod clock;
pub mod command;
pub mod placement;
pub mod queue;
pub mod recovery;
pub mod schedule;
pub mod state;
pub mod status;
pub mod throttle;
pub mod title;
pub mod turn;
pub mod usage;

pub use approval::{
    RequestKind, ResolveError, expired_notice, left_session_notice, pick_approval,
    resolve_approval, resolve_question,
};
pub use authz::{Action, Actor, Denied, Scopes, Target, decide, may_set_role};
pub use binding::{
    BoundSession, Drift, Preferences, Requested, Selection, apply_overrides, explicit_new_status,
    model_choice, new_with_task_note, pending_switch, select_session,
};
pub use clock::Clock;
pub use command::{Command, CommandError, Input, help_text, parse_input};
pub use queue::{DEFAULT_QUEUE_CAP, QueueFull, TurnQueue};
pub use recovery::{failover_notice, restart_notice};
pub use state::{StateInputs, derive_state};
pub use status::{SessionRow, StatusView, sessions_text, short_id, status_text};
pub use throttle::Throttle;
pub use turn::{TransitionError, transition};

/// A run of failures of one repeated task (a poll, a reconnect), so that a loop logs the
/// first failure and the recovery, not every retry (issue 24 S10: an outage must not
/// flood the log).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FailureRun {
    failures: u64,
}

impl FailureRun {
    /// Counts a failure; `true` for the first of a run (log it loudly then).
    pub fn fail(&mut self) -> bool {
        self.failures += 1;
        self.failures == 1
    }

    /// Ends the run; how many failures it had (`0`: there was none to report).
    pub fn recover(&mut self) -> u64 {
        std::mem::take(&mut self.failures)
    }
}

#[cfg(test)]
mod failure_run_tests {
    use super::FailureRun;

    #[test]
    fn only_the_first_failure_of_a_run_and_its_end_are_reported() {
        let mut r = FailureRun::default();
        assert_eq!(r.recover(), 0);
        assert!(r.fail());
        assert!(!r.fail());
        assert!(!r.fail());
        assert_eq!(r.recover(), 3);
        assert!(r.fail());
    }
}
