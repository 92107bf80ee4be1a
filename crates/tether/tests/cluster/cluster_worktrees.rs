//! End to end, issue 32: a worktree moves with its conversation. On a cluster the
//! worktrees live under the shared workspace root; the owner of an isolated conversation
//! is SIGKILLed with its agent, its worktree directory is gone too (a disk the new node
//! does not see), and the next message, taken up by the other node, resumes the same
//! session in the worktree restored from its last snapshot, telling the person.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::json;
use tether_testkit::Cluster;
use tether_testkit::git::{git, init_repo};

use crate::common::{node_options, str_of};

#[tokio::test]
async fn a_worktree_missing_on_the_node_that_takes_over_is_restored_from_its_snapshot() {
    let mut cluster = Cluster::start(2, node_options(2)).await;
    let dir = cluster.work_dir.join("repo");
    init_repo(&dir, &[("a.txt", "base\n")]);

    let a = cluster.node(0);
    let c = a
        .post_ok(
            "/api/v1/conversations",
            json!({"cwd": dir.display().to_string(), "isolation": "worktree"}),
        )
        .await;
    let c = str_of(&c, "id");
    let (first, _) = a.say_and_wait(&c, "write a.txt work on node a").await;
    a.say_and_wait(&c, "write notes.txt more work").await;
    let w = a
        .get_ok(&format!("/api/v1/conversations/{c}/worktree"))
        .await;
    assert!(w["snapshot"].is_string(), "{w}");
    let path = PathBuf::from(w["path"].as_str().unwrap());

    cluster.node_mut(0).kill9_with_agents().await;
    std::fs::remove_dir_all(&path).unwrap();

    let b = cluster.node(1);
    let (again, done) = b.say_and_wait(&c, "what do you remember").await;
    assert_eq!(again["session_id"], first["session_id"], "the same session");
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done.to_string().contains("work on node a"), "{done}");
    assert_eq!(
        std::fs::read_to_string(path.join("a.txt")).unwrap(),
        "work on node a\n"
    );
    assert_eq!(
        std::fs::read_to_string(path.join("notes.txt")).unwrap(),
        "more work\n"
    );
    let hist = b
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    assert!(
        hist.to_string()
            .contains("restored it from its last snapshot"),
        "{hist}"
    );
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
}
