//! End to end: delegated tasks across nodes (issue 12, design point 4). A parent on node
//! a delegates; its child's continue and close sent to other nodes run on a, where the
//! child's session lives; a close a took and never answered because a died is
//! `owner_lost` on the node that forwarded it; a parent whose node is at its
//! `max_live_per_node` gets a child on another node, whose result it waits for and
//! continues from where it is, reported to it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::delegation_util;

use std::time::Duration;

use crate::delegation_util::{delegate, parent_events, wait_child_session, wait_task};
use serde_json::json;
use tether_testkit::{Cluster, Daemon, DaemonOptions, within};

fn options() -> DaemonOptions {
    crate::common::node_options(2)
}

#[tokio::test]
async fn a_task_is_continued_and_closed_from_other_nodes_on_its_owner() {
    let cluster = Cluster::start(3, options()).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let parent = a.new_conversation(None).await;
    let task = delegate(a, &parent, "fake", "first part").await;
    assert_eq!(wait_task(a, &parent, &task).await["status"], "completed");
    let child = a.get_ok(&format!("/api/v1/conversations/{task}")).await["binding"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, started) = b
        .post(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "second part", "continuation_id": "k-1"}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["turn_version"], 2, "{started}");
    let turn = b
        .wait_turn(&child, started["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["first part"]"#),
        "{turn}"
    );
    assert!(a.pool_sessions().await.contains(&child));
    assert!(!b.pool_sessions().await.contains(&child));

    // The same continuation id from c: the first result, not a second turn.
    let (status, again) = c
        .post(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "second part", "continuation_id": "k-1"}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["turn_id"], started["turn_id"], "{again}");

    let (status, closed) = c
        .post(
            &format!("/api/v1/conversations/{task}/close"),
            json!({"continuation_id": "k-2"}),
        )
        .await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["availability"], "released", "{closed}");
    within("the child's process ends on its owner", async {
        while a.pool_sessions().await.contains(&child) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_command_its_owner_took_and_never_answered_is_owner_lost() {
    let mut cluster = Cluster::start(2, options()).await;
    let parent = cluster.node(0).new_conversation(None).await;
    // A turn that ignores cancelling: a's close waits for it while holding the command.
    let task = delegate(cluster.node(0), &parent, "fake", "freeze").await;
    wait_child_session(cluster.node(0), &task).await;

    let (first, rest) = cluster.nodes.split_at_mut(1);
    let (a, b) = (&mut first[0], &rest[0]);
    let path = format!("/api/v1/conversations/{task}/close");
    let close = b.post(&path, json!({"continuation_id": "k-1"}));
    let killer = async {
        // a has taken the close by then (on its notice, or its next look 500 ms on) and
        // waits for the frozen turn to end: it dies before it answers.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        a.kill9().await;
    };
    let ((status, lost), ()) = tokio::join!(close, killer);
    assert_eq!(status, 503, "{lost}");
    assert_eq!(lost["error"]["code"], "owner_lost", "{lost}");
}

#[tokio::test]
async fn a_parent_at_its_nodes_cap_gets_a_child_on_another_node() {
    let cluster = Cluster::start(
        2,
        DaemonOptions {
            extra_config: "\n[cluster]\nlease_ttl_secs = 2\nmax_live_per_node = 1\n".to_owned(),
            ..DaemonOptions::default()
        },
    )
    .await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    // The parent's session lives on a, which owns one conversation: its cap.
    let parent = a.new_conversation(None).await;
    let task = delegate(a, &parent, "fake", "first part").await;
    let done = wait_task(a, &parent, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let child = a.get_ok(&format!("/api/v1/conversations/{task}")).await["binding"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        b.pool_sessions().await.contains(&child),
        "the child runs on b"
    );
    assert!(!a.pool_sessions().await.contains(&child), "not on a");

    // Both nodes follow the task; its end is reported to the parent once.
    reported_once(a, &parent, "delegation_completed").await;

    // The parent continues it from a: the turn runs on b, in the same child session.
    let r = delegation_util::mcp(
        a,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "second part", "continuation_id": "k-1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    let turn = a.wait_turn(&child, r["turn_id"].as_str().unwrap()).await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["first part"]"#),
        "{turn}"
    );
    assert!(b.pool_sessions().await.contains(&child));
    assert!(!a.pool_sessions().await.contains(&child));
    reported_once(a, &parent, "delegation_session_update").await;
}

/// Waits for the parent's first `kind` event, then checks no second one follows (both
/// nodes' watchers have seen the turn end by then).
async fn reported_once(d: &Daemon, parent: &str, kind: &str) {
    within(&format!("the parent gets {kind}"), async {
        while parent_events(d, parent, kind).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(parent_events(d, parent, kind).await.len(), 1, "{kind} once");
}

/// Issue 26, item 1: parent and child on node a, a killed mid-child-turn. A survivor
/// (which started before the task existed) follows the task: the parent, now on b or c,
/// gets exactly one report of the interrupted turn, and a continue from the parent runs
/// and is reported exactly once.
#[tokio::test]
async fn a_task_whose_node_dies_is_followed_and_reported_once_by_a_survivor() {
    let mut cluster = Cluster::start(3, options()).await;
    let parent = cluster.node(0).new_conversation(None).await;
    let task = delegate(cluster.node(0), &parent, "fake", "sleep 60000").await;
    wait_child_session(cluster.node(0), &task).await;
    cluster.nodes[0].kill9().await;

    let b = cluster.node(1);
    let done = within("the parent is told of the interrupted turn", async {
        loop {
            let got = parent_events(b, &parent, "delegation_completed").await;
            if let Some(first) = got.first() {
                return first.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // Reported as the child's failure with the interruption's reason.
    let outcome = &done["payload"]["outcome"];
    assert_eq!(outcome["status"], "failed", "{done}");
    assert!(
        outcome["message"].as_str().unwrap().contains("interrupted"),
        "{done}"
    );
    reported_once(b, &parent, "delegation_completed").await;

    let r = delegation_util::mcp(
        b,
        &parent,
        "continue_with_session",
        json!({"task_id": task, "message": "second part", "continuation_id": "k-1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    reported_once(b, &parent, "delegation_session_update").await;
    reported_once(cluster.node(2), &parent, "delegation_session_update").await;
}

/// Issue 26, item 2: the continuation id is reserved in the store. Two tasks of one
/// parent, owned by two different nodes, are closed at once with one continuation id:
/// one close wins; the other is refused with `continuation_conflict` before it does
/// anything (its child's process still runs, the task is not released and can be
/// continued).
/// Three nodes at a cap of one live conversation each: a parent on the first and two
/// tasks of it, each completed once, each child on its own node. Returns the parent, the
/// tasks (id, child session) and the index of each child's node.
async fn two_tasks_on_two_nodes(cluster: &Cluster) -> (String, Vec<(String, String)>, [usize; 2]) {
    let a = cluster.node(0);
    let parent = a.new_conversation(None).await;
    let mut tasks = Vec::new();
    for part in ["one", "two"] {
        let task = delegate(a, &parent, "fake", part).await;
        assert_eq!(wait_task(a, &parent, &task).await["status"], "completed");
        let child =
            a.get_ok(&format!("/api/v1/conversations/{task}")).await["binding"]["session_id"]
                .as_str()
                .unwrap()
                .to_owned();
        tasks.push((task, child));
    }
    let mut owners = [0; 2];
    for (k, (_, child)) in tasks.iter().enumerate() {
        for i in 0..3 {
            if cluster.node(i).pool_sessions().await.contains(child) {
                owners[k] = i;
            }
        }
    }
    assert!(
        owners[0] != owners[1] && owners[0] != 0 && owners[1] != 0,
        "owners {owners:?}"
    );
    (parent, tasks, owners)
}

fn capped(extra: &str) -> DaemonOptions {
    DaemonOptions {
        extra_config: format!("{extra}\n[cluster]\nlease_ttl_secs = 2\nmax_live_per_node = 1\n"),
        ..DaemonOptions::default()
    }
}

#[tokio::test]
async fn one_continuation_id_for_two_tasks_on_two_nodes_is_used_once_and_nothing_half_applied() {
    let cluster = Cluster::start(3, capped("")).await;
    let a = cluster.node(0);
    let (_parent, tasks, [o1, o2]) = two_tasks_on_two_nodes(&cluster).await;

    // Continues raced with one id, round after round: one runs, the other is refused
    // and starts nothing.
    let mut versions = [1i64, 1];
    for round in 0..4 {
        let body = |n: usize| json!({"message": format!("round {round} of {n}"), "continuation_id": format!("same-{round}")});
        let (p1, p2) = (
            format!("/api/v1/conversations/{}/continue", tasks[0].0),
            format!("/api/v1/conversations/{}/continue", tasks[1].0),
        );
        let (r1, r2) = within("both continues answer", async {
            tokio::join!(a.post(&p1, body(0)), a.post(&p2, body(1)))
        })
        .await;
        let answers = [r1, r2];
        let won: Vec<usize> = (0..2).filter(|i| answers[*i].0 == 200).collect();
        assert_eq!(won.len(), 1, "round {round}: exactly one wins: {answers:?}");
        let lost = 1 - won[0];
        assert_eq!(
            (answers[lost].0, answers[lost].1["error"]["code"].as_str()),
            (409, Some("continuation_conflict")),
            "{answers:?}"
        );
        let (_, child) = &tasks[won[0]];
        let turn = a
            .wait_turn(child, answers[won[0]].1["turn_id"].as_str().unwrap())
            .await;
        assert_eq!(turn["status"], "completed", "{turn}");
        // The loser got no turn: its latest version is still its first.
        let other = &tasks[lost].0;
        let c = a
            .get_ok(&format!("/api/v1/conversations/{other}/continuation"))
            .await;
        versions[won[0]] += 1;
        assert_eq!(c["turn_version"], versions[lost], "round {round}: {c}");
    }

    // What each task looks like before the close race: the refused close must leave
    // the loser exactly so (its process and availability untouched).
    let mut before = Vec::new();
    for (task, child) in &tasks {
        let c = a
            .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
            .await;
        let node = cluster.node(if *child == tasks[0].1 { o1 } else { o2 });
        before.push((
            c["availability"].clone(),
            node.pool_sessions().await.contains(child),
        ));
    }
    let (p1, p2) = (
        format!("/api/v1/conversations/{}/close", tasks[0].0),
        format!("/api/v1/conversations/{}/close", tasks[1].0),
    );
    let body = json!({"continuation_id": "same-id"});
    let (r1, r2) = within("both closes answer", async {
        tokio::join!(a.post(&p1, body.clone()), a.post(&p2, body.clone()))
    })
    .await;
    let answers = [r1, r2];
    let won: Vec<usize> = (0..2).filter(|i| answers[*i].0 == 200).collect();
    assert_eq!(won.len(), 1, "exactly one close wins: {answers:?}");
    let lost = 1 - won[0];
    assert_eq!(answers[lost].0, 409, "{answers:?}");
    assert_eq!(
        answers[lost].1["error"]["code"], "continuation_conflict",
        "{answers:?}"
    );

    // The loser is untouched: not released, its process alive, and it continues.
    let (task, child) = &tasks[lost];
    let c = a
        .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
        .await;
    let loser_node = cluster.node([o1, o2][lost]);
    let after = (
        c["availability"].clone(),
        loser_node.pool_sessions().await.contains(child),
    );
    if after != before[lost] {
        let events = a
            .get_ok(&format!("/api/v1/sessions/{child}/events?limit=1000"))
            .await;
        panic!(
            "the refused close changed the loser: before {:?}, after {after:?}; {c}; events {events}",
            before[lost]
        );
    }
    let (status, started) = a
        .post(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "after all", "continuation_id": "next-id"}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    let turn = a
        .wait_turn(child, started["turn_id"].as_str().unwrap())
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
}

/// Issue 26, item 3: a report is written by the owner of the parent's conversation,
/// fenced, like any of its writes. A stream of the parent on a third node sees every
/// report once and in order, also those of continuations sent from other nodes and one
/// that goes to an older session of the parent (after `/new`).
#[tokio::test]
async fn reports_are_seen_once_and_in_order_on_a_third_node() {
    let cluster = Cluster::start(3, options()).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let parent = a.new_conversation(None).await;
    let mut stream = c.events(&parent, Some("0")).await;
    let task = delegate(a, &parent, "fake", "first part").await;
    assert_eq!(wait_task(a, &parent, &task).await["status"], "completed");
    let child = a.get_ok(&format!("/api/v1/conversations/{task}")).await["binding"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    async fn cont(from: &Daemon, task: &str, n: u32) -> serde_json::Value {
        let path = format!("/api/v1/conversations/{task}/continue");
        let body = json!({"message": format!("part {n}"), "continuation_id": format!("k-{n}")});
        from.post_ok(&path, body).await
    }
    for (n, from) in [(2, b), (3, c)] {
        let started = cont(from, &task, n).await;
        from.wait_turn(&child, started["turn_id"].as_str().unwrap())
            .await;
    }
    // The parent moves on to a new session; the task still reports to the one that
    // delegated it.
    let (_, turn) = a.say_and_wait(&parent, "/new hello").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let started = cont(b, &task, 4).await;
    b.wait_turn(&child, started["turn_id"].as_str().unwrap())
        .await;

    let mut versions = Vec::new();
    let mut ids = Vec::new();
    within("four reports on the third node's stream", async {
        while versions.len() < 4 {
            let ev = stream.next().await.expect("the stream goes on");
            let v = ev.json();
            ids.push(v["id"].as_i64().unwrap());
            let kind = v["payload"]["type"].as_str().unwrap_or_default().to_owned();
            if kind == "delegation_completed" || kind == "delegation_session_update" {
                versions.push(v["payload"]["turn_version"].as_i64().unwrap());
            }
        }
    })
    .await;
    // Nothing more comes: each once.
    let more = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            let Some(ev) = stream.next().await else {
                return;
            };
            let v = ev.json();
            let kind = v["payload"]["type"].as_str().unwrap_or_default().to_owned();
            if kind.starts_with("delegation_") && kind != "delegation_started" {
                panic!("a report twice: {v}");
            }
        }
    })
    .await;
    assert!(more.is_err(), "the stream ended");
    assert_eq!(versions, vec![1, 2, 3, 4], "every report once, in order");
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, ids, "events in order, none twice");
}

/// Issue 26, item 4: the parent's `/stop` reaches its turn's children on other nodes. The
/// parent's node is at its cap, so the child runs on the other node; stopping the parent
/// turn cancels the child there.
#[tokio::test]
async fn stopping_a_parent_turn_cancels_its_child_on_another_node() {
    let cluster = Cluster::start(
        2,
        DaemonOptions {
            extra_config: "\n[cluster]\nlease_ttl_secs = 2\nmax_live_per_node = 1\n".to_owned(),
            ..DaemonOptions::default()
        },
    )
    .await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let parent = a.new_conversation(None).await;
    let out = a
        .say(
            &parent,
            r#"mcp delegate_to_agent {"agent_type":"fake","task":"hang"} && get_delegation_status {"task_ids":["$task_id"],"wait_ms":0}"#,
        )
        .await;
    let task = within("the child exists", async {
        loop {
            let kids = a
                .get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
                .await;
            if let Some(k) = kids.as_array().and_then(|k| k.first())
                && k["status"] == "running"
            {
                return k["task_id"].as_str().unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    wait_child_session(a, &task).await;
    let child = a.get_ok(&format!("/api/v1/conversations/{task}")).await["binding"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        b.pool_sessions().await.contains(&child),
        "the child runs on b"
    );

    a.post_ok(&format!("/api/v1/conversations/{parent}/stop"), json!({}))
        .await;
    let c = within("the child is cancelled on b", async {
        loop {
            let c = a
                .get_ok(&format!("/api/v1/conversations/{task}/continuation"))
                .await;
            if c["status"] != "running" {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(c["status"], "canceled", "{c}");
    assert_eq!(c["availability"], "continuable_live", "{c}");
    let parent_turn = a
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(parent_turn["status"], "cancelled");
}

/// Issue 26, item 4: `max_running_children` holds across nodes. Two idle tasks of one
/// parent on two nodes, a cap of one running child: two continues at once (different
/// ids), one runs and the other is refused with `concurrency_limit`.
#[tokio::test]
async fn the_running_children_cap_holds_across_nodes() {
    let cluster = Cluster::start(3, capped("[delegation]\nmax_running_children = 1\n")).await;
    let a = cluster.node(0);
    let (_parent, tasks, _) = two_tasks_on_two_nodes(&cluster).await;
    for round in 0..3 {
        let (p1, p2) = (
            format!("/api/v1/conversations/{}/continue", tasks[0].0),
            format!("/api/v1/conversations/{}/continue", tasks[1].0),
        );
        let body = |n: usize| json!({"message": "sleep 600", "continuation_id": format!("cap-{round}-{n}")});
        let (r1, r2) = within("both continues answer", async {
            tokio::join!(a.post(&p1, body(0)), a.post(&p2, body(1)))
        })
        .await;
        let answers = [r1, r2];
        let won: Vec<usize> = (0..2).filter(|i| answers[*i].0 == 200).collect();
        assert_eq!(won.len(), 1, "round {round}: one runs: {answers:?}");
        let lost = 1 - won[0];
        assert_eq!(
            (answers[lost].0, answers[lost].1["error"]["code"].as_str()),
            (429, Some("concurrency_limit")),
            "{answers:?}"
        );
        let (_, child) = &tasks[won[0]];
        a.wait_turn(child, answers[won[0]].1["turn_id"].as_str().unwrap())
            .await;
    }
}

/// Issue 26, item 4: `max_live_per_owner` counts a parent's live children on every node.
/// At a cap of one, the parent's second child, started on another node than the first,
/// makes its idle sibling go dormant where it lives; continued later, that one resumes
/// its own session strictly.
#[tokio::test]
async fn the_live_children_cap_holds_across_nodes() {
    let cluster = Cluster::start(3, capped("[pool]\nmax_live_per_owner = 1\n")).await;
    let a = cluster.node(0);
    let parent = a.new_conversation(None).await;
    let first = delegate(a, &parent, "fake", "one").await;
    assert_eq!(wait_task(a, &parent, &first).await["status"], "completed");
    let first_child =
        a.get_ok(&format!("/api/v1/conversations/{first}")).await["binding"]["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
    let mut first_node = None;
    for i in 0..3 {
        if cluster.node(i).pool_sessions().await.contains(&first_child) {
            first_node = Some(i);
        }
    }
    let first_node = first_node.expect("the first child is live somewhere");
    assert_ne!(first_node, 0, "the parent's node is at its cap");

    let second = delegate(a, &parent, "fake", "two").await;
    assert_eq!(wait_task(a, &parent, &second).await["status"], "completed");
    within("the first child goes dormant where it lives", async {
        while cluster
            .node(first_node)
            .pool_sessions()
            .await
            .contains(&first_child)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let c = a
        .get_ok(&format!("/api/v1/conversations/{first}/continuation"))
        .await;
    assert_eq!(c["availability"], "continuable_resume", "{c}");
    let mut live = 0;
    for i in 0..3 {
        for s in cluster.node(i).pool_sessions().await {
            if s == first_child {
                live += 1;
            }
        }
    }
    assert_eq!(live, 0, "the first child is live nowhere");

    // Continued, it resumes its own session.
    let started = a
        .post_ok(
            &format!("/api/v1/conversations/{first}/continue"),
            json!({"message": "again", "continuation_id": "live-cap-1"}),
        )
        .await;
    let turn = a
        .wait_turn(&first_child, started["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["one"]"#),
        "{turn}"
    );
}
