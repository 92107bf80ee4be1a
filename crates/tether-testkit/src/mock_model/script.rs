//! What the mock model answers: the API-neutral [`Reply`], the API-neutral view of a
//! request ([`Transcript`]) and the default scripting by the latest user text.

use serde_json::{Map, Value, json};

/// One canned answer of the mock model, rendered in each API's own wire format.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A plain assistant text.
    Text(String),
    /// A call of the agent's shell tool running this command.
    Shell(String),
    /// A file creation: Codex `apply_patch`, Claude `Write`, Gemini `write_file`.
    Patch { path: String, content: String },
    /// A call of tool `tool` of MCP server `server` with these arguments.
    Mcp {
        server: String,
        tool: String,
        args: Value,
    },
    /// `n` text deltas `"part i "` (i = 1..=n), `ms` milliseconds apart.
    Slow { n: u32, ms: u64 },
    /// This HTTP status with the API's JSON error body.
    Error(u16),
    /// The vendor's usage limit, resetting in `secs` seconds, answered as each vendor
    /// does (429 with its body and headers; see `server::limit_response`).
    Limit { secs: u64 },
    /// A plain text reply (`window at P%`) whose response carries the vendor's
    /// subscription-window headers at `percent` used (see `server::window_headers`).
    Window { percent: u8 },
}

impl Reply {
    /// Parses a scripting command: `shell <command>`, `patch <path> <content>`,
    /// `mcp <server> <tool> <json-args>`, `slow <N> <MS>`, `error <status>`, `limit <secs>`,
    /// `window <percent>`.
    /// Anything else is `None` (the default text reply).
    pub fn parse_command(text: &str) -> Option<Reply> {
        let text = text.trim();
        let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let rest = rest.trim();
        match word {
            "shell" if !rest.is_empty() => Some(Reply::Shell(rest.to_string())),
            "patch" => {
                let (path, content) = rest.split_once(char::is_whitespace)?;
                Some(Reply::Patch {
                    path: path.to_string(),
                    content: content.trim_start().to_string(),
                })
            }
            "mcp" => {
                let mut parts = rest.splitn(3, char::is_whitespace);
                let server = parts.next().filter(|s| !s.is_empty())?.to_string();
                let tool = parts.next().filter(|s| !s.is_empty())?.to_string();
                let args = match parts.next().map(str::trim).filter(|s| !s.is_empty()) {
                    Some(raw) => serde_json::from_str(raw).ok()?,
                    None => Value::Object(Default::default()),
                };
                Some(Reply::Mcp { server, tool, args })
            }
            "slow" => {
                let mut parts = rest.split_whitespace();
                let n = parts.next()?.parse().ok()?;
                let ms = parts.next()?.parse().ok()?;
                Some(Reply::Slow { n, ms })
            }
            "error" => Some(Reply::Error(rest.parse().ok()?)),
            "limit" => Some(Reply::Limit {
                secs: rest.parse().ok()?,
            }),
            "window" => Some(Reply::Window {
                percent: rest.parse().ok().filter(|p| *p <= 100)?,
            }),
            _ => None,
        }
    }

    /// The full text a `Text` or `Slow` reply streams.
    pub(crate) fn stream_parts(&self) -> Vec<String> {
        match self {
            Reply::Text(t) => vec![t.clone()],
            Reply::Slow { n, .. } => (1..=*n).map(|i| format!("part {i} ")).collect(),
            _ => Vec::new(),
        }
    }
}

/// The last thing in a request's history.
#[derive(Debug, Clone, PartialEq)]
pub enum Last {
    /// A user message with this text.
    User(String),
    /// The result of a tool call the model made (`name` of the tool as called).
    ToolResult { name: String, output: String },
    /// Nothing recognisable.
    Other,
}

/// The API-neutral view of one model request.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Texts of the user messages, oldest first, without injected context blocks.
    pub user_texts: Vec<String>,
    /// Texts of the assistant messages, oldest first.
    pub assistant_texts: Vec<String>,
    pub last: Last,
    /// Names of the tools the request offers.
    pub tools: Vec<String>,
}

impl Transcript {
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }
}

/// The default answer to a request, scripted by its latest user text.
pub fn default_reply(t: &Transcript) -> Reply {
    match &t.last {
        Last::ToolResult { name, output } => {
            Reply::Text(format!("done: {}", summarize_output(name, output)))
        }
        Last::User(text) => Reply::parse_command(text).unwrap_or_else(|| {
            Reply::Text(format!(
                "mock reply to: {text} (turn {})",
                t.user_texts.len()
            ))
        }),
        Last::Other => Reply::Text("mock reply".to_string()),
    }
}

