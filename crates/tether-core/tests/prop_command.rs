//! Property tests of the command parser (bounded: 512 cases per property): whatever a
//! person types, `parse_input` never panics; an error always has a stable code and a
//! message; a `/word` never becomes a prompt for the agent; well-formed commands parse to
//! what they say, in any case, with any whitespace and a `@bot` suffix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::Config;
use tether_core::{Command, CommandError, Input, parse_input};
use tether_proto::ErrorCode;

const AGENTS: &[&str] = &["codex", "claude", "Gemini", "my-agent"];

fn config() -> Config {
    Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Whitespace as people (and platforms) type it, Unicode included.
fn space() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            " ", "\t", "\n", "\r\n", "\u{a0}", "\u{3000}", "\u{2009}",
        ]),
        1..4,
    )
    .prop_map(|v| v.concat())
}

/// A word without whitespace (may contain `/`, `@`, emoji, combining marks, ...).
fn word() -> impl Strategy<Value = String> {
    "[^\\s]{1,12}".prop_filter("no whitespace", |w: &String| {
        !w.chars().any(char::is_whitespace)
    })
}

/// Text that looks like commands: a slash or two, a known or unknown name in any case,
/// an optional `@bot`, then arbitrary words and whitespace.
fn commandish() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "new",
        "NEW",
        "Detach",
        "status",
        "stop",
        "approve",
        "deny",
        "agent",
        "model",
        "sessions",
        "help",
        "start",
        "frobnicate",
        "",
        "new@bot",
        "status@other_bot",
        "@",
    ]);
    (
        prop::sample::select(vec!["/", "//", " /", "///", "\u{3000}/"]),
        name,
        prop::collection::vec(
            (
                space(),
                prop_oneof![
                    word(),
                    Just("codex".to_string()),
                    Just("GEMINI".to_string())
                ],
            ),
            0..4,
        ),
        prop::option::of(space()),
    )
        .prop_map(|(slash, name, rest, tail)| {
            let mut s = format!("{slash}{name}");
            for (sp, w) in rest {
                s.push_str(&sp);
                s.push_str(&w);
            }
            s.push_str(&tail.unwrap_or_default());
            s
        })
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        commandish(),
        "\\PC{0,64}",
        "[/ \\t\\n@a-z]{0,24}"
    ]
}

fn agents() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(AGENTS.to_vec(), 0..=AGENTS.len())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn never_panics_and_errors_have_codes(text in any_text(), known in agents()) {
        match parse_input(&text, &known) {
            Ok(Input::Prompt(p)) => {
                let trimmed = text.trim();
                prop_assert!(!p.is_empty());
                if let Some(rest) = trimmed.strip_prefix("//") {
                    prop_assert_eq!(p, format!("/{rest}"));
                } else {
                    prop_assert!(!trimmed.starts_with('/'), "a /command became a prompt: {:?}", text);
                    prop_assert_eq!(p, trimmed);
                }
            }
            Ok(Input::Command(c)) => {
                prop_assert!(text.trim().starts_with('/'));
                prop_assert!(!text.trim().starts_with("//"));
                if let Command::Agent { name } = &c {
                    prop_assert!(known.contains(&name.as_str()), "unknown agent accepted: {}", name);
                }
                if let Command::New { agent: Some(a), .. } = &c {
                    prop_assert!(known.contains(&a.as_str()));
                }
            }
            Err(e) => {
                let code = e.code();
                prop_assert!(matches!(
                    code,
                    ErrorCode::BadRequest
                        | ErrorCode::UnknownCommand
                        | ErrorCode::InvalidCommand
                        | ErrorCode::UnknownAgent
                ), "unexpected code {:?}", code);
                let message = e.to_string();
                prop_assert!(!message.is_empty());
                prop_assert_eq!(matches!(e, CommandError::Empty), text.trim().is_empty());
                if code == ErrorCode::UnknownCommand {
                    prop_assert!(message.contains("/new") && message.contains("//"), "{}", message);
                }
                if let CommandError::UnknownAgent { known: listed, .. } = &e {
                    prop_assert_eq!(listed.len(), known.len());
                }
            }
        }
    }

    #[test]
    fn new_with_a_known_agent_and_task_parses_to_that(
        agent in prop::sample::select(AGENTS.to_vec()),
        upper in any::<bool>(),
        at_bot in any::<bool>(),
        sp in space(),
        sp2 in space(),
        task in prop::collection::vec(word(), 0..5),
    ) {
        let typed_agent = if upper { agent.to_uppercase() } else { agent.to_lowercase() };
        let cmd = if at_bot { "/New@tether_bot" } else { "/new" };
        let task_text = task.join(" ");
        let text = format!("{cmd}{sp}{typed_agent}{sp2}{task_text}");
        let parsed = parse_input(&text, AGENTS).unwrap();
        prop_assert_eq!(parsed, Input::Command(Command::New {
            agent: Some(agent.to_string()),
            task: (!task_text.is_empty()).then(|| task_text.clone()),
        }));
    }

    #[test]
    fn approve_and_deny_take_at_most_one_id(
        deny in any::<bool>(),
        ids in prop::collection::vec(word(), 0..3),
        sp in space(),
    ) {
        let name = if deny { "/deny" } else { "/APPROVE" };
        let text = format!("{name}{sp}{}", ids.join(" "));
        let parsed = parse_input(&text, AGENTS);
        match ids.len() {
            0 | 1 => {
                let id = ids.first().cloned();
                let want = if deny { Command::Deny { id } } else { Command::Approve { id } };
                prop_assert_eq!(parsed.unwrap(), Input::Command(want));
            }
            _ => {
                let e = parsed.unwrap_err();
                prop_assert_eq!(e.code(), ErrorCode::InvalidCommand);
            }
        }
    }

    #[test]
    fn anything_after_a_double_slash_goes_to_the_agent_verbatim(rest in "\\PC{0,40}") {
        let text = format!("//{rest}");
        if let Some(body) = text.trim().strip_prefix("//") {
            let parsed = parse_input(&text, AGENTS).unwrap();
            prop_assert_eq!(parsed, Input::Prompt(format!("/{body}")));
        }
    }
}
