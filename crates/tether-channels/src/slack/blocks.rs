//! What a Slack message looks like: mrkdwn escaping (`&`, `<`, `>`: so agent output can
//! never ping `@channel` or forge a link), agent Markdown turned into mrkdwn (bold,
//! strike, links, headings; code fences kept, their language dropped), and Block Kit
//! bodies: an optional header, one section, and for an approval an actions block whose
//! buttons carry the approval id and the decision.

use serde_json::{Value, json};
use tether_proto::{ApprovalId, Decision};

use crate::buttons::decision_name;
use crate::channel::{OutMessage, TextKind};

/// The longest text of one section block (Slack's limit is 3 000 characters).
pub const MAX_TEXT: usize = 3000;
/// The longest header (Slack: 150 characters).
const MAX_HEADER: usize = 150;
/// The `action_id` prefix of tether's approval buttons.
pub const ACTION_PREFIX: &str = "tether_decide_";

/// How many characters `c` takes once escaped (what the limit counts).
pub fn units(c: char) -> usize {
    match c {
        '&' => 5,
        '<' | '>' => 4,
        _ => 1,
    }
}

/// Escapes the three characters Slack treats as control characters.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// Agent Markdown as Slack mrkdwn, escaped.
pub fn mrkdwn(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.split('\n') {
        if is_fence(line) {
            // Slack shows a fence's language as code: open and close with a bare fence.
            in_code = !in_code;
            out.push("```".to_string());
        } else if in_code {
            out.push(escape(line));
        } else {
            out.push(inline(&escape(line)));
        }
    }
    out.join("\n")
}

/// One (escaped) line outside code blocks: headings, then bold, strike and links outside
/// inline code spans.
fn inline(line: &str) -> String {
    let trimmed = line.trim_start();
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
        let title = trimmed[hashes..].trim();
        if !title.is_empty() {
            return format!("*{}*", title.replace("**", ""));
        }
    }
    line.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                part.to_string()
            } else {
                links(
                    &part
                        .replace("**", "*")
                        .replace("__", "*")
                        .replace("~~", "~"),
                )
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// `[text](url)` → `<url|text>` for http(s) URLs.
fn links(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let parsed = after.find("](").and_then(|close| {
            let label = &after[..close];
            let tail = &after[close + 2..];
            let end = tail.find(')')?;
            let url = &tail[..end];
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && !url.contains(char::is_whitespace)
                && !label.contains('[');
            ok.then(|| (label, url, close + 2 + end + 1))
        });
        match parsed {
            Some((label, url, used)) => {
                out.push_str(&rest[..open]);
                out.push_str(&format!("<{url}|{}>", label.replace('|', "¦")));
                rest = &after[used..];
            }
            None => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A button's `value`: the approval it decides and how.
pub fn button_value(approval_id: &ApprovalId, d: Decision) -> String {
    json!({"approval_id": approval_id, "decision": decision_name(d)}).to_string()
}

/// `(text, blocks)` of a `chat.postMessage` / `chat.update` body. `text` is the
/// notification fallback; the blocks are what the message shows.
pub fn body(msg: &OutMessage) -> (String, Vec<Value>) {
    let escaped = escape(&msg.text);
    // Plain texts are shown literally (`plain_text`: no mrkdwn, no entities); agent
    // output is mrkdwn.
    let (kind, shown) = match msg.kind {
        TextKind::Plain => ("plain_text", msg.text.clone()),
        TextKind::Markdown => ("mrkdwn", mrkdwn(&msg.text)),
    };
    // Slack refuses an empty section.
    let shown = if shown.trim().is_empty() {
        "(empty)".to_string()
    } else {
        shown
    };
    let mut blocks = Vec::new();
    if let Some(title) = msg.title.as_deref().filter(|t| !t.trim().is_empty()) {
        let title: String = title.chars().take(MAX_HEADER).collect();
        blocks.push(json!({
            "type": "header",
            "text": {"type": "plain_text", "text": title, "emoji": true},
        }));
    }
    blocks.push(json!({"type": "section", "text": {"type": kind, "text": shown}}));
    if !msg.actions.is_empty() {
        let buttons: Vec<Value> = msg
            .actions
            .iter()
            .map(|a| {
                let mut b = json!({
                    "type": "button",
                    "action_id": format!("{ACTION_PREFIX}{}", decision_name(a.decision)),
                    "text": {"type": "plain_text", "text": a.label},
                    "value": button_value(&a.approval_id, a.decision),
                });
                match a.decision {
                    Decision::Allow => b["style"] = json!("primary"),
                    Decision::Deny => b["style"] = json!("danger"),
                    Decision::AllowAlways => {}
                }
                b
            })
            .collect();
        blocks.push(json!({"type": "actions", "block_id": "tether_approval", "elements": buttons}));
    }
    // The notification text: mrkdwn, so escaped.
    let fallback: String = escaped.chars().take(MAX_TEXT).collect();
    (fallback, blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Action;

    #[test]
    fn control_characters_are_escaped_everywhere() {
        assert_eq!(
            escape("<!channel> a&b <@U1>"),
            "&lt;!channel&gt; a&amp;b &lt;@U1&gt;"
        );
        assert_eq!(
            mrkdwn("```\nif a < b && c\n```"),
            "```\nif a &lt; b &amp;&amp; c\n```"
        );
        assert_eq!("a&<".chars().map(units).sum::<usize>(), 10);
    }

    #[test]
    fn markdown_becomes_mrkdwn_outside_code() {
        assert_eq!(
            mrkdwn("## Result\n**bold** and ~~gone~~, see [docs](https://x.org/a?b=1&c=2)"),
            "*Result*\n*bold* and ~gone~, see <https://x.org/a?b=1&amp;c=2|docs>"
        );
        assert_eq!(mrkdwn("`**kept**` **b**"), "`**kept**` *b*");
        assert_eq!(
            mrkdwn("```rust\nlet x = **y;\n```"),
            "```\nlet x = **y;\n```"
        );
        assert_eq!(mrkdwn("[not a link](ftp://x)"), "[not a link](ftp://x)");
    }

    #[test]
    fn approvals_carry_one_button_per_decision_naming_the_approval() {
        let mut msg = OutMessage::plain("rm -rf build");
        msg.title = Some("Approval needed".into());
        msg.actions = vec![
            Action {
                label: "Allow".into(),
                approval_id: "a1".into(),
                decision: Decision::Allow,
            },
            Action {
                label: "Deny".into(),
                approval_id: "a1".into(),
                decision: Decision::Deny,
            },
        ];
        let (text, blocks) = body(&msg);
        assert_eq!(text, "rm -rf build");
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(blocks[1]["text"]["type"], "plain_text");
        let buttons = blocks[2]["elements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(buttons.len(), 2);
        assert_eq!(buttons[1]["action_id"], "tether_decide_deny");
        let v: Value =
            serde_json::from_str(buttons[1]["value"].as_str().unwrap_or("")).unwrap_or_default();
        assert_eq!(v, json!({"approval_id": "a1", "decision": "deny"}));
    }
}
