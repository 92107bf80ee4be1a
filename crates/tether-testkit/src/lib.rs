//! tether-testkit: the fake agent binary, and helpers for tests: locating built binaries,
//! running a real `tether serve` against the fake agent, an HTTP + SSE client.
//! Dev-only: nothing in the product depends on it.

mod daemon;
mod sse;

use std::path::PathBuf;
use std::time::Duration;

pub use daemon::{Daemon, DaemonOptions};
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
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {TIMEOUT:?}: {what}"),
    }
}
