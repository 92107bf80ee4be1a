//! End to end through the `tether` binary: the private data dir, one daemon per data dir,
//! `doctor` and `token` finding the running daemon, warnings and config validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_util;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cli_util::{Home, mode, text};
use serde_json::{Value, json};
use tether_testkit::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every directory under `dir` (itself included) must be 0700 and every file 0600 or
/// stricter; sockets live in a 0700 directory and are skipped.
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            assert_private(&path);
        } else if !kind.is_socket() {
            assert_eq!(
                mode(&path) & 0o077,
                0,
                "{} is readable by others",
                path.display()
            );
        }
    }
}

async fn token_of(home: &Home, env: &[(&str, &str)]) -> String {
    let out = home.run(&["token"], env).await;
    assert!(out.status.success(), "tether token: {}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn conversation_history_is_private_to_its_user() {
    let home = Home::new("", "");
    // `pair` opens the store before any daemon ever ran.
    let out = home.run(&["pair", "list"], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let data = home.data();
    assert_private(&data);

    // Files and directory loosened (an older version, a restored backup): fixed at start.
    let served = home.serve(&["--listen", "127.0.0.1:0"], &[]).await;
    let token = token_of(&home, &[]).await;
    let client = reqwest::Client::new();
    let created: Value = client
        .post(format!("{}/api/v1/conversations", served.base))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(created["id"].is_string(), "{created}");
    assert!(data.join("tether.db-wal").exists());
    assert_private(&data);
    served.stop().await;

    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["tether.db", "tether.db-wal", "tether.db-shm", "token"] {
        let p = data.join(name);
        if p.exists() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let served = home.serve(&["--listen", "127.0.0.1:0"], &[]).await;
    assert_private(&data);
    served.stop().await;
}

#[tokio::test]
async fn a_second_daemon_on_the_same_data_dir_refuses_to_start_and_names_the_first() {
    let home = Home::new("", "");
    let first = home.serve(&["--listen", "127.0.0.1:0"], &[]).await;
    let token = token_of(&home, &[]).await;
    let client = reqwest::Client::new();
    let api = |p: &str| format!("{}{p}", first.base);
    let conv: Value = client
        .post(api("/api/v1/conversations"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let c = conv["id"].as_str().unwrap().to_string();
    client
        .post(api(&format!("/api/v1/conversations/{c}/messages")))
        .bearer_auth(&token)
        .json(&json!({"text": "approve rm -rf build"}))
        .send()
        .await
        .unwrap();
    let pending = || async {
        let list: Value = client
            .get(api("/api/v1/approvals?status=pending"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|a| a["conversation_id"] == c.as_str())
            .cloned()
    };
    let approval = within("approval is pending", async {
        loop {
            if let Some(a) = pending().await {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // The second daemon exits at once, naming the first, before touching the store.
    let second = home.run(&["serve", "--listen", "127.0.0.1:0"], &[]).await;
    assert!(!second.status.success());
    let err = text(&second.stderr);
    assert!(err.contains(&format!("pid {}", first.pid)), "{err}");
    assert!(err.contains(&home.data().display().to_string()), "{err}");
    assert!(text(&second.stdout).is_empty(), "{}", text(&second.stdout));
    // Restart recovery would have expired the pending approval.
    let still = pending().await.expect("approval still pending");
    assert_eq!(still["id"], approval["id"]);
    let answered = client
        .post(api(&format!(
            "/api/v1/approvals/{}",
            approval["id"].as_str().unwrap()
        )))
        .bearer_auth(&token)
        .json(&json!({"decision": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 200);

    // Once the first is gone (even killed), the data dir is free again.
    first.kill().await;
    let again = home.serve(&["--listen", "127.0.0.1:0"], &[]).await;
    again.stop().await;
}

#[tokio::test]
async fn doctor_and_token_find_the_daemon_whatever_its_listen_flag_and_token() {
    // The configured address is not where the daemon listens.
    let home = Home::new("listen = \"127.0.0.1:1\"", "");
    let env_token = [("TETHER_TOKEN", "token-from-the-environment")];
    let served = home.serve(&["--listen", "127.0.0.1:0"], &env_token).await;
    let record = home.data().join("daemon.json");
    assert_eq!(mode(&record), 0o600);
    // The public health route reports the instance id the record holds.
    let recorded: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(recorded["pid"], served.pid);
    let health: Value = reqwest::get(format!("{}/api/v1/health", served.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["instance_id"], recorded["instance_id"]);
    assert_eq!(recorded["instance_id"].as_str().unwrap().len(), 32);

    let out = home.run(&["doctor"], &[]).await;
    let report = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        report.contains(&format!("running: pid {} at {}", served.pid, served.base)),
        "{report}"
    );
    assert!(report.contains("environment (TETHER_TOKEN)"), "{report}");
    // `tether token` would print the file token, which this daemon does not accept.
    let out = home.run(&["token"], &[]).await;
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).trim().is_empty());
    assert!(
        text(&out.stderr).contains("environment (TETHER_TOKEN)"),
        "{}",
        text(&out.stderr)
    );
    let out = home.run(&["doctor"], &env_token).await;
    let report = text(&out.stdout);
    assert!(report.contains("  daemon: 0 live"), "{report}");

    served.stop().await;
    assert!(!record.exists(), "daemon.json is removed on a clean exit");
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    assert!(report.contains("not running"), "{report}");

    // With the token file: `tether token` prints the token the daemon accepts.
    let served = home
        .serve(&["--listen", "127.0.0.1:0"], &env_token[..0])
        .await;
    let token = token_of(&home, &env_token).await;
    let status = reqwest::Client::new()
        .get(format!("{}/api/v1/pool", served.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 200);
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    assert!(report.contains("from the token file"), "{report}");
    assert!(report.contains("  daemon: 0 live"), "{report}");
    served.stop().await;
}

/// A program on a port that answers everything like a tether health route and records
/// every request head it gets.
async fn impostor(instance_id: Option<&str>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let body = match instance_id {
        Some(id) => json!({"status": "ok", "version": "0.1.0", "instance_id": id}),
        None => json!({"status": "ok", "version": "0.1.0"}),
    }
    .to_string();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let log = log.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock().unwrap().push(text(&head));
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn doctor_never_sends_the_token_to_whatever_answers_on_the_port() {
    let (addr, seen) = impostor(None).await;
    let home = Home::new(&format!("listen = \"{addr}\""), "");
    let token = token_of(&home, &[]).await;

    let out = home.run(&["doctor"], &[]).await;
    let report = text(&out.stdout);
    assert!(report.contains("the token was not sent"), "{report}");
    // A live-looking record (this test's pid) whose address answers with another id.
    let (addr2, seen2) = impostor(Some("not-the-recorded-id")).await;
    let record = json!({"pid": std::process::id(), "listen": addr2,
        "instance_id": "0123456789abcdef", "token": "file", "version": "0.1.0"});
    std::fs::write(home.data().join("daemon.json"), record.to_string()).unwrap();
    let out = home.run(&["doctor"], &[]).await;
    let report = text(&out.stdout);
    assert!(report.contains("another instance id"), "{report}");

    for head in seen
        .lock()
        .unwrap()
        .iter()
        .chain(seen2.lock().unwrap().iter())
    {
        assert!(!head.contains(&token), "the token leaked: {head}");
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }
    assert!(
        !seen2.lock().unwrap().is_empty(),
        "doctor asked who answers"
    );
}

#[tokio::test]
async fn risky_settings_are_warned_about_at_start_and_by_doctor() {
    let feishu = "[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\n\
                  verification_token = \"v\"\nbase_url = \"http://127.0.0.1:1\"\n";
    let home = Home::new("listen = \"0.0.0.0:1\"", feishu);
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    assert!(
        report.contains("WARNING: listen address 0.0.0.0:1"),
        "{report}"
    );
    assert!(
        report.contains("WARNING: [channels.feishu] has no encrypt_key"),
        "{report}"
    );

    let served = home.serve(&["--listen", "0.0.0.0:0"], &[]).await;
    let log = served.stderr();
    let warn_lines: Vec<_> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warn_lines
            .iter()
            .any(|l| l.contains("not a loopback address")),
        "{log}"
    );
    assert!(
        warn_lines.iter().any(|l| l.contains("encrypt_key")),
        "{log}"
    );
    served.stop().await;

    // With both closed, no warning.
    let quiet = Home::new("", &format!("{feishu}encrypt_key = \"k\"\n"));
    let report = text(&quiet.run(&["doctor"], &[]).await.stdout);
    assert!(!report.contains("WARNING"), "{report}");
}

#[tokio::test]
async fn a_blank_tether_token_is_refused() {
    let home = Home::new("", "");
    for args in [&["serve", "--listen", "127.0.0.1:0"][..], &["token"][..]] {
        let out = home.run(args, &[("TETHER_TOKEN", "   ")]).await;
        assert!(!out.status.success(), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("TETHER_TOKEN") && err.contains("blank"),
            "{err}"
        );
    }
}

/// A setting `serve` must refuse, and what its error must say.
struct Refused {
    top: &'static str,
    tables: String,
    env: Vec<(&'static str, &'static str)>,
    /// Must appear in the error (the key or the variable).
    names: &'static str,
    /// Must not appear in the error.
    not: Option<&'static str>,
}

fn refused(top: &'static str, tables: &str, names: &'static str) -> Refused {
    Refused {
        top,
        tables: tables.to_owned(),
        env: vec![],
        names,
        not: None,
    }
}

#[tokio::test]
async fn invalid_settings_stop_the_start_with_an_error_naming_the_key_or_variable() {
    // Loopback only: a daemon that wrongly starts must not reach the real Telegram.
    let telegram = "[channels.telegram]\nbot_token = \"1:x\"\nbase_url = \"http://127.0.0.1:1\"\n";
    let feishu = "[channels.feishu]\napp_id = \"a\"\napp_secret = \"b\"\n\
                  verification_token = \"v\"\nencrypt_key = \"k\"\n";
    let env = |key, value, names| Refused {
        env: vec![(key, value)],
        ..refused("", "", names)
    };
    let cases = [
        // Relative to the config file's folder; neither exists.
        refused("workspace_roots = [\"missing\"]", "", "workspace_roots"),
        refused("default_cwd = \"work/gone\"", "", "default_cwd"),
        env("TETHER_LISTEN", "banana", "TETHER_LISTEN"),
        env("TETHER_DEFAULT_AGENT", "nobody", "TETHER_DEFAULT_AGENT"),
        env(
            "TETHER_CONFIG",
            "/nonexistent/tether/nope.toml",
            "TETHER_CONFIG",
        ),
        Refused {
            not: Some("untagged"),
            ..refused(
                "",
                &format!("{telegram}allowed_users = [42, true]\n"),
                "allowed_users",
            )
        },
        refused(
            "",
            &format!("[channels]\nmax_attempts = 0\n{telegram}"),
            "max_attempts",
        ),
        refused(
            "",
            "[channels.telegram]\nbot_token = \"1:x\"\nbase_url = \"not a url\"\n",
            "base_url",
        ),
        refused(
            "",
            &format!("{feishu}base_url = \"ftp://open.feishu.cn\"\n"),
            "base_url",
        ),
    ];
    for case in cases {
        let home = Home::new(case.top, &case.tables);
        // `--listen` would win over TETHER_LISTEN; `--config` over TETHER_CONFIG.
        let args: &[&str] = if case.names == "TETHER_LISTEN" {
            &["serve"]
        } else {
            &["serve", "--listen", "127.0.0.1:0"]
        };
        let with_config = case.names != "TETHER_CONFIG";
        let out = home.run_with(with_config, args, &case.env).await;
        let err = text(&out.stderr);
        let what = format!("{} {} {:?}", case.top, case.tables, case.env);
        assert!(!out.status.success(), "started: {what}");
        assert!(err.contains(case.names), "{what}: {err}");
        if let Some(not) = case.not {
            assert!(!err.contains(not), "{what}: {err}");
        }
        assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    }
}

#[tokio::test]
async fn doctor_tries_each_channels_credentials_against_its_platform() {
    use tether_testkit::fake_feishu::{APP_ID, FakeFeishu};
    use tether_testkit::fake_telegram::{BOT_TOKEN, FakeTelegram};
    let (tg, fs) = (FakeTelegram::start().await, FakeFeishu::start().await);
    let tables = |secret: &str| {
        format!(
            "[channels.telegram]\nbot_token = \"{BOT_TOKEN}\"\nbase_url = \"{}\"\n\n\
             [channels.feishu]\napp_id = \"{APP_ID}\"\napp_secret = \"{secret}\"\n\
             base_url = \"{}\"\n",
            tg.base_url, fs.base_url
        )
    };
    let home = Home::new("", &tables(tether_testkit::fake_feishu::APP_SECRET));
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    assert!(report.contains("telegram: ok: bot @"), "{report}");
    assert!(
        report.contains("feishu: ok: app cli_fake_app has a tenant access token; long connection endpoint answered"),
        "{report}"
    );
    assert_eq!(
        fs.ws_connections(),
        0,
        "doctor asks where, but does not connect"
    );

    let home = Home::new("", &tables("wrong-secret"));
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    assert!(report.contains("feishu: ERROR: "), "{report}");
    assert!(report.contains("app secret invalid"), "{report}");
    assert!(
        report.contains("check `app_id` and `app_secret`"),
        "{report}"
    );

    // Issue 24, first use 8: no answer names the host and the cause, and points at the
    // address, not at "retry later"; a refused token points at the token.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let home = Home::new(
        "",
        &format!(
            "[channels.telegram]\nbot_token = \"{BOT_TOKEN}\"\nbase_url = \"http://127.0.0.1:{port}\"\n"
        ),
    );
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    let line = report
        .lines()
        .find(|l| l.contains("telegram:"))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{report}"
    );
    assert!(line.to_lowercase().contains("refused"), "{report}");
    assert!(line.contains("is `base_url` right"), "{report}");
    assert!(
        !line.contains("retry later") && !line.contains(BOT_TOKEN),
        "{report}"
    );
    let home = Home::new(
        "",
        &format!(
            "[channels.telegram]\nbot_token = \"1:wrong\"\nbase_url = \"{}\"\n",
            tg.base_url
        ),
    );
    let report = text(&home.run(&["doctor"], &[]).await.stdout);
    let line = report
        .lines()
        .find(|l| l.contains("telegram:"))
        .unwrap_or_default();
    assert!(
        line.contains("ERROR") && line.contains("check `bot_token`"),
        "{report}"
    );
}

/// Issue 24, first use 5: `doctor` gates a script: it exits non-zero on anything that
/// stops `serve` (a default agent not installed, a store it cannot reach), says which,
/// and exits 0 on a sound setup.
#[tokio::test]
async fn doctor_exits_non_zero_on_what_stops_serve() {
    let sound = Home::new("", "");
    let out = sound.run(&["doctor"], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("store check:     ok"),
        "{}",
        text(&out.stdout)
    );

    let missing = Home::new(
        "",
        "[agents.ghost]\ndriver = \"acp\"\ncommand = \"/nonexistent/ghost-agent\"\n",
    );
    let cfg = std::fs::read_to_string(&missing.config).unwrap();
    std::fs::write(
        &missing.config,
        cfg.replace("default_agent = \"fake\"", "default_agent = \"ghost\""),
    )
    .unwrap();
    let out = missing.run(&["doctor"], &[]).await;
    assert!(!out.status.success());
    let report = text(&out.stdout);
    assert!(
        report.contains("problems (serve will not start)"),
        "{report}"
    );
    assert!(
        report.contains("the default agent \"ghost\" is not installed"),
        "{report}"
    );

    // A PostgreSQL URL nobody answers on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = Home::new(
        "",
        &format!("[store]\nurl = \"postgres://u:pw@127.0.0.1:{port}/x\"\n"),
    );
    let out = unreachable.run(&["doctor"], &[]).await;
    assert!(!out.status.success());
    let report = text(&out.stdout);
    assert!(report.contains("cannot be reached"), "{report}");
    assert!(!report.contains(":pw@"), "{report}");
}
