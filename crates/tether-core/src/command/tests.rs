//! Table-driven tests of the command parser.

use super::*;

const AGENTS: &[&str] = &["codex", "claude", "Gemini"];

fn cmd(c: Command) -> Result<Input, CommandError> {
    Ok(Input::Command(c))
}
fn prompt(s: &str) -> Result<Input, CommandError> {
    Ok(Input::Prompt(s.to_string()))
}
fn new(agent: Option<&str>, task: Option<&str>) -> Result<Input, CommandError> {
    cmd(Command::New {
        agent: agent.map(String::from),
        task: task.map(String::from),
    })
}
fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[test]
fn parse_table() {
    let missing = |command, usage| Err(CommandError::MissingArgument { command, usage });
    let extra = |command, usage| Err(CommandError::UnexpectedArgument { command, usage });
    let unknown = |name: &str| {
        Err(CommandError::Unknown {
            name: name.to_string(),
        })
    };
    let cases: Vec<(&str, Result<Input, CommandError>)> = vec![
        ("", Err(CommandError::Empty)),
        ("  \n\t ", Err(CommandError::Empty)),
        ("hello", prompt("hello")),
        ("  fix the bug \n", prompt("fix the bug")),
        (
            "line one\n/new is not a command here",
            prompt("line one\n/new is not a command here"),
        ),
        ("//compact", prompt("/compact")),
        ("  //review this file ", prompt("/review this file")),
        ("//", prompt("/")),
        ("///x", prompt("//x")),
        ("/new", new(None, None)),
        ("/NEW", new(None, None)),
        ("/new   ", new(None, None)),
        ("/new codex", new(Some("codex"), None)),
        ("/new CODEX", new(Some("codex"), None)),
        ("/new gemini hi", new(Some("Gemini"), Some("hi"))),
        ("/new codex fix it", new(Some("codex"), Some("fix it"))),
        (
            "/new claude\nline 1\nline 2",
            new(Some("claude"), Some("line 1\nline 2")),
        ),
        ("/new fix it", new(None, Some("fix it"))),
        ("/new codexx fix it", new(None, Some("codexx fix it"))),
        (
            "/new\nstep 1\n  step 2",
            new(None, Some("step 1\n  step 2")),
        ),
        ("/new@mybot codex go", new(Some("codex"), Some("go"))),
        ("/detach", cmd(Command::Detach)),
        ("/Detach@tether_bot", cmd(Command::Detach)),
        ("/detach now", extra("detach", "/detach")),
        ("/status", cmd(Command::Status)),
        ("/status@mybot", cmd(Command::Status)),
        ("/STATUS", cmd(Command::Status)),
        ("/status x", extra("status", "/status")),
        ("/stop", cmd(Command::Stop)),
        ("/stop please", extra("stop", "/stop")),
        ("/sessions", cmd(Command::Sessions)),
        ("/sessions all", extra("sessions", "/sessions")),
        ("/help", cmd(Command::Help)),
        ("/help new", cmd(Command::Help)),
        ("/start", cmd(Command::Help)),
        ("/approve", cmd(Command::Approve { id: None })),
        (
            "/approve ab12cd34",
            cmd(Command::Approve {
                id: some("ab12cd34"),
            }),
        ),
        (
            "/Approve@bot  AB12 ",
            cmd(Command::Approve { id: some("AB12") }),
        ),
        ("/approve a b", extra("approve", "/approve [id]")),
        ("/deny", cmd(Command::Deny { id: None })),
        ("/deny xyz", cmd(Command::Deny { id: some("xyz") })),
        ("/deny a b", extra("deny", "/deny [id]")),
        (
            "/agent codex",
            cmd(Command::Agent {
                name: "codex".into(),
            }),
        ),
        (
            "/agent GEMINI",
            cmd(Command::Agent {
                name: "Gemini".into(),
            }),
        ),
        ("/agent", missing("agent", "/agent <name>")),
        ("/agent   ", missing("agent", "/agent <name>")),
        ("/agent codex claude", extra("agent", "/agent <name>")),
        (
            "/agent gpt",
            Err(CommandError::UnknownAgent {
                name: "gpt".into(),
                known: AGENTS.iter().map(|a| a.to_string()).collect(),
            }),
        ),
        (
            "/model gpt-5",
            cmd(Command::Model {
                name: "gpt-5".into(),
            }),
        ),
        (
            "/model Opus",
            cmd(Command::Model {
                name: "Opus".into(),
            }),
        ),
        ("/model", missing("model", "/model <name>")),
        ("/model a b", extra("model", "/model <name>")),
        ("/foo", unknown("foo")),
        ("/Foo@bot bar", unknown("Foo")),
        ("/compact", unknown("compact")),
        ("/etc/hosts is broken", unknown("etc/hosts")),
        ("/", unknown("")),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_input(text, AGENTS), expected, "input {text:?}");
    }
}

