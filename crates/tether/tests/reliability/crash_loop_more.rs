//! The crash loop's wider workload (issue 33 item 8): a Feishu DM over the long
//! connection, delegation through tether's MCP tools, attachments uploaded over the API —
//! and the checks that stay linear in the history: after every restart only what is new
//! since the last check is looked at (open turns come from the `turns_open` index, the
//! Telegram sends are indexed as they arrive), so a loop of 1 000 kills is checked as
//! thoroughly after its last restart as after its first.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use sqlx::Row;
use tether_testkit::Daemon;
use tether_testkit::fake_feishu::{Events, FakeFeishu};
use tether_testkit::uploads::{BOUNDARY, Part, multipart_body};

/// The Feishu user and the DM chat of the Feishu conversation.
pub(crate) const FEISHU_USER: &str = "ou_soak";
pub(crate) const FEISHU_CHAT: &str = "oc_soak";

/// `[channels.feishu]` on the long connection, without the `[channels]` table the
/// Telegram section already opens.
pub(crate) fn feishu_section(fs: &FakeFeishu) -> String {
    let full = fs.long_connection_config(&[FEISHU_USER], "");
    let at = full.find("[channels.feishu]").unwrap();
    full[at..].to_string()
}

/// A message from the Feishu user in the DM, pushed on the long connection (Feishu
/// sends it again on the next connection until tether answers it).
pub(crate) fn feishu_say(fs: &FakeFeishu, events: &Events, text: &str) {
    fs.push_ws(&events.message(FEISHU_CHAT, "p2p", FEISHU_USER, text, false));
}

/// Uploads one small text file to a conversation; its attachment id, or `None` when the
/// daemon was killed under the request.
pub(crate) async fn upload(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    conv: &str,
    name: &str,
    bytes: &[u8],
) -> Option<String> {
    let body = multipart_body(&[Part {
        name,
        content_type: Some("text/plain"),
        bytes,
    }]);
    let resp = http
        .post(format!("{base}/api/v1/conversations/{conv}/attachments"))
        .bearer_auth(token)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .header("connection", "close")
        .body(body)
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let out: Value = resp.json().await.ok()?;
    // Too many uploads at once is answered 503 `server_busy`, to be tried again.
    if status == 503 && out["error"]["code"] == "server_busy" {
        return None;
    }
    assert!(status < 500, "upload: {status}: {out}");
    out["attachments"][0]["id"].as_str().map(str::to_string)
}

/// A read-only connection to the daemon's SQLite file.
async fn db(d: &Daemon) -> sqlx::SqliteConnection {
    use sqlx::ConnectOptions;
    sqlx::sqlite::SqliteConnectOptions::new()
        .filename(d.db_path())
        .read_only(true)
        .connect()
        .await
        .unwrap()
}

