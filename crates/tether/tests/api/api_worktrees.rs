//! End to end: isolated worktrees (issue 32). Two conversations on one repository edit
//! the same file at once, each in its own worktree on its own branch, and see only their
//! own edit; one merges back, the other's merge conflicts and changes nothing, and is
//! discarded (its state kept on the snapshot ref); a worktree removed from disk is
//! restored from its snapshot before the session resumes; `/diff` and `/merge` work from
//! a channel's composer; a directory outside git and a failing set-up are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tether_testkit::git::{git, init_repo};
use tether_testkit::{Daemon, DaemonOptions, within};

/// A repository with one committed file `shared.txt` ("base").
fn repo(d: &Daemon) -> PathBuf {
    let dir = d.work_dir().join("repo");
    init_repo(&dir, &[("shared.txt", "base\n")]);
    dir
}

async fn isolated(d: &Daemon, dir: &Path) -> String {
    let c = d
        .post_ok(
            "/api/v1/conversations",
            json!({"cwd": dir.display().to_string(), "isolation": "worktree"}),
        )
        .await;
    c["id"].as_str().unwrap().to_owned()
}

async fn worktree(d: &Daemon, c: &str) -> Value {
    d.get_ok(&format!("/api/v1/conversations/{c}/worktree"))
        .await
}

#[tokio::test]
async fn two_conversations_edit_one_file_apart_then_merge_conflict_and_discard() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    let (a, b) = (isolated(&d, &dir).await, isolated(&d, &dir).await);
    assert_eq!(worktree(&d, &a).await["status"], "wanted");
    // Both edit the same file at once.
    let ((oa, ta), (ob, tb)) = within("both turns", async {
        tokio::join!(
            d.say_and_wait(&a, "write shared.txt from A"),
            d.say_and_wait(&b, "write shared.txt from B")
        )
    })
    .await;
    assert_eq!(ta["status"], "completed", "{oa} {ta}");
    assert_eq!(tb["status"], "completed", "{ob} {tb}");
    let (wa, wb) = (worktree(&d, &a).await, worktree(&d, &b).await);
    let (pa, pb) = (
        PathBuf::from(wa["path"].as_str().unwrap()),
        PathBuf::from(wb["path"].as_str().unwrap()),
    );
    assert_ne!(pa, pb);
    assert_eq!(
        std::fs::read_to_string(pa.join("shared.txt")).unwrap(),
        "from A\n"
    );
    assert_eq!(
        std::fs::read_to_string(pb.join("shared.txt")).unwrap(),
        "from B\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("shared.txt")).unwrap(),
        "base\n"
    );
    assert_eq!(wa["branch"], format!("tether/{}", &a[..8]));
    assert_eq!(wa["changed_files"], json!(["shared.txt"]), "{wa}");
    // The history says where the session works.
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{a}/messages"))
        .await;
    assert!(hist.to_string().contains("isolated worktree"), "{hist}");
    // The patch, with the uncommitted edit.
    let patch = d
        .client
        .get(d.url(&format!("/api/v1/conversations/{a}/worktree/diff")))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        patch.contains("-base") && patch.contains("+from A"),
        "{patch}"
    );

    // A merges back; B then conflicts and nothing changes.
    let merged = d
        .post_ok(
            &format!("/api/v1/conversations/{a}/worktree"),
            json!({"action": "merge"}),
        )
        .await;
    assert_eq!(merged["status"], "active", "{merged}");
    assert_eq!(
        std::fs::read_to_string(dir.join("shared.txt")).unwrap(),
        "from A\n"
    );
    let head = git(&dir, &["rev-parse", "HEAD"]);
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{b}/worktree"),
            json!({"action": "merge"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "merge_conflict", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shared.txt")
    );
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), head, "nothing half done");
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
    assert!(!dir.join(".git/MERGE_HEAD").exists());

    // B is discarded: directory and branch go, the snapshot keeps its state.
    let gone = d
        .post_ok(
            &format!("/api/v1/conversations/{b}/worktree"),
            json!({"action": "discard"}),
        )
        .await;
    assert_eq!(gone["status"], "discarded");
    assert!(!pb.exists());
    assert!(
        git(&dir, &["branch", "--list", &format!("tether/{}", &b[..8])])
            .trim()
            .is_empty()
    );
    let kept = git(
        &dir,
        &[
            "show",
            &format!("refs/tether/snapshots/{}:shared.txt", &b[..8]),
        ],
    );
    assert_eq!(kept, "from B\n");
    // Its next message starts a new session in a new worktree from today's HEAD.
    let (again, _) = d.say_and_wait(&b, "hello").await;
    assert_ne!(again["session_id"], ob["session_id"]);
    let wb2 = worktree(&d, &b).await;
    let pb2 = PathBuf::from(wb2["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(pb2.join("shared.txt")).unwrap(),
        "from A\n"
    );
}

