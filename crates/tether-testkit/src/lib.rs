//! tether-testkit: the fake agent binary, and helpers for tests: locating built binaries,
//! running a real `tether serve` against the fake agent, an HTTP + SSE client.
//! Dev-only: nothing in the product depends on it.

pub mod black_hole;
mod cluster;
mod daemon;
pub mod fake_discord;
mod fake_discord_gateway;
pub mod fake_discord_interactions;
mod fake_discord_limits;
pub mod fake_feishu;
pub mod fake_slack;
pub mod fake_telegram;
pub mod git;
pub mod mock_model;
pub mod netns;
pub mod people;
pub mod postgres;
pub mod real_agents;
mod sse;
pub mod uploads;

use std::path::PathBuf;
use std::time::Duration;

pub use cluster::Cluster;
pub use daemon::{Daemon, DaemonOptions, attachment_copies};
pub use mock_model::{Api, MockModel, RecordedRequest, Reply};
pub use sse::{SseEvent, SseStream};

/// Default limit for every await in a test.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Path of a binary built from this workspace (e.g. `fake-agent`, `tether`), found next to
/// the running test executable (`target/<profile>/deps/..`). Run `cargo build --workspace
/// --bins` before the tests (the README's test command does).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("."));
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    if !path.exists() {
        panic!(
            "binary {} not found; run `cargo build --workspace --bins` first",
            path.display()
        );
    }
    path
}

/// Awaits `fut` for at most [`TIMEOUT`], panicking with `what` on time-out.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    within_for(what, TIMEOUT, fut).await
}

/// Awaits `fut` for at most `limit`, panicking with `what` on time-out.
pub async fn within_for<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?}: {what}"),
    }
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Path of a real agent CLI installed by `tools/agents/install` (the test script runs it):
/// `codex`, `claude`, `gemini` or `codex-acp`. Native binaries are returned where they
/// exist, so killing the process kills the agent (an npm shim could orphan it).
pub fn agent_cli(name: &str) -> PathBuf {
    let nm = repo_root().join("tools/agents/node_modules");
    let path = match name {
        "codex" => nm.join("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"),
        "claude" => nm.join("@anthropic-ai/claude-code-linux-x64/claude"),
        "gemini" => nm.join(".bin/gemini"),
        "codex-acp" => nm.join("@zed-industries/codex-acp-linux-x64/bin/codex-acp"),
        other => panic!("unknown agent CLI {other:?}"),
    };
    if !path.exists() {
        panic!(
            "{} not found; run tools/agents/install (scripts/test does)",
            path.display()
        );
    }
    path
}

/// The UTC wall-clock time `secs` from now as `YYYY-MM-DDTHH:MM:SS`, as a schedule's
/// `at` takes it (issue 30).
pub fn utc_in(secs: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    utc_of(now + secs)
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix time in seconds (UTC; Howard Hinnant's
/// `civil_from_days`).
pub fn utc_of(t: i64) -> String {
    let (days, rem) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}