/// What keeps the chats from being settled, or `None` once they are: no turn is open,
/// every mapped chat's cursor has passed its conversation's last event (its rows are
/// written with the cursor, in one transaction) and no outbox row is pending. Read in
/// that order, so a result that ended before the first read has reached its chat when
/// this answers `None`. (After a restart the pumps catch up from their cursors: an
/// empty outbox alone can be read before the rows of the last results are written.)
pub(crate) async fn unsettled(d: &Daemon) -> Option<String> {
    let open = open_turns(d).await;
    if !open.is_empty() {
        return Some(format!("{} turns open", open.len()));
    }
    let mut conn = db(d).await;
    let behind: i64 = sqlx::query(
        "SELECT COUNT(*) FROM channel_chats h JOIN conversations c ON c.id = h.conversation_id \
         WHERE h.event_cursor < (SELECT COALESCE(MAX(e.id), 0) FROM events e \
         WHERE e.conversation_num = c.num)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
    .get(0);
    if behind > 0 {
        return Some(format!("{behind} chats behind their conversation"));
    }
    let pending: i64 = sqlx::query("SELECT COUNT(*) FROM channel_outbox WHERE status = 'pending'")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    (pending > 0).then(|| format!("{pending} outbox rows pending"))
}

/// Turns still queued, running or waiting: (id, status, created_at in ms, conversation).
pub(crate) async fn open_turns(d: &Daemon) -> Vec<(String, String, i64, String)> {
    let mut conn = db(d).await;
    sqlx::query(
        "SELECT id, status, created_at, conversation_id FROM turns \
         WHERE status IN ('queued', 'running', 'waiting_approval', 'waiting_user')",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// The status of each of these turns ("missing" when there is no such turn).
pub(crate) async fn statuses_of(d: &Daemon, turns: &[String]) -> BTreeMap<String, String> {
    let mut conn = db(d).await;
    let mut out = BTreeMap::new();
    for chunk in turns.chunks(500) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!("SELECT id, status FROM turns WHERE id IN ({marks})");
        let mut q = sqlx::query(&sql);
        for t in chunk {
            q = q.bind(t);
        }
        for r in q.fetch_all(&mut conn).await.unwrap() {
            out.insert(r.get::<String, _>(0), r.get::<String, _>(1));
        }
    }
    for t in turns {
        out.entry(t.clone()).or_insert_with(|| "missing".into());
    }
    out
}

/// Every event of a session, paged by `seq`.
async fn all_events(d: &Daemon, session: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = d
            .get_ok(&format!(
                "/api/v1/sessions/{session}/events?after_seq={after}&limit=1000"
            ))
            .await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let Some(last) = events.last() else {
            return out;
        };
        after = last["seq"].as_i64().unwrap();
        out.extend(events);
    }
}

/// Polls `f` every 100 ms until it returns `Some`, for at most a soak's patience (15 min).
async fn patiently<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    tether_testkit::within_for(what, std::time::Duration::from_secs(900), async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Every task delegated from these parent conversations ends (completed, or failed when
/// a kill interrupted it), and its parent's session was told how it ended exactly once.
/// Returns (tasks, of them completed).
pub(crate) async fn check_delegations(d: &Daemon, parents: &[(String, String)]) -> (usize, usize) {
    let (mut tasks, mut completed) = (0, 0);
    for (parent, session) in parents {
        // A soak's patience (after 1 000 kills a parent's events run to hundreds of
        // thousands, read in pages by a debug build); what still runs is printed as it
        // changes, so a task that never ends shows in the log.
        let running_before = std::sync::Mutex::new(String::new());
        let children = patiently("every delegated task ends", || async {
            let list = d
                .get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
                .await;
            let list = list.as_array().cloned().unwrap_or_default();
            let running: Vec<&Value> = list.iter().filter(|t| t["status"] == "running").collect();
            let now = format!("{running:?}");
            let mut before = running_before.lock().unwrap();
            if !running.is_empty() && *before != now {
                eprintln!("crash loop: delegated tasks of {parent} still running: {now}");
            }
            *before = now;
            running.is_empty().then_some(list)
        })
        .await;
        let ids: BTreeSet<String> = children
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect();
        let reports = patiently("every task's end is reported to its parent", || async {
            let mut n: BTreeMap<String, usize> = BTreeMap::new();
            for e in all_events(d, session).await {
                if e["payload"]["type"] == "delegation_completed"
                    && let Some(t) = e["payload"]["task_id"].as_str()
                {
                    *n.entry(t.to_string()).or_default() += 1;
                }
            }
            ids.iter().all(|t| n.contains_key(t)).then_some(n)
        })
        .await;
        for t in &ids {
            assert_eq!(
                reports[t], 1,
                "task {t} of {parent} was reported {} times",
                reports[t]
            );
        }
        tasks += ids.len();
        completed += children
            .iter()
            .filter(|t| t["status"] == "completed")
            .count();
    }
    (tasks, completed)
}

/// A message sent with an uploaded file: its turn, the file's id and bytes.
#[derive(Debug, Clone)]
pub(crate) struct Attached {
    pub turn: String,
    pub session: String,
    pub name: String,
    pub id: String,
    pub bytes: Vec<u8>,
}

/// Every file sent with a message whose turn completed reached the agent (its copy is
/// named in the prompt the fake agent echoes) and downloads with the bytes uploaded.
/// Returns how many were checked.
pub(crate) async fn check_attachments(d: &Daemon, attached: &[Attached]) -> usize {
    let mut by_session: BTreeMap<&str, Vec<&Attached>> = BTreeMap::new();
    for a in attached {
        by_session.entry(&a.session).or_default().push(a);
    }
    let mut checked = 0;
    for (session, files) in by_session {
        let turns = d.all_turns(session).await;
        let by_id: BTreeMap<&str, &Value> = turns
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_str().unwrap(), t))
            .collect();
        for a in files {
            let t = by_id[a.turn.as_str()];
            if t["status"] != "completed" {
                continue;
            }
            let reply = t["result_text"].as_str().unwrap_or_default();
            if !reply.contains(&format!("-{}", a.name)) {
                // What the person was told about that turn (a file that could not be
                // read or copied is said in a status line; the person's line carries
                // the files given to the turn).
                let conv = t["conversation_id"].as_str().unwrap_or_default();
                let history = d
                    .get_ok(&format!("/api/v1/conversations/{conv}/messages?limit=1000"))
                    .await;
                let told: Vec<&Value> = history
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["turn_id"] == a.turn.as_str())
                    .collect();
                panic!(
                    "the agent was not given {} ({}): {reply}\nthe turn: {t}\nits history: {told:?}",
                    a.name, a.id
                );
            }
            let (status, _, bytes) = d.get_bytes(&format!("/api/v1/attachments/{}", a.id)).await;
            assert_eq!(status, 200, "download of {}", a.name);
            assert_eq!(bytes, a.bytes, "the bytes of {}", a.name);
            checked += 1;
        }
    }
    checked
}

/// Every message from the Feishu user has its one turn (checked by the caller with the
/// other chats) and every completed one's result shows in the DM exactly once (a send
/// repeated after a kill carries the same `uuid`, which Feishu answers with the message
/// already sent). Returns how many results were checked.
pub(crate) async fn check_feishu_results(d: &Daemon, fs: &FakeFeishu, session: &str) -> usize {
    let turns = d.all_turns(session).await;
    let mut checked = 0;
    let shown: Vec<String> = fs.shown(FEISHU_CHAT).iter().map(|m| m.text()).collect();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for text in &shown {
        for (i, _) in text.match_indices("echo: ") {
            if let Some(id) = text.get(i + 6..i + 14) {
                *count.entry(id.to_string()).or_default() += 1;
            }
        }
    }
    for t in turns.as_array().unwrap() {
        let input = t["input"].as_str().unwrap_or_default();
        let ours = input.len() == 8 && (input.starts_with('f') || input.starts_with('m'));
        if t["status"] == "completed" && ours {
            let n = count.get(input).copied().unwrap_or(0);
            assert_eq!(
                n, 1,
                "the result of {input:?} shows {n} times in the Feishu DM"
            );
            checked += 1;
        }
    }
    checked
}

/// The delegation message a parent conversation sends.
pub(crate) fn delegate_text(task: &str) -> String {
    format!(
        "mcp delegate_to_agent {}",
        json!({"agent_type": "fake", "task": task})
    )
}
