//! Which session a message goes to (DESIGN §2).
//!
//! Unbound → new session; agent or model drift → new session with a status message
//! saying why; otherwise reuse the bound session, whatever its last turn's outcome.
//! An explicit `/new` unbinds before selection (see [`explicit_new_status`]).

use tether_proto::NewSessionReason;

/// The session a conversation is bound to, as far as selection cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSession {
    pub session_id: String,
    pub agent: String,
    /// `None`: the agent's default model.
    pub model: Option<String>,
}

/// The agent and model a message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    pub agent: String,
    /// `None`: no preference (never drift on the model).
    pub model: Option<String>,
}

/// The outcome of [`select_session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Send the message to the bound session (resuming it first when dormant).
    Reuse { session_id: String },
    /// Start a new session; put `status_message` (if any) in the history.
    StartNew {
        reason: NewSessionReason,
        status_message: Option<String>,
    },
}

/// A conversation's choice of agent and model for new sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preferences {
    pub agent: String,
    /// `None`: the agent's default model.
    pub model: Option<String>,
}

/// An empty or blank model name means "no model given".
fn non_blank(model: Option<&str>) -> Option<&str> {
    model.map(str::trim).filter(|m| !m.is_empty())
}

fn model_label(model: Option<&str>) -> &str {
    non_blank(model).unwrap_or("default")
}

/// Decides where a message goes.
pub fn select_session(bound: Option<&BoundSession>, requested: &Requested) -> Selection {
    let Some(bound) = bound else {
        return Selection::StartNew {
            reason: NewSessionReason::Unbound,
            status_message: None,
        };
    };
    if bound.agent != requested.agent {
        return Selection::StartNew {
            reason: NewSessionReason::Drift,
            status_message: Some(format!(
                "agent changed from {} to {}: started a new session",
                bound.agent, requested.agent
            )),
        };
    }
    if let Some(wanted) = non_blank(requested.model.as_deref()) {
        let current = non_blank(bound.model.as_deref());
        if current != Some(wanted) {
            return Selection::StartNew {
                reason: NewSessionReason::Drift,
                status_message: Some(format!(
                    "model changed from {} to {wanted}: started a new session",
                    model_label(current)
                )),
            };
        }
    }
    Selection::Reuse {
        session_id: bound.session_id.clone(),
    }
}

/// The status message for a session started by `/new` (or the New Session button).
pub fn explicit_new_status(agent: &str) -> String {
    format!("new session requested: started a new {agent} session")
}

/// What a message asks for, given the conversation's preferences and the message's own
/// overrides (web UI pickers, `/new <agent>`). Overriding the agent without a model resets
/// the model to the agent's default when the agent changes: models are per agent.
/// A blank model override counts as none.
pub fn apply_overrides(prefs: &Preferences, agent: Option<&str>, model: Option<&str>) -> Requested {
    let agent = non_blank(agent);
    let model = non_blank(model);
    let new_agent = agent.unwrap_or(&prefs.agent);
    let model = match model {
        Some(m) => Some(m.to_string()),
        None if new_agent != prefs.agent => None,
        None => prefs.model.clone(),
    };
    Requested {
        agent: new_agent.to_string(),
        model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(agent: &str, model: Option<&str>) -> BoundSession {
        BoundSession {
            session_id: "s1".into(),
            agent: agent.into(),
            model: model.map(String::from),
        }
    }
    fn req(agent: &str, model: Option<&str>) -> Requested {
        Requested {
            agent: agent.into(),
            model: model.map(String::from),
        }
    }
    fn reuse() -> Selection {
        Selection::Reuse {
            session_id: "s1".into(),
        }
    }
    fn drift(msg: &str) -> Selection {
        Selection::StartNew {
            reason: NewSessionReason::Drift,
            status_message: Some(msg.into()),
        }
    }

    #[test]
    fn selection_table() {
        let unbound = Selection::StartNew {
            reason: NewSessionReason::Unbound,
            status_message: None,
        };
        let cases = [
            (None, req("codex", None), unbound.clone()),
            (None, req("codex", Some("o3")), unbound),
            (Some(bound("codex", None)), req("codex", None), reuse()),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", None),
                reuse(),
            ),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", Some("o3")),
                reuse(),
            ),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", Some("")),
                reuse(),
            ),
            (
                Some(bound("codex", None)),
                req("codex", Some("  ")),
                reuse(),
            ),
            (
                Some(bound("claude", None)),
                req("codex", None),
                drift("agent changed from claude to codex: started a new session"),
            ),
            (
                Some(bound("claude", Some("opus"))),
                req("codex", Some("opus")),
                drift("agent changed from claude to codex: started a new session"),
            ),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", Some("gpt-5")),
                drift("model changed from o3 to gpt-5: started a new session"),
            ),
            (
                Some(bound("codex", None)),
                req("codex", Some("gpt-5")),
                drift("model changed from default to gpt-5: started a new session"),
            ),
            (
                Some(bound("codex", Some(""))),
                req("codex", Some("gpt-5")),
                drift("model changed from default to gpt-5: started a new session"),
            ),
        ];
        for (b, r, expected) in cases {
            assert_eq!(select_session(b.as_ref(), &r), expected, "{b:?} {r:?}");
        }
    }

    #[test]
    fn explicit_new_message() {
        assert_eq!(
            explicit_new_status("codex"),
            "new session requested: started a new codex session"
        );
    }

    #[test]
    fn overrides_table() {
        let prefs = Preferences {
            agent: "codex".into(),
            model: Some("o3".into()),
        };
        let cases = [
            (None, None, req("codex", Some("o3"))),
            (Some("codex"), None, req("codex", Some("o3"))),
            (Some("claude"), None, req("claude", None)),
            (Some("claude"), Some("opus"), req("claude", Some("opus"))),
            (None, Some("gpt-5"), req("codex", Some("gpt-5"))),
            (Some("codex"), Some("gpt-5"), req("codex", Some("gpt-5"))),
            (Some(""), Some(""), req("codex", Some("o3"))),
            (Some("claude"), Some(" "), req("claude", None)),
        ];
        for (agent, model, expected) in cases {
            assert_eq!(
                apply_overrides(&prefs, agent, model),
                expected,
                "{agent:?} {model:?}"
            );
        }
        let no_model = Preferences {
            agent: "codex".into(),
            model: None,
        };
        assert_eq!(apply_overrides(&no_model, None, None), req("codex", None));
    }
}
