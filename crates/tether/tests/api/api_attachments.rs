//! Attachments end to end through the HTTP API with the fake agent (ACP, no image
//! capability): upload, dedupe, hand-over into the working directory, the history, the
//! download, and the refusals (hostile names, sizes, types that lie).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};
use tether_testkit::uploads::{PNG_1X1, Part};
use tether_testkit::{Daemon, DaemonOptions};

fn part<'a>(name: &'a str, content_type: Option<&'a str>, bytes: &'a [u8]) -> Part<'a> {
    Part {
        name,
        content_type,
        bytes,
    }
}

/// Every file under a directory (recursively), relative paths.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

async fn send(d: &Daemon, conv: &str, text: &str, ids: &[String]) -> (u16, Value) {
    d.post(
        &format!("/api/v1/conversations/{conv}/messages"),
        json!({ "text": text, "attachments": ids }),
    )
    .await
}

#[tokio::test]
async fn uploaded_files_reach_the_agent_as_files_and_show_in_the_history() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let log = b"error: the page failed\n";
    let ids = d
        .upload_ok(
            &c,
            &[
                part("app.log", Some("text/plain"), log),
                part("screen.png", Some("image/png"), PNG_1X1),
            ],
        )
        .await;
    assert_eq!(ids.len(), 2);
    let (status, out) = send(&d, &c, "what failed?", &ids).await;
    assert_eq!(status, 200, "{out}");
    let sid = out["session_id"].as_str().unwrap();
    let turn = d.wait_turn(sid, out["turn_id"].as_str().unwrap()).await;
    assert_eq!(turn["status"], "completed", "{turn}");

    // The fake agent takes no images: both are files under .tether/attachments/, named
    // in the prompt the agent echoes.
    let dir = d.work_dir().join(".tether/attachments");
    let copied = files_under(&dir);
    assert_eq!(copied.len(), 2, "{copied:?}");
    let log_copy = copied.iter().find(|f| f.ends_with("-app.log")).unwrap();
    assert_eq!(std::fs::read(dir.join(log_copy)).unwrap(), log);
    let png_copy = copied.iter().find(|f| f.ends_with("-screen.png")).unwrap();
    assert_eq!(std::fs::read(dir.join(png_copy)).unwrap(), PNG_1X1);
    let reply = turn["result_text"].as_str().unwrap();
    assert!(reply.contains("what failed?"), "{reply}");
    assert!(
        reply.contains(&format!(".tether/attachments/{log_copy}")),
        "{reply}"
    );

    let history = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let msgs = history.as_array().unwrap();
    let user = msgs.iter().find(|m| m["role"] == "user").unwrap();
    let names: Vec<&str> = user["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app.log", "screen.png"]);
    assert_eq!(user["attachments"][1]["mime"], "image/png");
    assert_eq!(user["attachments"][1]["kind"], "image");
    // An agent that cannot take images gets the file, and the person is told.
    assert!(
        msgs.iter().any(|m| m["role"] == "status"
            && m["text"]
                .as_str()
                .unwrap()
                .contains("does not take images: screen.png")),
        "{history}"
    );

    let (status, ct, bytes) = d
        .get_bytes(&format!("/api/v1/attachments/{}", ids[1]))
        .await;
    assert_eq!((status, ct.as_str()), (200, "image/png"));
    assert_eq!(bytes, PNG_1X1);
}

