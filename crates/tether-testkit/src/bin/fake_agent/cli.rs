//! Command line and environment. Parsing is lenient on purpose: arguments meant for the
//! real CLIs (`app-server`, `-c k=v`, `-p`, `--output-format stream-json`, ...) are
//! ignored, so a driver can run the fake agent with its usual arguments.

use std::path::PathBuf;

use anyhow::{Result, bail};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Acp,
    Codex,
    Claude,
}

impl Dialect {
    fn parse(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "acp" => Dialect::Acp,
            "codex" => Dialect::Codex,
            "claude" => Dialect::Claude,
            other => bail!("unknown dialect {other:?} (expected acp, codex or claude)"),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub dialect: Dialect,
    pub state_dir: PathBuf,
    pub exit_on_start: bool,
    pub refuse_resume: bool,
    pub resume_other_id: bool,
    pub hang_init: bool,
    /// claude: answer `get_status` (`--get-status`).
    pub get_status: bool,
    pub stderr_flood: usize,
    /// claude: `--session-id ID`.
    pub session_id: Option<String>,
    /// claude: `--resume ID` / `-r ID`.
    pub resume: Option<String>,
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// Parse arguments (without argv[0]); `env` looks up environment variables.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config> {
    let mut dialect = env("FAKE_AGENT_DIALECT").filter(|s| !s.trim().is_empty());
    let mut state_dir = env("FAKE_AGENT_STATE_DIR")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    let mut config = Config {
        dialect: Dialect::Acp,
        state_dir: PathBuf::new(),
        exit_on_start: truthy(env("FAKE_AGENT_EXIT_ON_START")),
        refuse_resume: truthy(env("FAKE_AGENT_REFUSE_RESUME")),
        resume_other_id: truthy(env("FAKE_AGENT_RESUME_OTHER_ID")),
        hang_init: truthy(env("FAKE_AGENT_HANG_INIT")),
        get_status: truthy(env("FAKE_AGENT_GET_STATUS")),
        stderr_flood: match env("FAKE_AGENT_STDERR_FLOOD") {
            Some(n) if !n.trim().is_empty() => n.trim().parse()?,
            _ => 0,
        },
        session_id: None,
        resume: None,
    };
    let mut guessed = None;

    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        // The value of a flag: inline `--f=v`, else the next argument unless it is a flag.
        let mut value = |required: bool| -> Result<Option<String>> {
            if inline.is_some() {
                return Ok(inline.clone());
            }
            match args.peek() {
                Some(next) if !next.starts_with('-') || required => Ok(args.next()),
                _ if required => bail!("{flag} needs a value"),
                _ => Ok(None),
            }
        };
        match flag.as_str() {
            "--dialect" => dialect = value(true)?,
            "--state-dir" => state_dir = value(true)?.map(PathBuf::from),
            "--exit-on-start" => config.exit_on_start = true,
            "--refuse-resume" => config.refuse_resume = true,
            "--resume-other-id" => config.resume_other_id = true,
            "--no-initialize-reply" => config.hang_init = true,
            "--get-status" => config.get_status = true,
            "--stderr-flood" => {
                config.stderr_flood = value(true)?.unwrap_or_default().parse()?;
            }
            "--session-id" => config.session_id = value(true)?,
            "--resume" | "-r" => config.resume = value(false)?,
            // Arguments of the real CLIs, used only to guess the dialect.
            "app-server" => guessed = Some(Dialect::Codex),
            "--input-format" | "--output-format" => {
                let format = value(false)?;
                if format.as_deref() == Some("stream-json") {
                    guessed = Some(Dialect::Claude);
                }
            }
            "-c" | "--config" => {
                value(false)?;
            }
            _ => {}
        }
    }

    config.dialect = match dialect {
        Some(d) => Dialect::parse(&d)?,
        None => guessed.unwrap_or(Dialect::Acp),
    };
    config.state_dir = state_dir.unwrap_or_else(|| std::env::temp_dir().join("fake-agent-state"));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_defaults() -> Result<()> {
        let c = parse(args(&[]), |_| None)?;
        assert_eq!(c.dialect, Dialect::Acp);
        assert!(c.state_dir.ends_with("fake-agent-state"));
        assert!(!c.exit_on_start && !c.refuse_resume && !c.hang_init);

        let c = parse(
            args(&[
                "--dialect=claude",
                "--state-dir",
                "/tmp/x",
                "--refuse-resume",
                "--stderr-flood",
                "5",
                "--resume",
                "abc",
                "-p",
            ]),
            |_| None,
        )?;
        assert_eq!(c.dialect, Dialect::Claude);
        assert_eq!(c.state_dir, PathBuf::from("/tmp/x"));
        assert!(c.refuse_resume);
        assert_eq!(c.stderr_flood, 5);
        assert_eq!(c.resume.as_deref(), Some("abc"));
        Ok(())
    }

    #[test]
    fn env_and_guessing() -> Result<()> {
        let env = |k: &str| match k {
            "FAKE_AGENT_RESUME_OTHER_ID" => Some("1".to_owned()),
            "FAKE_AGENT_HANG_INIT" => Some("true".to_owned()),
            _ => None,
        };
        let c = parse(args(&["app-server", "-c", "model=\"x\""]), env)?;
        assert_eq!(c.dialect, Dialect::Codex);
        assert!(c.resume_other_id && c.hang_init);

        let c = parse(
            args(&["-p", "--input-format", "stream-json", "--verbose"]),
            |_| None,
        )?;
        assert_eq!(c.dialect, Dialect::Claude);

        let c = parse(args(&["app-server"]), |k| {
            (k == "FAKE_AGENT_DIALECT").then(|| "acp".to_owned())
        })?;
        assert_eq!(c.dialect, Dialect::Acp);
        assert!(parse(args(&["--dialect", "gemini"]), |_| None).is_err());
        Ok(())
    }
}