/// Whether a user text is context the CLI injected rather than something the user typed:
/// a whole `<tag>...</tag>` block (`<environment_context>`, `<system-reminder>`,
/// `<session_context>`, ...) or Codex's AGENTS.md preamble.
pub(crate) fn is_injected_context(text: &str) -> bool {
    let t = text.trim();
    if t.starts_with("# AGENTS.md instructions") {
        return true;
    }
    let Some(rest) = t.strip_prefix('<') else {
        return false;
    };
    let tag: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    !tag.is_empty() && t.ends_with(&format!("</{tag}>"))
}

/// Joins the user-typed parts of one message (injected context dropped).
pub(crate) fn user_text_of<'a>(parts: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let kept: Vec<&str> = parts
        .into_iter()
        .filter(|p| !p.trim().is_empty() && !is_injected_context(p))
        .collect();
    (!kept.is_empty()).then(|| kept.join("\n"))
}

/// What `done: ...` reports about a tool result: the command output (what follows an
/// `Output:` header when the CLI wraps the output in metadata), for MCP tools all of it on
/// one line, otherwise its first line (or the first line of the error).
pub(crate) fn summarize_output(tool: &str, output: &str) -> String {
    let body = match output
        .lines()
        .position(|l| l.trim_start().starts_with("Output:"))
    {
        Some(i) => {
            let lines: Vec<&str> = output.lines().skip(i).collect();
            let first = lines[0].trim_start().trim_start_matches("Output:");
            std::iter::once(first)
                .chain(lines[1..].iter().copied())
                .collect::<Vec<_>>()
                .join("\n")
        }
        None => output.to_string(),
    };
    if tool.starts_with("mcp") {
        let flat: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
        return flat.chars().take(1000).collect();
    }
    body.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| "(no output)".to_string())
}

/// A minimal JSON value conforming to `schema` (JSON Schema or Gemini's OpenAPI subset).
/// A property named `next_speaker` gets `"user"`, so the CLI ends its turn.
pub(crate) fn schema_instance(schema: &Value, name: &str) -> Value {
    if name == "next_speaker" {
        return json!("user");
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(s)) => s.to_ascii_lowercase(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|s| *s != "null")
            .unwrap_or("string")
            .to_ascii_lowercase(),
        _ if schema.get("properties").is_some() => "object".into(),
        _ => "string".into(),
    };
    match kind.as_str() {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    out.insert(k.clone(), schema_instance(v, k));
                }
            }
            Value::Object(out)
        }
        "array" => json!([]),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(json!(1)),
        "boolean" => json!(false),
        _ => json!("mock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands() {
        assert_eq!(
            Reply::parse_command("shell echo hi there"),
            Some(Reply::Shell("echo hi there".into()))
        );
        assert_eq!(
            Reply::parse_command("patch a/b.txt hello world"),
            Some(Reply::Patch {
                path: "a/b.txt".into(),
                content: "hello world".into()
            })
        );
        assert_eq!(
            Reply::parse_command(r#"mcp tether ping {"x": 1}"#),
            Some(Reply::Mcp {
                server: "tether".into(),
                tool: "ping".into(),
                args: serde_json::json!({"x": 1})
            })
        );
        assert_eq!(
            Reply::parse_command("slow 3 50"),
            Some(Reply::Slow { n: 3, ms: 50 })
        );
        assert_eq!(Reply::parse_command("error 503"), Some(Reply::Error(503)));
        assert_eq!(Reply::parse_command("error x"), None);
        assert_eq!(Reply::parse_command("hello"), None);
        assert_eq!(Reply::parse_command("shell"), None);
    }

    #[test]
    fn injected_context_is_recognised() {
        assert!(is_injected_context(
            "<environment_context>\n <cwd>/x</cwd>\n</environment_context>"
        ));
        assert!(is_injected_context(
            "<system-reminder>\nhi\n</system-reminder>\n"
        ));
        assert!(is_injected_context("# AGENTS.md instructions for /x\n..."));
        assert!(!is_injected_context("<b>bold</i>"));
        assert!(!is_injected_context("hello"));
    }

    #[test]
    fn summaries() {
        let codex = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\nhello\nworld\n";
        assert_eq!(summarize_output("exec_command", codex), "hello");
        assert_eq!(
            summarize_output("run_shell_command", "Output: hi\nExit Code: 0"),
            "hi"
        );
        assert_eq!(summarize_output("Bash", "\nfirst\nsecond"), "first");
        assert_eq!(summarize_output("mcp__s__t", "a\nb"), "a b");
        assert_eq!(
            summarize_output("mcp__s__t", "Wall time: 1 s\nOutput:\npong {\"x\": 5}\n"),
            "pong {\"x\": 5}"
        );
        let t = Transcript {
            user_texts: vec!["a".into(), "b".into()],
            assistant_texts: vec![],
            last: Last::User("b".into()),
            tools: vec![],
        };
        assert_eq!(
            default_reply(&t),
            Reply::Text("mock reply to: b (turn 2)".into())
        );
    }
}