#[tokio::test]
async fn the_same_bytes_are_stored_once_and_go_with_their_conversation() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c1 = d.new_conversation(None).await;
    let c2 = d.new_conversation(None).await;
    let (_, a) = d.upload(&c1, &[part("a.png", None, PNG_1X1)]).await;
    let (_, b) = d.upload(&c2, &[part("b.png", None, PNG_1X1)]).await;
    let (a, b) = (&a["attachments"][0], &b["attachments"][0]);
    assert_ne!(a["id"], b["id"]);
    assert_eq!(a["sha256"], b["sha256"]);
    let store = d.data_dir().join("attachments");
    let blobs = || {
        files_under(&store)
            .into_iter()
            .filter(|f| !f.starts_with("tmp"))
            .collect::<Vec<_>>()
    };
    assert_eq!(blobs().len(), 1, "{:?}", blobs());

    // One conversation's attachment is not another's to send.
    let (status, body) = send(&d, &c2, "x", &[a["id"].as_str().unwrap().to_owned()]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    // Sent once, it cannot be sent again.
    let id = b["id"].as_str().unwrap().to_owned();
    let (status, _) = send(&d, &c2, "", std::slice::from_ref(&id)).await;
    assert_eq!(status, 200);
    let (status, body) = send(&d, &c2, "again", &[id]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );

    // Archiving removes a conversation: its rows go, the shared blob stays for c2 ...
    d.patch(
        &format!("/api/v1/conversations/{c1}"),
        json!({"archived": true}),
    )
    .await;
    let (status, _) = d
        .get(&format!(
            "/api/v1/attachments/{}",
            a["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 404);
    assert_eq!(blobs().len(), 1);
    // ... until the last conversation naming it goes too.
    d.patch(
        &format!("/api/v1/conversations/{c2}"),
        json!({"archived": true}),
    )
    .await;
    assert!(blobs().is_empty(), "{:?}", blobs());
}

#[tokio::test]
async fn hostile_names_oversized_files_and_lying_types_are_refused() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[attachments]\nmax_file_mb = 1\nmax_message_mb = 2\n".into(),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let code = |body: &Value| body["error"]["code"].as_str().unwrap_or("").to_owned();
    for name in [
        "../escape.txt",
        "a/b.txt",
        "..\\\\win.txt",
        "tab\t.txt",
        "..",
    ] {
        let (status, body) = d.upload(&c, &[part(name, None, b"x")]).await;
        assert_eq!(
            (status, code(&body).as_str()),
            (400, "attachment_bad_name"),
            "{name:?}: {body}"
        );
    }
    let (status, body) = d.upload(&c, &[part("photo.jpg", None, PNG_1X1)]).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (415, "attachment_type_mismatch"),
        "{body}"
    );
    let (status, body) = d
        .upload(&c, &[part("notes.txt", Some("image/png"), b"plain text")])
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (415, "attachment_type_mismatch"),
        "{body}"
    );
    let big = vec![b'a'; 1024 * 1024 + 1];
    let (status, body) = d.upload(&c, &[part("big.txt", None, &big)]).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (413, "attachment_too_large"),
        "{body}"
    );
    let most = vec![b'b'; 900 * 1024];
    let (status, body) = d
        .upload(
            &c,
            &[
                part("1.txt", None, &most),
                part("2.txt", None, &most),
                part("3.txt", None, &most),
            ],
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (413, "attachment_too_large"),
        "{body}"
    );
    // Nothing was written: no blob, nothing in or beside the working directory.
    assert!(
        files_under(&d.data_dir().join("attachments"))
            .iter()
            .all(|f| f.starts_with("tmp"))
    );
    assert!(files_under(&d.work_dir()).is_empty());
    assert!(!d.home.path().join("escape.txt").exists());

    // A good file in the same conversation still goes through.
    let ids = d
        .upload_ok(&c, &[part("ok.txt", Some("text/plain"), b"fine")])
        .await;
    let (status, out) = send(&d, &c, "", &ids).await;
    assert_eq!(status, 200, "{out}");
    let turn = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert!(
        turn["result_text"].as_str().unwrap().contains("-ok.txt"),
        "{turn}"
    );
}

#[tokio::test]
async fn the_openapi_document_describes_uploads_downloads_and_turn_files() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let doc = d.get_ok("/api/openapi.json").await;
    let paths = &doc["paths"];
    let upload = &paths["/api/v1/conversations/{id}/attachments"]["post"];
    assert!(
        upload["requestBody"]["content"]["multipart/form-data"].is_object(),
        "{upload}"
    );
    for p in [
        "/api/v1/attachments/{id}",
        "/api/v1/turns/{id}/files",
        "/api/v1/turns/{id}/files/content",
    ] {
        assert!(paths[p]["get"].is_object(), "{p}");
    }
    let codes: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "attachment_too_large",
        "attachment_type_mismatch",
        "attachment_bad_name",
        "attachment_unavailable",
    ] {
        assert!(codes.contains(&c), "{c}: {codes:?}");
    }
    let send = &doc["components"]["schemas"]["SendMessage"]["properties"];
    assert_eq!(send["attachments"]["type"], "array", "{send}");
}

