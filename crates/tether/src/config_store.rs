//! `[store]` of the config file: where the store lives. Without a URL it is the SQLite
//! file in the data dir (the embedded default); a `postgres://` URL uses PostgreSQL.
//!
//! ```toml
//! [store]
//! url = "postgres://tether@db.example.org/tether"   # or TETHER_DATABASE_URL, or --database
//! query_timeout_secs = 15   # one call's longest wait for PostgreSQL's answer
//! ```
//!
//! Precedence, highest first: `serve --database`, `TETHER_DATABASE_URL`, `[store] url`.
//! The URL may hold a password, so it is shown only with the password hidden
//! ([`redacted`]).

use anyhow::{Result, bail};
use serde::Deserialize;

/// `[store]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFile {
    pub url: Option<String>,
    /// How long one call waits for PostgreSQL's answer before it fails as unavailable
    /// (default 15; a server behind a cut network answers nothing and closes nothing).
    pub query_timeout_secs: Option<u64>,
}

/// `[store] query_timeout_secs`, at least 1 s.
pub fn query_timeout(file: Option<&StoreFile>) -> std::time::Duration {
    let default = tether_store::DEFAULT_QUERY_TIMEOUT_MS / 1000;
    std::time::Duration::from_secs(
        file.and_then(|f| f.query_timeout_secs)
            .unwrap_or(default)
            .max(1),
    )
}

/// The database URL to use (`None`: SQLite in the data dir), from the environment's
/// `TETHER_DATABASE_URL` or the file's `[store] url`; `named_by` says where for errors.
pub fn resolve(env_url: Option<String>, file: Option<StoreFile>) -> Result<Option<String>> {
    match (env_url, file.and_then(|f| f.url)) {
        (Some(url), _) => check(url, "TETHER_DATABASE_URL").map(Some),
        (None, Some(url)) => check(url, "[store] url").map(Some),
        (None, None) => Ok(None),
    }
}

/// A database URL is `postgres://…`/`postgresql://…` (or `sqlite:<path>`).
pub fn check(url: String, named_by: &str) -> Result<String> {
    let url = url.trim().to_owned();
    if tether_store::is_postgres_url(&url) || url.starts_with("sqlite:") {
        return Ok(url);
    }
    bail!(
        "{named_by}: {} is not a database URL (expected postgres://… or sqlite:…)",
        redacted(&url)
    )
}

/// The URL with any password replaced by `***` (for doctor and logs): the one in the
/// user info and the `password` / `sslpassword` query parameters (issue 24 S9).
pub fn redacted(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = redacted_userinfo(base);
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if is_secret_param(k) => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn is_secret_param(key: &str) -> bool {
    matches!(
        key.to_ascii_lowercase().as_str(),
        "password" | "sslpassword" | "pass" | "pwd"
    )
}

fn redacted_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // userinfo ends at the last '@' before the path.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redacted("postgres://me:secret@db:5432/t"),
            "postgres://me:***@db:5432/t"
        );
        assert_eq!(redacted("postgres://me@db/t"), "postgres://me@db/t");
        assert_eq!(redacted("sqlite:/x/y.db"), "sqlite:/x/y.db");
        assert_eq!(
            redacted("postgres://me@db/t?sslmode=require&password=secret&PassWord=x"),
            "postgres://me@db/t?sslmode=require&password=***&PassWord=***"
        );
        assert_eq!(
            redacted("postgres://me:s@db/t?application_name=a"),
            "postgres://me:***@db/t?application_name=a"
        );
    }

    #[test]
    fn the_environment_wins_and_urls_are_checked() {
        let file = || {
            Some(StoreFile {
                url: Some("postgres://file/t".into()),
                query_timeout_secs: None,
            })
        };
        assert_eq!(
            resolve(Some("postgres://env/t".into()), file())
                .ok()
                .flatten(),
            Some("postgres://env/t".into())
        );
        assert_eq!(
            resolve(None, file()).ok().flatten(),
            Some("postgres://file/t".into())
        );
        assert_eq!(resolve(None, None).ok().flatten(), None);
        assert!(resolve(Some("mysql://x".into()), None).is_err());
    }
}
