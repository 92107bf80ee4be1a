//! Runs a real `tether serve` in a temporary home with the fake agent registered, and
//! talks to it over HTTP.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::{SseStream, bin_path, within, within_for};

/// Settings for a test daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub approval_timeout_secs: u64,
    pub turn_timeout_secs: u64,
    pub queue_cap: usize,
    /// Extra TOML appended to the config file.
    pub extra_config: String,
    /// `start_timeout_secs` of the config (how long an agent may take to initialise).
    pub start_timeout_secs: u64,
    /// Append the daemon's stderr (its log) to [`Daemon::stderr_path`] instead of
    /// inheriting the test's stderr, and its stdout to [`Daemon::stdout_path`]; read them
    /// with [`Daemon::stderr_log`] and [`Daemon::stdout_log`].
    pub capture_stderr: bool,
    /// `TETHER_LOG` (the log filter), `info` by default.
    pub log_filter: String,
    /// Extra environment of `tether serve` (what agents may or may not get passed).
    pub env: Vec<(String, String)>,
    /// Put the data directory at this path inside the workspace root (`.tether`, or
    /// `.local/share/tether` as in the default layout where the root is the home
    /// directory) instead of beside it.
    pub data_dir_inside_workspace: Option<&'static str>,
    /// Run on this PostgreSQL database instead of the daemon's own store (a cluster's
    /// nodes share one; see [`crate::Cluster`]).
    pub database_url: Option<String>,
    /// The fake agents' state directory (their session files), instead of one in the
    /// daemon's home: a shared agent home when nodes of a cluster share it.
    pub fake_state_dir: Option<PathBuf>,
    /// The workspace root (and default cwd) instead of `work` in the daemon's home: the
    /// nodes of a cluster share one, as they would share a file system.
    pub work_dir: Option<PathBuf>,
    /// The data directory (SQLite's database, attachments) at this path instead of one
    /// in the daemon's home: a small file system of the test's own, say.
    pub data_dir: Option<PathBuf>,
    /// More `[store]` keys, written after the URL (with `database_url`).
    pub store_extra: String,
    /// Top-level config keys (written before every table).
    pub top_config: String,
    /// Run `tether serve` inside this network namespace (`ip netns exec`), listening on
    /// every address there; the test reaches it at the namespace's API address.
    pub netns: Option<crate::netns::NodeNet>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            approval_timeout_secs: 1800,
            turn_timeout_secs: 0,
            queue_cap: 16,
            extra_config: String::new(),
            start_timeout_secs: 10,
            capture_stderr: false,
            log_filter: "info".to_string(),
            env: Vec::new(),
            data_dir_inside_workspace: None,
            database_url: None,
            fake_state_dir: None,
            work_dir: None,
            data_dir: None,
            store_extra: String::new(),
            top_config: String::new(),
            netns: None,
        }
    }
}

/// A running `tether serve` (killed on drop) and its temporary home.
pub struct Daemon {
    child: Option<Child>,
    pub home: tempfile::TempDir,
    pub base: String,
    pub token: String,
    pub client: reqwest::Client,
    config_path: PathBuf,
    capture_stderr: bool,
    log_filter: String,
    env: Vec<(String, String)>,
    data_dir: PathBuf,
    /// The workspace root.
    work: PathBuf,
    /// Wall clock (ms since the epoch) when the current daemon process was launched.
    started_at_ms: i64,
    /// The PostgreSQL database of the store (`TETHER_TEST_STORE=postgres`), kept for the
    /// daemon's life (restarts included) and dropped with it.
    database: Option<crate::postgres::TestDatabase>,
    netns: Option<crate::netns::NodeNet>,
}

