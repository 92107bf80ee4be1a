//! Shared harness for the fake-agent integration tests: spawn the binary, write JSON lines,
//! read JSON lines with a timeout on every await.

#![allow(dead_code)]

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    /// Non-JSON stdout lines seen so far.
    pub garbage: Vec<String>,
}

impl Agent {
    pub fn spawn(state_dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Result<Self> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-agent"));
        cmd.arg("--state-dir")
            .arg(state_dir)
            .args(args)
            .env_remove("FAKE_AGENT_DIALECT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().context("spawning fake-agent")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let stderr_pipe = child.stderr.take().context("no stderr")?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        Ok(Self {
            child,
            stdin: Some(stdin),
            stdout,
            stderr,
            garbage: Vec::new(),
        })
    }

    pub async fn send(&mut self, message: Value) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        let mut line = serde_json::to_string(&message)?;
        line.push('\n');
        timeout(TIMEOUT, stdin.write_all(line.as_bytes())).await??;
        timeout(TIMEOUT, stdin.flush()).await??;
        Ok(())
    }

    /// The next JSON line (non-JSON lines are kept in `garbage`); error at EOF.
    pub async fn recv(&mut self) -> Result<Value> {
        loop {
            let line = timeout(TIMEOUT, self.stdout.next_line())
                .await
                .map_err(|_| anyhow!("timed out waiting for output; stderr:\n{}", self.stderr()))??
                .ok_or_else(|| anyhow!("fake-agent closed stdout; stderr:\n{}", self.stderr()))?;
            match serde_json::from_str(&line) {
                Ok(v) => return Ok(v),
                Err(_) => self.garbage.push(line),
            }
        }
    }

    /// Read until `pred` matches; returns the match and everything read before it.
    pub async fn recv_until(
        &mut self,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<(Value, Vec<Value>)> {
        let mut before = Vec::new();
        loop {
            let v = self.recv().await?;
            if pred(&v) {
                return Ok((v, before));
            }
            before.push(v);
        }
    }

    /// Close stdin and wait for the process to exit.
    pub async fn close(&mut self) -> Result<ExitStatus> {
        self.stdin = None;
        self.wait().await
    }

    pub async fn wait(&mut self) -> Result<ExitStatus> {
        Ok(timeout(TIMEOUT, self.child.wait()).await??)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Wait (bounded) until stderr contains `needle`.
    pub async fn stderr_contains(&self, needle: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while !self.stderr().contains(needle) {
            if tokio::time::Instant::now() > deadline {
                bail!("stderr never contained {needle:?}:\n{}", self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

/// The `id` of a message equals `id`, and it is a response (no method).
pub fn is_response(v: &Value, id: &Value) -> bool {
    v.get("method").is_none() && v.get("id") == Some(id)
}
