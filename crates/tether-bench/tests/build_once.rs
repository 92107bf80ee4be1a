//! The bench builds once: `cargo run --release -p tether-bench` resolves every dependency
//! with the features the workspace build (`cargo build --release`, which makes the
//! `tether` and `fake-agent` binaries the bench runs) gives it, so no crate is compiled
//! twice. Checked with `cargo tree` (offline: it reads only the lock file and the
//! registry cache), comparing each package's features in the two resolutions.

use std::collections::BTreeSet;
use std::process::Command;

fn features(args: &[&str]) -> std::io::Result<BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .args(["--no-dedupe", "-f", "{p} {f}"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        // The `tether` binary crate has no library: the bench cannot depend on it.
        .filter(|l| !l.starts_with("tether v"))
        .map(str::to_owned)
        .collect())
}

#[test]
fn the_bench_resolves_features_as_the_workspace_build() -> std::io::Result<()> {
    let bench = features(&["-p", "tether-bench"])?;
    let workspace = features(&["--workspace"])?;
    let only_bench: Vec<_> = bench.difference(&workspace).collect();
    let only_workspace: Vec<_> = workspace.difference(&bench).collect();
    assert!(
        only_bench.is_empty() && only_workspace.is_empty(),
        "packages whose features differ between `-p tether-bench` and the workspace build \
         (add the dependency to crates/tether-bench/Cargo.toml with those features):\n\
         only in the bench's: {only_bench:#?}\nonly in the workspace's: {only_workspace:#?}"
    );
    Ok(())
}
