//! Delegation settings, who calls, and the in-memory delegation state: the MCP tokens
//! of the sessions tether launched, the start-up readiness gate, and which blocks each
//! caller was told about.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tether_agents::McpServer;
use tether_proto::Session;

use crate::ctx::new_id;

/// Delegation settings (`[delegation]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationConfig {
    /// How deep delegation may nest: 1 = a person's agent may delegate, its children may
    /// not (1..=8).
    pub max_depth: u32,
    /// Children of one parent conversation that may run a turn at once (0 = no limit).
    pub max_running_children: usize,
    /// How agents reach tether's MCP server; `None`: no server is injected.
    pub mcp: Option<McpLaunch>,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            max_depth: 1,
            max_running_children: 4,
            mcp: None,
        }
    }
}

/// The stdio companion every launched agent gets as MCP server `tether`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpLaunch {
    /// The companion program (the `tether` binary) and its arguments (`["mcp"]`).
    pub command: String,
    pub args: Vec<String>,
    /// The daemon's local socket (in a 0700 directory).
    pub socket: PathBuf,
}

/// Environment variable naming the daemon's MCP socket (for `tether mcp`).
pub const MCP_SOCKET_ENV: &str = "TETHER_MCP_SOCKET";
/// Environment variable carrying the per-session MCP token (for `tether mcp`).
pub const MCP_TOKEN_ENV: &str = "TETHER_MCP_TOKEN";
/// Name of the MCP server tether injects.
pub const MCP_SERVER_NAME: &str = "tether";

/// Who calls a delegation operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An agent session tether launched, through its MCP token.
    Session {
        conversation_id: String,
        session_id: String,
    },
    /// An MCP client holding the API token: its tasks have no parent conversation.
    External,
    /// A person through the API or the web page: may act on any task.
    Person,
}

impl Caller {
    /// Who this caller is, for remembering what it was told.
    pub(crate) fn scope(&self) -> String {
        match self {
            Caller::Session {
                conversation_id, ..
            } => conversation_id.clone(),
            Caller::External => tether_store::EXTERNAL_SCOPE.to_string(),
            Caller::Person => "person".to_string(),
        }
    }
}

/// In-memory delegation state: MCP tokens of launched sessions and the readiness gate.
pub(crate) struct Registry {
    config: DelegationConfig,
    /// token → (conversation id, session id).
    tokens: Mutex<HashMap<String, (String, String)>>,
    /// Session id → its token.
    by_session: Mutex<HashMap<String, String>>,
    ready: AtomicBool,
    /// (caller scope, task id) → the blocking request last reported to that caller, so
    /// a wait can return on a block the caller has not seen yet.
    reported_blocks: Mutex<HashMap<(String, String), String>>,
}

impl Registry {
    pub fn new(config: DelegationConfig) -> Registry {
        Registry {
            config,
            tokens: Mutex::new(HashMap::new()),
            by_session: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
            reported_blocks: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &DelegationConfig {
        &self.config
    }

    /// The MCP servers to give an agent starting `session`: tether's companion with
    /// this session's token in its environment (never in argv).
    pub fn mcp_servers(&self, session: &Session) -> Vec<McpServer> {
        let Some(launch) = &self.config.mcp else {
            return Vec::new();
        };
        let token = {
            let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
            by_session
                .entry(session.id.clone())
                .or_insert_with(|| format!("{}{}", new_id(), new_id()))
                .clone()
        };
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                token.clone(),
                (session.conversation_id.clone(), session.id.clone()),
            );
        let env = BTreeMap::from([
            (
                MCP_SOCKET_ENV.to_string(),
                launch.socket.display().to_string(),
            ),
            (MCP_TOKEN_ENV.to_string(), token),
        ]);
        vec![McpServer {
            name: MCP_SERVER_NAME.to_string(),
            command: launch.command.clone(),
            args: launch.args.clone(),
            env,
        }]
    }

    /// The caller a per-session MCP token stands for.
    pub fn caller_for_token(&self, token: &str) -> Option<Caller> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.get(token).map(|(c, s)| Caller::Session {
            conversation_id: c.clone(),
            session_id: s.clone(),
        })
    }

    /// Forgets a released session's token.
    pub fn revoke(&self, session_id: &str) {
        let token = self
            .by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session_id);
        if let Some(t) = token {
            self.tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&t);
        }
    }

    /// The blocking request last reported to `scope` for `task_id`.
    pub fn reported_block(&self, scope: &str, task_id: &str) -> Option<String> {
        let map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&(scope.to_string(), task_id.to_string())).cloned()
    }

    /// Remembers what was reported to `scope` (`None`: not blocked).
    pub fn set_reported_block(&self, scope: &str, task_id: &str, request: Option<&str>) {
        let mut map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (scope.to_string(), task_id.to_string());
        match request {
            Some(r) => {
                map.insert(key, r.to_string());
            }
            None => {
                map.remove(&key);
            }
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Back to the start-up state (tests).
    #[cfg(test)]
    pub fn set_rebuilding(&self) {
        self.ready.store(false, Ordering::Release);
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}
