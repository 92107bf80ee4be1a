//! The prompt script: what the first word of a user message asks the fake agent to do,
//! and the exact texts it replies with. Pure functions, no I/O.

/// Lines printed to stdout by the `garbage` directive (none of them is JSON).
pub const GARBAGE_LINES: [&str; 3] = [
    "this is not json {{{",
    "fake-agent garbage line: <<<>>>",
    "}{ still not json",
];

/// Lines printed to stdout by the `junk` directive: JSON, but no valid message of any
/// dialect (responses to unknown ids, wrong types, unknown methods, non-objects).
pub const JUNK_LINES: [&str; 16] = [
    "[]",
    "42",
    "\"a string\"",
    "null",
    "{}",
    r#"{"id":987654321,"result":{"sessionId":"nope"}}"#,
    r#"{"id":"unknown","error":{"code":"x","message":7}}"#,
    r#"{"jsonrpc":"2.0","id":null,"method":null}"#,
    r#"{"method":42,"params":"x"}"#,
    r#"{"jsonrpc":"2.0","method":"session/update","params":"not an object"}"#,
    r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":7,"update":{"sessionUpdate":9}}}"#,
    r#"{"method":"item/agentMessage/delta","params":{"delta":5,"itemId":[]}}"#,
    r#"{"method":"made/up","params":{"deep":[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]}}"#,
    r#"{"type":"control_response","response":{"request_id":"never-asked","subtype":"success"}}"#,
    r#"{"type":"stream_event","event":null,"session_id":null}"#,
    r#"{"type":"made_up","subtype":[1,2,3]}"#,
];

/// Error message of a turn that fails because the prompt said `fail`.
pub const FAIL_MESSAGE: &str = "fake failure as asked";

/// What a user message asks for. Anything that does not parse as a directive is `Echo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    /// Reply `echo: <text>`.
    Echo,
    /// `write <path> <content…>`: write the line `<content>` to `<path>` in the session's
    /// working directory (an agent editing a file).
    Write { path: String, content: String },
    /// `stream N MS`: N chunks `chunk i `, MS milliseconds apart.
    Stream { count: u32, interval_ms: u64 },
    /// `rate N PER_SEC`: N chunks `chunk i ` at PER_SEC chunks per second on a fixed
    /// schedule (every chunk that is due goes out at each wake-up, so the timer's
    /// millisecond resolution does not cap the rate); `0` = no pause at all. For the
    /// benchmarks: `stream N 0` paces itself at about one chunk per millisecond.
    Rate { count: u32, per_sec: u64 },
    /// `approve <title>`: ask permission for a command tool call titled `<title>`.
    Approve { title: String },
    /// `slowapprove MS <title>`: wait MS milliseconds, then `approve <title>`.
    SlowApprove { ms: u64, title: String },
    /// `streamtools N <title>`: N chunks `chunk i ` with no pause, a completed tool call
    /// after each third of them, then `approve <title>`.
    StreamTools { count: u32, title: String },
    /// `ask <question>`: ask the user a question.
    Ask { question: String },
    /// `sleep MS`: wait, then reply `slept MS`.
    Sleep { ms: u64 },
    /// `spend N TOKENS MS`: N usage reports of TOKENS input tokens each, MS milliseconds
    /// apart, then reply `spent N×TOKENS`.
    Spend {
        reports: u32,
        tokens: u64,
        interval_ms: u64,
    },
    /// `crash`: one chunk, then exit with code 3 mid-turn.
    Crash,
    /// `garbage`: three non-JSON stdout lines, then reply `garbage done`.
    Garbage,
    /// `fail`: the turn fails.
    Fail,
    /// `limit SECS`: the vendor's usage limit, resetting in SECS seconds, as the
    /// dialect's CLI reports it (Codex `usageLimitExceeded`, Claude a rejected
    /// `rate_limit_event` and a 429 result; ACP an error).
    Limit { secs: u64 },
    /// `window P1 P2 …`: the vendor's reports of the account's usage window at each
    /// percent in turn, 100 ms apart (Codex `account/rateLimits/updated`, Claude
    /// `rate_limit_event`; ACP has none), then reply `window at <last>%`.
    Window { percents: Vec<u8> },
    /// `hang`: the turn never ends until cancelled.
    Hang,
    /// `freeze`: the turn never ends, and cancelling it does nothing either.
    Freeze,
    /// `flood N`: N lines on stderr during the turn, then reply `flooded N`.
    Flood { lines: u64 },
    /// `junk`: the [`JUNK_LINES`] on stdout, then reply `junk done`.
    Junk,
    /// `bigline KIB`: one non-JSON stdout line of KIB KiB, then reply `bigline done`.
    BigLine { kib: u64 },
    /// `replay <path>`: every line of the file, as is, on stdout; then reply `replay done`.
    Replay { path: String },
    /// `mcp <tool> <json-args>`: call `tool` on the first stdio MCP server the client
    /// gave the session; reply with the result's text. `mcp env` replies with that
    /// server's environment as a JSON object instead.
    Mcp { tool: String, args: String },
    /// `env NAME...`: reply `NAME=value` (or `NAME unset`) for each, space-separated.
    Env { names: Vec<String> },
    /// `orphan`: start `sleep 600` in the agent's process group (not waited for); reply
    /// `orphan <pid>`.
    Orphan,
}

