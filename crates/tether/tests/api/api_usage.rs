//! The usage ledger and budgets end to end (issue 29) with the fake agent in all three
//! dialects: every report the agent sends is a ledger row (the totals equal what the
//! agent reported, to the token), a turn without reports is counted as unknown, and a
//! hard cap stops the turn that crosses it mid-turn and refuses the next one before
//! any agent runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions};

use crate::reliability_util::{DIALECTS, agents_per_dialect};

async fn usage(d: &Daemon, query: &str) -> Value {
    d.get_ok(&format!("/api/v1/usage?{query}")).await
}

#[tokio::test]
async fn every_report_of_every_dialect_is_in_the_ledger_to_the_token() {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start(DaemonOptions {
        extra_config: agents_per_dialect("", state.path(), &[]),
        ..Default::default()
    })
    .await;
    let mut expected = 0;
    for dialect in DIALECTS {
        let c = d.new_conversation(Some(dialect)).await;
        // 3 reports of 100 tokens, then 2 of 7 in a second turn of the same session.
        let (_, t) = d.say_and_wait(&c, "spend 3 100 5").await;
        assert_eq!(t["status"], "completed", "{dialect}: {t}");
        let (_, t) = d.say_and_wait(&c, "spend 2 7 0").await;
        assert_eq!(t["status"], "completed", "{dialect}: {t}");
        let u = usage(&d, &format!("conversation_id={c}")).await;
        assert_eq!(u["totals"]["total_tokens"], 314, "{dialect}: {u}");
        assert_eq!(u["totals"]["input_tokens"], 314, "{dialect}: {u}");
        // ACP reports once per turn; Codex and Claude as they go.
        let reports = if dialect == "acp" { 2 } else { 5 };
        assert_eq!(u["totals"]["reports"], reports, "{dialect}: {u}");
        assert_eq!(u["totals"]["unreported_turns"], 0, "{dialect}: {u}");
        // The fake model has no price: unknown, not zero.
        assert_eq!(u["totals"]["unpriced_reports"], reports, "{dialect}: {u}");
        expected += 314;
        // The channels' /usage says the same.
        let r = d.say(&c, "/usage").await;
        assert_eq!(r["outcome"], "command", "{r}");
        let text = r["reply"].as_str().unwrap_or_default();
        assert!(text.contains("314 tokens"), "{dialect}: {text}");
    }
    // A turn whose agent reports nothing is an unknown.
    let c = d.new_conversation(Some("acp")).await;
    d.say_and_wait(&c, "hello").await;
    let u = usage(&d, &format!("conversation_id={c}")).await;
    assert_eq!(u["totals"]["unreported_turns"], 1, "{u}");
    assert_eq!(u["totals"]["reports"], 0, "{u}");
    // The person's and the team's totals hold everything, and the day's bucket too.
    let mine = usage(&d, "scope=person").await;
    assert_eq!(mine["totals"]["total_tokens"], expected, "{mine}");
    let team = usage(&d, "scope=team&bucket=month&days=60").await;
    assert_eq!(team["totals"]["total_tokens"], expected, "{team}");
    let series = team["series"].as_array().unwrap();
    let in_series: i64 = series
        .iter()
        .map(|p| p["totals"]["total_tokens"].as_i64().unwrap())
        .sum();
    assert_eq!(in_series, expected, "{team}");
    // Bad input names the field.
    let (status, body) = d.get("/api/v1/usage?scope=galaxy").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("scope"),
        "{body}"
    );
    let (status, _) = d.get("/api/v1/usage?scope=tree").await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_codex_report_sent_again_after_a_restart_is_counted_once() {
    let state = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(DaemonOptions {
        extra_config: agents_per_dialect("", state.path(), &[]),
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(Some("codex")).await;
    let (first, _) = d.say_and_wait(&c, "spend 2 100 0").await;
    // After a restart the resumed thread's last update comes again, during the next
    // turn (as codex 0.171 sends it): the same step, not a new one.
    d.kill9().await;
    d.launch_again().await;
    let (again, t) = d.say_and_wait(&c, "spend 1 7 0").await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(again["session_id"], first["session_id"]);
    let u = usage(&d, &format!("conversation_id={c}")).await;
    assert_eq!(u["totals"]["total_tokens"], 207, "{u}");
    assert_eq!(u["totals"]["reports"], 3, "{u}");
}

#[tokio::test]
async fn a_hard_cap_stops_the_turn_that_crosses_it_and_refuses_the_next() {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start(DaemonOptions {
        extra_config: agents_per_dialect("", state.path(), &[]),
        ..Default::default()
    })
    .await;
    for dialect in ["codex", "claude"] {
        let c = d.new_conversation(Some(dialect)).await;
        let (status, b) = d
            .post(
                "/api/v1/budgets",
                json!({"scope": "conversation", "scope_id": c, "limit": 250,
                       "warn_percent": 50, "period": "day"}),
            )
            .await;
        assert_eq!(status, 201, "{b}");
        assert_eq!(b["used"], 0.0);
        // 10 reports of 100, 50 ms apart: the third crosses 250 and stops the turn.
        let (_, t) = d.say_and_wait(&c, "spend 10 100 50").await;
        assert_eq!(t["status"], "failed", "{dialect}: {t}");
        assert_eq!(t["error_code"], "budget_exceeded", "{dialect}: {t}");
        let u = usage(&d, &format!("conversation_id={c}")).await;
        let spent = u["totals"]["total_tokens"].as_i64().unwrap();
        // The overshoot is bounded by the report that crossed the cap (plus one the
        // agent may have sent while being stopped).
        assert!(
            (300..=400).contains(&spent),
            "{dialect}: spent {spent}: {u}"
        );
        assert_eq!(u["budgets"][0]["over"], true, "{u}");
        // The warning at 50 % reached the history as a status line.
        let history = d
            .get_ok(&format!("/api/v1/conversations/{c}/messages"))
            .await;
        let lines = history.to_string();
        assert!(
            lines.contains("50 % of this conversation"),
            "{dialect}: {lines}"
        );
        // The next message is refused before any agent runs.
        let (_, t2) = d.say_and_wait(&c, "spend 1 1 0").await;
        assert_eq!(t2["status"], "failed", "{t2}");
        assert_eq!(t2["error_code"], "budget_exceeded", "{t2}");
        let after = usage(&d, &format!("conversation_id={c}")).await;
        assert_eq!(
            after["totals"]["total_tokens"], spent,
            "nothing ran: {after}"
        );
        // Deleting the budget lets it run again.
        let id = b["id"].as_str().unwrap();
        let (status, _) = d.delete(&format!("/api/v1/budgets/{id}")).await;
        assert_eq!(status, 204);
        let (_, t3) = d.say_and_wait(&c, "spend 1 1 0").await;
        assert_eq!(t3["status"], "completed", "{t3}");
    }
    // Bad budgets name the field; nothing is stored.
    for (body, field) in [
        (json!({"scope": "conversation", "limit": 10}), "scope_id"),
        (json!({"scope": "team", "limit": -1}), "limit"),
        (json!({"scope": "team", "limit": 1.5}), "limit"),
        (
            json!({"scope": "team", "limit": 10, "period": "year"}),
            "period",
        ),
        (
            json!({"scope": "team", "limit": 10, "unit": "apples"}),
            "unit",
        ),
        (
            json!({"scope": "team", "limit": 10, "warn_percent": 100}),
            "warn_percent",
        ),
        (
            json!({"scope": "person", "scope_id": "nobody", "limit": 10}),
            "scope_id",
        ),
    ] {
        let (status, err) = d.post("/api/v1/budgets", body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(field),
            "{body}: {err}"
        );
    }
    let list = d.get_ok("/api/v1/budgets").await;
    assert_eq!(list["budgets"].as_array().unwrap().len(), 0, "{list}");
}
