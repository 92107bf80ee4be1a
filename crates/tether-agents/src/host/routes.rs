//! Routing a shared process's messages to its sessions: each session registers the
//! handler it would have had on a process of its own under its thread or session id; the
//! process's one reader hands every notification and request to the handler of the id it
//! names ([`IdOf`]). A message naming no known id can be attributed only while one
//! session uses the process: then it goes to that session if it was strictly resumed (its
//! strict check sees an agent that answers as another session, as on a process of its
//! own). With others on the process it may be theirs (a session whose `session/new` has
//! not answered yet, a late message of one that left): a request is refused and a
//! notification dropped, never shown to another session and never ending its turn (issue
//! 24 S5). A notification about the account the process runs on (Codex's
//! `account/rateLimits/updated`) is every session's: each gets it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::jsonrpc::{CloseInfo, Connection, Handler, Incoming};

/// Whom a message of a shared process is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Addressee {
    /// The session of this id (`threadId` in Codex, `sessionId` in ACP).
    Session(String),
    /// Every session: the message is about the account the process runs on.
    Account,
    /// It names no session.
    Unnamed,
}

/// Whom a message is for.
pub(crate) type IdOf = fn(&Incoming) -> Addressee;

/// Told once when the process's output ends.
pub(crate) type OnClosed = Box<dyn FnOnce(&CloseInfo) + Send>;

/// What one session is given of its process.
pub(crate) struct Route {
    pub handler: Handler,
    /// Called when the process's output ends (Codex ends a running turn here).
    pub on_closed: Option<OnClosed>,
    /// A strictly resumed session: also sees messages of ids nobody owns.
    pub strict: bool,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("strict", &self.strict)
            .finish()
    }
}

/// How many ids of sessions that left a process are remembered (their late messages are
/// dropped, not taken for a foreign id).
const GONE_KEPT: usize = 256;

#[derive(Debug, Default)]
struct Table {
    routes: HashMap<String, Route>,
    gone: VecDeque<String>,
}

#[derive(Debug)]
pub(crate) struct Routes {
    id_of: IdOf,
    map: Mutex<Table>,
    /// Sessions holding a slot on the process, routed or still opening.
    users: AtomicUsize,
}

impl Routes {
    pub fn new(id_of: IdOf) -> Routes {
        Routes {
            id_of,
            map: Mutex::new(Table::default()),
            users: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes `id` to `route`; false (and nothing changes) when another session of the
    /// process holds `id` already: a second session under one id would take the first
    /// one's messages (issue 26 item 5).
    pub fn add(&self, id: &str, route: Route) -> bool {
        let mut t = self.lock();
        if t.routes.contains_key(id) {
            return false;
        }
        t.gone.retain(|g| g != id);
        t.routes.insert(id.to_owned(), route);
        true
    }

    pub fn remove(&self, id: &str) {
        let mut t = self.lock();
        if t.routes.remove(id).is_some() {
            if t.gone.len() == GONE_KEPT {
                t.gone.pop_front();
            }
            t.gone.push_back(id.to_owned());
        }
    }

    /// The number of sessions holding a slot on the process (the host's count).
    pub fn set_users(&self, users: usize) {
        self.users.store(users, Ordering::SeqCst);
    }

    /// The handler for the process's connection.
    pub fn handler(self: &Arc<Self>) -> Handler {
        let routes = Arc::clone(self);
        Box::new(move |conn: &Connection, incoming: Incoming| routes.dispatch(conn, incoming))
    }

    fn dispatch(&self, conn: &Connection, incoming: Incoming) {
        let id = match (self.id_of)(&incoming) {
            Addressee::Session(id) => Some(id),
            Addressee::Unnamed => None,
            Addressee::Account => {
                for route in self.lock().routes.values_mut() {
                    (route.handler)(conn, incoming.clone());
                }
                return;
            }
        };
        let mut t = self.lock();
        if let Some(route) = id.as_deref().and_then(|id| t.routes.get_mut(id)) {
            (route.handler)(conn, incoming);
            return;
        }
        let left = id
            .as_deref()
            .is_some_and(|id| t.gone.iter().any(|g| g == id));
        let lone = self.users.load(Ordering::SeqCst) <= 1 && t.routes.len() == 1;
        let owner = if left || !lone {
            None
        } else {
            t.routes.values_mut().find(|r| r.strict)
        };
        match (owner, incoming) {
            (Some(route), incoming) => (route.handler)(conn, incoming),
            (None, Incoming::Notification { method, .. }) => {
                tracing::debug!(%method, session = ?id, "dropping a message for no session of this process");
            }
            (
                None,
                Incoming::Request {
                    id: rid, method, ..
                },
            ) => {
                tracing::debug!(%method, session = ?id, "refusing a request for no session of this process");
                conn.refuse(rid, format!("no session {} here", id.unwrap_or_default()));
            }
        }
    }

    /// The process's output ended: every session is told.
    pub fn closed(&self, info: &CloseInfo) {
        let hooks: Vec<_> = self
            .lock()
            .routes
            .values_mut()
            .filter_map(|r| r.on_closed.take())
            .collect();
        for hook in hooks {
            hook(info);
        }
    }
}
