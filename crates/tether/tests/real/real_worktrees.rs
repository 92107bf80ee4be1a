//! The REAL agent CLIs work in an isolated worktree (issue 32): codex and claude are
//! started in the conversation's worktree (their request to the mock model names it as
//! their working directory, not the repository), the turn completes, and its end leaves
//! a snapshot; the person's checkout is untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::json;
use tether_testkit::git::{git, init_repo};
use tether_testkit::real_agents::{self, RealAgent, agent_toml, codex_env, codex_home};
use tether_testkit::{Api, Daemon, DaemonOptions, MockModel};

async fn in_a_worktree(d: &Daemon, model: &MockModel, agent: &str, api: Api) {
    let dir = d.work_dir().join("repo");
    init_repo(&dir, &[("README.md", "hello\n")]);
    let c = d
        .post_ok(
            "/api/v1/conversations",
            json!({"agent": agent, "cwd": dir.display().to_string(), "isolation": "worktree"}),
        )
        .await;
    let c = c["id"].as_str().unwrap().to_owned();
    let (_, turn) = d.say_and_wait(&c, "what is in this repository?").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let w = d
        .get_ok(&format!("/api/v1/conversations/{c}/worktree"))
        .await;
    let path = PathBuf::from(w["path"].as_str().unwrap());
    assert!(path.join("README.md").exists());
    // The CLI told the model where it works: the worktree.
    let asked = model
        .main_requests(api)
        .last()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(
        asked.contains(&path.display().to_string()),
        "{agent} did not work in {}: {asked}",
        path.display()
    );
    assert!(w["snapshot"].is_string(), "{w}");
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn codex_works_in_the_conversations_worktree() {
    let model = MockModel::start().await;
    let home = codex_home(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("codex", RealAgent::Codex, &codex_env(home.path())),
        ..DaemonOptions::default()
    })
    .await;
    in_a_worktree(&d, &model, "codex", Api::OpenAiResponses).await;
}

#[tokio::test]
async fn claude_works_in_the_conversations_worktree() {
    let model = MockModel::start().await;
    let config_dir = tempfile::tempdir().unwrap();
    let env = real_agents::claude_env(&model.base_url(), config_dir.path());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("claude", RealAgent::Claude, &env),
        ..DaemonOptions::default()
    })
    .await;
    in_a_worktree(&d, &model, "claude", Api::AnthropicMessages).await;
}
