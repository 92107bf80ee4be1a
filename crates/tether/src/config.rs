//! The config file (TOML), environment overrides, built-in agent defaults and
//! validation, resolved into [`Settings`].
//!
//! Precedence, highest first: command-line flag, environment (`TETHER_LISTEN`,
//! `TETHER_HOME`, `TETHER_DEFAULT_AGENT`, `TETHER_TOKEN`, `TETHER_DATABASE_URL`), config
//! file, defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use tether_agents::{AgentSpec, DriverKind};
use tether_runtime::{DelegationConfig, PoolConfig, RuntimeConfig};

use crate::paths::{self, Env};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
pub const DEFAULT_AGENT: &str = "codex";

/// The config file as written. Every field is optional; unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub default_agent: Option<String>,
    pub workspace_roots: Option<Vec<PathBuf>>,
    pub default_cwd: Option<PathBuf>,
    pub approval_timeout_secs: Option<u64>,
    pub queue_cap: Option<usize>,
    pub start_timeout_secs: Option<u64>,
    pub turn_timeout_secs: Option<u64>,
    /// How long a running turn waits for an unreachable database before it ends
    /// `interrupted` (default 300).
    pub store_outage_limit_secs: Option<u64>,
    /// `[pool]`: live pool limits.
    pub pool: Option<PoolFile>,
    /// `[delegation]`: agent-to-agent delegation limits.
    pub delegation: Option<DelegationFile>,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// `[channels]`: Telegram, Feishu and Discord (see `config_channels`).
    pub channels: Option<crate::config_channels::ChannelsFile>,
    /// `[server]`: HTTP time-outs and allowed host names (see `config_server`).
    pub server: Option<crate::config_server::ServerFile>,
    /// `[attachments]`: size limits of files sent with messages.
    pub attachments: Option<AttachmentsFile>,
    /// `[store]`: the database (see `config_store`).
    pub store: Option<crate::config_store::StoreFile>,
    /// `[cluster]`: this node's lease (see `cluster`).
    pub cluster: Option<crate::cluster::ClusterFile>,
    /// `[auth]`: sign-in on the page (see `config_auth`).
    pub auth: Option<crate::config_auth::AuthFile>,
    /// `[prices]`: the usage ledger's price table (see `config_usage`).
    pub prices: Option<crate::config_usage::PricesFile>,
    /// `[limits]`: turns parked at a vendor's usage limit (see `config_usage`).
    pub limits: Option<crate::config_usage::LimitsFile>,
    /// `[schedules]`: scheduled turns (see `config_schedules`).
    pub schedules: Option<crate::config_schedules::SchedulesFile>,
    /// `[telemetry]`: metrics, traces, log format (see `config_telemetry`).
    pub telemetry: Option<crate::config_telemetry::TelemetryFile>,
    /// `[worktrees]`: isolated git worktrees (see `config_worktrees`).
    pub worktrees: Option<crate::config_worktrees::WorktreesFile>,
}

/// `[attachments]`: the largest file and the largest sum of one message's files, in
/// MiB (defaults 20 and 50: a Telegram bot downloads at most 20 MB, Feishu takes files
/// up to 30 MB).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentsFile {
    pub max_file_mb: Option<u64>,
    pub max_message_mb: Option<u64>,
    pub max_files: Option<usize>,
}

fn attachment_limits(file: AttachmentsFile) -> Result<tether_runtime::AttachmentLimits> {
    let default = tether_runtime::AttachmentLimits::default();
    const MIB: u64 = 1024 * 1024;
    let limits = tether_runtime::AttachmentLimits {
        max_file_bytes: file.max_file_mb.map_or(default.max_file_bytes, |m| m * MIB),
        max_message_bytes: file
            .max_message_mb
            .map_or(default.max_message_bytes, |m| m * MIB),
        max_files: file.max_files.unwrap_or(default.max_files),
    };
    if !(1..=1000).contains(&limits.max_files) {
        bail!("[attachments] max_files must be between 1 and 1000");
    }
    if limits.max_file_bytes == 0 || limits.max_message_bytes == 0 {
        bail!("[attachments] limits must be greater than 0");
    }
    if limits.max_file_bytes > 1024 * MIB || limits.max_message_bytes > 1024 * MIB {
        bail!("[attachments] limits must be at most 1024 MiB");
    }
    Ok(limits)
}

