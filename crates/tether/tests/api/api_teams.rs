//! Teams end to end (issue 28): people with roles, personal tokens, conversations that
//! belong to someone and are private or the team's — through a real `tether serve`, on
//! SQLite and (second run of `scripts/test`) on PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::people::{Who, person};
use tether_testkit::{Daemon, DaemonOptions, within};

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

fn listed(list: &Value, conv: &str) -> bool {
    list.as_array().unwrap().iter().any(|c| c["id"] == conv)
}

#[tokio::test]
async fn each_person_sees_and_steers_only_what_their_role_and_the_visibility_allow() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    // The bootstrap token is the owner's (the upgrade path).
    let (_, me) = owner.get("/api/v1/me").await;
    assert_eq!(me["person"]["role"], "owner", "{me}");
    let owner_id = str(&me["person"]["id"]).to_string();

    let (alice_id, alice) = person(&owner, "alice", "member").await;
    let (_, bob) = person(&owner, "bob", "member").await;
    let (vera_id, vera) = person(&owner, "vera", "viewer").await;
    let (_, adam) = person(&owner, "adam", "admin").await;
    let (_, me) = alice.get("/api/v1/me").await;
    assert_eq!(me["person"]["name"], "alice", "{me}");

    // Alice's conversation is hers, and private.
    let (status, c) = alice.post("/api/v1/conversations", json!({})).await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["owner_id"], alice_id.as_str());
    assert_eq!(c["visibility"], "private");
    let conv = str(&c["id"]).to_string();
    let turn = alice.say_and_wait(&conv, "hello").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let sid = str(&turn["session_id"]).to_string();

    // To Bob and Vera it does not exist: 404 everywhere, never 403.
    for who in [&bob, &vera] {
        for path in [
            format!("/api/v1/conversations/{conv}"),
            format!("/api/v1/conversations/{conv}/messages"),
            format!("/api/v1/conversations/{conv}/events/page"),
            format!("/api/v1/conversations/{conv}/delegations"),
            format!("/api/v1/sessions/{sid}"),
            format!("/api/v1/sessions/{sid}/turns"),
        ] {
            let (status, body) = who.get(&path).await;
            assert_eq!(status, 404, "GET {path}: {body}");
            assert_eq!(code(&body), "not_found", "{body}");
        }
        let events = format!("/api/v1/conversations/{conv}/events");
        assert_eq!(who.sse_status(&events).await, 404);
        let (_, list) = who.get("/api/v1/conversations").await;
        assert!(!listed(&list, &conv), "{list}");
    }
    let (status, body) = bob
        .post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({"text": "hi"}),
        )
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    // Admins and the owner see it.
    for who in [&adam, &owner] {
        let (status, _) = who.get(&format!("/api/v1/conversations/{conv}")).await;
        assert_eq!(status, 200);
        let (_, list) = who.get("/api/v1/conversations").await;
        assert!(listed(&list, &conv), "{list}");
    }

    // Her approvals are hers: Bob neither lists nor answers them.
    let (status, out) = alice
        .post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({"text": "approve rm -rf build"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let approval = within("approval is pending", async {
        loop {
            let (_, list) = alice.get("/api/v1/approvals?status=pending").await;
            if let Some(a) = list.as_array().and_then(|l| l.first().cloned()) {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let aid = str(&approval["id"]).to_string();
    let (_, bobs) = bob.get("/api/v1/approvals?status=pending").await;
    assert_eq!(bobs, json!([]), "bob lists none");
    let (status, body) = bob
        .post(
            &format!("/api/v1/approvals/{aid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = vera
        .post(
            &format!("/api/v1/approvals/{aid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!((status, code(&body)), (404, "not_found"), "{body}");
    let (status, body) = alice
        .post(
            &format!("/api/v1/approvals/{aid}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decided_by"], "alice on api", "who and where: {body}");

    // Shared with the team: Bob reads and writes, Vera reads only; only Alice (or an
    // admin) changes who sees it.
    let path = format!("/api/v1/conversations/{conv}");
    let (status, body) = bob.patch(&path, json!({"visibility": "team"})).await;
    assert_eq!(status, 404, "still hidden from bob: {body}");
    let (status, body) = alice.patch(&path, json!({"visibility": "team"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["visibility"], "team");
    let (status, body) = bob.patch(&path, json!({"visibility": "private"})).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, _) = bob.get(&path).await;
    assert_eq!(status, 200);
    let turn = bob.say_and_wait(&conv, "bob was here").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let (status, _) = vera.get(&format!("{path}/messages")).await;
    assert_eq!(status, 200);
    let (_, list) = vera.get("/api/v1/conversations").await;
    assert!(listed(&list, &conv), "{list}");
    let (status, body) = vera
        .post(&format!("{path}/messages"), json!({"text": "hi"}))
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, body) = vera.post("/api/v1/conversations", json!({})).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");

    // Roles: members do not manage people; an admin makes no owner; the last owner stays.
    let (status, _) = alice.get("/api/v1/people").await;
    assert_eq!(status, 403);
    let (status, body) = adam
        .patch(
            &format!("/api/v1/people/{vera_id}"),
            json!({"role": "owner"}),
        )
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, body) = adam
        .patch(
            &format!("/api/v1/people/{vera_id}"),
            json!({"role": "member"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = owner
        .patch(
            &format!("/api/v1/people/{owner_id}"),
            json!({"role": "admin"}),
        )
        .await;
    assert_eq!((status, code(&body)), (409, "conflict"), "{body}");

    // A disabled person's tokens stop at once.
    let (status, _) = owner
        .patch(
            &format!("/api/v1/people/{alice_id}"),
            json!({"disabled": true}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = alice.get("/api/v1/me").await;
    assert_eq!(status, 401, "{body}");

    // The audit log says who did what, newest first, to admins only.
    let (status, body) = bob.get("/api/v1/audit").await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, page) = adam.get("/api/v1/audit?limit=500").await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().unwrap().clone();
    let find = |action: &str, target: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["target"] == target)
            .cloned()
            .unwrap_or_else(|| panic!("no {action} of {target} in {page}"))
    };
    let decided = find("approval_decided", &aid);
    assert_eq!(decided["person_id"], alice_id.as_str(), "{decided}");
    assert_eq!(decided["by"], "alice on api", "{decided}");
    assert_eq!(decided["detail"], "allow", "{decided}");
    assert_eq!(find("visibility_changed", &conv)["detail"], "team");
    assert_eq!(
        find("person_added", &alice_id)["person_id"],
        owner_id.as_str()
    );
    let changed = find("person_changed", &alice_id);
    assert!(str(&changed["detail"]).contains("disabled"), "{changed}");
    let failed = find("sign_in_failed", "127.0.0.1");
    assert_eq!(failed["person_id"], Value::Null, "{failed}");
    assert!(
        entries.iter().any(|e| e["action"] == "token_created"),
        "{page}"
    );
    let ids: Vec<i64> = entries.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    assert!(
        !page.to_string().contains("tth_"),
        "no secret in the audit log"
    );
    // Paged: two at a time reach the same entries.
    let (_, first) = adam.get("/api/v1/audit?limit=2").await;
    let before = first["next_before"].as_i64().expect("a next page");
    let (_, second) = adam
        .get(&format!("/api/v1/audit?limit=2&before={before}"))
        .await;
    assert_eq!(
        second["entries"][0]["id"].as_i64(),
        Some(ids[2]),
        "{second}"
    );
}

#[tokio::test]
async fn token_guessing_is_slowed_and_learns_nothing_once_blocked() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (_, bob) = person(&owner, "bob", "member").await;
    let guess = |n: usize| Who {
        d: &d,
        token: format!("tth_{n:064x}"),
    };
    // Half of them on /mcp, which checks its own session tokens: they count alike.
    for n in 0..10 {
        let wrong = Who {
            d: &d,
            token: format!("session-{n}"),
        };
        let (status, _) = wrong.post("/mcp", json!({})).await;
        assert_eq!(status, 401, "mcp guess {n}");
    }
    for n in 10..20 {
        let (status, body) = guess(n).get("/api/v1/me").await;
        assert_eq!(
            (status, code(&body)),
            (401, "unauthorized"),
            "guess {n}: {body}"
        );
    }
    let (status, _) = guess(98).post("/mcp", json!({})).await;
    assert_eq!(status, 429, "/mcp refuses a blocked address too");
    // Blocked now: wrong and right tokens alike get 429 with Retry-After.
    let (status, body) = guess(99).get("/api/v1/me").await;
    assert_eq!((status, code(&body)), (429, "too_many_attempts"), "{body}");
    let (status, body) = bob.get("/api/v1/me").await;
    assert_eq!((status, code(&body)), (429, "too_many_attempts"), "{body}");
    let resp = within(
        "blocked request",
        d.client
            .get(d.url("/api/v1/me"))
            .bearer_auth(&d.token)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let secs: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&secs), "Retry-After {secs}");
}

#[tokio::test]
async fn personal_tokens_carry_their_scopes_and_stop_when_revoked_or_expired() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (_, alice) = person(&owner, "alice", "member").await;
    let (status, c) = alice.post("/api/v1/conversations", json!({})).await;
    assert_eq!(status, 201, "{c}");
    let conv = str(&c["id"]).to_string();

    // A read-only token reads and cannot write.
    let (status, t) = alice
        .post(
            "/api/v1/tokens",
            json!({"name": "dashboard", "scopes": ["read"]}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    let ro = Who {
        d: &d,
        token: str(&t["secret"]).to_string(),
    };
    let ro_id = str(&t["token"]["id"]).to_string();
    let (status, _) = ro.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(status, 200);
    let (status, body) = ro
        .post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({"text": "hi"}),
        )
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    // Nor make itself a stronger token.
    let (status, _) = ro.post("/api/v1/tokens", json!({"name": "more"})).await;
    assert_eq!(status, 403);

    // The list shows it without its secret and with when it was used; the secret is
    // stored only as a hash, so it is nowhere in the store.
    let (_, list) = alice.get("/api/v1/tokens").await;
    let mine = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == ro_id.as_str())
        .cloned()
        .unwrap();
    assert!(mine["last_used_at_ms"].as_i64().is_some(), "{mine}");
    assert!(!list.to_string().contains(&ro.token));
    if d.database_url().is_none() {
        let raw = std::fs::read(d.db_path()).unwrap();
        let secret = ro.token.as_bytes();
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret),
            "secret stored"
        );
    }
    // Someone else's token is not Alice's to revoke.
    let (_, ops) = owner.post("/api/v1/tokens", json!({"name": "ops"})).await;
    let theirs = str(&ops["token"]["id"]).to_string();
    let (status, _) = alice.delete(&format!("/api/v1/tokens/{theirs}")).await;
    assert_eq!(status, 404);

    // Revoked: the next request is refused, and the streams it opened close.
    let open = |path: String| {
        let req = d.client.get(d.url(&path)).bearer_auth(&ro.token);
        async move {
            let resp = within("open SSE", req.send()).await.unwrap();
            assert_eq!(resp.status().as_u16(), 200, "{path}");
            tether_testkit::SseStream::new(resp)
        }
    };
    let mut events = open(format!("/api/v1/conversations/{conv}/events")).await;
    let mut list = open("/api/v1/conversations/events".to_string()).await;
    let (status, _) = alice.delete(&format!("/api/v1/tokens/{ro_id}")).await;
    assert_eq!(status, 204);
    within("the event stream closes", async {
        while events.next().await.is_some() {}
    })
    .await;
    within("the list stream closes", async {
        while list.next().await.is_some() {}
    })
    .await;
    let (status, body) = ro.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = alice.delete(&format!("/api/v1/tokens/{ro_id}")).await;
    assert_eq!(status, 404, "revoked already");

    // Expired: works until its time, then not.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (status, body) = alice
        .post(
            "/api/v1/tokens",
            json!({"name": "old", "expires_at_ms": now - 1000}),
        )
        .await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");
    let (status, t) = alice
        .post(
            "/api/v1/tokens",
            json!({"name": "brief", "expires_at_ms": now + 1500}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    let brief = Who {
        d: &d,
        token: str(&t["secret"]).to_string(),
    };
    let (status, _) = brief.get("/api/v1/me").await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let (status, _) = brief.get("/api/v1/me").await;
    assert_eq!(status, 401);

    // A made-up token of the right shape is refused like any wrong token.
    let forged = Who {
        d: &d,
        token: format!("tth_{}", "0".repeat(64)),
    };
    let (status, _) = forged.get("/api/v1/me").await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn mcp_callers_act_with_a_persons_rights() {
    use crate::delegation_util::{http_tool, mcp_http, tool_result};
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (alice_id, alice) = person(&owner, "alice", "member").await;
    let (_, bob) = person(&owner, "bob", "member").await;
    let (_, vera) = person(&owner, "vera", "viewer").await;

    // Alice's agent delegates through its session token: the child is Alice's, private.
    let (_, c) = alice.post("/api/v1/conversations", json!({})).await;
    let parent = str(&c["id"]).to_string();
    let args = json!({"agent_type": "fake", "task": "hello"});
    let turn = alice
        .say_and_wait(&parent, &format!("mcp delegate_to_agent {args}"))
        .await;
    let started = tool_result(&turn);
    assert_eq!(started["status"], "running", "{started}");
    let (_, list) = alice.get("/api/v1/conversations").await;
    let child = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] != parent.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no child in {list}"));
    assert_eq!(child["owner_id"], alice_id.as_str(), "{child}");
    assert_eq!(child["visibility"], "private");
    let (status, _) = bob
        .get(&format!("/api/v1/conversations/{}", str(&child["id"])))
        .await;
    assert_eq!(status, 404);

    // A personal token on `/mcp`: a member delegates as herself, a viewer may not, and
    // a task of someone else's private conversation is not there for Bob.
    let mine = http_tool(&d, &bob.token, "delegate_to_agent", args.clone()).await;
    assert_eq!(mine["status"], "running", "{mine}");
    let (_, bobs) = bob.get("/api/v1/conversations").await;
    assert_eq!(bobs.as_array().unwrap().len(), 1, "{bobs}");
    let refused = http_tool(&d, &vera.token, "delegate_to_agent", args.clone()).await;
    assert_eq!(refused["error_code"], "forbidden", "{refused}");
    // An MCP client's tasks are its person's: Bob does not see Alice's.
    let hers = http_tool(&d, &alice.token, "delegate_to_agent", args.clone()).await;
    let task = str(&hers["task_id"]);
    for (who, sees) in [(&alice, true), (&bob, false), (&owner, true)] {
        let args = json!({"task_ids": [task]});
        let r = http_tool(&d, &who.token, "get_delegation_status", args).await;
        assert_eq!(r["tasks"][0]["status"] != "unknown", sees, "{r}");
    }

    // Revoked or unknown personal tokens are refused by the route itself.
    let (status, _) = mcp_http(&d, "tth_nope", 1, "tools/list", json!({})).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn the_cli_makes_lists_and_revokes_personal_tokens_while_the_daemon_runs() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (_, _alice) = person(&owner, "alice", "member").await;
    let out = d
        .cli(&[
            "token", "create", "--name", "ci", "--scope", "read", "--person", "alice",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let secret = text.lines().next().unwrap().to_string();
    assert!(secret.starts_with("tth_"), "{text}");
    let ci = Who {
        d: &d,
        token: secret,
    };
    let (status, me) = ci.get("/api/v1/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["person"]["name"], "alice");
    assert_eq!(me["scopes"], json!(["read"]));
    let (status, _) = ci.post("/api/v1/conversations", json!({})).await;
    assert_eq!(status, 403, "read only");

    let list = d.cli(&["token", "list"]).await;
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    let line = list
        .lines()
        .find(|l| l.ends_with(" ci"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains("active"), "{list}");
    assert!(!list.contains(&ci.token), "no secrets listed");
    let id = line.split_whitespace().next().unwrap();
    let out = d.cli(&["token", "revoke", id]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, _) = ci.get("/api/v1/me").await;
    assert_eq!(status, 401);
    let again = d.cli(&["token", "revoke", id]).await;
    assert!(!again.status.success(), "revoking twice is an error");
    let bad = d
        .cli(&["token", "create", "--name", "x", "--scope", "root"])
        .await;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown scope"));
    // `tether token` alone is still the bootstrap (owner) token.
    let boot = d.cli(&["token"]).await;
    assert_eq!(String::from_utf8_lossy(&boot.stdout).trim(), d.token);
}