/// Parse a user message (leading/trailing whitespace ignored).
pub fn parse(text: &str) -> Directive {
    let mut words = text.split_whitespace();
    let Some(first) = words.next() else {
        return Directive::Echo;
    };
    let rest: Vec<&str> = words.collect();
    if first == "mcp" {
        let after = text.trim().trim_start_matches("mcp").trim_start();
        let (tool, args) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
        if !tool.is_empty() {
            let args = if args.trim().is_empty() {
                "{}"
            } else {
                args.trim()
            };
            return Directive::Mcp {
                tool: tool.to_owned(),
                args: args.to_owned(),
            };
        }
    }
    match first {
        "stream" => match rest.as_slice() {
            [n, ms] => match (n.parse(), ms.parse()) {
                (Ok(count), Ok(interval_ms)) => Directive::Stream { count, interval_ms },
                _ => Directive::Echo,
            },
            _ => Directive::Echo,
        },
        "rate" => match rest.as_slice() {
            [n, r] => match (n.parse(), r.parse()) {
                (Ok(count), Ok(per_sec)) => Directive::Rate { count, per_sec },
                _ => Directive::Echo,
            },
            _ => Directive::Echo,
        },
        "streamtools" if rest.len() >= 2 => match rest[0].parse() {
            Ok(count) => Directive::StreamTools {
                count,
                title: rest[1..].join(" "),
            },
            Err(_) => Directive::Echo,
        },
        "slowapprove" if rest.len() >= 2 => match rest[0].parse() {
            Ok(ms) => Directive::SlowApprove {
                ms,
                title: rest[1..].join(" "),
            },
            Err(_) => Directive::Echo,
        },
        "approve" if !rest.is_empty() => Directive::Approve {
            title: rest.join(" "),
        },
        "ask" if !rest.is_empty() => Directive::Ask {
            question: rest.join(" "),
        },
        "spend" => match rest.as_slice() {
            [n, t, ms] => match (n.parse(), t.parse(), ms.parse()) {
                (Ok(reports), Ok(tokens), Ok(interval_ms)) => Directive::Spend {
                    reports,
                    tokens,
                    interval_ms,
                },
                _ => Directive::Echo,
            },
            _ => Directive::Echo,
        },
        "limit" => match rest.as_slice() {
            [secs] => secs
                .parse()
                .map(|secs| Directive::Limit { secs })
                .unwrap_or(Directive::Echo),
            _ => Directive::Echo,
        },
        "window" if !rest.is_empty() => {
            let percents: Option<Vec<u8>> = rest
                .iter()
                .map(|p| p.parse().ok().filter(|p| *p <= 100))
                .collect();
            percents.map_or(Directive::Echo, |percents| Directive::Window { percents })
        }
        "sleep" => match rest.as_slice() {
            [ms] => ms
                .parse()
                .map(|ms| Directive::Sleep { ms })
                .unwrap_or(Directive::Echo),
            _ => Directive::Echo,
        },
        "write" if rest.len() >= 2 => Directive::Write {
            path: rest[0].to_owned(),
            content: rest[1..].join(" "),
        },
        "crash" => Directive::Crash,
        "garbage" => Directive::Garbage,
        "fail" => Directive::Fail,
        "hang" => Directive::Hang,
        "freeze" => Directive::Freeze,
        "replay" if rest.len() == 1 => Directive::Replay {
            path: rest[0].to_owned(),
        },
        "junk" => Directive::Junk,
        "env" if !rest.is_empty() => Directive::Env {
            names: rest.iter().map(|n| (*n).to_owned()).collect(),
        },
        "orphan" => Directive::Orphan,
        "flood" | "bigline" => match rest.as_slice() {
            [n] => match (first, n.parse()) {
                ("flood", Ok(lines)) => Directive::Flood { lines },
                (_, Ok(kib)) => Directive::BigLine { kib },
                _ => Directive::Echo,
            },
            _ => Directive::Echo,
        },
        _ => Directive::Echo,
    }
}