/// `[pool]`: how many agent processes stay live (0 = no limit) and for how long idle.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    pub max_live: Option<usize>,
    pub max_live_per_owner: Option<usize>,
    /// 0 = never evict for idleness.
    pub idle_ttl_secs: Option<u64>,
    /// Codex and ACP sessions one agent process hosts (1 = a process per session).
    pub sessions_per_process: Option<usize>,
    /// Shared agent processes in all (0 = no limit).
    pub max_processes: Option<usize>,
    /// Seconds a shared process without sessions is kept.
    pub process_idle_secs: Option<u64>,
    /// Keep one warm spare process per Claude agent for new sessions (default: when the
    /// default agent is a Claude agent).
    pub claude_spare: Option<bool>,
    /// Agent processes of every kind at once, a hard ceiling (0 = no limit).
    pub process_limit: Option<usize>,
}

/// `[delegation]`: how deep delegation may nest (1..=8, default 1) and how many children
/// of one conversation may run at once (0 = no limit, default 4).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationFile {
    pub max_depth: Option<u32>,
    pub max_running_children: Option<usize>,
}

/// `[agents.NAME]`. For a built-in agent (codex, claude, gemini) every field is optional
/// and overrides the built-in one; a new agent needs `driver` and `command`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub driver: Option<DriverKind>,
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    /// Variables passed from tether's environment, added to the built-in agent's list.
    pub pass_env: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    /// The vendor account it runs on (usage and limits are per account; default: the
    /// agent's name).
    pub account: Option<String>,
}

/// Everything the binary needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file that was read, if any.
    pub config_path: Option<PathBuf>,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub default_agent: String,
    pub agents: BTreeMap<String, AgentSpec>,
    pub workspace_roots: Vec<PathBuf>,
    pub default_cwd: PathBuf,
    pub approval_timeout: Duration,
    pub queue_cap: usize,
    pub start_timeout: Duration,
    pub turn_timeout: Option<Duration>,
    pub store_outage_limit: Duration,
    pub pool: PoolConfig,
    /// Delegation limits (the MCP launch is filled in by `serve`).
    pub delegation: DelegationConfig,
    /// `TETHER_TOKEN`: used instead of the token file when set.
    pub token_override: Option<String>,
    /// The channels to run (none unless configured).
    pub channels: tether_channels::ChannelsConfig,
    /// `[server]`: HTTP time-outs and allowed host names.
    pub server: crate::config_server::ServerSettings,
    /// `[auth.oidc]`: sign-in on the page with OpenID Connect (`None`: tokens only).
    pub oidc: Option<tether_server::OidcConfig>,
    /// `[prices]` and the agents' accounts (the usage ledger).
    pub usage: tether_runtime::UsageConfig,
    /// `[schedules]`.
    pub schedules: tether_runtime::SchedulesConfig,
    /// `[telemetry]`.
    pub telemetry: crate::config_telemetry::TelemetrySettings,
    /// `[worktrees]`.
    pub worktrees: tether_runtime::WorktreesConfig,
    /// `[attachments]`: size limits.
    pub attachments: tether_runtime::AttachmentLimits,
    /// The database URL (`None`: SQLite in the data dir; see `config_store`).
    pub database_url: Option<String>,
    /// `[store] query_timeout_secs`: one PostgreSQL call's longest wait.
    pub query_timeout: Duration,
    /// How long this node's lease in the node registry lasts without a heartbeat.
    pub lease_ttl: Duration,
    /// `[cluster] max_live_per_node` (0: no limit).
    pub max_live_per_node: usize,
    /// `[cluster] attachments_dir`: attachment files on storage the nodes share.
    pub attachments_dir: Option<PathBuf>,
    /// `[cluster] notices`: commit notices wake the nodes (false: polling alone).
    pub cluster_notices: bool,
    /// What file-out never reads besides the data directory and the attachment store
    /// (issue 24 S1): the config file, the default config directory, the credentials
    /// under the home directory.
    pub private_paths: Vec<PathBuf>,
}

