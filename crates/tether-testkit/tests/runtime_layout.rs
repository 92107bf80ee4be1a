//! The layout of `tether-runtime` shows its design (docs/architecture.md, code map):
//! `session/` and `delegation/`, no file over 500 lines, no import circle between its
//! files, commands to a session actor built only inside `session/` (one typed handle, one
//! time-out policy), a turn's end built only by `TurnEnding`, time read only from the
//! `Clock`, and every mutating call through `Runtime::call`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    tether_testkit::repo_root().join("crates/tether-runtime/src")
}

/// Every `.rs` file under `dir` with its text, by its path relative to `root` with `/`
/// separators.
fn rust_files(root: &Path, dir: &Path, out: &mut Sources) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let text = std::fs::read_to_string(&path)?;
            out.insert(rel.to_string_lossy().replace('\\', "/"), text);
        }
    }
    Ok(())
}

/// The runtime's sources: path -> text.
type Sources = BTreeMap<String, String>;

fn sources() -> std::io::Result<Sources> {
    let mut out = Sources::new();
    rust_files(&src(), &src(), &mut out)?;
    Ok(out)
}

/// A file's code without comments (doc links name paths that are not imports).
fn code(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The file of module `segs` (`["session", "actor"]`), if it is one.
fn module_file(files: &Sources, segs: &[String]) -> Option<String> {
    if segs.is_empty() {
        return Some("lib.rs".to_string());
    }
    let base = segs.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")]
        .into_iter()
        .find(|f| files.contains_key(f))
}

/// The module path of a file (`session/actor/mod.rs` -> `["session", "actor"]`).
fn module_of(file: &str) -> Vec<String> {
    let trimmed = file
        .strip_suffix("/mod.rs")
        .or_else(|| file.strip_suffix(".rs"))
        .unwrap_or(file);
    if trimmed == "lib" {
        return Vec::new();
    }
    trimmed.split('/').map(str::to_string).collect()
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |e| format!("{prefix}{e}")))
        .collect()
}

/// Paths the file names: `use crate::…`/`use super::…` trees and inline `crate::…` paths,
/// each as absolute module segments.
fn named_paths(file: &str, text: &str) -> Vec<Vec<String>> {
    let text = code(text);
    let mut paths = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("use ") {
        let tail = &rest[at + 4..];
        let end = tail.find(';').unwrap_or(tail.len());
        let stmt: String = tail[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        if stmt.starts_with("crate::") || stmt.starts_with("super::") {
            paths.extend(expand(&stmt));
        }
        rest = &tail[end..];
    }
    for (at, _) in text.match_indices("crate::") {
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        paths.push(path);
    }
    let here = module_of(file);
    // `super` of `a/b/mod.rs` and of `a/b.rs` alike is `a`.
    let parent = here[..here.len().saturating_sub(1)].to_vec();
    paths
        .into_iter()
        .filter_map(|p| {
            let segs: Vec<String> = p
                .split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            match segs.first().map(String::as_str) {
                Some("crate") => Some(segs[1..].to_vec()),
                Some("super") => Some(
                    parent
                        .iter()
                        .cloned()
                        .chain(segs[1..].iter().cloned())
                        .collect(),
                ),
                _ => None,
            }
        })
        .collect()
}

/// Names `lib.rs` re-exports, by the module file they come from.
fn reexports(files: &Sources) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let text = code(files.get("lib.rs").map_or("", String::as_str));
    for stmt in text.split(';') {
        let Some(tree) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        for path in expand(tree) {
            let segs: Vec<String> = path.split("::").map(|s| s.trim().to_string()).collect();
            let Some((name, module)) = segs.split_last() else {
                continue;
            };
            if let Some(f) = deepest(files, module) {
                map.insert(name.clone(), f);
            }
        }
    }
    map
}

/// The deepest module file a path reaches.
fn deepest(files: &Sources, segs: &[String]) -> Option<String> {
    (0..=segs.len())
        .rev()
        .find_map(|n| module_file(files, &segs[..n]).filter(|_| n > 0 || segs.is_empty()))
}

/// File -> the files it imports from.
fn import_graph(all: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let lib = reexports(all);
    let mut graph = BTreeMap::new();
    for (file, text) in all.iter().filter(|(f, _)| f.as_str() != "lib.rs") {
        let mut to = BTreeSet::new();
        for segs in named_paths(file, text) {
            let target = deepest(all, &segs)
                .or_else(|| segs.first().and_then(|name| lib.get(name).cloned()));
            if let Some(t) = target.filter(|t| t != file && t != "lib.rs") {
                to.insert(t);
            }
        }
        graph.insert(file.clone(), to);
    }
    graph
}

