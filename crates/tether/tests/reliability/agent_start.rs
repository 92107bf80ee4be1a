//! How agents are started, through a real `tether serve` and the fake agent: a missing
//! binary says how to fix it, the working directory is checked again at every start
//! (and never lies in the data directory), agents get only the environment they are
//! given, `tether doctor` probes them with that environment, and agent processes left
//! by a killed daemon are ended when it starts again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

fn toml_path(p: &Path) -> String {
    tether_testkit::real_agents::toml_str(&p.display().to_string())
}

/// `[agents.NAME]` running the fake agent (ACP) with extra TOML lines.
fn fake_agent(d_home: &Path, name: &str, extra: &str) -> String {
    format!(
        "[agents.{name}]\ndriver = \"acp\"\ncommand = {}\nargs = [\"--state-dir\", {}]\n{extra}\n",
        toml_path(&bin_path("fake-agent")),
        toml_path(&d_home.join("fake-state-extra")),
    )
}

async fn conversation(d: &Daemon, body: Value) -> String {
    let c = d.post_ok("/api/v1/conversations", body).await;
    c["id"].as_str().unwrap().to_owned()
}

/// The agent's reply text of a turn that must complete.
async fn reply(d: &Daemon, conv: &str, text: &str) -> String {
    let (_, t) = d.say_and_wait(conv, text).await;
    assert_eq!(t["status"], "completed", "{t}");
    t["result_text"]
        .as_str()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_missing_agent_binary_says_how_to_fix_it() {
    let extra = "[agents.ghost]\ndriver = \"acp\"\ncommand = \"ghost-agent-not-installed\"\n\n\
                 [agents.lost]\ndriver = \"codex\"\ncommand = \"/nowhere/lost-agent\"\n";
    let d = Daemon::start(DaemonOptions {
        extra_config: extra.to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    for (agent, expected) in [
        (
            "ghost",
            "ghost-agent-not-installed: command not found on PATH — install it or set \
             `[agents.ghost] command` (see `tether doctor`)",
        ),
        (
            "lost",
            "/nowhere/lost-agent: not found or not executable — install it or set \
             `[agents.lost] command` (see `tether doctor`)",
        ),
    ] {
        let c = d.new_conversation(Some(agent)).await;
        let (_, t) = d.say_and_wait(&c, "hello").await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error_code"], "spawn_failed", "{t}");
        let message = t["error_message"].as_str().unwrap();
        assert!(message.contains(expected), "{agent}: {message}");
        let cwd = d.work_dir().display().to_string();
        assert!(!message.contains(&cwd), "names the cwd: {message}");
    }
}

#[tokio::test]
async fn a_working_directory_swapped_for_a_symlink_is_refused_at_the_next_start() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let outside = tempfile::tempdir().unwrap();
    let proj = d.work_dir().join("proj");
    std::fs::create_dir(&proj).unwrap();
    let cwd = proj.display().to_string();
    // One conversation has a session (to be resumed), one has not started yet.
    let resumed = conversation(&d, json!({ "cwd": cwd })).await;
    assert!(
        reply(&d, &resumed, "hello")
            .await
            .starts_with("echo: hello")
    );
    let fresh = conversation(&d, json!({ "cwd": cwd })).await;
    d.restart().await;

    std::fs::remove_dir(&proj).unwrap();
    std::os::unix::fs::symlink(outside.path(), &proj).unwrap();
    for conv in [&resumed, &fresh] {
        let (_, t) = d.say_and_wait(conv, "hello again").await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error_code"], "invalid_cwd", "{t}");
        let message = t["error_message"].as_str().unwrap();
        assert!(message.contains("outside the workspace roots"), "{message}");
    }
}

#[tokio::test]
async fn the_data_directory_is_never_a_working_directory() {
    let d = Daemon::start(DaemonOptions {
        data_dir_inside_workspace: Some(".tether"),
        ..DaemonOptions::default()
    })
    .await;
    let data = d.data_dir().to_path_buf();
    assert!(data.starts_with(d.work_dir()));
    for cwd in [data.clone(), data.join("run")] {
        let (status, body) = d
            .post(
                "/api/v1/conversations",
                json!({ "cwd": cwd.display().to_string() }),
            )
            .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_cwd"))
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("data directory"), "{message}");
    }
    // The workspace root around it is still fine.
    let c = conversation(&d, json!({ "cwd": d.work_dir().display().to_string() })).await;
    assert!(reply(&d, &c, "hi").await.starts_with("echo: hi"));
}

#[tokio::test]
async fn agents_get_passed_variables_and_no_others() {
    let home = tempfile::tempdir().unwrap();
    let mut extra = fake_agent(home.path(), "envy", "pass_env = [\"TETHER_TEST_PASSED\"]");
    // A Claude agent is told IS_SANDBOX=1 (claude refuses root without it); no other is.
    extra.push_str(&format!(
        "[agents.claudy]\ndriver = \"claude\"\ncommand = {}\nargs = [\"--dialect\", \"claude\", \"--state-dir\", {}]\n\n",
        toml_path(&bin_path("fake-agent")),
        toml_path(&home.path().join("fake-claude")),
    ));
    // The built-in codex agent (its default arguments select the fake agent's codex
    // dialect) passes Codex's credentials by default.
    extra.push_str(&format!(
        "[agents.codex]\ncommand = {}\n\n[agents.codex.env]\nFAKE_AGENT_STATE_DIR = {}\n",
        toml_path(&bin_path("fake-agent")),
        toml_path(&home.path().join("fake-codex")),
    ));
    let env = [
        ("TETHER_TEST_PASSED", "passed-value"),
        ("TETHER_TEST_SECRET", "secret-value"),
        ("OPENAI_API_KEY", "sk-test-key"),
    ];
    let d = Daemon::start(DaemonOptions {
        extra_config: extra,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..DaemonOptions::default()
    })
    .await;
    let envy = d.new_conversation(Some("envy")).await;
    assert_eq!(
        reply(
            &d,
            &envy,
            "env TETHER_TEST_PASSED TETHER_TEST_SECRET OPENAI_API_KEY IS_SANDBOX"
        )
        .await,
        "TETHER_TEST_PASSED=passed-value TETHER_TEST_SECRET unset OPENAI_API_KEY unset \
         IS_SANDBOX unset"
    );
    let claudy = d.new_conversation(Some("claudy")).await;
    assert_eq!(
        reply(&d, &claudy, "env IS_SANDBOX TETHER_TEST_SECRET").await,
        "IS_SANDBOX=1 TETHER_TEST_SECRET unset"
    );
    let codex = d.new_conversation(Some("codex")).await;
    assert_eq!(
        reply(
            &d,
            &codex,
            "env OPENAI_API_KEY TETHER_TEST_PASSED TETHER_TEST_SECRET"
        )
        .await,
        "OPENAI_API_KEY=sk-test-key TETHER_TEST_PASSED unset TETHER_TEST_SECRET unset"
    );
}

#[tokio::test]
async fn doctor_probes_versions_with_the_agents_environment() {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe-agent");
    std::fs::write(
        &probe,
        "#!/bin/sh\necho \"probe 1.0 passed=[$TETHER_TEST_PASSED] secret=[$TETHER_TEST_SECRET]\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("tether.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:9\"\ndata_dir = {}\nworkspace_roots = [{}]\n\
             default_agent = \"probe\"\n\n[agents.probe]\ndriver = \"acp\"\ncommand = {}\n\
             pass_env = [\"TETHER_TEST_PASSED\"]\n\
             args = [\"--api-key\", \"live-key-value\", \"--verbose\"]\n\n\
             [agents.mine]\ndriver = \"claude\"\ncommand = {}\n\n\
             [agents.mine.env]\nFAKE_AGENT_STATE_DIR = {}\n",
            toml_path(&dir.path().join("data")),
            toml_path(dir.path()),
            toml_path(&probe),
            toml_path(&bin_path("fake-agent")),
            toml_path(&dir.path().join("fake-state")),
        ),
    )
    .unwrap();
    let out = within(
        "tether doctor",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(&config)
            .arg("doctor")
            .env_remove("TETHER_HOME")
            .env("TETHER_TEST_PASSED", "yes")
            .env("TETHER_TEST_SECRET", "leaked")
            .output(),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("version: probe 1.0 passed=[yes] secret=[]"),
        "{stdout}"
    );
    // A key given as an argument is not printed (issue 24 S12).
    assert!(stdout.contains("--api-key *** --verbose"), "{stdout}");
    assert!(!stdout.contains("live-key-value"), "{stdout}");
    // Issue 24, first use 2: doctor starts a session of each agent. The probe is no agent
    // at all: it fails, marked `[!!]` with the reason. A Claude agent given only a
    // driver and a command gets the driver's arguments, and starts.
    assert!(stdout.contains("[!!] probe (driver: acp)"), "{stdout}");
    assert!(stdout.contains("starts:  FAILED: "), "{stdout}");
    assert!(stdout.contains("[ok] mine (driver: claude)"), "{stdout}");
    assert!(stdout.contains("starts:  ok (a session opens)"), "{stdout}");
    assert!(stdout.contains("--input-format stream-json"), "{stdout}");
}