/// The config file that was read, the default config directory (it holds bot tokens
/// whichever file was read) and the home directory's credential stores.
fn private_paths(config_path: Option<&Path>, env: &Env) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = config_path.map(Path::to_path_buf).into_iter().collect();
    if let Some(dir) = paths::default_config_file(env)
        .as_deref()
        .and_then(Path::parent)
    {
        out.push(dir.to_path_buf());
    }
    if let Some(home) = paths::home_dir(env) {
        out.extend(tether_runtime::home_secrets(&home));
    }
    out
}

impl Settings {
    /// Finds and reads the config file (`explicit` must exist; the default location is
    /// optional), then resolves everything.
    pub fn load(explicit: Option<&Path>, listen_flag: Option<&str>, env: &Env) -> Result<Self> {
        // Errors name where the path came from: the flag, the variable, or neither.
        let (path, named_by) = match (explicit, env("TETHER_CONFIG")) {
            (Some(p), _) => (Some(p.to_path_buf()), "--config "),
            (None, Some(p)) => (Some(PathBuf::from(p)), "TETHER_CONFIG="),
            (None, None) => (paths::default_config_file(env).filter(|p| p.is_file()), ""),
        };
        let file = match &path {
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| {
                    format!("cannot read config file {named_by}{}", p.display())
                })?;
                parse(&text).with_context(|| format!("invalid config file {}", p.display()))?
            }
            None => FileConfig::default(),
        };
        Self::resolve(file, path, listen_flag, env)
    }

    /// Applies overrides and defaults to a parsed file, then validates.
    pub fn resolve(
        file: FileConfig,
        config_path: Option<PathBuf>,
        listen_flag: Option<&str>,
        env: &Env,
    ) -> Result<Self> {
        // Relative paths in the file are relative to the file's folder.
        let base = config_path
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(paths::current_dir);
        let in_file = |p: &Path| paths::absolutize(&paths::expand_tilde(p, env), &base);

        // Which file errors name (a value from the environment names its variable).
        let file_name = config_path
            .as_deref()
            .map_or_else(|| "the config file".to_owned(), |p| p.display().to_string());
        let (listen_text, listen_from) = match (listen_flag, env("TETHER_LISTEN"), file.listen) {
            (Some(flag), _, _) => (flag.to_owned(), "--listen".to_owned()),
            (None, Some(var), _) => (var, "TETHER_LISTEN".to_owned()),
            (None, None, Some(key)) => (key, format!("`listen` in {file_name}")),
            (None, None, None) => (DEFAULT_LISTEN.to_owned(), "the default".to_owned()),
        };
        let listen = parse_listen(&listen_text).with_context(|| listen_from.clone())?;

        let data_dir = match (env("TETHER_HOME"), &file.data_dir) {
            (Some(home), _) => paths::absolutize(Path::new(&home), &paths::current_dir()),
            (None, Some(dir)) => in_file(dir),
            (None, None) => paths::default_data_dir(env)?,
        };

        let accounts = file
            .agents
            .iter()
            .filter_map(|(name, a)| Some((name.clone(), a.account.clone()?)))
            .collect();
        let agents = merge_agents(file.agents)?;
        let (default_agent, agent_from) = match (env("TETHER_DEFAULT_AGENT"), file.default_agent) {
            (Some(var), _) => (var, "TETHER_DEFAULT_AGENT".to_owned()),
            (None, Some(key)) => (key, format!("default_agent in {file_name}")),
            (None, None) => (DEFAULT_AGENT.to_owned(), "default_agent".to_owned()),
        };
        if !agents.contains_key(&default_agent) {
            bail!(
                "{agent_from}: agent {default_agent:?} is not configured; configured agents: {}",
                agents.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let token_override = match env("TETHER_TOKEN") {
            Some(token) if token.trim().is_empty() => {
                bail!(
                    "TETHER_TOKEN is set but blank: unset it (to use the token file) or set a token"
                )
            }
            token => token.map(|t| t.trim().to_owned()),
        };

        let workspace_roots: Vec<PathBuf> = match file.workspace_roots {
            Some(roots) => roots.iter().map(|p| in_file(p)).collect(),
            None => vec![paths::home_dir(env).ok_or_else(|| {
                anyhow!("HOME is not set: set workspace_roots in the config file")
            })?],
        };
        if workspace_roots.is_empty() {
            bail!("workspace_roots must name at least one directory");
        }
        let default_cwd = match &file.default_cwd {
            Some(dir) => in_file(dir),
            None => workspace_roots[0].clone(),
        };
        if !workspace_roots
            .iter()
            .any(|root| default_cwd.starts_with(root))
        {
            bail!(
                "default_cwd {} does not lie under any workspace root ({})",
                default_cwd.display(),
                workspace_roots
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }

        let approval_timeout_secs = file.approval_timeout_secs.unwrap_or(1800);
        if approval_timeout_secs == 0 {
            bail!("approval_timeout_secs must be greater than 0");
        }
        let start_timeout_secs = file.start_timeout_secs.unwrap_or(30);
        if start_timeout_secs == 0 {
            bail!("start_timeout_secs must be greater than 0");
        }
        let turn_timeout = match file.turn_timeout_secs.unwrap_or(0) {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        };

        let claude_default = agents
            .get(&default_agent)
            .is_some_and(|a| a.driver == DriverKind::Claude);
        let delegation = delegation_config(file.delegation.unwrap_or_default())?;
        let cluster = crate::cluster::settings(file.cluster)?;
        let private_paths = private_paths(config_path.as_deref(), env);

        Ok(Settings {
            private_paths,
            config_path,
            listen,
            data_dir,
            default_agent,
            agents,
            workspace_roots,
            default_cwd,
            approval_timeout: Duration::from_secs(approval_timeout_secs),
            queue_cap: file.queue_cap.unwrap_or(16),
            start_timeout: Duration::from_secs(start_timeout_secs),
            turn_timeout,
            store_outage_limit: Duration::from_secs(
                file.store_outage_limit_secs.unwrap_or(300).max(1),
            ),
            pool: pool_config(file.pool.unwrap_or_default(), claude_default),
            delegation,
            token_override,
            channels: crate::config_channels::resolve(file.channels)?,
            server: crate::config_server::resolve(file.server)?,
            oidc: crate::config_auth::resolve(file.auth, env("TETHER_OIDC_CLIENT_SECRET"))?,
            usage: crate::config_usage::resolve(file.prices, file.limits, accounts)?,
            schedules: crate::config_schedules::resolve(file.schedules)?,
            worktrees: crate::config_worktrees::resolve(file.worktrees)?,
            telemetry: crate::config_telemetry::resolve(
                file.telemetry,
                env("TETHER_OTLP_ENDPOINT"),
                env("TETHER_LOG_FORMAT"),
            )?,
            attachments: attachment_limits(file.attachments.unwrap_or_default())?,
            query_timeout: crate::config_store::query_timeout(file.store.as_ref()),
            database_url: crate::config_store::resolve(env("TETHER_DATABASE_URL"), file.store)?,
            lease_ttl: cluster.lease_ttl,
            max_live_per_node: cluster.max_live_per_node,
            attachments_dir: cluster.attachments_dir,
            cluster_notices: cluster.notices,
        })
    }

    /// The workspace roots and the default cwd must be existing directories. Checked by
    /// `serve` (and reported by `doctor`), not while resolving, so that `token` and
    /// `doctor` still run on such a config.
    pub fn check_directories(&self) -> Result<()> {
        let missing = |p: &Path| match std::fs::metadata(p) {
            Ok(meta) if meta.is_dir() => None,
            Ok(_) => Some("is not a directory"),
            Err(_) => Some("does not exist"),
        };
        for root in &self.workspace_roots {
            if let Some(why) = missing(root) {
                bail!("workspace_roots: {} {why}", root.display());
            }
        }
        if let Some(why) = missing(&self.default_cwd) {
            bail!("default_cwd: {} {why}", self.default_cwd.display());
        }
        Ok(())
    }

    /// The runtime's configuration, for node `node_id` (see `datadir::node_id`).
    pub fn runtime_config(&self, node_id: &str) -> RuntimeConfig {
        RuntimeConfig {
            agents: self.agents.clone(),
            default_agent: self.default_agent.clone(),
            workspace_roots: self.workspace_roots.clone(),
            default_cwd: self.default_cwd.clone(),
            data_dir: self.data_dir.clone(),
            private_paths: self.private_paths.clone(),
            approval_timeout: self.approval_timeout,
            queue_cap: self.queue_cap,
            start_timeout: self.start_timeout,
            turn_timeout: self.turn_timeout,
            store_outage_limit: self.store_outage_limit,
            pool: self.pool.clone(),
            delegation: self.delegation.clone(),
            coalesce: tether_runtime::CoalesceConfig::default(),
            attachments: self.attachments,
            cluster: tether_runtime::ClusterConfig {
                node_id: node_id.into(),
                lease_ttl: self.lease_ttl,
                max_live_per_node: self.max_live_per_node,
                attachments_dir: self.attachments_dir.clone(),
                notices: self.cluster_notices,
            },
            usage: self.usage.clone(),
            schedules: self.schedules.clone(),
            worktrees: self.worktrees.clone(),
        }
    }
}

fn delegation_config(file: DelegationFile) -> Result<DelegationConfig> {
    let default = DelegationConfig::default();
    let max_depth = file.max_depth.unwrap_or(default.max_depth);
    if !(1..=8).contains(&max_depth) {
        bail!("delegation.max_depth must be between 1 and 8 (got {max_depth})");
    }
    Ok(DelegationConfig {
        max_depth,
        max_running_children: file
            .max_running_children
            .unwrap_or(default.max_running_children),
        mcp: None,
    })
}

/// `[pool]`; `claude_default`: the default agent is a Claude agent (then a warm spare
/// is kept unless `claude_spare = false`: a new conversation is most likely Claude's).
fn pool_config(file: PoolFile, claude_default: bool) -> PoolConfig {
    let default = PoolConfig::default();
    PoolConfig {
        max_live: file.max_live.unwrap_or(default.max_live),
        max_live_per_owner: file
            .max_live_per_owner
            .unwrap_or(default.max_live_per_owner),
        idle_ttl: match file.idle_ttl_secs {
            Some(0) => None,
            Some(secs) => Some(Duration::from_secs(secs)),
            None => default.idle_ttl,
        },
        sessions_per_process: file
            .sessions_per_process
            .unwrap_or(default.sessions_per_process),
        max_processes: file.max_processes.unwrap_or(default.max_processes),
        process_idle: file
            .process_idle_secs
            .map_or(default.process_idle, Duration::from_secs),
        claude_spare: file.claude_spare.unwrap_or(claude_default),
        process_limit: file.process_limit.unwrap_or(default.process_limit),
    }
}

/// Parses the config file text.
pub fn parse(text: &str) -> Result<FileConfig> {
    Ok(toml::from_str(text)?)
}

/// `IP:PORT` (`localhost:PORT` is taken as `127.0.0.1:PORT`).
pub fn parse_listen(text: &str) -> Result<SocketAddr> {
    let text = text.trim();
    let normalized = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    normalized.parse().map_err(|_| {
        anyhow!("invalid listen address {text:?}: expected IP:PORT, such as {DEFAULT_LISTEN}")
    })
}

/// The arguments `claude` runs with under tether.
const CLAUDE_ARGS: &[&str] = &[
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--include-partial-messages",
];

/// What an agent of `driver` running `command` gets unless its config says otherwise
/// (issue 24, first use 2): the arguments that make the CLI speak the driver's protocol
/// and the variables its credentials live in. ACP agents are told apart by the
/// command's file name (gemini, codex-acp, claude's ACP adapters); another ACP agent gets
/// no arguments and no credentials by default.
pub fn driver_defaults(
    driver: DriverKind,
    command: &str,
) -> (&'static [&'static str], &'static [&'static str]) {
    use tether_agents::env::{CLAUDE_PASS_ENV, CODEX_PASS_ENV, GEMINI_PASS_ENV};
    let file = std::path::Path::new(command)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(command);
    match driver {
        DriverKind::Codex => (&["app-server"], CODEX_PASS_ENV),
        DriverKind::Claude => (CLAUDE_ARGS, CLAUDE_PASS_ENV),
        DriverKind::Acp => match file {
            "gemini" => (&["--acp"], GEMINI_PASS_ENV),
            f if f.starts_with("codex-acp") => (&[], CODEX_PASS_ENV),
            f if f.starts_with("claude-code-acp") || f.starts_with("claude-agent-acp") => {
                (&[], CLAUDE_PASS_ENV)
            }
            _ => (&[], &[]),
        },
    }
}