#[tokio::test]
async fn a_removed_worktree_comes_back_from_its_snapshot_before_the_session_resumes() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    let c = isolated(&d, &dir).await;
    let (first, _) = d
        .say_and_wait(&c, "write notes/new.txt untracked work")
        .await;
    d.say_and_wait(&c, "write shared.txt edited").await;
    let w = worktree(&d, &c).await;
    let path = PathBuf::from(w["path"].as_str().unwrap());
    assert!(w["snapshot"].is_string(), "{w}");
    // The machine's copy is lost (another node, a cleaned disk).
    d.kill9().await;
    std::fs::remove_dir_all(&path).unwrap();
    d.launch_again().await;
    let (again, done) = d.say_and_wait(&c, "what do you remember").await;
    assert_eq!(again["session_id"], first["session_id"], "the same session");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        std::fs::read_to_string(path.join("shared.txt")).unwrap(),
        "edited\n"
    );
    assert_eq!(
        std::fs::read_to_string(path.join("notes/new.txt")).unwrap(),
        "untracked work\n"
    );
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    assert!(
        hist.to_string()
            .contains("restored it from its last snapshot"),
        "{hist}"
    );
    // The person's own checkout was never touched.
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn diff_and_merge_work_as_commands_and_bad_input_is_refused() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    // Outside git: refused, with its own code, nothing created.
    let plain = d.work_dir().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (status, body) = d
        .post(
            "/api/v1/conversations",
            json!({"cwd": plain.display().to_string(), "isolation": "worktree"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "isolation_needs_git");

    // `/worktree on` in a plain conversation isolates its next session.
    let c = d
        .post_ok(
            "/api/v1/conversations",
            json!({"cwd": dir.display().to_string()}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let on = d.say(&c, "/worktree on").await;
    assert!(
        on["reply"].as_str().unwrap().contains("Isolation is on"),
        "{on}"
    );
    d.say_and_wait(&c, "write shared.txt by command").await;
    let diff = d.say(&c, "/diff").await;
    assert!(
        diff["reply"].as_str().unwrap().contains("shared.txt"),
        "{diff}"
    );
    let files = diff["attachments"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{diff}");
    assert!(files[0]["name"].as_str().unwrap().ends_with(".patch"));
    let merged = d.say(&c, "/merge").await;
    assert!(
        merged["reply"].as_str().unwrap().contains("Merged"),
        "{merged}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("shared.txt")).unwrap(),
        "by command\n"
    );
    // Off is refused while the worktree holds the conversation's work.
    let (status, off) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "/worktree off"}),
        )
        .await;
    assert_eq!(status, 409, "{off}");
    assert!(off.to_string().contains("merge or discard"), "{off}");
}

#[tokio::test]
async fn a_failing_set_up_stops_the_turn_and_shows_why() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[worktrees]\nsetup = \"echo preparing; exit 3\"\n".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let dir = repo(&d);
    let c = isolated(&d, &dir).await;
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "worktree_failed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exit") && message.contains("preparing"),
        "{message}"
    );
    // Nothing bound: no session started.
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert!(conv["binding"].is_null(), "{conv}");
}

