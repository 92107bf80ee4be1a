//! Vendor usage limits with the REAL CLIs against the mock model (issue 29).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_testkit::real_agents::{self, RealAgent};
use tether_testkit::{Daemon, DaemonOptions, MockModel};

#[tokio::test]
async fn probe_codex_limit() {
    let model = MockModel::start().await;
    let codex_home = real_agents::codex_home(&model.base_url());
    let config = real_agents::agent_toml(
        "codex",
        RealAgent::Codex,
        &real_agents::codex_env(codex_home.path()),
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(Some("codex")).await;
    let (o, t) = d.say_and_wait(&c, "limit 600").await;
    eprintln!("PROBE turn: {t}");
    let sid = o["session_id"].as_str().unwrap();
    let ev = d.get_ok(&format!("/api/v1/sessions/{sid}/events?limit=100")).await;
    eprintln!("PROBE events: {ev}");
    eprintln!("PROBE requests: {}", model.requests().len());
}
