//! git for the tests of isolated worktrees (issue 32): a command that must succeed, and a
//! repository with one commit.

use std::path::Path;
use std::process::Command;

/// Runs `git -C dir args…` (a fixed identity) and returns its output; panics, naming the
/// command, when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` a repository on `main` with `files` (path, content) in one commit.
pub fn init_repo(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    git(dir, &["init", "--quiet", "-b", "main"]);
    for (path, content) in files {
        std::fs::write(dir.join(path), content).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "--quiet", "-m", "base"]);
}
