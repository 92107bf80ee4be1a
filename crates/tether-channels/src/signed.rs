//! What the signed webhooks share (Slack's Events API, Feishu's event callback, Discord's
//! HTTP interactions): the replay window of a signed request's timestamp, checked from
//! the headers before the body is read, and comparisons of secrets in constant time.

use axum::http::HeaderMap;

/// How far a signed request's timestamp may be from now (either way): 5 minutes, as
/// Slack advises, and the same for Feishu and Discord. An older capture is refused even
/// after its key has left the dedupe table.
pub(crate) const REPLAY_WINDOW_SECS: i64 = 5 * 60;

/// A header's value as text, if it is there and is text.
pub(crate) fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The signed timestamp `ts` (Unix seconds) lies within [`REPLAY_WINDOW_SECS`] of now.
/// `Err` says why not.
pub(crate) fn fresh(ts: &str) -> Result<(), String> {
    within_window(ts, tether_store::now_ms() / 1000)
}

fn within_window(ts: &str, now: i64) -> Result<(), String> {
    let ts: i64 = ts
        .trim()
        .parse()
        .map_err(|_| "the request timestamp is not a number".to_string())?;
    if (now - ts).abs() > REPLAY_WINDOW_SECS {
        return Err(format!(
            "the request timestamp is {}s away from now (at most {REPLAY_WINDOW_SECS}s)",
            now - ts
        ));
    }
    Ok(())
}

/// Equal contents, in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_count_within_five_minutes_either_way() {
        assert!(fresh(&(tether_store::now_ms() / 1000).to_string()).is_ok());
        assert!(fresh("12").is_err());
        assert!(within_window("1000", 1300).is_ok());
        assert!(within_window(" 1300 ", 1000).is_ok());
        assert!(within_window("1000", 1301).is_err());
        assert!(within_window("1301", 1000).is_err());
        assert!(within_window("soon", 1000).is_err());
    }

    #[test]
    fn equal_secrets_compare_equal() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