#[tokio::test]
async fn a_file_sent_with_file_stays_with_its_reply_in_the_history() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    let cwd = conv["cwd"].as_str().unwrap().to_owned();
    std::fs::write(Path::new(&cwd).join("report.txt"), b"all green\n").unwrap();

    let (status, out) = send(&d, &c, "/file report.txt", &[]).await;
    assert_eq!(status, 200, "{out}");
    let id = out["attachments"][0]["id"].as_str().unwrap().to_owned();

    // The reply in the history names the file, so the page can link it after a reload.
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let reply = page
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "command" && m["text"].as_str().unwrap().contains("report.txt"))
        .unwrap_or_else(|| panic!("no /file reply in {page}"))
        .clone();
    assert_eq!(reply["attachments"][0]["id"], id.as_str(), "{reply}");
    assert_eq!(reply["attachments"][0]["name"], "report.txt");
    let (status, _ct, bytes) = d.get_bytes(&format!("/api/v1/attachments/{id}")).await;
    assert_eq!((status, bytes.as_slice()), (200, &b"all green\n"[..]));

    // Outside the working directory: refused, and nothing is stored.
    let (status, body) = send(&d, &c, "/file ../etc/passwd", &[]).await;
    assert_ne!(status, 200, "{body}");
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let with_files = page
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["attachments"].as_array().is_some_and(|a| !a.is_empty()))
        .count();
    assert_eq!(with_files, 1, "{page}");
}

/// Issue 24 S1: in the default layout (the workspace root and the working directory are
/// the home directory, the data directory lies inside it) `/file` and a turn's file
/// content never hand out tether's token or database, nor anything through a working
/// directory swapped for a link or a hard link planted in it.
#[tokio::test]
async fn file_out_never_reads_the_data_directory_or_leaves_through_links() {
    let d = Daemon::start(DaemonOptions {
        data_dir_inside_workspace: Some(".local/share/tether"),
        ..DaemonOptions::default()
    })
    .await;
    let home = d.work_dir();
    let c = d.new_conversation(None).await;
    let refused = |status: u16, body: &Value| {
        assert_eq!(
            (status, &body["error"]["code"]),
            (403, &json!("file_refused")),
            "{body}"
        );
        assert!(!body.to_string().contains(&d.token), "{body}");
    };
    // The database file exists on SQLite only (the store may be on PostgreSQL).
    let mut paths = vec![".local/share/tether/token", "./.local/share/tether/token"];
    if d.data_dir().join("tether.db").exists() {
        paths.push(".local/share/tether/tether.db");
    }
    for path in paths {
        let (status, body) = send(&d, &c, &format!("/file {path}"), &[]).await;
        refused(status, &body);
    }
    let token_abs = d.data_dir().join("token").display().to_string();
    let (status, body) = send(&d, &c, &format!("/file {token_abs}"), &[]).await;
    refused(status, &body);

    // The same through the API's turn file content.
    let (out, _turn) = d.say_and_wait(&c, "hello").await;
    let tid = out["turn_id"].as_str().unwrap();
    let (status, _ct, bytes) = d
        .get_bytes(&format!(
            "/api/v1/turns/{tid}/files/content?path=.local/share/tether/token"
        ))
        .await;
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&bytes));
    assert!(!String::from_utf8_lossy(&bytes).contains(&d.token));

    // A `..` is a bad path, not a missing file.
    let (status, body) = send(&d, &c, "/file ../etc/passwd", &[]).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_request"))
    );

    // A hard link planted in the working directory names a file outside it.
    let proj = home.join("proj");
    std::fs::create_dir(&proj).unwrap();
    let outside = d.home.path().join("outside-secret.txt");
    std::fs::write(&outside, b"not yours").unwrap();
    std::fs::hard_link(&outside, proj.join("innocent.txt")).unwrap();
    std::fs::write(proj.join("fine.txt"), b"yours").unwrap();
    let p = d
        .post_ok(
            "/api/v1/conversations",
            json!({ "cwd": proj.display().to_string() }),
        )
        .await;
    let pc = p["id"].as_str().unwrap().to_owned();
    let (status, body) = send(&d, &pc, "/file innocent.txt", &[]).await;
    refused(status, &body);
    assert!(!body.to_string().contains("not yours"), "{body}");
    let (status, body) = send(&d, &pc, "/file fine.txt", &[]).await;
    assert_eq!(status, 200, "{body}");

    // The working directory swapped for a symlink to `/` after it was chosen.
    std::fs::rename(&proj, home.join("proj.old")).unwrap();
    std::os::unix::fs::symlink("/", &proj).unwrap();
    let (status, body) = send(&d, &pc, "/file etc/passwd", &[]).await;
    refused(status, &body);
    assert!(!body.to_string().contains("root:"), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("replaced by a link"), "{message}");
}

