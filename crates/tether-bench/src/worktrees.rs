//! Issue 32: an isolated worktree for a repository of `files` files. Side by side: a
//! plain `git worktree add` of the same repository, and tether's (the branch, the
//! worktree, `.worktreeinclude`), timed by tether itself (its status line) on a
//! conversation's first message; the disk each takes; and the snapshot tether records
//! at every turn's end (the same commands, timed here on tether's worktree).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::daemon::{BenchDaemon, Home, Spec, str_field};
use crate::report::{Row, Verdict};

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost")
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Bytes of disk the files under `dir` take (allocated blocks; no links followed).
fn disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.blocks() * 512),
                _ => {}
            }
        }
    }
    total
}

/// A repository of `files` small files in 100 folders, one commit.
fn make_repo(dir: &Path, files: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    git(dir, &["init", "--quiet", "-b", "main"])?;
    for i in 0..files {
        let sub = dir.join(format!("src/m{:03}", i % 100));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(
            sub.join(format!("f{i}.rs")),
            format!("pub fn f{i}() -> u32 {{ {i} }}\n"),
        )?;
    }
    std::fs::write(dir.join(".env"), "SECRET=bench\n")?;
    std::fs::write(dir.join(".gitignore"), ".env\n")?;
    std::fs::write(dir.join(".worktreeinclude"), ".env\n")?;
    git(dir, &["add", "."])?;
    git(dir, &["commit", "--quiet", "-m", "bench"])?;
    Ok(())
}

pub async fn run(files: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let work = home.path().join("work");
    let repo = work.join("repo");
    make_repo(&repo, files)?;

    // A warm-up (the files in the page cache for both), then a plain worktree.
    let warm = work.join("warm-worktree");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "warm",
            &warm.display().to_string(),
        ],
    )?;
    git(
        &repo,
        &["worktree", "remove", "--force", &warm.display().to_string()],
    )?;
    let plain = work.join("plain-worktree");
    let t = Instant::now();
    git(
        &repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "plain",
            &plain.display().to_string(),
        ],
    )?;
    let plain_ms = t.elapsed().as_secs_f64() * 1000.0;
    let plain_disk = disk(&plain);

    let daemon = BenchDaemon::start(home.path(), &Spec::default()).await?;
    let result = measure(&daemon, &repo, plain_ms, plain_disk, files).await;
    daemon.stop().await?;
    result
}

async fn measure(
    d: &BenchDaemon,
    repo: &Path,
    plain_ms: f64,
    plain_disk: u64,
    files: usize,
) -> Result<Vec<Row>> {
    let conv = d
        .post(
            "/api/v1/conversations",
            json!({"cwd": repo.display().to_string(), "isolation": "worktree"}),
        )
        .await?;
    let conv = str_field(&conv, "id")?;
    let asked = Instant::now();
    d.say(&conv, "hello").await?;
    let first_answer_ms = asked.elapsed().as_secs_f64() * 1000.0;
    let w = d
        .get(&format!("/api/v1/conversations/{conv}/worktree"))
        .await?;
    let path = std::path::PathBuf::from(str_field(&w, "path")?);
    let hist = d
        .get(&format!("/api/v1/conversations/{conv}/messages"))
        .await?;
    // "… in <path> (<n> ms)": tether's own time for the worktree.
    let made_ms: f64 = hist
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["text"].as_str())
        .find(|t| t.contains("isolated worktree"))
        .and_then(|t| t.rsplit_once(" ms)").map(|(a, _)| a))
        .and_then(|a| a.rsplit_once('(').map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .context("no worktree line in the history")?;
    let tether_disk = disk(&path);
    if !path.join(".env").exists() {
        bail!("the listed .env was not copied in");
    }
    // A turn's end: the snapshot of a worktree with one change.
    std::fs::write(path.join("src/m000/f0.rs"), "changed\n")?;
    let index = std::env::temp_dir().join(format!("bench-index-{}", std::process::id()));
    let t = Instant::now();
    let env_index = |args: &[&str]| -> Result<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&path)
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@localhost")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@localhost")
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    env_index(&["read-tree", "HEAD"])?;
    env_index(&["add", "--all", "."])?;
    let tree = env_index(&["write-tree"])?;
    env_index(&["commit-tree", tree.trim(), "-p", "HEAD", "-m", "bench"])?;
    let snapshot_ms = t.elapsed().as_secs_f64() * 1000.0;
    let _ = std::fs::remove_file(&index);
    let ratio = made_ms / plain_ms.max(0.001);
    Ok(vec![
        Row::new(
            "13a",
            format!(
                "an isolated worktree of a repository of {files} files: tether vs a plain `git worktree add`"
            ),
            format!(
                "{made_ms:.0} ms vs {plain_ms:.0} ms ({ratio:.2}×); first message answered in {first_answer_ms:.0} ms"
            ),
            "≤ 1.5× git's own",
            if ratio <= 1.5 {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ),
        Row::new(
            "13b",
            format!("the disk a worktree of {files} files takes: tether's vs a plain one"),
            format!(
                "{:.1} MiB vs {:.1} MiB on disk (the objects stay the repository's)",
                tether_disk as f64 / 1048576.0,
                plain_disk as f64 / 1048576.0
            ),
            "the same (+ the listed files)",
            if tether_disk <= plain_disk + 8192 {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ),
        Row::new(
            "13c",
            format!("a turn's-end snapshot of a worktree of {files} files (temporary index)"),
            format!("{snapshot_ms:.0} ms"),
            "< 1 s (off the turn's path)",
            if snapshot_ms < 1000.0 {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ),
    ])
}
