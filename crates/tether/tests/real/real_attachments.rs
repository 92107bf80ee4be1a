//! Images sent with a message reach the REAL agent CLIs as their provider's own image
//! input, seen in the request the CLI makes to the mock model: Codex → Responses
//! `input_image` (a data URL), Claude → Anthropic `image` block (base64 source), Gemini
//! over ACP → Gemini `inlineData`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::real_agents::{
    self, AgentReaper, RealAgent, agent_toml, codex_env, codex_home, gemini_env,
};
use tether_testkit::uploads::{PNG_1X1, PNG_1X1_BASE64, Part, find_objects};
use tether_testkit::{Api, Daemon, DaemonOptions, MockModel};

/// Uploads the PNG and sends it with `text` to a conversation of `agent`; the finished
/// turn.
async fn send_png(d: &Daemon, agent: &str, text: &str) -> Value {
    let c = d.new_conversation(Some(agent)).await;
    let ids = d
        .upload_ok(
            &c,
            &[Part {
                name: "screen.png",
                content_type: Some("image/png"),
                bytes: PNG_1X1,
            }],
        )
        .await;
    let out = d
        .post_ok(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({ "text": text, "attachments": ids }),
        )
        .await;
    d.wait_turn(
        out["session_id"].as_str().unwrap(),
        out["turn_id"].as_str().unwrap(),
    )
    .await
}

fn last_main_body(model: &MockModel, api: Api) -> Value {
    model
        .main_requests(api)
        .last()
        .map(|r| r.body.clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn codex_gets_the_image_as_a_responses_input_image() {
    let model = MockModel::start().await;
    let home = codex_home(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("codex", RealAgent::Codex, &codex_env(home.path())),
        ..DaemonOptions::default()
    })
    .await;
    let turn = send_png(&d, "codex", "what is on the screen?").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let body = last_main_body(&model, Api::OpenAiResponses);
    let images = find_objects(&body, &|m| m.get("type") == Some(&json!("input_image")));
    assert_eq!(images.len(), 1, "{body}");
    let url = images[0]["image_url"].as_str().unwrap();
    assert_eq!(url, format!("data:image/png;base64,{PNG_1X1_BASE64}"));
    // Native input: nothing was copied into the working directory.
    assert!(!d.work_dir().join(".tether/attachments").exists());
}

#[tokio::test]
async fn claude_gets_the_image_as_an_anthropic_image_block() {
    let model = MockModel::start().await;
    let config_dir = tempfile::tempdir().unwrap();
    let env = real_agents::claude_env(&model.base_url(), config_dir.path());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("claude", RealAgent::Claude, &env),
        ..DaemonOptions::default()
    })
    .await;
    let turn = send_png(&d, "claude", "what is on the screen?").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let body = last_main_body(&model, Api::AnthropicMessages);
    let images = find_objects(&body, &|m| m.get("type") == Some(&json!("image")));
    assert_eq!(images.len(), 1, "{body}");
    assert_eq!(
        images[0]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": PNG_1X1_BASE64})
    );
}

#[tokio::test]
async fn gemini_over_acp_gets_the_image_as_inline_data() {
    let model = MockModel::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = gemini_env(&model.base_url(), home.path());
    let _reaper = AgentReaper::new("GEMINI_CLI_HOME", &home.path().display().to_string());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("gemini", RealAgent::Gemini, &env),
        start_timeout_secs: 30,
        ..DaemonOptions::default()
    })
    .await;
    let turn = send_png(&d, "gemini", "what is on the screen?").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let body = last_main_body(&model, Api::Gemini);
    let images = find_objects(&body, &|m| m.contains_key("inlineData"));
    assert_eq!(images.len(), 1, "{body}");
    assert_eq!(
        images[0]["inlineData"],
        json!({"mimeType": "image/png", "data": PNG_1X1_BASE64})
    );
}

#[tokio::test]
async fn a_file_codex_writes_in_a_turn_is_listed_and_downloadable_inside_the_cwd_only() {
    let model = MockModel::start().await;
    let home = codex_home(&model.base_url());
    let d = Daemon::start(DaemonOptions {
        extra_config: agent_toml("codex", RealAgent::Codex, &codex_env(home.path())),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(Some("codex")).await;
    let o = d.say(&c, "patch notes/out.txt hello from codex").await;
    let a = d.pending_approval(&c).await;
    d.post_ok(
        &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
        json!({ "decision": "allow" }),
    )
    .await;
    let tid = o["turn_id"].as_str().unwrap();
    let t = d.wait_turn(o["session_id"].as_str().unwrap(), tid).await;
    assert_eq!(t["status"], "completed", "{t}");

    let files = d.get_ok(&format!("/api/v1/turns/{tid}/files")).await;
    let listed = files["files"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{files}");
    assert_eq!(listed[0]["path"], "notes/out.txt");
    assert_eq!(listed[0]["exists"], true);
    let (status, _, bytes) = d
        .get_bytes(&format!(
            "/api/v1/turns/{tid}/files/content?path=notes/out.txt"
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8(bytes).unwrap().trim(), "hello from codex");

    // Confined: no `..`, no symlink out of the working directory.
    let secret = d.home.path().join("secret.txt");
    std::fs::write(&secret, "not for agents").unwrap();
    std::os::unix::fs::symlink(&secret, d.work_dir().join("link.txt")).unwrap();
    for (path, want) in [
        ("../secret.txt", 400),
        ("link.txt", 403),
        (secret.to_str().unwrap(), 403),
    ] {
        let (status, _, bytes) = d
            .get_bytes(&format!("/api/v1/turns/{tid}/files/content?path={path}"))
            .await;
        assert_eq!(status, want, "{path}: {}", String::from_utf8_lossy(&bytes));
    }
}
