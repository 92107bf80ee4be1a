//! Chat files as gemini-cli 0.61 writes them (shapes taken from its real files).

use super::*;

const SID: &str = "4338d16c-1111-2222-3333-444444444444";

fn header(sid: &str, at: &str) -> String {
    format!(
        r#"{{"sessionId":"{sid}","projectHash":"ab","startTime":"{at}","lastUpdated":"{at}","kind":"main"}}"#
    )
}
const CONTEXT: &str = r#"{"$set":{"messages":[{"id":"ctx","type":"user","content":[{"text":"<session_context>\nThis is the Gemini CLI."}]}]}}"#;

fn turn(n: u32, at: &str) -> String {
    format!(
        "{{\"id\":\"u{n}\",\"type\":\"user\",\"content\":[{{\"text\":\"message {n}\"}}]}}\n\
         {{\"id\":\"g{n}\",\"type\":\"gemini\",\"content\":\"hello\",\"thoughts\":[]}}\n\
         {{\"$set\":{{\"lastUpdated\":\"{at}\"}}}}"
    )
}

/// The real file after a new session and one turn, and the empty file a later
/// `session/load` writes for the same session.
fn real_file() -> String {
    [
        header(SID, "2026-12-02T11:17:00Z"),
        CONTEXT.into(),
        turn(1, "2026-12-02T11:17:05Z"),
    ]
    .join("\n")
}
fn empty_twin() -> String {
    [header(SID, "2026-12-02T11:18:00Z"), CONTEXT.into()].join("\n")
}

fn project() -> (tempfile::TempDir, PathBuf, GeminiChats) {
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("proj");
    std::fs::create_dir_all(&cwd).unwrap();
    let gemini = home.path().join(".gemini");
    std::fs::create_dir_all(gemini.join("tmp/proj/chats")).unwrap();
    std::fs::write(
        gemini.join("projects.json"),
        serde_json::json!({"projects": {cwd.to_str().unwrap(): "proj"}}).to_string(),
    )
    .unwrap();
    let env = BTreeMap::from([("GEMINI_CLI_HOME".into(), home.path().as_os_str().into())]);
    let chats = GeminiChats::of("/usr/bin/gemini", &env, &cwd).unwrap();
    let dir = gemini.join("tmp/proj/chats");
    (home, dir, chats)
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn reads_files_the_way_gemini_does() {
    let r = read_record(&real_file());
    assert_eq!(r.session_id.as_deref(), Some(SID));
    assert!(r.resumable);
    assert_eq!(r.last_updated, "2026-12-02T11:17:05Z");
    // The context message alone is not a conversation.
    assert!(!read_record(&empty_twin()).resumable);
    // A messages list set afterwards replaces the turns (a load in the creation minute).
    assert!(!read_record(&format!("{}\n{CONTEXT}", real_file())).resumable);
    // A rewind to the first message drops everything from it on.
    assert!(!read_record(&format!("{}\n{{\"$rewindTo\":\"u1\"}}", real_file())).resumable);
    assert_eq!(
        short_id("session-2026-12-02T11-17-4338d16c.jsonl"),
        Some("4338d16c")
    );
    assert_eq!(short_id("session-2026-12-02T11-17-4338d16.jsonl"), None);
    assert_eq!(short_id("notes-2026-4338d16c.jsonl"), None);
}

#[test]
fn only_gemini_with_a_known_project_is_kept() {
    let (home, _, _) = project();
    let env = BTreeMap::from([("HOME".into(), home.path().as_os_str().into())]);
    let cwd = home.path().join("proj");
    assert!(GeminiChats::of("gemini", &env, &cwd).is_some());
    assert!(GeminiChats::of("codex-acp", &env, &cwd).is_none());
    assert!(GeminiChats::of("gemini", &env, home.path()).is_none());
}

#[tokio::test]
async fn the_empty_twin_of_a_real_session_is_swept_and_others_are_left() {
    let (_home, dir, chats) = project();
    std::fs::write(
        dir.join("session-2026-12-02T11-17-4338d16c.jsonl"),
        real_file(),
    )
    .unwrap();
    std::fs::write(
        dir.join("session-2026-12-02T11-18-4338d16c.jsonl"),
        empty_twin(),
    )
    .unwrap();
    // A brand-new session before its first prompt, and another process's start-up file.
    let fresh = [
        header("9404b118-aaaa", "2026-12-02T11:18:01Z"),
        CONTEXT.into(),
    ]
    .join("\n");
    std::fs::write(dir.join("session-2026-12-02T11-18-9404b118.jsonl"), fresh).unwrap();
    assert_eq!(chats.sweep().await.unwrap(), 1);
    assert_eq!(
        names(&dir),
        [
            "session-2026-12-02T11-17-4338d16c.jsonl",
            "session-2026-12-02T11-18-9404b118.jsonl"
        ]
    );
}

#[tokio::test]
async fn park_keeps_the_newest_real_file_under_a_minute_gemini_never_writes() {
    let (_home, dir, chats) = project();
    let newer = format!("{}\n{}", real_file(), turn(2, "2026-12-02T11:19:05Z"));
    std::fs::write(
        dir.join("session-2026-12-02T11-17-4338d16c.jsonl"),
        real_file(),
    )
    .unwrap();
    std::fs::write(dir.join("session-2026-12-02T11-19-4338d16c.jsonl"), &newer).unwrap();
    std::fs::write(
        dir.join("session-2026-12-02T11-20-4338d16c.jsonl"),
        empty_twin(),
    )
    .unwrap();
    assert!(chats.park(SID).await.unwrap());
    assert_eq!(names(&dir), ["session-2000-01-01T00-00-4338d16c.jsonl"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("session-2000-01-01T00-00-4338d16c.jsonl")).unwrap(),
        newer
    );
    // The older copy is aside, not gone.
    assert_eq!(
        names(&dir.with_file_name("tether-aside")),
        ["session-2026-12-02T11-17-4338d16c.jsonl"]
    );
    // Parked again (the next load), it stays where it is.
    assert!(chats.park(SID).await.unwrap());
    assert_eq!(names(&dir), ["session-2000-01-01T00-00-4338d16c.jsonl"]);
    // A session with no real file is reported, nothing moved.
    assert!(!chats.park("72918b22-0000").await.unwrap());
}
