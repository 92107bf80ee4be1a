//! A subscription account's usage window as each CLI reports it (issue 29), for window
//! budgets and for the reset a parked turn waits for.
//!
//! - Codex app-server: `account/rateLimits/updated` (and `account/rateLimits/read`'s
//!   answer) carry `rateLimits.primary` / `.secondary`, each `{usedPercent,
//!   windowDurationMins, resetsAt}` (percent 0–100, reset in Unix seconds), from the
//!   vendor's `x-codex-primary-*` / `x-codex-secondary-*` response headers.
//! - Claude Code stream-json: `rate_limit_event.rate_limit_info` with `status`
//!   (`allowed`, `allowed_warning`, `rejected`), `rateLimitType` (`five_hour`,
//!   `seven_day`, …), `utilization` (a fraction 0–1) and `resetsAt` (Unix seconds);
//!   a rejected window without a utilisation is full.
//! - Gemini CLI (ACP): a quota it will not retry by itself (a `RetryInfo` delay over
//!   five minutes, a daily quota) ends the prompt with JSON-RPC error code 429 and its
//!   message, "… Suggested retry after 600s." (or "… reset after 2h52m39s.").

use serde_json::{Map, Value};

/// One window of the account the agent runs on, as its vendor reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowReport {
    /// The vendor's name of the window (`five_hour`, `seven_day`, `primary`, …).
    pub window: String,
    /// Percent used, 0–100.
    pub used_percent: u8,
    /// When it resets (Unix ms), when the vendor says.
    pub resets_at_ms: Option<i64>,
}

fn percent(v: f64) -> u8 {
    v.clamp(0.0, 100.0).round() as u8
}

/// Codex's `rateLimits` snapshot: one report per window it names.
pub fn codex(rate_limits: &Value) -> Vec<WindowReport> {
    let mut out = Vec::new();
    for slot in ["primary", "secondary"] {
        let Some(w) = rate_limits.get(slot).filter(|w| w.is_object()) else {
            continue;
        };
        let Some(used) = w.get("usedPercent").and_then(Value::as_f64) else {
            continue;
        };
        let window = match w.get("windowDurationMins").and_then(Value::as_i64) {
            Some(300) => "five_hour".to_owned(),
            Some(10_080) => "seven_day".to_owned(),
            Some(m) => format!("{m}_minutes"),
            None => slot.to_owned(),
        };
        out.push(WindowReport {
            window,
            used_percent: percent(used),
            resets_at_ms: w.get("resetsAt").and_then(Value::as_i64).map(|s| s * 1000),
        });
    }
    out
}

/// Claude's `rate_limit_event` message.
pub fn claude(message: &Map<String, Value>) -> Option<WindowReport> {
    let info = message.get("rate_limit_info")?;
    let rejected = info.get("status").and_then(Value::as_str) == Some("rejected");
    let used = match info.get("utilization").and_then(Value::as_f64) {
        // A fraction, as the unified headers give it (past 1 when over: full).
        Some(u) => u * 100.0,
        None if rejected => 100.0,
        None => return None,
    };
    Some(WindowReport {
        window: info
            .get("rateLimitType")
            .and_then(Value::as_str)
            .unwrap_or("unified")
            .to_owned(),
        used_percent: percent(used),
        resets_at_ms: info
            .get("resetsAt")
            .and_then(Value::as_i64)
            .map(|s| s * 1000),
    })
}

/// The vendor's limit in an ACP agent's error answer to a prompt (Gemini's code 429, or
/// its quota wording): the message and, when it says, in how many ms it resets.
pub fn acp_limit(code: i64, message: &str) -> Option<Option<i64>> {
    let lower = message.to_ascii_lowercase();
    let limited = code == 429
        || lower.contains("resource_exhausted")
        || lower.contains("exhausted your")
        || lower.contains("quota exceeded");
    limited.then(|| after_ms(&lower))
}

/// "retry after 600s", "retry in 1.5s", "reset after 2h52m39s", "500ms": the wait in ms.
fn after_ms(lower: &str) -> Option<i64> {
    let at = ["retry after ", "retry in ", "reset after ", "resets after "]
        .iter()
        .find_map(|k| lower.find(k).map(|i| i + k.len()))?;
    let rest = &lower[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'h' | 'm' | 's')))
        .unwrap_or(rest.len());
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = rest[..end].trim_end_matches('.').chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        let unit_ms = match c {
            'h' => 3_600_000.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1.0
            }
            'm' => 60_000.0,
            's' => 1000.0,
            _ => return None,
        };
        total += n * unit_ms;
        any = true;
    }
    any.then_some(total.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codex_names_its_windows_by_their_length() {
        let r = codex(&json!({
            "primary": {"usedPercent": 42.4, "windowDurationMins": 300, "resetsAt": 1_800_000_000},
            "secondary": {"usedPercent": 7, "windowDurationMins": 10080},
            "credits": null
        }));
        assert_eq!(
            r,
            vec![
                WindowReport {
                    window: "five_hour".into(),
                    used_percent: 42,
                    resets_at_ms: Some(1_800_000_000_000)
                },
                WindowReport {
                    window: "seven_day".into(),
                    used_percent: 7,
                    resets_at_ms: None
                },
            ]
        );
        assert!(codex(&json!({"primary": null})).is_empty());
    }

    #[test]
    fn gemini_says_its_limit_with_code_429_and_when_to_retry() {
        let m = "Resource has been exhausted (e.g. check quota).\nSuggested retry after 600s.";
        assert_eq!(acp_limit(429, m), Some(Some(600_000)));
        assert_eq!(
            acp_limit(
                -32603,
                "You have exhausted your capacity. Your quota will reset after 2h52m39s."
            ),
            Some(Some(10_359_000))
        );
        assert_eq!(acp_limit(429, "Please retry in 1.5s"), Some(Some(1_500)));
        assert_eq!(acp_limit(429, "Please retry in 500ms"), Some(Some(500)));
        assert_eq!(acp_limit(429, "slow down"), Some(None));
        assert_eq!(acp_limit(-32603, "boom"), None);
    }

    #[test]
    fn claude_reads_utilisation_as_a_fraction_and_a_rejection_as_full() {
        let m = |v: Value| v.as_object().cloned().unwrap_or_default();
        let warn = m(json!({"type": "rate_limit_event", "rate_limit_info": {
            "status": "allowed_warning", "rateLimitType": "five_hour",
            "utilization": 0.85, "resetsAt": 1_800_000_000}}));
        assert_eq!(
            claude(&warn),
            Some(WindowReport {
                window: "five_hour".into(),
                used_percent: 85,
                resets_at_ms: Some(1_800_000_000_000)
            })
        );
        let rejected = m(json!({"rate_limit_info": {"status": "rejected"}}));
        assert_eq!(claude(&rejected).map(|r| r.used_percent), Some(100));
        let plain = m(json!({"rate_limit_info": {"status": "allowed"}}));
        assert_eq!(claude(&plain), None);
    }
}
