//! tether: the daemon binary. Reads the config (file, environment, flags), wires the
//! store, the runtime, the channels and the HTTP server together, and offers `serve`,
//! `token`, `doctor` and `pair`.
//!
//! Only wiring and operator-facing output live here: no domain logic, no protocol code.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod backup;
mod cluster;
mod config;
mod config_auth;
mod config_channels;
mod config_schedules;
mod config_server;
mod config_slack;
mod config_store;
mod config_telemetry;
mod config_usage;
mod config_worktrees;
mod daemon_record;
mod datadir;
mod doctor;
mod doctor_pool;
mod doctor_redact;
mod doctor_start;
mod drain_cmd;
mod mcp_cmd;
mod metrics;
mod pair;
mod paths;
mod serve;
mod telemetry;
mod token;
mod token_cmd;
mod warnings;

/// jemalloc instead of glibc's malloc (D278): tether's CPU per streamed event fell from
/// about 8 µs to about 7 µs (allocation was a third of it: every line from an agent is a
/// tree of small strings and maps), for about 5 MB more RSS.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Settings;

#[derive(Debug, Parser)]
#[command(
    name = "tether",
    version,
    about = "Keeps coding agents in continuous sessions"
)]
struct Cli {
    /// Config file (TOML). Default: $TETHER_CONFIG, else
    /// $XDG_CONFIG_HOME/tether/config.toml if it exists.
    // TETHER_CONFIG is read by `Settings::load`, so that its errors can name it.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon (HTTP API) until SIGINT or SIGTERM.
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:7878 (port 0: any free port).
        #[arg(long, value_name = "ADDR:PORT")]
        listen: Option<String>,
        /// The database: postgres://… (PostgreSQL) instead of the SQLite file in the data
        /// dir. Default: $TETHER_DATABASE_URL, else `[store] url`.
        #[arg(long, value_name = "URL")]
        database: Option<String>,
    },
    /// Print the bootstrap (owner) API token, creating it if missing; or manage personal
    /// tokens.
    Token {
        #[command(subcommand)]
        action: Option<TokenAction>,
    },
    /// Show the configuration, check that the agents are installed and start a session
    /// of each (no prompt is sent), try the store and the channels' credentials.
    Doctor {
        /// Do not start a session of each agent (only look for it and ask `--version`).
        #[arg(long)]
        no_start: bool,
    },
    /// Drain a running node (as SIGTERM does): no new work, channels handed over,
    /// running turns finish within `[server] drain_grace_secs`, then it exits.
    Drain {
        /// The node's address (default: this data directory's daemon).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Return once the node drains, without waiting for it to exit.
        #[arg(long)]
        no_wait: bool,
    },
    /// Back the embedded store up into a new directory, safe while the daemon runs (the
    /// store, attachment files, token and node id).
    Backup {
        /// A new (or empty) directory.
        dest: PathBuf,
    },
    /// Restore a backup made by `tether backup` (the daemon must be stopped; what is
    /// replaced is kept in the data directory).
    Restore {
        /// The backup's directory.
        src: PathBuf,
    },
    /// The stdio MCP server tether gives its agents (started by tether, not by people).
    Mcp,
    /// Channel pairing: approve people who wrote to a channel bot and got a code.
    Pair {
        #[command(subcommand)]
        action: PairAction,
    },
}