/// The agents every installation knows (found on `PATH` when installed).
pub fn builtin_agents() -> BTreeMap<String, AgentSpec> {
    let owned = |list: &[&str]| -> Vec<String> { list.iter().map(|a| (*a).to_owned()).collect() };
    let spec = |name: &str, driver, command: &str| {
        let (args, pass_env) = driver_defaults(driver, command);
        AgentSpec {
            name: name.to_owned(),
            driver,
            command: command.to_owned(),
            args: owned(args),
            pass_env: owned(pass_env),
            env: BTreeMap::new(),
        }
    };
    [
        spec("codex", DriverKind::Codex, "codex"),
        spec("claude", DriverKind::Claude, "claude"),
        spec("gemini", DriverKind::Acp, "gemini"),
    ]
    .into_iter()
    .map(|s| (s.name.clone(), s))
    .collect()
}

/// The built-in agents with the file's `[agents.*]` merged over them by name.
pub fn merge_agents(file: BTreeMap<String, AgentConfig>) -> Result<BTreeMap<String, AgentSpec>> {
    let mut agents = builtin_agents();
    for (name, cfg) in file {
        if name.trim().is_empty() {
            bail!("[agents] entries need a non-empty name");
        }
        let spec = match agents.remove(&name) {
            Some(mut spec) => {
                if let Some(driver) = cfg.driver {
                    spec.driver = driver;
                }
                if let Some(command) = cfg.command {
                    spec.command = command;
                }
                if let Some(args) = cfg.args {
                    spec.args = args;
                }
                if let Some(env) = cfg.env {
                    spec.env = env;
                }
                spec.pass_env.extend(cfg.pass_env.unwrap_or_default());
                spec
            }
            None => {
                let driver = cfg.driver.ok_or_else(|| {
                    anyhow!(
                        "[agents.{name}] needs `driver` (one of \"acp\", \"codex\", \"claude\")"
                    )
                })?;
                let command = cfg
                    .command
                    .ok_or_else(|| anyhow!("[agents.{name}] needs `command`"))?;
                // The driver's defaults unless given: `args` replaces them, `pass_env`
                // adds to them (as for the built-in agents).
                let (args, pass_env) = driver_defaults(driver, &command);
                let mut passed: Vec<String> = pass_env.iter().map(|v| (*v).to_owned()).collect();
                passed.extend(cfg.pass_env.unwrap_or_default());
                AgentSpec {
                    driver,
                    args: cfg
                        .args
                        .unwrap_or_else(|| args.iter().map(|a| (*a).to_owned()).collect()),
                    command,
                    pass_env: passed,
                    env: cfg.env.unwrap_or_default(),
                    name: name.clone(),
                }
            }
        };
        if spec.command.trim().is_empty() {
            bail!("[agents.{name}] `command` must not be empty");
        }
        if let Some(bad) = spec
            .pass_env
            .iter()
            .find(|v| v.is_empty() || v.contains(['=', '\0']))
        {
            bail!("[agents.{name}] `pass_env` has an invalid variable name {bad:?}");
        }
        agents.insert(name, spec);
    }
    Ok(agents)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
