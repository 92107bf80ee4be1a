//! Line-atomic stdout: every message is written as one line and flushed under a lock, so
//! concurrent tasks never interleave and nothing is lost when the process exits on purpose.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, Stdout};
use tokio::sync::Mutex;

#[derive(Clone)]
pub struct Out {
    stdout: Arc<Mutex<Stdout>>,
}

impl Out {
    pub fn new() -> Self {
        Self {
            stdout: Arc::new(Mutex::new(tokio::io::stdout())),
        }
    }

    /// Write one JSON object as one line.
    pub async fn send(&self, message: &Value) -> Result<()> {
        let line = serde_json::to_string(message)?;
        self.line(&line).await
    }

    /// Write one raw line (a newline is appended).
    pub async fn line(&self, line: &str) -> Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let mut stdout = self.stdout.lock().await;
        stdout.write_all(&buf).await.context("writing stdout")?;
        stdout.flush().await.context("flushing stdout")?;
        Ok(())
    }
}