#[tokio::test]
async fn a_delegated_task_works_in_a_worktree_from_its_parents_state_and_merges_into_it() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    let parent = isolated(&d, &dir).await;
    // The parent's uncommitted work, then a task.
    d.say_and_wait(&parent, "write parent.txt parent's work")
        .await;
    let task =
        crate::delegation_util::delegate(&d, &parent, "fake", "write child.txt child's work").await;
    let done = crate::delegation_util::wait_task(&d, &parent, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let (wp, wc) = (worktree(&d, &parent).await, worktree(&d, &task).await);
    let (pp, pc) = (
        PathBuf::from(wp["path"].as_str().unwrap()),
        PathBuf::from(wc["path"].as_str().unwrap()),
    );
    // The child started from the parent's state (its uncommitted file included) ...
    assert_eq!(
        std::fs::read_to_string(pc.join("parent.txt")).unwrap(),
        "parent's work\n"
    );
    assert_eq!(
        std::fs::read_to_string(pc.join("child.txt")).unwrap(),
        "child's work\n"
    );
    // ... and its edits stayed in its own tree.
    assert!(!pp.join("child.txt").exists());
    assert!(!dir.join("child.txt").exists() && !dir.join("parent.txt").exists());
    assert_eq!(wc["changed_files"], json!(["child.txt"]), "{wc}");
    // Merged into the parent's branch, not into the person's checkout.
    d.post_ok(
        &format!("/api/v1/conversations/{task}/worktree"),
        json!({"action": "merge"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(pp.join("child.txt")).unwrap(),
        "child's work\n"
    );
    assert!(!dir.join("child.txt").exists());
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn an_archived_conversations_worktree_goes_after_its_grace_and_comes_back_with_it() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[worktrees]\narchive_grace_secs = 1\n".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let dir = repo(&d);
    let c = isolated(&d, &dir).await;
    let (first, _) = d.say_and_wait(&c, "write keep.txt kept work").await;
    let path = PathBuf::from(worktree(&d, &c).await["path"].as_str().unwrap());
    d.patch(
        &format!("/api/v1/conversations/{c}"),
        json!({"archived": true}),
    )
    .await;
    within("the archived worktree is removed", async {
        while path.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    // The snapshot kept the work; nothing else in the repository moved.
    let kept = git(
        &dir,
        &[
            "show",
            &format!("refs/tether/snapshots/{}:keep.txt", &c[..8]),
        ],
    );
    assert_eq!(kept, "kept work\n");
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
    // Brought back, it continues in the same session, its files restored.
    d.patch(
        &format!("/api/v1/conversations/{c}"),
        json!({"archived": false}),
    )
    .await;
    let (again, done) = d.say_and_wait(&c, "what do you remember").await;
    assert_eq!(again["session_id"], first["session_id"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        std::fs::read_to_string(path.join("keep.txt")).unwrap(),
        "kept work\n"
    );
}

#[tokio::test]
async fn a_hanging_set_up_times_out_and_a_taken_branch_is_refused() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[worktrees]\nsetup = \"echo started; sleep 30\"\nsetup_timeout_secs = 1\n"
            .to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let dir = repo(&d);
    let c = isolated(&d, &dir).await;
    let asked = std::time::Instant::now();
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1 s"),
        "{body}"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(10),
        "the set-up was stopped"
    );

    // A branch of that name exists already: refused, naming it; nothing created.
    let other = isolated(&d, &dir).await;
    git(&dir, &["branch", &format!("tether/{}", &other[..8])]);
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{other}/messages"),
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exists already"),
        "{body}"
    );
}

#[tokio::test]
async fn two_conversations_merging_at_once_both_land_one_after_the_other() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    let (a, b) = (isolated(&d, &dir).await, isolated(&d, &dir).await);
    d.say_and_wait(&a, "write a.txt from A").await;
    d.say_and_wait(&b, "write b.txt from B").await;
    let (pa, pb) = (
        format!("/api/v1/conversations/{a}/worktree"),
        format!("/api/v1/conversations/{b}/worktree"),
    );
    let (ra, rb) = within("both merges", async {
        tokio::join!(
            d.post(&pa, json!({"action": "merge"})),
            d.post(&pb, json!({"action": "merge"}))
        )
    })
    .await;
    assert_eq!((ra.0, rb.0), (200, 200), "{ra:?} {rb:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "from A\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("b.txt")).unwrap(),
        "from B\n"
    );
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn a_discarded_tasks_work_closes_it_and_submodules_are_said() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let dir = repo(&d);
    // A submodule (a local one: git refuses the file transport for submodules unless
    // told, so the worktree says it works without it).
    let sub = d.work_dir().join("sub");
    init_repo(&sub, &[("lib.txt", "lib\n")]);
    git(
        &dir,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "--quiet",
            &sub.display().to_string(),
            "sub",
        ],
    );
    git(&dir, &["commit", "--quiet", "-m", "with a submodule"]);
    let parent = isolated(&d, &dir).await;
    let (_, first) = d.say_and_wait(&parent, "hello").await;
    assert_eq!(first["status"], "completed", "{first}");
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{parent}/messages"))
        .await;
    assert!(hist.to_string().contains("submodules"), "{hist}");

    let task = crate::delegation_util::delegate(&d, &parent, "fake", "write t.txt first try").await;
    crate::delegation_util::wait_task(&d, &parent, &task).await;
    let w = worktree(&d, &task).await;
    let path = PathBuf::from(w["path"].as_str().unwrap());
    // The parent decides against the task's work: its worktree goes, the task is closed.
    let gone = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/worktree"),
            json!({"action": "discard"}),
        )
        .await;
    assert_eq!(gone["status"], "discarded", "{gone}");
    assert!(!path.exists());
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "write t.txt second try", "continuation_id": "again-1"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    // Its work is kept on the snapshot ref.
    let kept = git(
        &dir,
        &[
            "show",
            &format!("refs/tether/snapshots/{}:t.txt", &task[..8]),
        ],
    );
    assert_eq!(kept, "first try\n");
}