/// One import circle, if any (depth-first search).
fn a_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut circle = stack[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_runtime_is_in_two_modules_session_and_delegation() {
    let all = sources().unwrap();
    for f in [
        "session/actor/mod.rs",
        "session/handle.rs",
        "session/mailbox.rs",
        "session/actors.rs",
        "session/router.rs",
        "session/routing.rs",
        "session/pool.rs",
        "session/ending.rs",
        "delegation/mod.rs",
        "delegation/registry.rs",
        "delegation/continuation.rs",
        "delegation/close.rs",
        "delegation/status.rs",
        "delegation/watch.rs",
    ] {
        assert!(all.contains_key(f), "{f} is missing: {:?}", all.keys());
    }
}

#[test]
fn no_file_of_the_runtime_is_over_500_lines() {
    for (f, text) in sources().unwrap() {
        let n = text.lines().count();
        assert!(n <= 500, "{f} has {n} lines");
    }
}

#[test]
fn the_runtimes_files_import_each_other_in_no_circle() {
    let graph = import_graph(&sources().unwrap());
    // The graph is read, not empty: the actor's parts import the actor.
    assert!(
        graph["session/actor/turn.rs"].contains("session/actor/mod.rs"),
        "{graph:?}"
    );
    assert!(graph["api.rs"].contains("ctx.rs"), "{graph:?}");
    assert_eq!(a_circle(&graph), None);
}

#[test]
fn only_the_session_module_builds_actor_commands_and_replies() {
    let all = sources().unwrap();
    for (f, text) in all.iter().filter(|(f, _)| !f.starts_with("session/")) {
        let text = code(text);
        for word in ["ActorCmd", "oneshot"] {
            assert!(
                !text.contains(word),
                "{f} uses {word}: talk to a session actor through session::handle"
            );
        }
    }
}

#[test]
fn only_turn_ending_builds_the_end_of_a_turn() {
    let all = sources().unwrap();
    for (f, text) in all
        .iter()
        .filter(|(f, _)| f.as_str() != "session/ending.rs")
    {
        let text = code(text);
        for built in [
            "TurnEnd {",
            "TurnFailed {",
            "TurnCompleted {",
            "TurnCancelled {",
        ] {
            assert!(
                !text.contains(built),
                "{f} builds `{built}` by hand: use session::ending::TurnEnding"
            );
        }
    }
}

/// No crate decides anything by the store backend's name (issue 27 item 2): whether the
/// store is one node's or a cluster's is `Store::topology`, a type; the name is only
/// for people (logs, `doctor`, the cluster view).
#[test]
fn nothing_compares_the_store_backends_name() {
    let crates = tether_testkit::repo_root().join("crates");
    let mut all = Sources::new();
    rust_files(&crates, &crates, &mut all).unwrap();
    let compared: Vec<&String> = all
        .iter()
        .filter(|(path, _)| path.contains("/src/"))
        .filter(|(_, text)| {
            text.contains("backend_name() ==") || text.contains("backend_name() !=")
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        compared.is_empty(),
        "compare Store::topology() instead: {compared:?}"
    );
}

/// Wall-clock time in the runtime comes from its `Clock` (issue 27 item 2), so leases,
/// placement, presence and deadlines run on the clock an in-process test sets: no
/// `now_ms()` function call outside `seams.rs` (the system clock), only `.now_ms()` on
/// a clock.
#[test]
fn the_runtime_reads_the_time_only_from_its_clock() {
    let all = sources().unwrap();
    for (f, text) in all.iter().filter(|(f, _)| f.as_str() != "seams.rs") {
        let text = code(text);
        let bare = text
            .match_indices("now_ms()")
            .filter(|(i, _)| !text[..*i].ends_with('.'))
            .count();
        assert_eq!(bare, 0, "{f} calls now_ms() instead of its Clock");
        assert!(
            !text.contains("tether_store::now_ms") && !text.contains("SystemTime::now"),
            "{f} reads the system clock instead of its Clock"
        );
    }
}

/// Every mutating call goes through `Runtime::call` (issue 27 item 1): only the
/// dispatcher and the placement run a call here, and only `call.rs` defines commands.
#[test]
fn every_command_runs_through_runtime_call() {
    let all = sources().unwrap();
    for (f, text) in &all {
        let text = code(text);
        if !matches!(f.as_str(), "dispatch.rs" | "cluster/routed.rs") {
            assert!(
                !text.contains(".run_here(") && !text.contains(".routed("),
                "{f} runs a call around Runtime::call"
            );
        }
        if f != "call.rs" {
            assert!(
                !text.contains("enum Command "),
                "{f} defines commands outside call.rs"
            );
        }
    }
}

/// The runtime's methods are its facade, in one file (issue 27 item 1): the work is done
/// by services (`Conversations`, `Router`, `Delegations`, `Attachments`, `Placement`,
/// `Feed`, `Dispatch`), each a view of the runtime in its own module, so a feature adds
/// a service or a method on one, never another `impl Runtime` somewhere.
#[test]
fn only_the_facade_holds_impl_runtime() {
    let all = sources().unwrap();
    let holders: Vec<&String> = all
        .iter()
        .filter(|(_, text)| code(text).lines().any(|l| l.starts_with("impl Runtime {")))
        .map(|(f, _)| f)
        .collect();
    assert_eq!(holders, vec!["api.rs"], "impl Runtime outside the facade");
}