#[derive(Debug, Subcommand)]
enum PairAction {
    /// List pending pairing codes (`--all`: approved and expired ones too).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Allow the person who got this code (e.g. ABCD-2345) on their channel, as an
    /// existing person (`--person <id>`) or a new member named after the account.
    Approve {
        code: String,
        /// Link the account to this person (see `tether token list`, the API's
        /// `/api/v1/people`).
        #[arg(long)]
        person: Option<String>,
        /// The new person's role: `member` (default) or `viewer`.
        #[arg(long)]
        role: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Make a personal token (`tth_…`), printed this once.
    Create {
        /// What it is for, e.g. "ci" or "alice's laptop".
        #[arg(long)]
        name: String,
        /// Comma-separated scopes: read, write, approve, admin (default: all).
        #[arg(long)]
        scope: Option<String>,
        /// It stops working after this many days (default: never).
        #[arg(long, value_name = "DAYS")]
        expires_in_days: Option<u32>,
        /// Whose (a person's name or id; default: the install's owner).
        #[arg(long)]
        person: Option<String>,
    },
    /// List everyone's personal tokens (never their secrets).
    List,
    /// Revoke a token by id (`tok_…`): it stops working at once, on every node.
    Revoke { id: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Mcp = cli.command {
        // Needs no config: the daemon put everything into the environment.
        let _logs = telemetry::init(None, None)?;
        return mcp_cmd::run().await;
    }
    let listen = match &cli.command {
        Command::Serve { listen, .. } => listen.as_deref(),
        _ => None,
    };
    let mut settings = Settings::load(cli.config.as_deref(), listen, &paths::process_env)?;
    if let Command::Serve {
        database: Some(url),
        ..
    } = &cli.command
    {
        settings.database_url = Some(config_store::check(url.clone(), "--database")?);
    }
    // `serve` logs (and traces) as `[telemetry]` says; the other commands log text.
    let serving = matches!(cli.command, Command::Serve { .. });
    let node = if serving {
        datadir::node_id(&settings.data_dir).ok()
    } else {
        None
    };
    let _telemetry = telemetry::init(serving.then_some(&settings.telemetry), node.as_deref())?;
    match cli.command {
        Command::Serve { .. } => serve::run(settings).await,
        Command::Token { action } => {
            let text = match action {
                None => format!("{}\n", token::for_command(&settings).await?),
                Some(TokenAction::Create {
                    name,
                    scope,
                    expires_in_days,
                    person,
                }) => {
                    let (scope, person) = (scope.as_deref(), person.as_deref());
                    token_cmd::create(&settings, &name, scope, expires_in_days, person).await?
                }
                Some(TokenAction::List) => token_cmd::list(&settings).await?,
                Some(TokenAction::Revoke { id }) => token_cmd::revoke(&settings, &id).await?,
            };
            let mut out = std::io::stdout().lock();
            write!(out, "{text}")?;
            out.flush()?;
            Ok(())
        }
        Command::Mcp => mcp_cmd::run().await,
        Command::Drain { url, no_wait } => drain_cmd::run(&settings, url, no_wait).await,
        Command::Backup { dest } => say(&backup::backup(&settings, &dest).await?),
        Command::Restore { src } => say(&backup::restore(&settings, &src).await?),
        Command::Doctor { no_start } => {
            let report = doctor::run(&settings, !no_start).await;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.text)?;
            out.flush()?;
            match report.problems.len() {
                0 => Ok(()),
                n => anyhow::bail!("{n} problem(s) would stop `tether serve` (see above)"),
            }
        }
        Command::Pair { action } => {
            let text = match action {
                PairAction::List { all } => pair::list(&settings, all).await?,
                PairAction::Approve { code, person, role } => {
                    let role = match role.as_deref() {
                        None => None,
                        Some(r) => Some(tether_proto::Role::parse(r).ok_or_else(|| {
                            anyhow::anyhow!("unknown role {r:?}: member or viewer")
                        })?),
                    };
                    let to = tether_channels::pairing::ApprovePairing {
                        person_id: person.map(tether_proto::PersonId::from),
                        role,
                    };
                    pair::approve(&settings, &code, &to).await?
                }
            };
            let mut out = std::io::stdout().lock();
            write!(out, "{text}")?;
            out.flush()?;
            Ok(())
        }
    }
}

/// Prints a command's text.
fn say(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write!(out, "{text}")?;
    out.flush()?;
    Ok(())
}

fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {err:#}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["tether", "serve", "--listen", "127.0.0.1:0"]).unwrap();
        assert!(
            matches!(cli.command, Command::Serve { listen: Some(ref l), .. } if l == "127.0.0.1:0")
        );
        let cli = Cli::try_parse_from(["tether", "token", "--config", "/x.toml"]).unwrap();
        assert_eq!(cli.config, Some(PathBuf::from("/x.toml")));
    }
}