fn toml_str(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

impl Daemon {
    /// Starts a daemon with agents `fake` (default), `fake2`, `fake-refuse`
    /// (`--refuse-resume`) and `fake-other` (`--resume-other-id`), all sharing one fake
    /// agent state directory.
    pub async fn start(opts: DaemonOptions) -> Daemon {
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let work = opts
            .work_dir
            .clone()
            .unwrap_or_else(|| home.path().join("work"));
        std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("mkdir: {e}"));
        let state = opts
            .fake_state_dir
            .clone()
            .unwrap_or_else(|| home.path().join("fake-state"));
        let data_dir = match (&opts.data_dir, opts.data_dir_inside_workspace) {
            (Some(dir), _) => dir.clone(),
            (None, Some(rel)) => work.join(rel),
            (None, None) => home.path().join("data"),
        };
        let fake = bin_path("fake-agent");
        let agent = |name: &str, extra: &str| {
            format!(
                "[agents.{name}]\ndriver = \"acp\"\ncommand = {}\nargs = [\"--state-dir\", {}{extra}]\n\n",
                toml_str(&fake),
                toml_str(&state)
            )
        };
        let config = format!(
            "data_dir = {}\ndefault_agent = \"fake\"\nworkspace_roots = [{}]\ndefault_cwd = {}\n\
             approval_timeout_secs = {}\nturn_timeout_secs = {}\nqueue_cap = {}\nstart_timeout_secs = {}\n{}\n{}{}{}{}{}",
            toml_str(&data_dir),
            toml_str(&work),
            toml_str(&work),
            opts.approval_timeout_secs,
            opts.turn_timeout_secs,
            opts.queue_cap,
            opts.start_timeout_secs,
            opts.top_config,
            agent("fake", ""),
            agent("fake2", ""),
            agent("fake-refuse", ", \"--refuse-resume\""),
            agent("fake-other", ", \"--resume-other-id\""),
            opts.extra_config,
        );
        // `TETHER_TEST_STORE=postgres` runs the daemon on a database of its own.
        let database = match crate::postgres::Backend::from_env() {
            _ if opts.database_url.is_some() => None,
            crate::postgres::Backend::Sqlite => None,
            crate::postgres::Backend::Postgres => Some(
                // Longer than `within`: without TETHER_TEST_DATABASE_URL this starts a
                // cluster first (initdb).
                tokio::time::timeout(
                    Duration::from_secs(120),
                    crate::postgres::TestDatabase::create(),
                )
                .await
                .unwrap_or_else(|_| panic!("timed out creating a test database"))
                .unwrap_or_else(|e| panic!("test database: {e:#}")),
            ),
        };
        let url = opts
            .database_url
            .clone()
            .or_else(|| database.as_ref().map(|db| db.url.clone()));
        let config = match url {
            Some(url) => format!("{config}\n[store]\nurl = {url:?}\n{}", opts.store_extra),
            None => config,
        };
        let config_path = home.path().join("tether.toml");
        std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("write config: {e}"));
        let mut d = Daemon {
            child: None,
            home,
            base: String::new(),
            token: String::new(),
            // Idle connections are dropped by the client well before any server's
            // keep-alive time-out (1 s in some tests): reusing one the server is closing
            // fails the request ("error sending request"), a race seen under load.
            client: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_millis(500))
                .build()
                .unwrap_or_else(|e| panic!("http client: {e}")),
            config_path,
            capture_stderr: opts.capture_stderr,
            log_filter: opts.log_filter,
            env: opts.env,
            data_dir,
            work,
            started_at_ms: 0,
            database,
            netns: opts.netns,
        };
        d.launch().await;
        d
    }

    /// When the current daemon process was launched (ms since the epoch).
    pub fn started_at_ms(&self) -> i64 {
        self.started_at_ms
    }

    /// The fake agent's state directory (delete a session file to make resume fail).
    pub fn fake_state_dir(&self) -> PathBuf {
        self.home.path().join("fake-state")
    }

    /// The workspace root configured for the daemon.
    pub fn work_dir(&self) -> PathBuf {
        self.work.clone()
    }

    /// Every file tether copied for agents under the working directory's
    /// `.tether/attachments/` (one directory per conversation), as full paths, sorted.
    pub fn attachment_copies(&self) -> Vec<PathBuf> {
        attachment_copies(&self.work)
    }

    /// Where the daemon's stderr goes with [`DaemonOptions::capture_stderr`] (every run
    /// of it on this home appends).
    pub fn stderr_path(&self) -> PathBuf {
        self.home.path().join("tether.stderr.log")
    }

    /// Where the daemon's stdout goes with [`DaemonOptions::capture_stderr`].
    pub fn stdout_path(&self) -> PathBuf {
        self.home.path().join("tether.stdout.log")
    }

    /// Everything the daemon wrote to stderr so far (empty unless captured).
    pub fn stderr_log(&self) -> String {
        std::fs::read(self.stderr_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Everything the daemon wrote to stdout so far (empty unless captured).
    pub fn stdout_log(&self) -> String {
        std::fs::read(self.stdout_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The daemon's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The PostgreSQL URL of the daemon's store (`None`: SQLite, [`Daemon::db_path`]).
    pub fn database_url(&self) -> Option<&str> {
        self.database.as_ref().map(|d| d.url.as_str())
    }

    /// The SQLite database of the daemon.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("tether.db")
    }

    /// The daemon's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    async fn launch(&mut self) {
        self.started_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let stderr = if self.capture_stderr {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.stderr_path())
                .unwrap_or_else(|e| panic!("open stderr log: {e}"));
            Stdio::from(file)
        } else {
            Stdio::inherit()
        };
        let (mut command, listen) = match &self.netns {
            Some(net) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &net.ns]).arg(bin_path("tether"));
                (c, "0.0.0.0:0")
            }
            None => (Command::new(bin_path("tether")), "127.0.0.1:0"),
        };
        // The test machine's own agent credentials never reach the daemon (and so its
        // agents, which get the built-in agents' credentials passed).
        for key in crate::real_agents::FOREIGN_ENV {
            command.env_remove(key);
        }
        let mut child = command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("--config")
            .arg(&self.config_path)
            .arg("serve")
            .arg("--listen")
            .arg(listen)
            .env("TETHER_LOG", &self.log_filter)
            .env_remove("TETHER_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn tether: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut lines = BufReader::new(stdout).lines();
        // With capture on, stdout lines go to `stdout_path()` too.
        let mut copy = self.capture_stderr.then(|| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.stdout_path())
                .unwrap_or_else(|e| panic!("open stdout log: {e}"))
        });
        let mut keep = move |line: &str| {
            if let Some(f) = copy.as_mut() {
                use std::io::Write;
                let _ = writeln!(f, "{line}");
            }
        };
        let addr = within("tether serve prints its address", async {
            while let Ok(Some(line)) = lines.next_line().await {
                keep(&line);
                if let Some(rest) = line.strip_prefix("tether listening on ") {
                    return rest.trim().to_string();
                }
            }
            panic!("tether serve exited before listening");
        })
        .await;
        // Keep draining stdout so the daemon never blocks on a full pipe.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                keep(&line);
            }
        });
        self.base = match &self.netns {
            // Every address in the namespace: the test reaches it at the API address.
            Some(net) => addr.replacen("0.0.0.0", &net.api_ip, 1),
            None => addr,
        };
        self.child = Some(child);
        let out = within("tether token", async {
            Command::new(bin_path("tether"))
                .arg("--config")
                .arg(&self.config_path)
                .arg("token")
                .env_remove("TETHER_HOME")
                .output()
                .await
        })
        .await
        .unwrap_or_else(|e| panic!("tether token: {e}"));
        assert!(out.status.success(), "tether token failed: {out:?}");
        self.token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }

    /// Runs `tether --config <this daemon's config> <args>` (e.g. `doctor`) with the
    /// daemon's environment; its output.
    pub async fn cli(&self, args: &[&str]) -> std::process::Output {
        within("tether cli", async {
            Command::new(bin_path("tether"))
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .arg("--config")
                .arg(&self.config_path)
                .args(args)
                .env_remove("TETHER_HOME")
                .output()
                .await
        })
        .await
        .unwrap_or_else(|e| panic!("tether {args:?}: {e}"))
    }

    /// Kills the daemon with SIGKILL (no clean-up runs) and waits for it.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status();
            }
            let _ = within("killed daemon exits", child.wait()).await;
        }
    }

    /// Kills the daemon and the agent process groups it started with SIGKILL, as when
    /// its machine dies (a plain [`Daemon::kill9`] leaves its agents running until the
    /// next start on the same home ends them).
    pub async fn kill9_with_agents(&mut self) {
        let groups: Vec<i32> = self.pid().map(child_groups).unwrap_or_default();
        self.kill9().await;
        // Each process of those groups by its own (positive) id: a group id given to
        // `kill` is too easy to get wrong, and a wrong one kills what the test runs in.
        for pid in members_of(&groups) {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// Sends SIGTERM (the daemon drains, then exits: issue 31).
    pub fn sigterm(&self) {
        self.signal("-TERM");
    }

    /// Waits (at most `limit`) for the daemon process to exit by itself; its exit status.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("the daemon does not run"));
        match tokio::time::timeout(limit, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("waiting for the daemon: {e}"),
            Err(_) => {
                let _ = child.start_kill();
                panic!("the daemon did not exit within {limit:?}")
            }
        }
    }

    /// Sets (or, with `None`, removes) an environment variable of the next launches.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.env.push((key.to_owned(), v.to_owned()));
        }
    }

    /// Runs `tether serve` on this home expecting it to refuse to start: its exit status
    /// and what it wrote to stderr (panics if it starts serving instead).
    pub async fn serve_refused(&self) -> (std::process::ExitStatus, String) {
        assert!(self.child.is_none(), "the daemon still runs");
        let mut command = Command::new(bin_path("tether"));
        let out = within_for(
            "tether serve refuses",
            Duration::from_secs(60),
            command
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .arg("--config")
                .arg(&self.config_path)
                .arg("serve")
                .arg("--listen")
                .arg("127.0.0.1:0")
                .env("TETHER_LOG", &self.log_filter)
                .env_remove("TETHER_HOME")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap_or_else(|e| panic!("spawn tether: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("tether listening on"),
            "tether served instead of refusing: {stdout}"
        );
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts the daemon again on the same home after it exited by itself.
    pub async fn launch_again(&mut self) {
        assert!(self.child.is_none(), "the daemon still runs");
        self.launch().await;
    }

    /// Pauses the daemon with SIGSTOP (it keeps its sockets and its agents, and does
    /// nothing: a node that lost its lease without knowing it).
    pub fn sigstop(&self) {
        self.signal("-STOP");
    }

    /// Resumes a daemon paused with [`Daemon::sigstop`].
    pub fn sigcont(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill")
                .arg(sig)
                .arg(pid.to_string())
                .status();
        }
    }

    /// Whether the daemon process runs (it was neither killed nor stopped by a test).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the daemon again on the same home after [`Daemon::kill9`] (to change its
    /// files in between).
    pub async fn relaunch(&mut self) {
        self.kill9().await;
        self.launch().await;
    }

    /// Starts the daemon again on the same home.
    pub async fn restart(&mut self) {
        self.kill9().await;
        self.launch().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let limit = crate::TIMEOUT;
        let resp = crate::within_for("HTTP request", limit, req.send())
            .await
            .unwrap_or_else(|e| panic!("http: {e}"));
        let status = resp.status().as_u16();
        let text = crate::within_for("HTTP body", limit, resp.text())
            .await
            .unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(
            self.client
                .patch(self.url(path))
                .bearer_auth(&self.token)
                .json(&body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.client.delete(self.url(path)).bearer_auth(&self.token))
            .await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.client.get(self.url(path)).bearer_auth(&self.token))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(
            self.client
                .post(self.url(path))
                .bearer_auth(&self.token)
                .json(&body),
        )
        .await
    }

    /// The session ids in this daemon's live pool (`GET /api/v1/pool`).
    pub async fn pool_sessions(&self) -> Vec<String> {
        let pool = self.get_ok("/api/v1/pool").await;
        pool["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["sessions"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    }

    /// GET that must succeed; returns the JSON body.
    pub async fn get_ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// Every turn of `session`, oldest first, as one JSON array: the turn list's pages
    /// (1000 turns each) followed by their `X-Next-Cursor`. Each page is answered within
    /// two minutes (a debug build's page of a soak's turns runs to tens of MB).
    pub async fn all_turns(&self, session: &str) -> Value {
        let limit = Duration::from_secs(120);
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/v1/sessions/{session}/turns?limit=1000");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let req = self.client.get(self.url(&path)).bearer_auth(&self.token);
            let resp = crate::within_for("HTTP request", limit, req.send())
                .await
                .unwrap_or_else(|e| panic!("http: {e}"));
            let status = resp.status().as_u16();
            cursor = resp
                .headers()
                .get("x-next-cursor")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let text = crate::within_for("HTTP body", limit, resp.text())
                .await
                .unwrap_or_default();
            assert_eq!(status, 200, "GET {path}: {text}");
            match serde_json::from_str(&text) {
                Ok(Value::Array(page)) => all.extend(page),
                _ => panic!("GET {path}: not a list: {text}"),
            }
            if cursor.is_none() {
                return Value::Array(all);
            }
        }
    }

    /// The first pending approval of `conversation`, waiting (at most [`crate::TIMEOUT`])
    /// until there is one.
    pub async fn pending_approval(&self, conversation: &str) -> Value {
        crate::within("approval is pending", async {
            loop {
                let list = self
                    .get_ok("/api/v1/approvals?status=pending&limit=1000")
                    .await;
                let found = list.as_array().and_then(|l| {
                    l.iter()
                        .find(|a| a["conversation_id"] == conversation)
                        .cloned()
                });
                if let Some(a) = found {
                    return a;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// POST that must succeed (2xx); returns the JSON body.
    pub async fn post_ok(&self, path: &str, body: Value) -> Value {
        let (status, resp) = self.post(path, body).await;
        assert!((200..300).contains(&status), "POST {path}: {status} {resp}");
        resp
    }

    /// Creates a conversation (agent `fake` unless given).
    pub async fn new_conversation(&self, agent: Option<&str>) -> String {
        let body = match agent {
            Some(a) => json!({ "agent": a }),
            None => json!({}),
        };
        let c = self.post_ok("/api/v1/conversations", body).await;
        c["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {c}"))
            .to_string()
    }

    /// Sends a message; returns the outcome.
    pub async fn say(&self, conv: &str, text: &str) -> Value {
        self.post_ok(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({ "text": text }),
        )
        .await
    }

    /// Polls a session's turns until `turn_id` has ended; returns the turn.
    pub async fn wait_turn(&self, session_id: &str, turn_id: &str) -> Value {
        self.wait_turn_for(session_id, turn_id, crate::TIMEOUT)
            .await
    }

    /// [`Daemon::wait_turn`] for at most `limit`.
    pub async fn wait_turn_for(&self, session_id: &str, turn_id: &str, limit: Duration) -> Value {
        crate::within_for(&format!("turn {turn_id} ends"), limit, async {
            loop {
                let turns = self.all_turns(session_id).await;
                if let Some(t) = turns
                    .as_array()
                    .and_then(|a| a.iter().find(|t| t["id"] == turn_id))
                {
                    let status = t["status"].as_str().unwrap_or("");
                    if matches!(status, "completed" | "failed" | "cancelled" | "interrupted") {
                        return t.clone();
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// Sends a message and waits for its turn to end; returns (outcome, turn).
    pub async fn say_and_wait(&self, conv: &str, text: &str) -> (Value, Value) {
        let out = self.say(conv, text).await;
        let sid = out["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no session in {out}"));
        let tid = out["turn_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no turn in {out}"));
        let turn = self.wait_turn(sid, tid).await;
        (out, turn)
    }

    /// Polls until `pred` holds for the conversation view.
    pub async fn wait_conversation(
        &self,
        conv: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        within(what, async {
            loop {
                let c = self.get_ok(&format!("/api/v1/conversations/{conv}")).await;
                if pred(&c) {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// The conversation's history (as JSON text) once it says `needle`: a line posted
    /// after a turn ended (a parking notice) may come a moment after the turn's end.
    pub async fn wait_history(&self, conv: &str, needle: &str) -> String {
        within(needle, async {
            loop {
                let h = self
                    .get_ok(&format!("/api/v1/conversations/{conv}/messages"))
                    .await
                    .to_string();
                if h.contains(needle) {
                    return h;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }

    /// Opens the conversation's SSE stream, optionally resuming after `last_event_id`.
    pub async fn events(&self, conv: &str, last_event_id: Option<&str>) -> SseStream {
        let mut req = self
            .client
            .get(self.url(&format!("/api/v1/conversations/{conv}/events")))
            .bearer_auth(&self.token);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = within("open SSE", req.send())
            .await
            .unwrap_or_else(|e| panic!("sse: {e}"));
        assert_eq!(resp.status().as_u16(), 200, "SSE status");
        SseStream::new(resp)
    }
}

/// Every file under `<work>/.tether/attachments/`, recursively, sorted.
pub fn attachment_copies(work: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![work.join(".tether/attachments")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every process as (pid, parent pid, process group), from `/proc/<pid>/stat` (fields 4
/// and 5, after the command name, which may hold spaces).
fn processes() -> Vec<(i32, i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let mut fields = rest.split_whitespace().skip(1);
            let ppid = fields.next()?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some((pid, ppid, pgrp))
        })
        .collect()
}

/// The process groups `pid`'s children lead: the agents tether starts each in a group of
/// its own. A child in another group (the daemon's own, which is the test's) is never
/// taken for one.
fn child_groups(pid: u32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(child, ppid, pgrp)| i64::from(*ppid) == i64::from(pid) && pgrp == child)
        .map(|(child, _, _)| child)
        .collect()
}

/// The processes whose group is one of `groups`.
fn members_of(groups: &[i32]) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(pid, _, pgrp)| *pid > 1 && *pgrp > 1 && groups.contains(pgrp))
        .map(|(pid, _, _)| pid)
        .collect()
}
