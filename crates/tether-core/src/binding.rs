//! Which session a message goes to (architecture.md §3).
//!
//! Unbound → new session; agent or model drift → new session with a status message
//! saying why; otherwise reuse the bound session, whatever its last turn's outcome.
//! An explicit `/new` unbinds before selection (see [`explicit_new_status`]).
//!
//! A model of `None` always means "the agent's default model": going back to it from a
//! chosen model is drift like any other model change.

use tether_proto::{NewSessionReason, SessionId};

/// The word that asks for the agent's default model, in `/model default` and in the
/// API's `"model": "default"` (any case).
pub const DEFAULT_MODEL_WORD: &str = "default";

/// The session a conversation is bound to, as far as selection cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSession {
    pub session_id: SessionId,
    pub agent: String,
    /// `None`: the agent's default model.
    pub model: Option<String>,
}

/// The agent and model a message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    pub agent: String,
    /// `None`: the agent's default model.
    pub model: Option<String>,
}

/// The outcome of [`select_session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Send the message to the bound session (resuming it first when dormant).
    Reuse { session_id: SessionId },
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

/// How the bound session differs from what the next message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    Agent {
        from: String,
        to: String,
    },
    /// `None` on either side: the agent's default model.
    Model {
        from: Option<String>,
        to: Option<String>,
    },
}

impl Drift {
    /// What changed, e.g. `model changed from o3 to default`.
    pub fn describe(&self) -> String {
        match self {
            Drift::Agent { from, to } => format!("agent changed from {from} to {to}"),
            Drift::Model { from, to } => format!(
                "model changed from {} to {}",
                model_label(from.as_deref()),
                model_label(to.as_deref())
            ),
        }
    }
}

/// An empty or blank model name means "no model given".
fn non_blank(model: Option<&str>) -> Option<&str> {
    model.map(str::trim).filter(|m| !m.is_empty())
}

/// How a model is shown to people: its name, or `default`.
pub fn model_label(model: Option<&str>) -> &str {
    non_blank(model).unwrap_or(DEFAULT_MODEL_WORD)
}

/// A model name as typed (`/model <name>`, the API's `model`): `default` (any case) or
/// blank means the agent's default model (`None`).
pub fn model_choice(name: &str) -> Option<&str> {
    let name = name.trim();
    if name.is_empty() || name.eq_ignore_ascii_case(DEFAULT_MODEL_WORD) {
        None
    } else {
        Some(name)
    }
}

/// The one drift rule: the agent differs, or the model does (a blank model is the
/// agent's default, the same as none).
pub fn drift(bound: &BoundSession, requested: &Requested) -> Option<Drift> {
    if bound.agent != requested.agent {
        return Some(Drift::Agent {
            from: bound.agent.clone(),
            to: requested.agent.clone(),
        });
    }
    let current = non_blank(bound.model.as_deref());
    let wanted = non_blank(requested.model.as_deref());
    (current != wanted).then(|| Drift::Model {
        from: current.map(str::to_string),
        to: wanted.map(str::to_string),
    })
}

/// Decides where a message goes.
pub fn select_session(bound: Option<&BoundSession>, requested: &Requested) -> Selection {
    let Some(bound) = bound else {
        return Selection::StartNew {
            reason: NewSessionReason::Unbound,
            status_message: None,
        };
    };
    match drift(bound, requested) {
        Some(d) => Selection::StartNew {
            reason: NewSessionReason::Drift,
            status_message: Some(format!("{}: started a new session", d.describe())),
        },
        None => Selection::Reuse {
            session_id: bound.session_id.clone(),
        },
    }
}

/// The status message for a session started by `/new` (or the New Session button).
pub fn explicit_new_status(agent: &str) -> String {
    format!("new session requested: started a new {agent} session")
}

/// The reply to `/new <task>` whose first word is not an agent name: the whole text went
/// to the new session as its task (so a mistyped agent name does not pass unnoticed).
pub fn new_with_task_note(agent: &str, task: &str) -> String {
    let word = task.split_whitespace().next().unwrap_or(task);
    format!(
        "started a new {agent} session with the task: {task}\n\
         (\"{word}\" is not an agent name; to choose an agent: /new <agent> <task>)"
    )
}

/// What a message asks for, given the conversation's preferences and the message's own
/// overrides (web UI pickers, `/new <agent>`, `/agent <name>`).
///
/// `model`: `None` or blank keeps the preference; `default` (see [`model_choice`]) asks
/// for the agent's default model. Changing the agent without naming a model resets the
/// model to the agent's default (models are per agent); naming the same agent keeps it.
pub fn apply_overrides(prefs: &Preferences, agent: Option<&str>, model: Option<&str>) -> Requested {
    let agent = non_blank(agent);
    let new_agent = agent.unwrap_or(&prefs.agent);
    let model = match non_blank(model) {
        Some(m) => model_choice(m).map(str::to_string),
        None if new_agent != prefs.agent => None,
        None => prefs.model.clone(),
    };
    Requested {
        agent: new_agent.to_string(),
        model,
    }
}

/// The switch the next message will make: the conversation's preferences (set by
/// `/agent`, `/model` or the pickers) differ from the bound session. `None` when unbound
/// (the next message starts a session anyway) or when nothing differs.
pub fn pending_switch(bound: Option<&BoundSession>, prefs: &Preferences) -> Option<Drift> {
    let requested = Requested {
        agent: prefs.agent.clone(),
        model: prefs.model.clone(),
    };
    drift(bound?, &requested)
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
            // Back to the agent's default model is a model change too.
            (
                Some(bound("codex", Some("o3"))),
                req("codex", None),
                drift("model changed from o3 to default: started a new session"),
            ),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", Some("o3")),
                reuse(),
            ),
            (
                Some(bound("codex", Some("o3"))),
                req("codex", Some("")),
                drift("model changed from o3 to default: started a new session"),
            ),
            (Some(bound("codex", Some(""))), req("codex", None), reuse()),
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
            (None, Some("default"), req("codex", None)),
            (Some("codex"), Some("DEFAULT"), req("codex", None)),
            (Some("claude"), Some("default"), req("claude", None)),
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

    #[test]
    fn pending_switch_table() {
        let prefs = |agent: &str, model: Option<&str>| Preferences {
            agent: agent.into(),
            model: model.map(String::from),
        };
        let cases = [
            (None, prefs("codex", Some("o3")), None),
            (
                Some(bound("codex", Some("o3"))),
                prefs("codex", Some("o3")),
                None,
            ),
            (
                Some(bound("codex", Some("o3"))),
                prefs("codex", None),
                Some("model changed from o3 to default"),
            ),
            (
                Some(bound("codex", None)),
                prefs("claude", None),
                Some("agent changed from codex to claude"),
            ),
        ];
        for (b, p, expected) in cases {
            assert_eq!(
                pending_switch(b.as_ref(), &p).map(|d| d.describe()),
                expected.map(String::from),
                "{b:?} {p:?}"
            );
        }
    }

    #[test]
    fn new_with_task_note_names_the_word() {
        assert_eq!(
            new_with_task_note("codex", "codexx fix it"),
            "started a new codex session with the task: codexx fix it\n\
             (\"codexx\" is not an agent name; to choose an agent: /new <agent> <task>)"
        );
    }

    #[test]
    fn model_choice_table() {
        let cases = [
            ("gpt-5", Some("gpt-5")),
            (" o3 ", Some("o3")),
            ("default", None),
            ("DEFAULT", None),
            ("", None),
        ];
        for (input, expected) in cases {
            assert_eq!(model_choice(input), expected, "{input:?}");
        }
    }
}
