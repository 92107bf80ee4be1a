//! What the layout tests share (`runtime_layout.rs`, `channels_layout.rs`): a crate's
//! sources, each file's code without comments, and the graph of which file imports which
//! (with a circle in it, if there is one).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub fn rust_files(root: &Path, dir: &Path, out: &mut Sources) -> std::io::Result<()> {
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

/// A crate's sources: path -> text.
pub type Sources = BTreeMap<String, String>;

/// The sources of the crate whose `src/` is `src`.
pub fn sources_of(src: &Path) -> std::io::Result<Sources> {
    let mut out = Sources::new();
    rust_files(src, src, &mut out)?;
    Ok(out)
}

/// A file's code without comments (doc links name paths that are not imports).
pub fn code(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The file of module `segs` (`["session", "actor"]`), if it is one.
pub fn module_file(files: &Sources, segs: &[String]) -> Option<String> {
    if segs.is_empty() {
        return Some("lib.rs".to_string());
    }
    let base = segs.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")]
        .into_iter()
        .find(|f| files.contains_key(f))
}

/// The module path of a file (`session/actor/mod.rs` -> `["session", "actor"]`).
pub fn module_of(file: &str) -> Vec<String> {
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
pub fn expand(tree: &str) -> Vec<String> {
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
pub fn named_paths(file: &str, text: &str) -> Vec<Vec<String>> {
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
pub fn reexports(files: &Sources) -> BTreeMap<String, String> {
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
pub fn deepest(files: &Sources, segs: &[String]) -> Option<String> {
    (0..=segs.len())
        .rev()
        .find_map(|n| module_file(files, &segs[..n]).filter(|_| n > 0 || segs.is_empty()))
}

/// File -> the files it imports from.
pub fn import_graph(all: &Sources) -> BTreeMap<String, BTreeSet<String>> {
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
pub fn a_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
