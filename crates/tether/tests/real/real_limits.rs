//! Vendor usage limits with the REAL CLIs against the mock model (issue 29): the mock
//! answers as OpenAI and Anthropic do at a limit (429 `usage_limit_reached` with Codex's
//! rate-limit headers; 429 `rate_limit_error` with the unified rate-limit headers), and
//! tether recognises it from what Codex (`usageLimitExceeded`) and Claude Code
//! (`api_error_status: 429`) print: the turn ends `usage_limit`, the conversation is
//! parked with a continuation the person can cancel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_testkit::real_agents;
use tether_testkit::{Daemon, DaemonOptions, MockModel};

#[tokio::test]
async fn codex_and_claude_at_their_limit_are_parked_not_failed() {
    let model = MockModel::start().await;
    let agents = real_agents::codex_and_claude(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agents.config.clone(),
        ..DaemonOptions::default()
    })
    .await;
    for agent in ["codex", "claude"] {
        let c = d.new_conversation(Some(agent)).await;
        let (_, t) = d.say_and_wait(&c, "limit 600").await;
        assert_eq!(t["status"], "failed", "{agent}: {t}");
        assert_eq!(t["error_code"], "usage_limit", "{agent}: {t}");
        let history = d
            .get_ok(&format!("/api/v1/conversations/{c}/messages"))
            .await
            .to_string();
        assert!(history.contains("I will continue at"), "{agent}: {history}");
        let r = d.say(&c, "/cancel").await;
        assert_eq!(
            r["reply"], "The automatic continuation was cancelled.",
            "{agent}: {r}"
        );
    }
}
