//! Splitting long texts at a channel's limit: on paragraph boundaries first, then line
//! boundaries, then spaces; a fenced code block is never split when it fits in a part,
//! and one that does not fit is closed at the end of a part and reopened (with its
//! language) at the start of the next, so every part is well-formed on its own.

/// Room kept in every part for a closing fence (`\n```` `).
const FENCE_RESERVE: usize = 4;

/// Counts a text in the platform's units (`char::len_utf16` for Telegram).
pub type Units = fn(char) -> usize;

/// One unit per character.
pub fn chars(_: char) -> usize {
    1
}

/// UTF-16 code units (how Telegram counts message length).
pub fn utf16(c: char) -> usize {
    c.len_utf16()
}

fn len(text: &str, units: Units) -> usize {
    text.chars().map(units).sum()
}

fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// Where to cut `text`: a byte offset, and the fence line to reopen when the cut falls
/// inside a code block.
fn choose_cut(text: &str, limit: usize, units: Units) -> (usize, Option<String>) {
    // The longest prefix that fits with room for a closing fence.
    let budget = limit.saturating_sub(FENCE_RESERVE).max(1);
    let mut max_byte = 0;
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += units(c);
        if used > budget {
            break;
        }
        max_byte = i + c.len_utf8();
    }
    if max_byte == 0 {
        // Not even one character fits the budget: take one anyway.
        max_byte = text.chars().next().map_or(text.len(), char::len_utf8);
    }
    let min = max_byte / 3;

    let mut para = None;
    let mut line_out = None;
    let mut line_in: Option<(usize, String)> = None;
    let mut opener: Option<String> = None;
    let mut start = 0;
    let mut prev_blank = false;
    // The code state at the start of the line that holds `max_byte`.
    let mut state_at_max: Option<String> = None;
    for line in text.split_inclusive('\n') {
        if start > max_byte {
            break;
        }
        if start > 0 && start >= min {
            match &opener {
                None => {
                    if prev_blank {
                        para = Some(start);
                    }
                    line_out = Some(start);
                }
                Some(op) => line_in = Some((start, op.clone())),
            }
        }
        state_at_max.clone_from(&opener);
        let body = line.trim_end_matches(['\n', '\r']);
        if is_fence(body) {
            opener = match opener {
                Some(_) => None,
                None => Some(body.trim_start().to_string()),
            };
        }
        prev_blank = body.trim().is_empty() && opener.is_none();
        start += line.len();
    }
    if let Some(p) = para {
        return (p, None);
    }
    if let Some(p) = line_out {
        return (p, None);
    }
    if let Some((p, op)) = line_in {
        return (p, Some(op));
    }
    // Inside one long line: the last space, else a hard cut.
    let head = &text[..max_byte];
    let cut = head
        .rfind([' ', '\t'])
        .filter(|&i| i >= min && i > 0)
        .map_or(max_byte, |i| i + 1);
    (cut, state_at_max)
}

/// Splits `text` into parts of at most `limit` units each (see the module docs).
pub fn split_text(text: &str, limit: usize, units: Units) -> Vec<String> {
    let limit = limit.max(FENCE_RESERVE + 16);
    let mut parts = Vec::new();
    let mut rest = text.trim_start_matches(['\n', '\r']).trim_end().to_string();
    while len(&rest, units) > limit {
        let (cut, fence) = choose_cut(&rest, limit, units);
        let mut head = rest[..cut].trim_end().to_string();
        let mut tail = rest[cut..].trim_start_matches(['\n', '\r']).to_string();
        if let Some(op) = fence {
            // Reopen with the language only when that line is short.
            let op = if len(&op, units) > limit / 4 {
                "```".to_string()
            } else {
                op
            };
            let close = if op.starts_with('~') { "~~~" } else { "```" };
            head.push('\n');
            head.push_str(close);
            tail = format!("{op}\n{tail}");
        }
        if !head.trim().is_empty() {
            parts.push(head);
        }
        rest = tail;
    }
    if !rest.trim().is_empty() || parts.is_empty() {
        parts.push(rest);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fences_balanced(part: &str) -> bool {
        part.lines().filter(|l| is_fence(l)).count() % 2 == 0
    }

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split_text("hello", 100, chars), ["hello"]);
        assert_eq!(split_text("", 100, chars), [""]);
    }

    #[test]
    fn paragraphs_are_kept_together() {
        let p1 = "a".repeat(40);
        let p2 = "b".repeat(40);
        let p3 = "c".repeat(40);
        let text = format!("{p1}\n\n{p2}\n\n{p3}");
        let parts = split_text(&text, 90, chars);
        assert_eq!(parts, [format!("{p1}\n\n{p2}"), p3]);
    }

    #[test]
    fn lines_are_used_when_a_paragraph_is_too_long() {
        let line = "x".repeat(30);
        let text = vec![line.clone(); 5].join("\n");
        let parts = split_text(&text, 70, chars);
        assert!(parts.iter().all(|p| p.chars().count() <= 70), "{parts:?}");
        assert_eq!(parts.join("\n"), text);
    }

    #[test]
    fn a_code_block_that_fits_is_not_split() {
        let intro = "i".repeat(50);
        let code = format!("```rust\n{}\n```", ["let x = 1;"; 5].join("\n"));
        let text = format!("{intro}\n\n{code}\n\nafter");
        let parts = split_text(&text, 80, chars);
        assert!(parts.iter().any(|p| p.contains(&code)), "{parts:?}");
        assert!(parts.iter().all(|p| fences_balanced(p)), "{parts:?}");
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened() {
        let body: Vec<String> = (0..40).map(|i| format!("line {i:02} of code")).collect();
        let text = format!("intro\n\n```python\n{}\n```\n\ndone", body.join("\n"));
        let parts = split_text(&text, 120, chars);
        assert!(parts.len() > 2, "{parts:?}");
        for p in &parts {
            assert!(p.chars().count() <= 120, "{p}");
            assert!(fences_balanced(p), "unbalanced: {p}");
        }
        assert!(parts[2].starts_with("```python\n"), "{:?}", parts[2]);
        // Nothing is lost: every code line appears exactly once.
        let all = parts.join("\n");
        for line in &body {
            assert_eq!(all.matches(line.as_str()).count(), 1, "{line}");
        }
        assert!(all.ends_with("done"));
    }

    #[test]
    fn a_long_line_is_cut_at_spaces_then_hard() {
        let words = vec!["word"; 100].join(" ");
        let parts = split_text(&words, 50, chars);
        assert!(parts.iter().all(|p| p.chars().count() <= 50));
        assert_eq!(parts.join(" "), words);
        let blob = "z".repeat(130);
        let parts = split_text(&blob, 50, chars);
        assert!(parts.iter().all(|p| p.chars().count() <= 50));
        assert_eq!(parts.concat(), blob);
    }

    #[test]
    fn limits_count_utf16_units_when_asked() {
        let text = "😀".repeat(60); // 2 UTF-16 units each
        let parts = split_text(&text, 50, utf16);
        assert!(
            parts.iter().all(|p| p.encode_utf16().count() <= 50),
            "{parts:?}"
        );
        assert_eq!(parts.concat(), text);
    }
}
