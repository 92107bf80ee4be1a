//! A real `tether serve` process for the benchmarks: a config like the testkit's
//! (`crates/tether-testkit/src/daemon.rs`) with the fake agent registered as `fake`, a
//! known API token (`TETHER_TOKEN`), a port chosen up front (so start-up can be timed
//! from process start to the first `200` of `/api/v1/health`), and its pid for the memory
//! figures read from `/proc/<pid>/status`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tether_testkit::real_agents::toml_str;
use tether_testkit::{SseStream, bin_path};
use tokio::process::{Child, Command};

/// The API token every bench daemon uses.
const TOKEN: &str = "tether-bench-token";
/// Longest wait for a daemon to serve.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Longest wait for one turn to end.
pub const TURN_LIMIT: Duration = Duration::from_secs(120);

/// What a figure needs from its daemon.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// TOML appended to the config (e.g. `[pool]`, more agents).
    pub extra_config: String,
    /// Messages that may wait behind a running turn (default 16).
    pub queue_cap: Option<usize>,
}

/// A running daemon (killed on drop).
pub struct BenchDaemon {
    child: Child,
    pub pid: u32,
    pub base: String,
    pub client: reqwest::Client,
    /// Process start → first `200` from `/api/v1/health`.
    pub start_time: Duration,
    home: PathBuf,
    config: PathBuf,
    /// The token requests carry: the bootstrap token, or a person's ([`BenchDaemon::act_as`]).
    token: String,
}

/// Memory of a process from `/proc/<pid>/status`, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mem {
    /// `VmRSS`: resident now.
    pub rss_kb: u64,
    /// `VmHWM`: peak resident.
    pub hwm_kb: u64,
}

/// Reads `VmRSS` and `VmHWM` of `pid`.
pub fn mem_of(pid: u32) -> Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("no {name} in /proc/{pid}/status"))
    };
    Ok(Mem {
        rss_kb: field("VmRSS:")?,
        hwm_kb: field("VmHWM:")?,
    })
}

/// CPU time (user + system) `pid` has used so far, from `/proc/<pid>/stat`.
pub fn cpu_time_of(pid: u32) -> Result<Duration> {
    Ok(cpu_times_of(pid)?.0)
}

/// CPU time (user + system) of `pid` itself and of its children it has waited for (its
/// agent processes, once ended), from `/proc/<pid>/stat`.
pub fn cpu_times_of(pid: u32) -> Result<(Duration, Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| anyhow!("no field {i} in /proc/{pid}/stat"))
    };
    // `rest` starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12;
    // cutime and cstime (16, 17) are 13 and 14.
    let own = ticks(11)? + ticks(12)?;
    let children = ticks(13)? + ticks(14)?;
    let ms = |t: u64| Duration::from_millis(t * 1000 / clock_ticks_per_sec());
    Ok((ms(own), ms(children)))
}

/// Context switches of `pid`'s threads so far (voluntary and not, summed over
/// `/proc/<pid>/task/*/status`; a thread that ended takes its count with it).
pub fn context_switches_of(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
            continue; // the thread ended meanwhile
        };
        for line in status.lines() {
            if let Some(n) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += n.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}

fn clock_ticks_per_sec() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// A temporary home for one figure's daemon: removed afterwards, unless
/// `TETHER_BENCH_KEEP` is set (then its path — config, `daemon.log`, database — is
/// printed and kept for a look).
pub struct Home(Option<tempfile::TempDir>);

impl Home {
    pub fn new() -> Result<Home> {
        Ok(Home(Some(
            tempfile::Builder::new()
                .prefix("tether-bench-")
                .tempdir()
                .context("creating a temporary home")?,
        )))
    }

    pub fn path(&self) -> &Path {
        self.0
            .as_ref()
            .map(|t| t.path())
            .unwrap_or(Path::new("/nonexistent"))
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        if std::env::var_os("TETHER_BENCH_KEEP").is_some()
            && let Some(t) = self.0.take()
        {
            eprintln!("tether-bench: kept {}", t.keep().display());
        }
    }
}

/// A free loopback port (bound and released: a small race, fine on a bench machine).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

