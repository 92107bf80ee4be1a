//! tether-testkit: the fake agent binary, and helpers for tests (locating built binaries,
//! temporary homes, timeouts). Dev-only: nothing in the product depends on it.

use std::path::PathBuf;

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
