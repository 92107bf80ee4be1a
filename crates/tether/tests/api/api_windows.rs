//! Budgets in percent of a subscription's usage window (issue 29), with the fake agent
//! reporting the window as Codex (`account/rateLimits/updated`) and Claude Code
//! (`rate_limit_event`) do: the warning line at its share of the cap, the report that
//! reaches the cap stops the turn (`budget_exceeded`), the next turn on that account is
//! refused before its agent is asked, and another account's turns still run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions};

use crate::reliability_util::agents_per_dialect;

#[tokio::test]
async fn a_window_budget_stops_the_turn_whose_report_reaches_it_and_refuses_the_next() {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start(DaemonOptions {
        extra_config: agents_per_dialect("", state.path(), &[]),
        ..Default::default()
    })
    .await;
    let (status, b) = d
        .post(
            "/api/v1/budgets",
            json!({"scope": "team", "unit": "window", "limit": 80, "warn_percent": 50}),
        )
        .await;
    assert_eq!(status, 201, "{b}");
    assert_eq!(b["unit"], "window", "{b}");
    for dialect in ["codex", "claude"] {
        let c = d.new_conversation(Some(dialect)).await;
        // Four reports 100 ms apart: 60 % passes the warning line (40 of 80), 90 %
        // passes the cap and stops the turn before the last one.
        let (_, t) = d.say_and_wait(&c, "window 30 60 90 95").await;
        assert_eq!(t["status"], "failed", "{dialect}: {t}");
        assert_eq!(t["error_code"], "budget_exceeded", "{dialect}: {t}");
        let history = d
            .get_ok(&format!("/api/v1/conversations/{c}/messages"))
            .await
            .to_string();
        assert!(
            history.contains("⚠️ 50 % of the team's budget of the vendor's usage window: 60 %"),
            "{dialect}: {history}"
        );
        assert!(
            t.to_string().contains("90 % used of 80 %"),
            "{dialect}: {t}"
        );
        // Refused before the agent is asked: the fake agent would answer "window at …".
        let (_, t2) = d.say_and_wait(&c, "hello").await;
        assert_eq!(t2["error_code"], "budget_exceeded", "{dialect}: {t2}");
        assert!(
            t2["result_text"].is_null() || t2["result_text"] == "",
            "{t2}"
        );
    }
    // The ACP dialect runs on an account of its own whose vendor reported nothing.
    let other = d.new_conversation(Some("acp")).await;
    let (_, t) = d.say_and_wait(&other, "hello").await;
    assert_eq!(t["status"], "completed", "{t}");
    // The budget shows the fullest window it watches.
    let list = d.get_ok("/api/v1/budgets").await;
    assert_eq!(list["budgets"][0]["used"], 90.0, "{list}");
    assert_eq!(list["budgets"][0]["over"], true, "{list}");
    // A window budget is a whole percent over the vendor's own window.
    for (body, field) in [
        (
            json!({"scope": "team", "unit": "window", "limit": 120}),
            "limit",
        ),
        (
            json!({"scope": "team", "unit": "window", "limit": 50.5}),
            "limit",
        ),
        (
            json!({"scope": "team", "unit": "window", "limit": 50, "period": "day"}),
            "period",
        ),
    ] {
        let (status, err) = d.post("/api/v1/budgets", body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(field),
            "{body}: {err}"
        );
    }
}
