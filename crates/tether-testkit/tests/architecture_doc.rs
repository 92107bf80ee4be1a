//! `docs/architecture.md` is the map the code cites: every section number the sources
//! cite in it exists, and nothing cites the design file that is not in the repository.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn code_comments_cite_sections_of_the_architecture_document_that_exist() {
    let root = tether_testkit::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let sections: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split('.').next())
        .map(str::to_string)
        .collect();
    assert!(sections.len() >= 5, "sections: {sections:?}");

    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files).unwrap();
    let mut citations = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let design_cite = ["DESIGN", " §"].concat();
        assert!(
            !text.contains(&design_cite),
            "{} cites the design file, which is not in the repository: cite docs/architecture.md",
            file.display()
        );
        let marker = ["architecture.md", " §"].concat();
        for (at, _) in text.match_indices(&marker) {
            let n: String = text[at + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            assert!(
                sections.contains(&n),
                "{} cites {marker}{n}, which has no such section",
                file.display()
            );
            citations += 1;
        }
    }
    assert!(citations > 0, "no code cites docs/architecture.md");
}

fn all_files(dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | "node_modules" | ".git" | ".artifacts") {
                all_files(&path, out)?;
            }
        } else {
            out.push(path.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// Every file the map names (a backticked path ending in a source or document suffix)
/// exists: as written from the repository's root, or as the end of a file's path (the
/// map names `delegation/watch.rs` inside its crate).
#[test]
fn every_file_the_architecture_document_names_exists() {
    let root = tether_testkit::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    all_files(&root, &mut files).unwrap();
    let suffixes = [
        ".rs", ".sql", ".md", ".toml", ".mjs", ".js", ".css", ".html",
    ];
    let mut named = 0;
    let mut missing = Vec::new();
    for (i, part) in doc.split('`').enumerate() {
        // Odd parts are inside backticks.
        if i % 2 == 0 {
            continue;
        }
        let path = part.split("::").next().unwrap_or(part);
        let plain = path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.'));
        if !plain || !suffixes.iter().any(|s| path.ends_with(s)) {
            continue;
        }
        named += 1;
        let end = format!("/{path}");
        if !root.join(path).exists() && !files.iter().any(|f| f.ends_with(&end)) {
            missing.push(path.to_owned());
        }
    }
    assert!(named > 20, "the map names only {named} files");
    assert!(
        missing.is_empty(),
        "docs/architecture.md names files that do not exist: {missing:?}"
    );
}

/// `docs/decisions.md`: every entry is `- **D<n>** (<yyyy-mm-dd>, <status>) …`, numbered
/// 1, 2, 3 … in order, with status `accepted` or `superseded by D<m>` naming an entry
/// that exists.
#[test]
fn every_decision_is_numbered_dated_and_has_a_status() {
    let root = tether_testkit::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/decisions.md")).unwrap();
    let entries: Vec<&str> = doc.lines().filter(|l| l.starts_with("- ")).collect();
    assert!(entries.len() > 100, "only {} decisions", entries.len());
    for (i, line) in entries.iter().enumerate() {
        let n = i + 1;
        let head = format!("- **D{n}** (");
        let rest = line
            .strip_prefix(&head)
            .unwrap_or_else(|| panic!("decision {n} does not start with {head:?}: {line}"));
        let (meta, _) = rest
            .split_once(") ")
            .unwrap_or_else(|| panic!("decision {n} has no (date, status): {line}"));
        let (date, status) = meta
            .split_once(", ")
            .unwrap_or_else(|| panic!("decision {n}: no date and status in {meta:?}"));
        let d: Vec<&str> = date.split('-').collect();
        assert!(
            d.len() == 3 && d.iter().all(|p| p.chars().all(|c| c.is_ascii_digit())),
            "decision {n}: {date:?} is not a date"
        );
        match status.strip_prefix("superseded by D") {
            Some(m) => {
                let m: usize = m
                    .parse()
                    .unwrap_or_else(|_| panic!("decision {n}: bad status {status:?}"));
                assert!(
                    m >= 1 && m <= entries.len() && m != n,
                    "decision {n}: {status}"
                );
            }
            None => assert_eq!(status, "accepted", "decision {n}: unknown status"),
        }
    }
}
