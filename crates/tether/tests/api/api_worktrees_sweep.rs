//! End to end: worktrees kept within a disk budget (issue 32). One node's periodic
//! clean-up removes tether's stale worktree directories (snapshot first) and, over the
//! budget, idle worktrees least recently used first until the total fits — never a busy
//! one, never one just added (it may be being made), never the person's own worktree; a removed idle worktree comes back from its
//! snapshot at the conversation's next turn, in the same session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tether_testkit::git::{git, init_repo};
use tether_testkit::{Daemon, DaemonOptions, within};

async fn isolated(d: &Daemon, dir: &Path) -> String {
    let c = d
        .post_ok(
            "/api/v1/conversations",
            json!({"cwd": dir.display().to_string(), "isolation": "worktree"}),
        )
        .await;
    c["id"].as_str().unwrap().to_owned()
}

async fn path_of(d: &Daemon, c: &str) -> PathBuf {
    let w = d
        .get_ok(&format!("/api/v1/conversations/{c}/worktree"))
        .await;
    PathBuf::from(w["path"].as_str().unwrap())
}

/// `git worktree add` of a new branch, as a person (or a crashed tether) does.
fn add_worktree(repo: &Path, at: &Path, branch: &str) {
    git(
        repo,
        &["worktree", "add", "-q", "-b", branch, at.to_str().unwrap()],
    );
}

async fn until_gone(what: &str, p: &Path) {
    within(what, async {
        while p.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn stale_and_idle_worktrees_go_within_the_budget_and_nothing_else() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[worktrees]\ndisk_budget_mb = 1\nsweep_interval_secs = 1\n\
                       sweep_idle_secs = 0\n[pool]\nidle_ttl_secs = 1\n"
            .to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let dir = d.work_dir().join("repo");
    init_repo(&dir, &[("shared.txt", "base\n")]);
    // A (used first) holds 2 MB the person put there; B (used later) a small file.
    let a = isolated(&d, &dir).await;
    let (first_a, _) = d.say_and_wait(&a, "write a.txt from A").await;
    let pa = path_of(&d, &a).await;
    std::fs::write(pa.join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    d.say_and_wait(&a, "write a2.txt the big file is recorded")
        .await;
    let b = isolated(&d, &dir).await;
    d.say_and_wait(&b, "write b.txt from B").await;
    let pb = path_of(&d, &b).await;
    // A stale worktree of tether's that no conversation keeps (a crash between making
    // and storing it), with work in it; and the person's own worktree beside it.
    let stale = pa.parent().unwrap().join("repo-deadbeef");
    add_worktree(&dir, &stale, "tether/deadbeef");
    std::fs::write(stale.join("lost.txt"), "not lost\n").unwrap();
    // Added by git a day ago: past the grace that spares a worktree being made.
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(86_400);
    std::fs::File::options()
        .write(true)
        .open(stale.join(".git"))
        .unwrap()
        .set_modified(day_ago)
        .unwrap();
    // One added just now, as a conversation making its worktree has (its row is stored
    // after its set-up): not stale yet.
    let young = pa.parent().unwrap().join("repo-cafebabe");
    add_worktree(&dir, &young, "tether/cafebabe");
    let mine = d.work_dir().join("mine");
    add_worktree(&dir, &mine, "mine");
    std::fs::write(mine.join("draft.txt"), "the person's\n").unwrap();

    until_gone("the stale worktree is removed", &stale).await;
    until_gone("the idle worktree over the budget is removed", &pa).await;
    assert_eq!(
        git(&dir, &["show", "refs/tether/snapshots/deadbeef:lost.txt"]),
        "not lost\n"
    );
    // The budget is met without B (more sweeps run meanwhile); the person's worktree
    // and checkout are untouched.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(pb.join("b.txt").exists(), "B fits in the budget: kept");
    assert!(
        young.join(".git").exists(),
        "a worktree being made is not stale"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("draft.txt")).unwrap(),
        "the person's\n"
    );
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");

    // A busy conversation's worktree stays while its turn runs, over the budget or not.
    let c = isolated(&d, &dir).await;
    d.say_and_wait(&c, "write c.txt from C").await;
    let pc = path_of(&d, &c).await;
    std::fs::write(pc.join("big.bin"), vec![9u8; 2 << 20]).unwrap();
    let running = d.say(&c, "sleep 4000").await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(pc.join("big.bin").exists(), "a busy worktree stays");
    d.wait_turn(
        running["session_id"].as_str().unwrap(),
        running["turn_id"].as_str().unwrap(),
    )
    .await;

    // A's next turn brings its worktree back from the snapshot, in the same session.
    let (again, done) = d.say_and_wait(&a, "what do you remember").await;
    assert_eq!(again["session_id"], first_a["session_id"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        std::fs::metadata(pa.join("big.bin")).unwrap().len(),
        2 << 20
    );
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{a}/messages"))
        .await;
    assert!(
        hist.to_string()
            .contains("restored it from its last snapshot"),
        "{hist}"
    );
    // The operator sees what went.
    let metrics = within(
        "scrape",
        d.client.get(d.url("/metrics")).bearer_auth(&d.token).send(),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        metrics.contains("tether_worktrees_removed_total{")
            && metrics.contains("reason=\"stale\"")
            && metrics.contains("reason=\"budget\""),
        "{metrics}"
    );
}
