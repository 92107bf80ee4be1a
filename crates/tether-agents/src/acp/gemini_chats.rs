//! Keeping gemini sessions resumable (issue 24, first use 1). gemini-cli 0.61 keeps each
//! session in `<home>/.gemini/tmp/<project>/chats/session-<UTC minute>-<8 id chars>.jsonl`
//! and finds a session by the `sessionId` inside the files, not by name. Two of its own
//! habits lose sessions:
//!
//! - every `session/load` first writes an empty file for the same session, named for the
//!   current minute, then records into the old one; at the next process start its
//!   expired-session clean-up deletes every file of a short id that has an empty file,
//!   the real one included ("No previous sessions found for this project.");
//! - a load in the minute the session's file was created appends an empty message list
//!   to that very file, which then counts as empty.
//!
//! So, around a gemini process (recognised by its command's file name): before it starts
//! and after every load, [`GeminiChats::sweep`] deletes the empty files of sessions that
//! have a real one; before a `session/load`, [`GeminiChats::park`] renames the session's
//! newest real file to a name of a minute gemini never writes (`2000-01-01T00-00`) and
//! moves older copies aside. gemini only ever appends to the file it loaded, so it goes on
//! recording there. Never touched while the session is open: tether opens a session on
//! one process at a time.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The minute of a parked file's name: before any file gemini writes.
const PARKED_MINUTE: &str = "2000-01-01T00-00";

/// One gemini project's chat directory.
#[derive(Debug, Clone)]
pub(crate) struct GeminiChats {
    chats: PathBuf,
}

impl GeminiChats {
    /// The chat directory of `cwd`'s project for a gemini process with environment `env`
    /// (`GEMINI_CLI_HOME`, else `HOME`), when `program` is gemini and gemini knows the
    /// project (`.gemini/projects.json`). `None` otherwise: nothing to keep.
    pub fn of(
        program: &str,
        env: &BTreeMap<std::ffi::OsString, std::ffi::OsString>,
        cwd: &Path,
    ) -> Option<GeminiChats> {
        if Path::new(program).file_name()? != "gemini" {
            return None;
        }
        let home = env
            .get(std::ffi::OsStr::new("GEMINI_CLI_HOME"))
            .or_else(|| env.get(std::ffi::OsStr::new("HOME")))?;
        let gemini = Path::new(home).join(".gemini");
        let projects: Value =
            serde_json::from_slice(&std::fs::read(gemini.join("projects.json")).ok()?).ok()?;
        let projects = projects.get("projects")?;
        let slug = [cwd.to_path_buf(), cwd.canonicalize().unwrap_or_default()]
            .iter()
            .find_map(|p| projects.get(p.to_str()?)?.as_str().map(str::to_owned))?;
        if slug.contains('/') || slug.starts_with('.') {
            return None;
        }
        Some(GeminiChats {
            chats: gemini.join("tmp").join(slug).join("chats"),
        })
    }

    /// Deletes the empty files of every session that also has a real one (they make
    /// gemini's clean-up delete the real one). The number deleted.
    pub async fn sweep(&self) -> io::Result<usize> {
        let chats = self.chats.clone();
        blocking(move || sweep(&chats)).await
    }

    /// Before a `session/load` of `session_id`: its newest real file under the parked
    /// name, every other file of its short id out of the way. `false` when it has no
    /// real file (gemini will say the session is gone).
    pub async fn park(&self, session_id: &str) -> io::Result<bool> {
        let (chats, id) = (self.chats.clone(), session_id.to_owned());
        blocking(move || park(&chats, &id)).await
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("gemini chat files: {e}")))?
}

/// What gemini reads from one chat file (the same reading as its own loader).
#[derive(Debug, Default, PartialEq)]
struct Record {
    session_id: Option<String>,
    subagent: bool,
    last_updated: String,
    resumable: bool,
}

