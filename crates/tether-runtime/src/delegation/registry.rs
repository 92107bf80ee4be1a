//! Delegation settings, who calls, and the in-memory delegation state: the MCP tokens
//! of the sessions tether launched (each revocable, with a signal that ends the waits of
//! its holder), the start-up readiness gate, the shutdown signal, the waits in flight
//! per caller, and which blocks each caller was told about.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tether_agents::McpServer;
use tether_proto::{ConversationId, Session, SessionId, TaskId};

use tokio_util::sync::CancellationToken;

use crate::ids::new_id;

#[path = "registry_parked.rs"]
mod parked;
use parked::ParkedToken;

/// Concurrent `get_delegation_status` waits one caller may have in flight.
pub const MAX_WAITS_PER_CALLER: usize = 8;

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
    /// The daemon's own `/mcp` endpoint (`http://127.0.0.1:PORT/mcp`), given to agents
    /// that speak MCP over HTTP instead of the companion; `None`: the companion for all.
    pub http_url: Option<String>,
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
        conversation_id: ConversationId,
        session_id: SessionId,
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
            } => conversation_id.to_string(),
            Caller::External => tether_store::EXTERNAL_SCOPE.to_string(),
            Caller::Person => "person".to_string(),
        }
    }
}

/// A live session's MCP token.
struct TokenEntry {
    conversation_id: ConversationId,
    session_id: SessionId,
    /// Cancelled when the token is revoked.
    revoked: CancellationToken,
}

/// In-memory delegation state: MCP tokens of launched sessions and the readiness gate.
pub(crate) struct Registry {
    config: DelegationConfig,
    /// token → its session.
    tokens: Mutex<HashMap<String, TokenEntry>>,
    /// Session id → its token.
    by_session: Mutex<HashMap<SessionId, String>>,
    ready: AtomicBool,
    /// Cancelled when the daemon begins to shut down.
    stopping: CancellationToken,
    /// Caller scope → waits in flight.
    waits: Arc<Mutex<HashMap<String, usize>>>,
    /// (caller scope, task id) → the blocking request last reported to that caller, so
    /// a wait can return on a block the caller has not seen yet.
    reported_blocks: Mutex<HashMap<(String, TaskId), String>>,
    /// (ledger scope, continuation id) → a lock held by the one request using it.
    ledger_locks: LockMap,
    /// Tokens of spare agent processes started before their session exists (see
    /// [`Registry::reserved_servers`]).
    reserved: Mutex<std::collections::HashSet<String>>,
    /// Tokens kept for a thread the agent holds loaded ([`Registry::park`]), each with
    /// a task waiting for its process to end.
    parked: Mutex<HashMap<String, ParkedToken>>,
}

/// A new per-session MCP token (two random ids).
fn new_token() -> String {
    format!("{}{}", new_id::<String>(), new_id::<String>())
}

/// The token in MCP servers built by [`Registry::mcp_servers`] or
/// [`Registry::reserved_servers`].
pub(crate) fn token_in(servers: &[McpServer]) -> Option<&str> {
    servers
        .iter()
        .find_map(|s| s.env.get(MCP_TOKEN_ENV))
        .map(String::as_str)
}

/// The servers with their token blanked: what two starts must share to use one spare.
pub(crate) fn without_token(servers: &[McpServer]) -> Vec<McpServer> {
    servers
        .iter()
        .cloned()
        .map(|mut s| {
            if let Some(t) = s.env.get_mut(MCP_TOKEN_ENV) {
                t.clear();
            }
            if let Some(h) = s.http.as_mut() {
                h.bearer_token.clear();
            }
            s
        })
        .collect()
}

type LockMap = Arc<Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>>;

/// Holds a continuation id of a ledger scope; the map entry goes when nobody waits.
pub(crate) struct LedgerGuard {
    key: (String, String),
    locks: LockMap,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for LedgerGuard {
    fn drop(&mut self) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // Ours and the map's reference: nobody else waits for this id.
        if locks
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) <= 2)
        {
            locks.remove(&self.key);
        }
        self.guard = None;
    }
}

/// One wait in flight; its slot is given back on drop.
pub(crate) struct WaitSlot {
    scope: String,
    waits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut waits = self.waits.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = waits.get_mut(&self.scope) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                waits.remove(&self.scope);
            }
        }
    }
}

impl Registry {
    pub fn new(config: DelegationConfig) -> Registry {
        Registry {
            config,
            tokens: Mutex::new(HashMap::new()),
            by_session: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
            stopping: CancellationToken::new(),
            waits: Arc::new(Mutex::new(HashMap::new())),
            reported_blocks: Mutex::new(HashMap::new()),
            ledger_locks: Arc::new(Mutex::new(HashMap::new())),
            reserved: Mutex::new(std::collections::HashSet::new()),
            parked: Mutex::new(HashMap::new()),
        }
    }

