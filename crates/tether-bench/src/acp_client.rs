//! A bare ACP client that drives the fake agent directly over stdio, without tether: the
//! overhead figure subtracts the agent's own time, measured here with the same prompts,
//! the same binary and the same arguments tether uses.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const LIMIT: Duration = Duration::from_secs(30);

pub struct AcpAgent {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    cwd: String,
    session: String,
}

impl AcpAgent {
    /// Spawns `fake-agent --state-dir <state>` (ACP) and initializes it.
    pub async fn spawn(fake: &Path, state: &Path, cwd: &Path) -> Result<AcpAgent> {
        let mut child = Command::new(fake)
            .arg("--state-dir")
            .arg(state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawning the fake agent")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut a = AcpAgent {
            _child: child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
            cwd: cwd.display().to_string(),
            session: String::new(),
        };
        a.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await?;
        Ok(a)
    }

    /// Sends a request; reads until its response (notifications are counted).
    async fn request(&mut self, method: &str, params: Value) -> Result<(Value, usize)> {
        self.next_id += 1;
        let id = self.next_id;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let read = async {
            let mut notifications = 0;
            while let Some(line) = self.lines.next_line().await? {
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v.get("method").is_none() && v["id"] == id {
                    if let Some(e) = v.get("error") {
                        bail!("{method}: {e}");
                    }
                    return Ok((v["result"].clone(), notifications));
                }
                notifications += 1;
            }
            bail!("the fake agent closed stdout")
        };
        tokio::time::timeout(LIMIT, read)
            .await
            .map_err(|_| anyhow!("{method} timed out"))?
    }

    /// Starts a new session (later prompts go to it).
    pub async fn new_session(&mut self) -> Result<()> {
        let (r, _) = self
            .request("session/new", json!({"cwd": self.cwd, "mcpServers": []}))
            .await?;
        self.session = r["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId in {r}"))?
            .to_owned();
        Ok(())
    }

    /// One prompt round trip: the time from sending it to its response.
    pub async fn prompt(&mut self, text: &str) -> Result<Duration> {
        let t0 = Instant::now();
        let params = json!({
            "sessionId": self.session,
            "prompt": [{"type": "text", "text": text}],
        });
        self.request("session/prompt", params).await?;
        Ok(t0.elapsed())
    }
}
