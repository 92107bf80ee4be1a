//! Line-atomic stdout: every message is written as one line and flushed under a lock, so
//! concurrent tasks never interleave and nothing is lost when the process exits on purpose.
//!
//! The write is a plain blocking `write(2)` on the locked std stdout, not tokio's
//! `Stdout`: tokio hands every write to its blocking pool (a thread hop and two futex
//! wake-ups per line), which made the fake agent, not tether, the bottleneck of the
//! ingest benchmark (100 agents streaming at once used 3× tether's CPU). A line is a few
//! hundred bytes; the pipe blocks only when tether stops reading, and tether reads each
//! agent's stdout in its own task.

use std::io::Write;

use anyhow::{Context, Result};
use serde_json::Value;

#[derive(Clone, Default)]
pub struct Out;

impl Out {
    pub fn new() -> Self {
        Self
    }

    /// Write one JSON object as one line.
    pub async fn send(&self, message: &Value) -> Result<()> {
        let mut buf = serde_json::to_vec(message)?;
        buf.push(b'\n');
        Self::write(&buf)
    }

    /// Write one raw line (a newline is appended).
    pub async fn line(&self, line: &str) -> Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        Self::write(&buf)
    }

    fn write(buf: &[u8]) -> Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(buf).context("writing stdout")?;
        stdout.flush().context("flushing stdout")
    }
}
