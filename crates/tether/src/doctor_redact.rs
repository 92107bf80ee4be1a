//! What `tether doctor` shows of an agent's arguments (issue 24 S12): a key given on the
//! command line (`--api-key sk-…`, `-c model_providers.x.api_key=…`, a bare `sk-…`) is
//! shown as `***`, so the report can be pasted into an issue.

/// Words in a flag or a `key=value` key that mark its value secret.
const SECRET_WORDS: [&str; 7] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "credential",
];

/// Prefixes of well-known credential formats.
const SECRET_PREFIXES: [&str; 8] = [
    "sk-",
    "sk_",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "ghp_",
    "github_pat_",
    "AIza",
];

fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| name.contains(w))
}

fn looks_secret(value: &str) -> bool {
    let v = value.trim_matches(['"', '\'']);
    SECRET_PREFIXES.iter().any(|p| v.starts_with(p))
        || (v.len() >= 32
            && v.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '/' | '=')
            }))
}

/// `args` with every secret-looking value replaced by `***`.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut next_is_secret = false;
    for arg in args {
        if std::mem::take(&mut next_is_secret) && !arg.starts_with('-') {
            out.push("***".to_owned());
            continue;
        }
        if let Some((name, value)) = arg.split_once('=') {
            if names_a_secret(name) || looks_secret(value) {
                out.push(format!("{name}=***"));
                continue;
            }
        } else if arg.starts_with('-') && names_a_secret(arg) {
            next_is_secret = true;
        }
        out.push(if looks_secret(arg) {
            "***".to_owned()
        } else {
            arg.clone()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        redact_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn keys_on_the_command_line_are_hidden() {
        assert_eq!(
            r(&["--api-key", "abc", "--model", "gpt-5"]),
            ["--api-key", "***", "--model", "gpt-5"]
        );
        assert_eq!(r(&["--token=xyz"]), ["--token=***"]);
        assert_eq!(
            r(&[
                "-c",
                "model_providers.mock.api_key=\"k\"",
                "-c",
                "model=\"o3\""
            ]),
            [
                "-c",
                "model_providers.mock.api_key=***",
                "-c",
                "model=\"o3\""
            ]
        );
        assert_eq!(r(&["sk-proj-123"]), ["***"]);
        assert_eq!(r(&["--header", "x=ghp_0123456789"]), ["--header", "x=***"]);
        assert_eq!(
            r(&["--acp", "--state-dir", "/home/me/.state", "app-server"]),
            ["--acp", "--state-dir", "/home/me/.state", "app-server"]
        );
        // A flag named like a secret that takes no value leaves the next flag alone.
        assert_eq!(r(&["--no-auth", "--verbose"]), ["--no-auth", "--verbose"]);
    }
}