/// Issue 24 S3 and first use 7: the copies made for the agent are private (0700
/// directories, 0600 files) and stay out of the repository's `git status`.
#[tokio::test]
async fn attachment_copies_are_private_and_out_of_git_status() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(DaemonOptions::default()).await;
    let work = d.work_dir();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&work)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q"]);
    let c = d.new_conversation(None).await;
    let ids = d
        .upload_ok(
            &c,
            &[part("notes.txt", Some("text/plain"), b"remember this")],
        )
        .await;
    let (status, out) = send(&d, &c, "read it", &ids).await;
    assert_eq!(status, 200, "{out}");
    d.wait_turn(
        out["session_id"].as_str().unwrap(),
        out["turn_id"].as_str().unwrap(),
    )
    .await;
    let copies = files_under(&work.join(".tether/attachments"));
    assert_eq!(copies.len(), 1, "{copies:?}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let copy = work.join(".tether/attachments").join(&copies[0]);
    assert_eq!(mode(&copy), 0o600);
    assert_eq!(mode(&work.join(".tether/attachments")), 0o700);
    assert_eq!(mode(&work.join(".tether")), 0o700);
    let status = git(&["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains(".tether"), "{status}");
}

/// Issue 24 S3: two conversations in one working directory keep their copies apart,
/// and archiving a conversation removes its copies (never through a planted link).
#[tokio::test]
async fn copies_are_per_conversation_and_go_when_it_is_archived() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (c1, c2) = (
        d.new_conversation(None).await,
        d.new_conversation(None).await,
    );
    for (c, name) in [(&c1, "one.txt"), (&c2, "two.txt")] {
        let ids = d
            .upload_ok(c, &[part(name, Some("text/plain"), name.as_bytes())])
            .await;
        let (status, out) = send(&d, c, "read it", &ids).await;
        assert_eq!(status, 200, "{out}");
        d.wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    }
    let root = d.work_dir().join(".tether/attachments");
    let copies = files_under(&root);
    assert_eq!(copies.len(), 2, "{copies:?}");
    for (c, name) in [(&c1, "one.txt"), (&c2, "two.txt")] {
        let own = files_under(&root.join(c));
        assert!(
            own.len() == 1 && own[0].ends_with(name),
            "{c}: {own:?} of {copies:?}"
        );
    }

    // Archiving c1 removes its copies and leaves c2's.
    d.patch(
        &format!("/api/v1/conversations/{c1}"),
        json!({"archived": true}),
    )
    .await;
    assert!(!root.join(&c1).exists(), "{:?}", files_under(&root));
    assert_eq!(files_under(&root.join(&c2)).len(), 1);

    // A link planted in place of c2's directory is never followed.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "keep").unwrap();
    std::fs::remove_dir_all(root.join(&c2)).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join(&c2)).unwrap();
    d.patch(
        &format!("/api/v1/conversations/{c2}"),
        json!({"archived": true}),
    )
    .await;
    assert!(outside.path().join("keep.txt").exists());
}

