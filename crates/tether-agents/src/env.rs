//! The environment an agent process gets. tether's own environment is never inherited
//! as a whole (it may hold tether's secrets and anything else exported for `tether
//! serve`); an agent gets exactly:
//!
//! 1. the [`BASE_ENV`] variables (system basics, proxies, CA certificates) that are set
//!    for tether;
//! 2. the variables its `pass_env` names (for the built-in agents the credentials of
//!    their CLI, see [`CODEX_PASS_ENV`], [`CLAUDE_PASS_ENV`], [`GEMINI_PASS_ENV`]) that
//!    are set for tether;
//! 3. the agent's configured `env`, which wins over all of the above.
//!
//! The Claude driver adds `IS_SANDBOX=1` to its own processes unless configured
//! (claude refuses to run as root otherwise); no other agent gets it (issue 24 S12).

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::driver::AgentSpec;

/// Copied from tether's environment for every agent, when set.
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "SHELL",
    "TZ",
    // Networks that need a proxy or their own certificate authority.
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// What the Codex CLI (`codex`, also `codex-acp`) reads for its credentials and home.
pub const CODEX_PASS_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORGANIZATION",
    "OPENAI_PROJECT",
    "CODEX_API_KEY",
    "CODEX_HOME",
    "CODEX_CA_CERTIFICATE",
    "AZURE_OPENAI_API_KEY",
];

/// What Claude Code reads for its credentials and home, including Amazon Bedrock and
/// Google Vertex AI.
pub const CLAUDE_PASS_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
    "CLAUDE_CODE_SKIP_VERTEX_AUTH",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "CLOUD_ML_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_QUOTA_PROJECT",
];

/// What the Gemini CLI reads for its credentials and home, including Vertex AI.
pub const GEMINI_PASS_ENV: &[&str] = &[
    "GEMINI_API_KEY",
    "GEMINI_MODEL",
    "GEMINI_CLI_HOME",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_GCA",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_PROJECT_ID",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_CLOUD_QUOTA_PROJECT",
    "GOOGLE_CLOUD_ACCESS_TOKEN",
];

/// The complete environment of an agent process (see the module header), read from
/// tether's own environment now.
pub fn agent_env(
    pass_env: &[String],
    env: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    environment(pass_env, env, |key| std::env::var_os(key))
}

/// [`agent_env`] of a configured agent: what its process and its `--version` probe get.
pub fn spec_env(spec: &AgentSpec) -> BTreeMap<OsString, OsString> {
    agent_env(&spec.pass_env, &spec.env)
}

fn environment(
    pass_env: &[String],
    env: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> BTreeMap<OsString, OsString> {
    let mut out = BTreeMap::new();
    let passed = BASE_ENV
        .iter()
        .copied()
        .chain(pass_env.iter().map(String::as_str));
    for key in passed {
        if let Some(value) = lookup(key) {
            out.insert(OsString::from(key), value);
        }
    }
    for (key, value) in env {
        out.insert(key.into(), value.into());
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_listed_variables_pass_and_configured_ones_win() {
        let host: BTreeMap<&str, &str> = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-1"),
            ("TETHER_TOKEN", "secret"),
            ("IS_SANDBOX", "yes"),
            ("HOME", "/root"),
        ]
        .into();
        let lookup = |k: &str| host.get(k).map(OsString::from);
        let configured = BTreeMap::from([("HOME".to_owned(), "/agent".to_owned())]);
        let env = environment(&["OPENAI_API_KEY".to_owned()], &configured, lookup);
        let get = |k: &str| env.get(&OsString::from(k)).map(|v| v.to_str().unwrap());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(get("OPENAI_API_KEY"), Some("sk-1"));
        assert_eq!(get("TETHER_TOKEN"), None);
        assert_eq!(get("IS_SANDBOX"), None, "only the Claude driver sets it");
        assert_eq!(get("HOME"), Some("/agent"));
    }
}
