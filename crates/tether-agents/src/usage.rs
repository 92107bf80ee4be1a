//! Each agent's usage report as [`Tokens`] (issue 29): the wire shapes differ in what
//! their counts include, and the ledger must not count a token twice or miss one.
//!
//! - Codex (`thread/tokenUsage/updated`'s `tokenUsage`, and a turn's usage): OpenAI
//!   counts cached input inside `inputTokens` and reasoning inside `outputTokens`; `last`
//!   is the latest step, `total` the thread's running sum.
//! - Claude (an assistant message's `usage`, `result.usage`): Anthropic counts cache
//!   reads and cache writes apart from `input_tokens`.
//! - ACP agents (`usage` at a turn's end, not in the stable schema): camelCase or
//!   snake_case, whatever they send; nothing recognisable is `None` (an unknown, not 0).

use serde_json::Value;
use tether_core::usage::Tokens;

fn count(v: &Value, names: &[&str]) -> Option<u64> {
    names.iter().find_map(|n| v.get(*n).and_then(Value::as_u64))
}

/// Codex's `{inputTokens, cachedInputTokens, outputTokens, reasoningOutputTokens}` (one
/// of `last` or `total`).
pub fn codex_breakdown(b: &Value) -> Option<Tokens> {
    let input = count(b, &["inputTokens", "input_tokens"])?;
    let output = count(b, &["outputTokens", "output_tokens"]).unwrap_or(0);
    let cached = count(b, &["cachedInputTokens", "cached_input_tokens"]).unwrap_or(0);
    let reasoning = count(b, &["reasoningOutputTokens", "reasoning_output_tokens"]).unwrap_or(0);
    Some(Tokens {
        input: input.saturating_sub(cached),
        cached_input: cached.min(input),
        cache_write: 0,
        output: output.saturating_sub(reasoning),
        reasoning: reasoning.min(output),
    })
}

/// Codex's `tokenUsage`: the latest step (`last`).
pub fn codex_step(token_usage: &Value) -> Option<Tokens> {
    token_usage.get("last").and_then(codex_breakdown)
}

/// Codex's `tokenUsage`: the thread's running total (`total`).
pub fn codex_total(token_usage: &Value) -> Option<Tokens> {
    token_usage.get("total").and_then(codex_breakdown)
}

/// Claude's `usage`.
pub fn claude(usage: &Value) -> Option<Tokens> {
    let input = count(usage, &["input_tokens"])?;
    Some(Tokens {
        input,
        cached_input: count(usage, &["cache_read_input_tokens"]).unwrap_or(0),
        cache_write: count(usage, &["cache_creation_input_tokens"]).unwrap_or(0),
        output: count(usage, &["output_tokens"]).unwrap_or(0),
        reasoning: 0,
    })
}

/// An ACP agent's `usage`, whatever it names its counts; `None` without an input or
/// output count.
pub fn acp(usage: &Value) -> Option<Tokens> {
    let input = count(usage, &["inputTokens", "input_tokens", "promptTokens"]);
    let output = count(
        usage,
        &["outputTokens", "output_tokens", "completionTokens"],
    );
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Tokens {
        input: input.unwrap_or(0),
        cached_input: count(
            usage,
            &["cachedReadTokens", "cached_read_tokens", "cachedTokens"],
        )
        .unwrap_or(0),
        cache_write: count(usage, &["cachedWriteTokens", "cached_write_tokens"]).unwrap_or(0),
        output: output.unwrap_or(0),
        reasoning: count(
            usage,
            &["thoughtTokens", "thought_tokens", "reasoningTokens"],
        )
        .unwrap_or(0),
    })
}