/// Writes the daemon's config into `home` (data in `home/data`, workspace `home/work`,
/// fake agent state in `home/fake-state`); returns its path.
pub fn write_config(home: &Path, spec: &Spec) -> Result<PathBuf> {
    let work = home.join("work");
    std::fs::create_dir_all(&work).context("creating the work dir")?;
    let fake = bin_path("fake-agent");
    let state = home.join("fake-state");
    let path_str = |p: &Path| toml_str(&p.display().to_string());
    let config = format!(
        "data_dir = {data}\ndefault_agent = \"fake\"\nworkspace_roots = [{work}]\n\
         default_cwd = {work}\nqueue_cap = {queue}\nstart_timeout_secs = 30\n\n\
         [agents.fake]\ndriver = \"acp\"\ncommand = {fake}\nargs = [\"--state-dir\", {state}]\n\n{extra}",
        data = path_str(&home.join("data")),
        work = path_str(&work),
        queue = spec.queue_cap.unwrap_or(16),
        fake = path_str(&fake),
        state = path_str(&state),
        extra = spec.extra_config,
    );
    let path = home.join("tether.toml");
    std::fs::write(&path, config).context("writing the config")?;
    Ok(path)
}

impl BenchDaemon {
    /// Writes the config into `home` and starts `tether serve` on it.
    pub async fn start(home: &Path, spec: &Spec) -> Result<BenchDaemon> {
        let config = write_config(home, spec)?;
        Self::launch(home, &config).await
    }