#[test]
fn no_known_agents_means_new_takes_everything_as_task() {
    assert_eq!(
        parse_input("/new codex fix", &[]),
        new(None, Some("codex fix"))
    );
    assert!(matches!(
        parse_input("/agent codex", &[]),
        Err(CommandError::UnknownAgent { .. })
    ));
}

#[test]
fn error_codes() {
    let cases = [
        (CommandError::Empty, ErrorCode::BadRequest),
        (
            CommandError::Unknown { name: "x".into() },
            ErrorCode::UnknownCommand,
        ),
        (
            CommandError::MissingArgument {
                command: "agent",
                usage: "/agent <name>",
            },
            ErrorCode::InvalidCommand,
        ),
        (
            CommandError::UnexpectedArgument {
                command: "stop",
                usage: "/stop",
            },
            ErrorCode::InvalidCommand,
        ),
        (
            CommandError::UnknownAgent {
                name: "x".into(),
                known: vec![],
            },
            ErrorCode::UnknownAgent,
        ),
    ];
    for (err, code) in cases {
        assert_eq!(err.code(), code, "{err:?}");
    }
}

#[test]
fn unknown_lists_every_command() {
    let msg = CommandError::Unknown { name: "foo".into() }.to_string();
    assert!(msg.starts_with("unknown command /foo. Commands: /new [agent] [task], /detach, "));
    for spec in COMMANDS {
        assert!(msg.contains(spec.usage), "{msg} lacks {}", spec.usage);
    }
    assert!(msg.contains("//"));
}

#[test]
fn messages() {
    let cases = [
        (
            CommandError::MissingArgument {
                command: "agent",
                usage: "/agent <name>",
            },
            "/agent needs an argument. Usage: /agent <name>",
        ),
        (
            CommandError::UnknownAgent {
                name: "gpt".into(),
                known: vec!["a".into(), "b".into()],
            },
            "unknown agent \"gpt\". Agents: a, b",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
    }
}

#[test]
fn help_has_one_line_per_command_and_every_command_parses() {
    let help = help_text();
    for spec in COMMANDS {
        assert_eq!(
            help.lines().filter(|l| l.starts_with(spec.usage)).count(),
            1,
            "{help}"
        );
        let parsed = parse_input(&format!("/{} codex", spec.name), AGENTS);
        let name = match parsed {
            Ok(Input::Command(c)) => c.name(),
            Err(e) => match e {
                CommandError::UnexpectedArgument { command, .. } => command,
                other => panic!("/{}: {other:?}", spec.name),
            },
            Ok(Input::Prompt(p)) => panic!("prompt {p}"),
        };
        assert_eq!(name, spec.name);
    }
    assert_eq!(help.lines().count(), COMMANDS.len() + 1);
}

#[test]
fn command_words_are_the_parsed_ones() {
    for w in [
        "new",
        "DETACH",
        "status",
        "stop",
        "sessions",
        "help",
        "approve",
        "deny",
        "agent",
        "model",
        "file",
        "usage",
        "cancel",
        "every",
        "at",
        "schedules",
    ] {
        assert!(is_command_word(w), "{w}");
        let text = format!("/{w} x");
        assert!(
            !matches!(
                parse_input(&text, &["x"]),
                Err(CommandError::Unknown { .. })
            ),
            "{w}"
        );
    }
    assert!(!is_command_word("important:"));
    assert!(!is_command_word("start"));
}

#[test]
fn schedule_commands_keep_the_rest_of_the_line() {
    assert_eq!(
        parse_input("/every weekday 09:00 pull, run the tests", &[]),
        Ok(Input::Command(Command::Every {
            spec: "weekday 09:00 pull, run the tests".into()
        }))
    );
    assert_eq!(
        parse_input("/at 2026-12-24 18:00 wrap up", &[]),
        Ok(Input::Command(Command::At {
            spec: "2026-12-24 18:00 wrap up".into()
        }))
    );
    assert_eq!(
        parse_input("/schedules", &[]),
        Ok(Input::Command(Command::Schedules { action: None }))
    );
    assert_eq!(
        parse_input("/schedules pause sch_1", &[]),
        Ok(Input::Command(Command::Schedules {
            action: Some(("pause".into(), "sch_1".into()))
        }))
    );
    assert!(matches!(
        parse_input("/schedules explode sch_1", &[]),
        Err(CommandError::UnexpectedArgument { .. })
    ));
    assert!(matches!(
        parse_input("/every", &[]),
        Err(CommandError::MissingArgument { .. })
    ));
}