    /// Serialises every request that uses `continuation_id` in `scope` (whatever its
    /// task), so the ledger is read and written by one of them at a time.
    pub async fn lock_ledger(&self, scope: &str, continuation_id: &str) -> LedgerGuard {
        let key = (scope.to_string(), continuation_id.to_string());
        let lock = {
            let mut locks = self.ledger_locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        LedgerGuard {
            key,
            locks: self.ledger_locks.clone(),
            guard: Some(guard),
        }
    }

    pub fn config(&self) -> &DelegationConfig {
        &self.config
    }

    /// The MCP servers to give an agent starting `session`: tether's companion with
    /// this session's token in its environment (never in argv). A session keeps its
    /// token while its process lives; a revoked token is never issued again.
    pub fn mcp_servers(&self, session: &Session) -> Vec<McpServer> {
        if self.config.mcp.is_none() {
            return Vec::new();
        }
        let token = {
            let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
            let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            let token = by_session
                .entry(session.id.clone())
                .or_insert_with(new_token)
                .clone();
            // A parked token is in use again.
            if let Some(p) = self
                .parked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&token)
            {
                p.dormant = false;
            }
            tokens.entry(token.clone()).or_insert_with(|| TokenEntry {
                conversation_id: session.conversation_id.clone(),
                session_id: session.id.clone(),
                revoked: CancellationToken::new(),
            });
            token
        };
        self.servers_with(token)
    }

    fn servers_with(&self, token: String) -> Vec<McpServer> {
        let Some(launch) = &self.config.mcp else {
            return Vec::new();
        };
        let env = BTreeMap::from([
            (
                MCP_SOCKET_ENV.to_string(),
                launch.socket.display().to_string(),
            ),
            (MCP_TOKEN_ENV.to_string(), token.clone()),
        ]);
        let http = launch.http_url.as_ref().map(|url| tether_agents::McpHttp {
            url: url.clone(),
            bearer_token: token,
        });
        vec![McpServer {
            name: MCP_SERVER_NAME.to_string(),
            command: launch.command.clone(),
            args: launch.args.clone(),
            env,
            http,
        }]
    }

    /// The MCP servers for a spare agent process, started before its session exists
    /// (the Claude warm spare): a fresh token the MCP endpoints admit, so the agent's
    /// start-up connects and lists the tools, but which stands for no caller (every tool
    /// call is refused) until [`Registry::adopt`] hands it a session.
    pub fn reserved_servers(&self) -> Vec<McpServer> {
        if self.config.mcp.is_none() {
            return Vec::new();
        }
        let token = new_token();
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.clone());
        self.servers_with(token)
    }

    /// A reserved token that will not be adopted (its spare ended).
    pub fn unreserve(&self, token: &str) {
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(token);
    }

    /// The session whose token is `session_token` takes over the reserved token of the
    /// spare process it was given (that process holds the reserved one in its
    /// environment); its own, never used, is dropped. False when either is unknown.
    pub fn adopt(&self, session_token: &str, reserved: &str) -> bool {
        let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let mut reserved_set = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if !reserved_set.contains(reserved) {
            return false;
        }
        let Some(entry) = tokens.remove(session_token) else {
            return false;
        };
        reserved_set.remove(reserved);
        by_session.insert(entry.session_id.clone(), reserved.to_string());
        tokens.insert(reserved.to_string(), entry);
        true
    }

    /// Whether the MCP endpoints let a connection with `token` in: a live session's
    /// token or a reserved one.
    pub fn admits(&self, token: &str) -> bool {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(token)
            || self
                .reserved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(token)
    }

    /// The caller a per-session MCP token stands for.
    pub fn caller_for_token(&self, token: &str) -> Option<Caller> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.get(token).map(|t| Caller::Session {
            conversation_id: t.conversation_id.clone(),
            session_id: t.session_id.clone(),
        })
    }

    /// Cancelled when the current token of `session_id` is revoked; `None` when the
    /// session holds no token.
    pub fn revocation(&self, session_id: &SessionId) -> Option<CancellationToken> {
        let by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
        let token = by_session.get(session_id)?;
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.get(token).map(|t| t.revoked.clone())
    }

    /// Revokes a session's token (its process ended, or it was replaced or released).
    pub fn revoke(&self, session_id: &SessionId) {
        let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = by_session.remove(session_id)
            && let Some(entry) = tokens.remove(&t)
        {
            entry.revoked.cancel();
        }
    }

    /// Revokes the tokens of every session of a conversation (it was archived).
    pub fn revoke_conversation(&self, conversation_id: &ConversationId) {
        let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|_, t| {
            if t.conversation_id != *conversation_id {
                return true;
            }
            by_session.remove(&t.session_id);
            t.revoked.cancel();
            false
        });
    }

    /// Takes one of `scope`'s wait slots; `None` when all [`MAX_WAITS_PER_CALLER`] are in use.
    pub fn begin_wait(&self, scope: &str) -> Option<WaitSlot> {
        let mut waits = self.waits.lock().unwrap_or_else(|e| e.into_inner());
        let n = waits.entry(scope.to_string()).or_insert(0);
        if *n >= MAX_WAITS_PER_CALLER {
            return None;
        }
        *n += 1;
        Some(WaitSlot {
            scope: scope.to_string(),
            waits: self.waits.clone(),
        })
    }

    /// Cancelled once the daemon begins to shut down.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// The blocking request last reported to `scope` for `task_id`.
    pub fn reported_block(&self, scope: &str, task_id: &TaskId) -> Option<String> {
        let map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&(scope.to_string(), task_id.clone())).cloned()
    }

    /// Remembers what was reported to `scope` (`None`: not blocked).
    pub fn set_reported_block(&self, scope: &str, task_id: &TaskId, request: Option<&str>) {
        let mut map = self
            .reported_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (scope.to_string(), task_id.clone());
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