    /// Starts `tether serve` with an existing config; returns once health answers 200.
    pub async fn launch(home: &Path, config: &Path) -> Result<BenchDaemon> {
        let port = free_port()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.join("daemon.log"))
            .context("opening daemon.log")?;
        let started = Instant::now();
        // `TETHER_BENCH_WRAP="valgrind --tool=massif ..."` runs the daemon under a tool
        // (massif sees jemalloc's pages only with `--pages-as-heap=yes`).
        let wrap = std::env::var("TETHER_BENCH_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut cmd = match words.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(words).arg(bin_path("tether"));
                c
            }
            None => Command::new(bin_path("tether")),
        };
        let child = cmd
            .arg("--config")
            .arg(config)
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("TETHER_TOKEN", TOKEN)
            .env_remove("TETHER_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("spawning tether serve")?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("tether serve has no pid"))?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .build()
            .context("building the HTTP client")?;
        let mut d = BenchDaemon {
            child,
            pid,
            base: format!("http://127.0.0.1:{port}"),
            client,
            start_time: Duration::ZERO,
            home: home.to_path_buf(),
            config: config.to_path_buf(),
            token: TOKEN.to_owned(),
        };
        d.start_time = d.wait_healthy(started).await?;
        Ok(d)
    }

    async fn wait_healthy(&mut self, started: Instant) -> Result<Duration> {
        let url = self.url("/api/v1/health");
        loop {
            if started.elapsed() > START_LIMIT {
                bail!("tether serve did not answer health within {START_LIMIT:?}");
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "tether serve exited with {status} before serving; log tail:\n{}",
                    self.log_tail()
                );
            }
            match self
                .client
                .get(&url)
                .timeout(Duration::from_secs(30))
                .send()
                .await
            {
                Ok(r) if r.status().as_u16() == 200 => return Ok(started.elapsed()),
                Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    /// The last lines of the daemon's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops the daemon (SIGTERM: it ends its agents), then starts it again on the same
    /// config; the new start time is in `start_time`.
    pub async fn restart(self) -> Result<BenchDaemon> {
        let home = self.home.clone();
        let config = self.config.clone();
        self.stop().await?;
        Self::launch(&home, &config).await
    }

    /// SIGTERM, then waits (SIGKILL after 60 s).
    pub async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(r) => {
                r.context("waiting for tether serve")?;
            }
            Err(_) => {
                let _ = self.child.kill().await;
            }
        }
        Ok(())
    }

    /// SIGKILL (no goodbye: its agents die with it, its leases run out), then reaps it.
    pub async fn kill9(mut self) -> Result<()> {
        self.child.kill().await.context("killing tether serve")?;
        Ok(())
    }

    pub fn mem(&self) -> Result<Mem> {
        mem_of(self.pid)
    }

    pub fn cpu_time(&self) -> Result<Duration> {
        cpu_time_of(self.pid)
    }

    /// Context switches of the daemon's threads so far.
    pub fn context_switches(&self) -> Result<u64> {
        context_switches_of(self.pid)
    }

    /// [`cpu_times_of`] the daemon.
    pub fn cpu_times(&self) -> Result<(Duration, Duration)> {
        cpu_times_of(self.pid)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn check(resp: reqwest::Response, what: &str) -> Result<Value> {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("{what}: HTTP {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// `req` with the API token and the turn time-out.
    pub fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        req.bearer_auth(&self.token).timeout(TURN_LIMIT)
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        let resp = self
            .client
            .get(self.url(path))
            .bearer_auth(&self.token)
            .timeout(TURN_LIMIT)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        Self::check(resp, &format!("GET {path}")).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let resp = self
            .client
            .post(self.url(path))
            .bearer_auth(&self.token)
            .timeout(TURN_LIMIT)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        Self::check(resp, &format!("POST {path}")).await
    }

    /// Creates a conversation with `agent` (the default `fake` when `None`).
    pub async fn new_conversation(&self, agent: Option<&str>) -> Result<String> {
        let body = match agent {
            Some(a) => json!({ "agent": a }),
            None => json!({}),
        };
        let c = self.post("/api/v1/conversations", body).await?;
        str_field(&c, "id")
    }

    /// From now on, requests carry `secret` (a personal token) instead of the bootstrap
    /// token.
    pub fn act_as(&mut self, secret: &str) {
        secret.clone_into(&mut self.token);
    }

    /// Back to the bootstrap token.
    pub fn act_as_owner(&mut self) {
        TOKEN.clone_into(&mut self.token);
    }

    /// Sends a message; returns the outcome.
    pub async fn say(&self, conv: &str, text: &str) -> Result<Value> {
        self.post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({ "text": text }),
        )
        .await
    }

    /// Opens the conversation's SSE stream from its beginning.
    pub async fn events(&self, conv: &str) -> Result<SseStream> {
        let resp = self
            .client
            .get(self.url(&format!("/api/v1/conversations/{conv}/events")))
            .bearer_auth(&self.token)
            .send()
            .await
            .context("opening SSE")?;
        if resp.status().as_u16() != 200 {
            bail!("SSE: HTTP {}", resp.status());
        }
        Ok(SseStream::new(resp))
    }

    /// Sends `text` and reads `sse` until that turn's terminal event; returns the
    /// envelope of `turn_completed` (any other ending is an error).
    pub async fn turn(&self, conv: &str, sse: &mut SseStream, text: &str) -> Result<Value> {
        let out = self.say(conv, text).await?;
        let turn_id = str_field(&out, "turn_id")?;
        wait_turn_end(sse, &turn_id).await
    }

    /// The conversation view.
    pub async fn conversation(&self, conv: &str) -> Result<Value> {
        self.get(&format!("/api/v1/conversations/{conv}")).await
    }
}

/// A string field of a JSON object.
pub fn str_field(v: &Value, key: &str) -> Result<String> {
    v[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no {key} in {v}"))
}

/// Reads `sse` until `turn_id` ends; its `turn_completed` envelope, or an error.
pub async fn wait_turn_end(sse: &mut SseStream, turn_id: &str) -> Result<Value> {
    let read = async {
        while let Some(ev) = sse.next().await {
            let kind = ev.event.as_deref().unwrap_or("");
            if !matches!(
                kind,
                "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted"
            ) {
                continue;
            }
            let env = ev.json();
            if env["turn_id"] != turn_id {
                continue;
            }
            if kind != "turn_completed" {
                bail!("turn {turn_id} ended with {kind}: {}", env["payload"]);
            }
            return Ok(env);
        }
        bail!("the event stream ended before turn {turn_id} did")
    };
    tokio::time::timeout(TURN_LIMIT, read)
        .await
        .map_err(|_| anyhow!("turn {turn_id} did not end within {TURN_LIMIT:?}"))?
}