/// The usage an ACP agent's `session/prompt` result reports, per model where it says:
/// the (unstable) `usage` field, else gemini's `_meta.quota` (`model_usage[]`, each a
/// `token_count` of one model, or one `token_count`). Empty when it reports nothing.
pub fn acp_result(result: &Value) -> Vec<(Tokens, Option<String>)> {
    let model_of = |v: &Value| v.get("model").and_then(Value::as_str).map(str::to_owned);
    if let Some(u) = result.get("usage").filter(|u| !u.is_null()) {
        return acp(u).map(|t| (t, model_of(u))).into_iter().collect();
    }
    let Some(quota) = result.pointer("/_meta/quota") else {
        return Vec::new();
    };
    let per_model: Vec<(Tokens, Option<String>)> = quota
        .get("model_usage")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| Some((acp(m.get("token_count")?)?, model_of(m))))
        .collect();
    if !per_model.is_empty() {
        return per_model;
    }
    quota
        .get("token_count")
        .and_then(acp)
        .map(|t| (t, None))
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemini_reports_its_turns_usage_per_model_in_meta_quota() {
        // As gemini 0.61 answers a prompt.
        let r = json!({"stopReason": "end_turn", "_meta": {"quota": {
            "token_count": {"input_tokens": 11711, "output_tokens": 9},
            "model_usage": [{"model": "gemini-3.8-flash",
                             "token_count": {"input_tokens": 11711, "output_tokens": 9}}]}}});
        let reports = acp_result(&r);
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].0.input, 11711);
        assert_eq!(reports[0].0.output, 9);
        assert_eq!(reports[0].1.as_deref(), Some("gemini-3.8-flash"));
        let total_only = json!({"_meta": {"quota": {"token_count": {"input_tokens": 5}}}});
        assert_eq!(acp_result(&total_only)[0].0.input, 5);
        let usage = json!({"usage": {"inputTokens": 3, "outputTokens": 4, "model": "m"}});
        assert_eq!(acp_result(&usage)[0].1.as_deref(), Some("m"));
        assert!(acp_result(&json!({"stopReason": "end_turn"})).is_empty());
    }

    #[test]
    fn codex_counts_cached_input_and_reasoning_once() {
        let u = json!({
            "total": {"inputTokens": 1500, "cachedInputTokens": 1000, "outputTokens": 300,
                      "reasoningOutputTokens": 120, "totalTokens": 1800},
            "last": {"inputTokens": 500, "cachedInputTokens": 400, "outputTokens": 60,
                     "reasoningOutputTokens": 20, "totalTokens": 560},
            "modelContextWindow": 272000
        });
        let step = codex_step(&u).unwrap();
        assert_eq!(
            step,
            Tokens {
                input: 100,
                cached_input: 400,
                cache_write: 0,
                output: 40,
                reasoning: 20
            }
        );
        assert_eq!(step.total(), 560, "the vendor's own total");
        assert_eq!(codex_total(&u).unwrap().total(), 1800);
        assert_eq!(codex_step(&json!({"total": {}})), None);
    }

    #[test]
    fn claude_counts_cache_reads_and_writes_apart_from_input() {
        let u = json!({"input_tokens": 12, "cache_read_input_tokens": 3000,
                       "cache_creation_input_tokens": 200, "output_tokens": 45});
        assert_eq!(
            claude(&u).unwrap(),
            Tokens {
                input: 12,
                cached_input: 3000,
                cache_write: 200,
                output: 45,
                reasoning: 0
            }
        );
        assert_eq!(
            claude(&json!({"output_tokens": 1})),
            None,
            "no input count: unknown"
        );
    }

    #[test]
    fn acp_usage_is_read_in_either_case_and_nothing_recognisable_is_unknown() {
        let camel = json!({"inputTokens": 7, "outputTokens": 9, "thoughtTokens": 2,
                           "cachedReadTokens": 1});
        let snake = json!({"input_tokens": 7, "output_tokens": 9, "thought_tokens": 2,
                           "cached_read_tokens": 1});
        assert_eq!(acp(&camel), acp(&snake));
        assert_eq!(acp(&camel).unwrap().total(), 19);
        assert_eq!(acp(&json!({"cost": 1})), None);
    }
}
