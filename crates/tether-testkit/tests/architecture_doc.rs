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
