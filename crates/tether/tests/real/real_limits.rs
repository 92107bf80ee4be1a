//! Vendor usage limits with the REAL CLIs against the mock model (issue 29): the mock
//! answers as OpenAI, Anthropic and Google do at a limit (429 `usage_limit_reached` with
//! Codex's rate-limit headers; 429 `rate_limit_error` with the unified rate-limit
//! headers; 429 `RESOURCE_EXHAUSTED` with a `RetryInfo`), and tether recognises it from
//! what Codex (`usageLimitExceeded`, and the headers as an `account/rateLimits/updated`
//! snapshot with the reset), Claude Code (`api_error_status: 429`) and gemini (ACP error
//! 429, "Suggested retry after 600s.") print: the turn ends `usage_limit`, the
//! conversation is parked with a continuation the person can cancel. And a window
//! budget against the real Codex: the mock's `x-codex-primary-*` headers on an answer
//! reach tether as Codex's snapshot, and the turns on that account stop at the cap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_testkit::real_agents;
use tether_testkit::{Daemon, DaemonOptions, MockModel};

#[tokio::test]
async fn codex_claude_and_gemini_at_their_limit_are_parked_not_failed() {
    let model = MockModel::start().await;
    let agents = real_agents::codex_claude_and_gemini(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agents.config.clone(),
        start_timeout_secs: 30,
        ..DaemonOptions::default()
    })
    .await;
    // Codex and gemini say when the limit resets; Claude Code with an API key does not.
    for (agent, says_when) in [("codex", true), ("claude", false), ("gemini", true)] {
        let c = d.new_conversation(Some(agent)).await;
        let (_, t) = d.say_and_wait(&c, "limit 600").await;
        assert_eq!(t["status"], "failed", "{agent}: {t}");
        assert_eq!(t["error_code"], "usage_limit", "{agent}: {t}");
        let history = d.wait_history(&c, "I will continue at").await;
        assert_eq!(
            history.contains("usage limit resets at"),
            says_when,
            "{agent}: {history}"
        );
        let r = d.say(&c, "/cancel").await;
        assert_eq!(
            r["reply"], "The automatic continuation was cancelled.",
            "{agent}: {r}"
        );
    }
}

#[tokio::test]
async fn a_window_budget_stops_the_real_codex_at_its_cap() {
    let model = MockModel::start().await;
    let agents = real_agents::codex_and_claude(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agents.config.clone(),
        ..DaemonOptions::default()
    })
    .await;
    let (status, b) = d
        .post(
            "/api/v1/budgets",
            json!({"scope": "team", "unit": "window", "limit": 80}),
        )
        .await;
    assert_eq!(status, 201, "{b}");
    let c = d.new_conversation(Some("codex")).await;
    let (_, t) = d.say_and_wait(&c, "window 40").await;
    assert_eq!(t["status"], "completed", "{t}");
    // The answer carries 90 %: whether the snapshot ends this turn or arrives after it,
    // the next turn on the account is refused before Codex is asked.
    let (_, t) = d.say_and_wait(&c, "window 90").await;
    assert!(
        t["status"] == "completed" || t["error_code"] == "budget_exceeded",
        "{t}"
    );
    let asked = model.requests().len();
    let (_, t) = d.say_and_wait(&c, "hello").await;
    assert_eq!(t["error_code"], "budget_exceeded", "{t}");
    assert_eq!(model.requests().len(), asked, "the vendor was not asked");
    let list = d.get_ok("/api/v1/budgets").await;
    assert_eq!(list["budgets"][0]["used"], 90.0, "{list}");
}