/// Issue 24 S7: downloads open with the bearer header or a signed link for that one
/// object, never with the token in the address; answers are never cached.
#[tokio::test]
async fn downloads_open_with_signed_links_not_the_token_in_the_address() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let conv = d.new_conversation(None).await;
    let (_, up) = d
        .upload(
            &conv,
            &[
                part("a.txt", None, b"alpha\n"),
                part("b.txt", None, b"beta\n"),
            ],
        )
        .await;
    let a = up["attachments"][0]["id"].as_str().unwrap().to_owned();
    let b = up["attachments"][1]["id"].as_str().unwrap().to_owned();
    let anon = reqwest::Client::new();
    let status = |url: String| {
        let anon = anon.clone();
        async move {
            let r = tokio::time::timeout(std::time::Duration::from_secs(10), anon.get(url).send())
                .await
                .unwrap()
                .unwrap();
            let cache = r
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap().to_owned());
            let st = r.status().as_u16();
            (st, cache, r.text().await.unwrap())
        }
    };

    let path_a = format!("/api/v1/attachments/{a}");
    let path_b = format!("/api/v1/attachments/{b}");
    let links = d
        .post_ok("/api/v1/links", json!({"paths": [&path_a, &path_b]}))
        .await;
    let links = links["links"].as_array().unwrap();
    assert_eq!(links.len(), 2);
    let (url_a, url_b) = (
        links[0]["url"].as_str().unwrap().to_owned(),
        links[1]["url"].as_str().unwrap().to_owned(),
    );
    // Made by the bootstrap token: for the install's owner, named inside what is signed.
    assert!(
        url_a.starts_with(&format!("{path_a}?by=owner&exp=")),
        "{url_a}"
    );
    let forged = url_a.replace("by=owner", "by=someone");
    assert_eq!(
        status(d.url(&forged)).await.0,
        401,
        "another person in the link"
    );
    assert!(!url_a.contains(&d.token), "{url_a}");
    let expires = links[0]["expires_at_ms"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        expires > now && expires <= now + 16 * 60 * 1000,
        "{expires} vs {now}"
    );

    let (st, cache, body) = status(d.url(&url_a)).await;
    assert_eq!(
        (st, cache.as_deref(), body.as_str()),
        (200, Some("no-store, private"), "alpha\n")
    );
    // A link opens its own object only: a's signature on b's address is refused.
    let swapped = url_a.replace(&a, &b);
    assert_eq!(status(d.url(&swapped)).await.0, 401);
    assert_eq!(status(d.url(&url_b)).await.0, 200);
    // The token in the address opens nothing any more; the header still does.
    assert_eq!(
        status(d.url(&format!("{path_a}?token={}", d.token)))
            .await
            .0,
        401
    );
    let (st, _, _) = d.get_bytes(&path_a).await;
    assert_eq!(st, 200);
    // Other answers are not cached either.
    let r = d
        .client
        .get(d.url("/api/v1/conversations"))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-control"], "no-store, private");

    // Links are made for downloads only, and only with the token.
    for (bad, code) in [
        (json!({"paths": ["/api/v1/conversations"]}), "bad_request"),
        (
            json!({"paths": ["http://elsewhere/api/v1/attachments/x"]}),
            "bad_request",
        ),
        (
            json!({"paths": [format!("{path_a}?token=x")]}),
            "bad_request",
        ),
        (json!({"paths": "one"}), "invalid_json"),
        (json!({"paths": [], "extra": 1}), "invalid_json"),
    ] {
        let (st, body) = d.post("/api/v1/links", bad.clone()).await;
        assert_eq!(
            (st, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{bad}: {body}"
        );
    }
    let many: Vec<String> = (0..501).map(|_| path_a.clone()).collect();
    let (st, _) = d.post("/api/v1/links", json!({ "paths": many })).await;
    assert_eq!(st, 400);
    let r = anon
        .post(d.url("/api/v1/links"))
        .json(&json!({"paths": [&path_a]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}
