//! A conversation's title (issue 24, first use 4): one created without a title is
//! [`UNTITLED`] until its first message names it ([`from_message`]), so a sidebar of
//! many conversations stays readable.

/// The title of a conversation nobody named yet.
pub const UNTITLED: &str = "New conversation";

/// Longest derived title, in characters (an ellipsis marks a cut).
pub const MAX_TITLE_CHARS: usize = 60;

/// A title from a message's text: its first non-blank line, whitespace collapsed, cut at
/// a word boundary to at most [`MAX_TITLE_CHARS`] characters. `None` for a message with
/// no text (an image alone).
pub fn from_message(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let full = words.join(" ");
    if full.chars().count() <= MAX_TITLE_CHARS {
        return Some(full);
    }
    let mut out = String::new();
    for w in &words {
        let extra = usize::from(!out.is_empty()) + w.chars().count();
        if out.chars().count() + extra > MAX_TITLE_CHARS - 1 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    if out.is_empty() {
        // One very long word: cut it.
        out = full.chars().take(MAX_TITLE_CHARS - 1).collect();
    }
    out.push('…');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_names_the_conversation_and_long_ones_are_cut_at_a_word() {
        assert_eq!(
            from_message("  fix the   login bug\nsecond line").as_deref(),
            Some("fix the login bug")
        );
        assert_eq!(from_message("\n\n  ").as_deref(), None);
        let long =
            "please look at the flaky integration tests in the payments service and tell me why";
        let t = from_message(long).unwrap();
        assert!(t.ends_with('…'), "{t}");
        assert!(t.chars().count() <= MAX_TITLE_CHARS, "{t}");
        assert!(long.starts_with(t.trim_end_matches('…')), "{t}");
        let word = "x".repeat(100);
        assert_eq!(
            from_message(&word).unwrap().chars().count(),
            MAX_TITLE_CHARS
        );
    }
}
