//! Working directories must exist and lie under a configured workspace root.

use std::path::{Path, PathBuf};

use crate::RuntimeError;

/// Canonicalises `path` and checks it lies under one of `roots`.
pub(crate) fn validate(path: &str, roots: &[PathBuf]) -> Result<String, RuntimeError> {
    let invalid = |reason: String| RuntimeError::InvalidCwd {
        path: path.to_string(),
        reason,
    };
    if path.trim().is_empty() {
        return Err(invalid("it is empty".to_string()));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(invalid("it must be an absolute path".to_string()));
    }
    let canon = p
        .canonicalize()
        .map_err(|e| invalid(format!("it cannot be opened: {e}")))?;
    if !canon.is_dir() {
        return Err(invalid("it is not a directory".to_string()));
    }
    let allowed = roots
        .iter()
        .filter_map(|r| r.canonicalize().ok())
        .any(|root| canon.starts_with(&root));
    if !allowed {
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(invalid(format!(
            "it is outside the workspace roots ({})",
            list.join(", ")
        )));
    }
    Ok(canon.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_rules() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("proj");
        std::fs::create_dir(&inside).unwrap();
        let roots = vec![root.path().to_path_buf()];
        let ok = validate(inside.to_str().unwrap(), &roots).unwrap();
        assert!(ok.ends_with("proj"));
        let traversal = format!("{}/proj/../../..", root.path().display());
        assert!(validate(&traversal, &roots).is_err());
        assert!(validate("relative/dir", &roots).is_err());
        assert!(validate("/definitely/not/here", &roots).is_err());
        assert!(validate("", &roots).is_err());
    }
}
