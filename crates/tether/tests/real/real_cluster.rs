//! End to end, issue 12, with the REAL `codex app-server` (pinned in tools/agents) against
//! the mock model: three nodes on one PostgreSQL database whose `CODEX_HOME` is one
//! shared agent home. The owner is SIGKILLed mid-turn; a survivor takes the conversation
//! over (the turn `interrupted`) and the next message, sent to another node, resumes the
//! same codex thread with its history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Api, Cluster, DaemonOptions, MockModel, within};

fn ids(out: &Value) -> (String, String) {
    (
        out["session_id"].as_str().unwrap().to_owned(),
        out["turn_id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_mid_turn_and_another_node_resumes_the_codex_thread() {
    let model = MockModel::start().await;
    // The shared agent home: every node's codex reads and writes the same CODEX_HOME.
    let codex_home = real_agents::codex_home(&model.base_url());
    let env = real_agents::codex_env(codex_home.path());
    let mut cluster = Cluster::start(
        3,
        DaemonOptions {
            extra_config: format!(
                "{}\n[cluster]\nlease_ttl_secs = 2\n",
                real_agents::agent_toml("codex", RealAgent::Codex, &env)
            ),
            ..DaemonOptions::default()
        },
    )
    .await;
    let a = cluster.node(0);
    let c = a.new_conversation(Some("codex")).await;
    let (o1, t1) = a.say_and_wait(&c, "remember apples").await;
    assert_eq!(t1["status"], "completed", "{t1}");
    let sid = ids(&o1).0;
    let thread = a.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"].clone();
    let o = a.say(&c, "slow 50 100").await;
    let tid = ids(&o).1;
    within("first delta", async {
        loop {
            let page = a.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
            if page["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["turn_id"] == tid.as_str() && e["payload"]["type"] == "message_delta")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // As when its machine dies: the node and its codex go together.
    cluster.node_mut(0).kill9_with_agents().await;

    let b = cluster.node(1);
    within("a survivor interrupts the turn", async {
        loop {
            let turns = b.all_turns(&sid).await;
            let t = turns
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["id"] == tid.as_str())
                .cloned()
                .unwrap();
            if t["status"] == "interrupted" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    let third = cluster.node(2);
    let (o2, t2) = third.say_and_wait(&c, "what did I say?").await;
    assert_eq!(o2["session_id"], sid.as_str(), "{o2}");
    assert_eq!(t2["status"], "completed", "{t2}");
    assert_eq!(
        third.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"],
        thread,
        "the same codex thread"
    );
    let requests = model.main_requests(Api::OpenAiResponses);
    let texts = requests.last().unwrap().user_texts();
    assert_eq!(
        texts.first().map(String::as_str),
        Some("remember apples"),
        "{texts:?}"
    );
    assert_eq!(
        texts.last().map(String::as_str),
        Some("what did I say?"),
        "{texts:?}"
    );
    // The usage ledger after the failover (issue 29): what the model billed, to the
    // token — the killed turn's stream was cut before its usage was sent, so neither
    // counts it.
    crate::ledger_equals_the_models_count(third, &model).await;
}
