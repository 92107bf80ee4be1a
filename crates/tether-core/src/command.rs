//! Parsing what a person typed into a [`Command`] or a prompt for the agent (architecture.md §3).
//!
//! The same commands work on every channel. An unknown `/command` is an error that lists
//! the commands; it is never sent to the agent. A leading `//` sends the rest literally
//! (for the agent's own slash commands).

use tether_proto::ErrorCode;

/// A tether command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new [agent] [task]`: unbind; with a task, start the new session with it at once.
    New {
        agent: Option<String>,
        task: Option<String>,
    },
    /// `/detach`: only unbind.
    Detach,
    /// `/status`.
    Status,
    /// `/stop`: cancel the running turn (queued messages keep their place).
    Stop,
    /// `/approve [id]`.
    Approve { id: Option<String> },
    /// `/deny [id]`.
    Deny { id: Option<String> },
    /// `/agent <name>`: the agent for new sessions (the known spelling).
    Agent { name: String },
    /// `/model <name>`: the model for new sessions; `default` is the agent's own (see
    /// [`crate::binding::model_choice`]).
    Model { name: String },
    /// `/sessions`: list this conversation's sessions.
    Sessions,
    /// `/usage`: this conversation's usage, its task tree's and its budgets.
    Usage,
    /// `/cancel`: cancel the continuation waiting for a vendor's limit to reset.
    Cancel,
    /// `/file <path>`: send a file from the working directory (the rest of the line).
    File { path: String },
    /// `/every <when> <prompt>`: a schedule in this conversation (the rest of the line,
    /// read by [`crate::schedule::parse_every`]).
    Every { spec: String },
    /// `/at <YYYY-MM-DD> <HH:MM> <prompt>`: a one-off run ([`crate::schedule::parse_at`]).
    At { spec: String },
    /// `/schedules [pause|resume|delete <id>]`: list this conversation's schedules, or
    /// change one.
    Schedules { action: Option<(String, String)> },
    /// `/worktree [on|off|discard]`: this conversation's isolated worktree (issue 32):
    /// its state, isolation for the next session, or discarding it.
    Worktree { action: Option<String> },
    /// `/diff`: the worktree's changes (a summary, and the patch as a file).
    Diff,
    /// `/merge`: merge the worktree's branch back.
    Merge,
    /// `/help` (also Telegram's `/start`).
    Help,
}

impl Command {
    /// The command's name without the slash, e.g. `"new"`.
    pub fn name(&self) -> &'static str {
        match self {
            Command::New { .. } => "new",
            Command::Detach => "detach",
            Command::Status => "status",
            Command::Stop => "stop",
            Command::Approve { .. } => "approve",
            Command::Deny { .. } => "deny",
            Command::Agent { .. } => "agent",
            Command::Model { .. } => "model",
            Command::Sessions => "sessions",
            Command::Usage => "usage",
            Command::Cancel => "cancel",
            Command::File { .. } => "file",
            Command::Every { .. } => "every",
            Command::At { .. } => "at",
            Command::Schedules { .. } => "schedules",
            Command::Worktree { .. } => "worktree",
            Command::Diff => "diff",
            Command::Merge => "merge",
            Command::Help => "help",
        }
    }
}

/// What a message is: a command for tether or a prompt for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Command(Command),
    /// Text for the agent (trimmed; a leading `//` already turned into `/`).
    Prompt(String),
}

/// Why a message could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("empty message")]
    Empty,
    #[error(
        "unknown command /{name}. Commands: {}. Start with // to send text beginning with / to the agent.",
        command_list()
    )]
    Unknown { name: String },
    #[error("/{command} needs an argument. Usage: {usage}")]
    MissingArgument {
        command: &'static str,
        usage: &'static str,
    },
    #[error("/{command} takes no more arguments. Usage: {usage}")]
    UnexpectedArgument {
        command: &'static str,
        usage: &'static str,
    },
    #[error("unknown agent {name:?}. Agents: {}", known.join(", "))]
    UnknownAgent { name: String, known: Vec<String> },
}

impl CommandError {
    /// The stable wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            CommandError::Empty => ErrorCode::BadRequest,
            CommandError::Unknown { .. } => ErrorCode::UnknownCommand,
            CommandError::MissingArgument { .. } | CommandError::UnexpectedArgument { .. } => {
                ErrorCode::InvalidCommand
            }
            CommandError::UnknownAgent { .. } => ErrorCode::UnknownAgent,
        }
    }
}

