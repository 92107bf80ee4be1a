//! Telegram's HTML parse mode: everything escaped (`&`, `<`, `>`), agent output's code
//! fences rendered as `<pre><code>` and inline backticks as `<code>`. HTML is chosen
//! over MarkdownV2 because its escaping is three characters and cannot fail on
//! arbitrary agent text.

/// Escapes text for HTML parse mode.
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

fn inline(line: &str) -> String {
    // Backtick pairs become <code>; an unpaired backtick stays literal.
    let pieces: Vec<&str> = line.split('`').collect();
    if pieces.len() < 3 {
        return escape(line);
    }
    let mut out = String::new();
    let last_pair_end = if pieces.len() % 2 == 1 {
        pieces.len()
    } else {
        pieces.len() - 1
    };
    for (i, p) in pieces.iter().enumerate() {
        if i >= last_pair_end {
            out.push('`');
            out.push_str(&escape(p));
        } else if i % 2 == 1 {
            out.push_str("<code>");
            out.push_str(&escape(p));
            out.push_str("</code>");
        } else {
            out.push_str(&escape(p));
        }
    }
    out
}

fn fence_lang(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t.strip_prefix("```").or_else(|| t.strip_prefix("~~~"))?;
    Some(rest.trim())
}

/// Renders Markdown-ish agent output (one part, fences balanced) as Telegram HTML.
pub fn markdown(text: &str) -> String {
    let mut out = Vec::new();
    let mut code: Option<(String, Vec<&str>)> = None;
    for line in text.split('\n') {
        match (&mut code, fence_lang(line)) {
            (None, Some(lang)) => code = Some((lang.to_string(), Vec::new())),
            (Some(_), Some(_)) => {
                if let Some((lang, lines)) = code.take() {
                    out.push(pre(&lang, &lines));
                }
            }
            (Some((_, lines)), None) => lines.push(line),
            (None, None) => out.push(inline(line)),
        }
    }
    if let Some((lang, lines)) = code.take() {
        out.push(pre(&lang, &lines));
    }
    out.join("\n")
}

fn pre(lang: &str, lines: &[&str]) -> String {
    let body = escape(&lines.join("\n"));
    let lang: String = lang
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '#'))
        .collect();
    if lang.is_empty() {
        format!("<pre>{body}</pre>")
    } else {
        format!("<pre><code class=\"language-{lang}\">{body}</code></pre>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_escaped() {
        assert_eq!(escape("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
    }

    #[test]
    fn fences_and_inline_code_are_rendered() {
        let md = "Run `cargo test` now:\n```rust\nif a < b { x() }\n```\ndone `open";
        assert_eq!(
            markdown(md),
            "Run <code>cargo test</code> now:\n\
             <pre><code class=\"language-rust\">if a &lt; b { x() }</code></pre>\n\
             done `open"
        );
        assert_eq!(markdown("```\n<x>\n```"), "<pre>&lt;x&gt;</pre>");
        // An unclosed fence is closed.
        assert_eq!(
            markdown("```sh\nls"),
            "<pre><code class=\"language-sh\">ls</code></pre>"
        );
    }
}