/// The reply of the `env` directive for these variables, read with `lookup`.
pub fn env_reply(names: &[String], lookup: impl Fn(&str) -> Option<String>) -> String {
    names
        .iter()
        .map(|n| match lookup(n) {
            Some(v) => format!("{n}={v}"),
            None => format!("{n} unset"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `remembers N: [..]` for the user messages that came before the current one.
pub fn remembers_line(earlier: &[String]) -> String {
    let list = serde_json::to_string(earlier).unwrap_or_else(|_| "[]".to_owned());
    format!("remembers {}: {list}", earlier.len())
}

/// A directive's own text followed by a newline and the remembers line.
pub fn with_remembers(text: &str, earlier: &[String]) -> String {
    format!("{text}\n{}", remembers_line(earlier))
}

/// What the user decided about a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Allowed,
    AllowedAlways,
    Denied,
    Cancelled,
}

impl Permission {
    /// The reply text of the `approve` directive for this decision.
    pub fn reply(self) -> &'static str {
        match self {
            Permission::Allowed => "approval: allowed",
            Permission::AllowedAlways => "approval: allowed_always",
            Permission::Denied => "approval: denied",
            Permission::Cancelled => "approval: cancelled",
        }
    }
}

/// The reply text of the `ask` directive (`None` = declined or cancelled).
pub fn answer_reply(answer: Option<&str>) -> String {
    format!("answer: {}", answer.unwrap_or("<declined>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_echo() {
        assert_eq!(parse("hello there"), Directive::Echo);
        assert_eq!(parse(""), Directive::Echo);
        assert_eq!(parse("   "), Directive::Echo);
        assert_eq!(parse("Stream 3 10"), Directive::Echo);
    }

    #[test]
    fn directives_parse() {
        assert_eq!(
            parse("  stream 3 10 "),
            Directive::Stream {
                count: 3,
                interval_ms: 10
            }
        );
        assert_eq!(
            parse("approve rm -rf  target"),
            Directive::Approve {
                title: "rm -rf target".into()
            }
        );
        assert_eq!(
            parse("ask what is your name?"),
            Directive::Ask {
                question: "what is your name?".into()
            }
        );
        assert_eq!(
            parse("streamtools 30 rm x"),
            Directive::StreamTools {
                count: 30,
                title: "rm x".into()
            }
        );
        assert_eq!(parse("streamtools x rm"), Directive::Echo);
        assert_eq!(
            parse("window 50 90"),
            Directive::Window {
                percents: vec![50, 90]
            }
        );
        assert_eq!(parse("window 101"), Directive::Echo);
        assert_eq!(
            parse("rate 100 10000"),
            Directive::Rate {
                count: 100,
                per_sec: 10_000
            }
        );
        assert_eq!(parse("rate 100"), Directive::Echo);
        assert_eq!(parse("sleep 250"), Directive::Sleep { ms: 250 });
        assert_eq!(parse("crash"), Directive::Crash);
        assert_eq!(parse("garbage"), Directive::Garbage);
        assert_eq!(parse("fail"), Directive::Fail);
        assert_eq!(parse("hang"), Directive::Hang);
        assert_eq!(parse("freeze"), Directive::Freeze);
        assert_eq!(parse("junk"), Directive::Junk);
        assert_eq!(parse("flood 10"), Directive::Flood { lines: 10 });
        assert_eq!(parse("bigline 3"), Directive::BigLine { kib: 3 });
        assert_eq!(parse("flood x"), Directive::Echo);
        assert_eq!(
            parse("replay /tmp/x"),
            Directive::Replay {
                path: "/tmp/x".into()
            }
        );
        assert_eq!(
            parse("mcp delegate_to_agent {\"task\": \"a  b\"}"),
            Directive::Mcp {
                tool: "delegate_to_agent".into(),
                args: "{\"task\": \"a  b\"}".into()
            }
        );
        assert_eq!(
            parse("mcp get_delegation_status"),
            Directive::Mcp {
                tool: "get_delegation_status".into(),
                args: "{}".into()
            }
        );
    }

    #[test]
    fn malformed_directives_fall_back_to_echo() {
        assert_eq!(parse("stream x 10"), Directive::Echo);
        assert_eq!(parse("stream 3"), Directive::Echo);
        assert_eq!(parse("sleep soon"), Directive::Echo);
        assert_eq!(parse("approve"), Directive::Echo);
        assert_eq!(parse("ask"), Directive::Echo);
        assert_eq!(parse("slowapprove soon x"), Directive::Echo);
        assert_eq!(
            parse("slowapprove 500 rm -rf"),
            Directive::SlowApprove {
                ms: 500,
                title: "rm -rf".into()
            }
        );
    }

    #[test]
    fn remembers_formats() {
        assert_eq!(remembers_line(&[]), "remembers 0: []");
        let earlier = vec!["a".to_owned(), "say \"hi\"".to_owned()];
        assert_eq!(
            remembers_line(&earlier),
            r#"remembers 2: ["a","say \"hi\""]"#
        );
        assert_eq!(
            with_remembers("echo: b", &["a".to_owned()]),
            "echo: b\nremembers 1: [\"a\"]"
        );
        assert_eq!(answer_reply(None), "answer: <declined>");
        assert_eq!(answer_reply(Some("blue")), "answer: blue");
    }
}