struct Spec {
    name: &'static str,
    usage: &'static str,
    about: &'static str,
}

const COMMANDS: &[Spec] = &[
    Spec {
        name: "new",
        usage: "/new [agent] [task]",
        about: "start a new session (optionally with another agent and a first task)",
    },
    Spec {
        name: "detach",
        usage: "/detach",
        about: "unbind the current session",
    },
    Spec {
        name: "status",
        usage: "/status",
        about: "show the session, state and queue",
    },
    Spec {
        name: "stop",
        usage: "/stop",
        about: "cancel the running turn",
    },
    Spec {
        name: "approve",
        usage: "/approve [id]",
        about: "allow a pending approval",
    },
    Spec {
        name: "deny",
        usage: "/deny [id]",
        about: "deny a pending approval",
    },
    Spec {
        name: "agent",
        usage: "/agent <name>",
        about: "choose the agent for new sessions",
    },
    Spec {
        name: "model",
        usage: "/model <name>",
        about: "choose the model for new sessions (default: the agent's own)",
    },
    Spec {
        name: "sessions",
        usage: "/sessions",
        about: "list this conversation's sessions",
    },
    Spec {
        name: "usage",
        usage: "/usage",
        about: "show the tokens and cost spent here and the budgets that apply",
    },
    Spec {
        name: "cancel",
        usage: "/cancel",
        about: "cancel the automatic continuation after a usage limit",
    },
    Spec {
        name: "file",
        usage: "/file <path>",
        about: "send a file from the working directory",
    },
    Spec {
        name: "every",
        usage: "/every <when> <prompt>",
        about: "run a prompt here on a schedule: /every weekday 09:00 …, /every 2h …, /every cron <m h dom mon dow> …",
    },
    Spec {
        name: "at",
        usage: "/at <YYYY-MM-DD> <HH:MM> <prompt>",
        about: "run a prompt here once, at that time",
    },
    Spec {
        name: "schedules",
        usage: "/schedules [pause|resume|delete <id>]",
        about: "list this conversation's schedules, or pause, resume or delete one",
    },
    Spec {
        name: "worktree",
        usage: "/worktree [on|off|discard]",
        about: "this conversation's isolated git worktree: its branch and changes, isolation on or off, or discard it",
    },
    Spec {
        name: "diff",
        usage: "/diff",
        about: "the worktree's changes against its base (a summary and the patch as a file)",
    },
    Spec {
        name: "merge",
        usage: "/merge",
        about: "merge the worktree's branch into the repository's checked-out branch",
    },
    Spec {
        name: "help",
        usage: "/help",
        about: "show this help",
    },
];

