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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