/// Issue 24, first use 2: a configured agent gets its driver's arguments and credential
/// variables unless its config says otherwise, and works with nothing but a driver and a
/// command.
#[tokio::test]
async fn a_configured_agent_gets_its_drivers_defaults() {
    let home = tempfile::tempdir().unwrap();
    let d = Daemon::start(DaemonOptions {
        extra_config: format!(
            "[agents.mine]\ndriver = \"claude\"\ncommand = {}\n\n[agents.mine.env]\nFAKE_AGENT_STATE_DIR = {}\n",
            toml_path(&bin_path("fake-agent")),
            toml_path(&home.path().join("fake-claude")),
        ),
        env: vec![("ANTHROPIC_API_KEY".to_string(), "sk-ant-test".to_string())],
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(Some("mine")).await;
    assert_eq!(reply(&d, &c, "hi").await, "echo: hi");
    assert_eq!(
        reply(&d, &c, "env ANTHROPIC_API_KEY").await,
        "ANTHROPIC_API_KEY=sk-ant-test",
        "Claude's credential variables pass by default"
    );
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Running processes whose command line contains `needle`.
fn pids_with_arg(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .filter(|pid| running(*pid))
        .collect()
}

async fn until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn agents_left_by_a_killed_daemon_are_ended_when_it_starts_again() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let text = reply(&d, &c, "orphan").await;
    let orphan: u32 = text.strip_prefix("orphan ").unwrap().parse().unwrap();
    let state = d.fake_state_dir().display().to_string();
    assert!(running(orphan));
    assert!(!pids_with_arg(&state).is_empty(), "the agent runs");

    d.kill9().await;
    // The agent itself dies with the daemon (parent-death signal) ...
    until(
        "the agent dies with the daemon",
        Duration::from_secs(1),
        || pids_with_arg(&state).is_empty(),
    )
    .await;
    // ... but what it started in its process group lives on until the next start.
    assert!(running(orphan), "the orphan outlived the daemon");
    d.restart().await;
    until(
        "the orphan is ended at start-up",
        Duration::from_secs(5),
        || !running(orphan),
    )
    .await;
}