fn usage(name: &'static str) -> &'static str {
    COMMANDS
        .iter()
        .find(|s| s.name == name)
        .map_or("", |s| s.usage)
}

fn command_list() -> String {
    COMMANDS
        .iter()
        .map(|s| s.usage)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per command with a short description.
pub fn help_text() -> String {
    let mut out = String::new();
    for spec in COMMANDS {
        out.push_str(&format!("{} — {}\n", spec.usage, spec.about));
    }
    out.push_str("// — send the rest to the agent as typed (for the agent's own /commands)");
    out
}

/// Whether `word` (case-insensitively) names a command [`parse_input`] knows, so a
/// channel whose client cannot send a leading `/` may offer another sign for it.
pub fn is_command_word(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "new"
            | "detach"
            | "status"
            | "stop"
            | "sessions"
            | "usage"
            | "cancel"
            | "help"
            | "approve"
            | "deny"
            | "agent"
            | "model"
            | "file"
            | "every"
            | "at"
            | "schedules"
            | "worktree"
            | "diff"
            | "merge"
    )
}

/// Parses a message. `known_agents` are the configured agent names: `/new <agent> ...`
/// only takes its first word as an agent when it is one of them (case-insensitively), and
/// `/agent <name>` must name one. Returned agent names use the known spelling.
pub fn parse_input(text: &str, known_agents: &[&str]) -> Result<Input, CommandError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(CommandError::Empty);
    }
    let Some(body) = text.strip_prefix('/') else {
        return Ok(Input::Prompt(text.to_string()));
    };
    if body.starts_with('/') {
        return Ok(Input::Prompt(body.to_string()));
    }
    let (word, rest) = split_word(body);
    // Telegram appends the bot's name in groups: `/status@mybot`.
    let typed = word.split('@').next().unwrap_or(word);
    let command = match typed.to_ascii_lowercase().as_str() {
        "new" => parse_new(rest, known_agents),
        "detach" => no_args("detach", rest, Command::Detach)?,
        "status" => no_args("status", rest, Command::Status)?,
        "stop" => no_args("stop", rest, Command::Stop)?,
        "sessions" => no_args("sessions", rest, Command::Sessions)?,
        "usage" => no_args("usage", rest, Command::Usage)?,
        "cancel" => no_args("cancel", rest, Command::Cancel)?,
        "help" | "start" => Command::Help,
        "approve" => Command::Approve {
            id: optional_arg("approve", rest)?,
        },
        "deny" => Command::Deny {
            id: optional_arg("deny", rest)?,
        },
        "agent" => {
            let name = required_arg("agent", rest)?;
            Command::Agent {
                name: known_agent(&name, known_agents).ok_or_else(|| {
                    CommandError::UnknownAgent {
                        name: name.clone(),
                        known: known_agents.iter().map(|a| a.to_string()).collect(),
                    }
                })?,
            }
        }
        "model" => Command::Model {
            name: required_arg("model", rest)?,
        },
        // The whole rest: a path may contain spaces.
        "file" if rest.is_empty() => {
            return Err(CommandError::MissingArgument {
                command: "file",
                usage: usage("file"),
            });
        }
        "file" => Command::File {
            path: rest.to_string(),
        },
        "every" => Command::Every {
            spec: whole_rest("every", rest)?,
        },
        "at" => Command::At {
            spec: whole_rest("at", rest)?,
        },
        "schedules" => Command::Schedules {
            action: match split_word(rest) {
                ("", _) => None,
                (verb, id) if matches!(verb, "pause" | "resume" | "delete") && !id.is_empty() => {
                    Some((verb.to_owned(), id.to_owned()))
                }
                _ => {
                    return Err(CommandError::UnexpectedArgument {
                        command: "schedules",
                        usage: usage("schedules"),
                    });
                }
            },
        },
        "worktree" => Command::Worktree {
            action: match rest {
                "" => None,
                "on" | "off" | "discard" => Some(rest.to_owned()),
                _ => {
                    return Err(CommandError::UnexpectedArgument {
                        command: "worktree",
                        usage: usage("worktree"),
                    });
                }
            },
        },
        "diff" => no_args("diff", rest, Command::Diff)?,
        "merge" => no_args("merge", rest, Command::Merge)?,
        _ => {
            return Err(CommandError::Unknown {
                name: typed.to_string(),
            });
        }
    };
    Ok(Input::Command(command))
}

/// Splits off the first whitespace-separated word; the rest is trimmed.
fn split_word(s: &str) -> (&str, &str) {
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    }
}

fn known_agent(word: &str, known_agents: &[&str]) -> Option<String> {
    known_agents
        .iter()
        .find(|a| a.eq_ignore_ascii_case(word))
        .map(|a| a.to_string())
}

fn parse_new(rest: &str, known_agents: &[&str]) -> Command {
    if rest.is_empty() {
        return Command::New {
            agent: None,
            task: None,
        };
    }
    let (first, after) = split_word(rest);
    match known_agent(first, known_agents) {
        Some(agent) => Command::New {
            agent: Some(agent),
            task: (!after.is_empty()).then(|| after.to_string()),
        },
        None => Command::New {
            agent: None,
            task: Some(rest.to_string()),
        },
    }
}

fn no_args(command: &'static str, rest: &str, cmd: Command) -> Result<Command, CommandError> {
    if rest.is_empty() {
        Ok(cmd)
    } else {
        Err(CommandError::UnexpectedArgument {
            command,
            usage: usage(command),
        })
    }
}

fn optional_arg(command: &'static str, rest: &str) -> Result<Option<String>, CommandError> {
    let (word, more) = split_word(rest);
    if !more.is_empty() {
        return Err(CommandError::UnexpectedArgument {
            command,
            usage: usage(command),
        });
    }
    Ok((!word.is_empty()).then(|| word.to_string()))
}

/// The rest of the line, which must not be empty.
fn whole_rest(command: &'static str, rest: &str) -> Result<String, CommandError> {
    if rest.is_empty() {
        return Err(CommandError::MissingArgument {
            command,
            usage: usage(command),
        });
    }
    Ok(rest.to_owned())
}

fn required_arg(command: &'static str, rest: &str) -> Result<String, CommandError> {
    optional_arg(command, rest)?.ok_or(CommandError::MissingArgument {
        command,
        usage: usage(command),
    })
}

#[cfg(test)]
mod tests;