/// A file's short session id (`session-…-<8 chars>.json[l]`).
fn short_id(name: &str) -> Option<&str> {
    if !name.starts_with("session-") {
        return None;
    }
    let stem = name
        .strip_suffix(".jsonl")
        .or_else(|| name.strip_suffix(".json"))?;
    let short = stem.rsplit('-').next()?;
    (short.len() == 8 && short.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(short)
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        Some(Value::Object(o)) => o
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// Whether a message makes its session one gemini offers to resume.
fn resumable(m: &Value) -> bool {
    let text = text_of(m.get("content"));
    let text = text.trim();
    match m.get("type").and_then(Value::as_str) {
        Some("user") => {
            !text.is_empty()
                && !["/", "?", "<session_context>", "<hook_context>"]
                    .iter()
                    .any(|p| text.starts_with(p))
        }
        Some("gemini") => {
            !text.is_empty()
                || m.get("toolCalls").is_some_and(|v| !v.is_null())
                || m.get("thoughts").is_some_and(|v| !v.is_null())
        }
        _ => false,
    }
}

/// Reads a chat file line by line: message records by id, `$set` (a `messages` list
/// replaces them), `$rewindTo` (drops that message and every later one), headers.
fn read_record(text: &str) -> Record {
    let mut meta = serde_json::Map::new();
    let mut messages: Vec<(String, Value)> = Vec::new();
    let put = |messages: &mut Vec<(String, Value)>, m: &Value| {
        if let Some(id) = m.get("id").and_then(Value::as_str) {
            match messages.iter_mut().find(|(k, _)| k == id) {
                Some(slot) => slot.1 = m.clone(),
                None => messages.push((id.to_owned(), m.clone())),
            }
        }
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(Value::Object(r)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(to) = r.get("$rewindTo").and_then(Value::as_str) {
            let at = messages.iter().position(|(k, _)| k == to).unwrap_or(0);
            messages.truncate(at);
        } else if r.get("id").is_some_and(Value::is_string) {
            put(&mut messages, &Value::Object(r));
        } else if let Some(Value::Object(set)) = r.get("$set") {
            if let Some(Value::Array(list)) = set.get("messages") {
                messages.clear();
                list.iter().for_each(|m| put(&mut messages, m));
            }
            meta.extend(set.clone());
        } else if r.get("sessionId").is_some_and(Value::is_string)
            && r.get("projectHash").is_some_and(Value::is_string)
        {
            if let Some(Value::Array(list)) = r.get("messages") {
                list.iter().for_each(|m| put(&mut messages, m));
            }
            meta.extend(r);
        }
    }
    let field = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
    Record {
        session_id: field("sessionId"),
        subagent: field("kind").as_deref() == Some("subagent"),
        last_updated: field("lastUpdated").unwrap_or_default(),
        resumable: messages.iter().any(|(_, m)| resumable(m)),
    }
}

/// The session files in `chats`, by short id, each with its record.
fn by_short_id(chats: &Path) -> io::Result<BTreeMap<String, Vec<(String, Record)>>> {
    let mut out: BTreeMap<String, Vec<(String, Record)>> = BTreeMap::new();
    let entries = match std::fs::read_dir(chats) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(short) = short_id(&name).map(str::to_owned) else {
            continue;
        };
        if !entry.file_type()?.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        out.entry(short)
            .or_default()
            .push((name, read_record(&text)));
    }
    Ok(out)
}

fn sweep(chats: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for files in by_short_id(chats)?.values() {
        if !files.iter().any(|(_, r)| r.resumable) {
            continue;
        }
        for (name, _) in files.iter().filter(|(_, r)| !r.resumable) {
            std::fs::remove_file(chats.join(name))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn park(chats: &Path, session_id: &str) -> io::Result<bool> {
    let Some(short) = session_id.get(..8) else {
        return Ok(false);
    };
    let files = by_short_id(chats)?.remove(short).unwrap_or_default();
    let best = files
        .iter()
        .filter(|(_, r)| r.resumable && !r.subagent && r.session_id.as_deref() == Some(session_id))
        .max_by(|a, b| a.1.last_updated.cmp(&b.1.last_updated))
        .map(|(name, _)| name.clone());
    let Some(best) = best else {
        return Ok(false);
    };
    let aside = chats.with_file_name("tether-aside");
    for (name, record) in &files {
        if *name == best {
            continue;
        }
        if record.resumable {
            // An older copy: kept out of gemini's sight, not deleted.
            std::fs::create_dir_all(&aside)?;
            std::fs::rename(chats.join(name), aside.join(name))?;
        } else {
            std::fs::remove_file(chats.join(name))?;
        }
    }
    let ext = if best.ends_with(".jsonl") {
        "jsonl"
    } else {
        "json"
    };
    let parked = format!("session-{PARKED_MINUTE}-{short}.{ext}");
    if best != parked {
        std::fs::rename(chats.join(&best), chats.join(&parked))?;
    }
    Ok(true)
}

#[cfg(test)]
#[path = "gemini_chats_tests.rs"]
mod tests;
