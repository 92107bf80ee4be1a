//! Routing a shared process's messages to its sessions: each session registers the
//! handler it would have had on a process of its own under its thread or session id; the
//! process's one reader hands every notification and request to the handler of the id it
//! names ([`IdOf`]). A message naming no known id goes to the resumed sessions (their
//! strict checks see an agent that answers as another session, as on a process of their
//! own); otherwise a request is refused and a notification dropped, never shown to another
//! session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::jsonrpc::{CloseInfo, Connection, Handler, Incoming};

/// The session id a message names (`threadId` in Codex, `sessionId` in ACP).
pub(crate) type IdOf = fn(&Incoming) -> Option<String>;

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

#[derive(Debug)]
pub(crate) struct Routes {
    id_of: IdOf,
    map: Mutex<HashMap<String, Route>>,
}

impl Routes {
    pub fn new(id_of: IdOf) -> Routes {
        Routes {
            id_of,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, id: &str, route: Route) {
        self.lock().insert(id.to_owned(), route);
    }

    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The handler for the process's connection.
    pub fn handler(self: &Arc<Self>) -> Handler {
        let routes = Arc::clone(self);
        Box::new(move |conn: &Connection, incoming: Incoming| routes.dispatch(conn, incoming))
    }

    fn dispatch(&self, conn: &Connection, incoming: Incoming) {
        let id = (self.id_of)(&incoming);
        let mut map = self.lock();
        if let Some(route) = id.as_deref().and_then(|id| map.get_mut(id)) {
            (route.handler)(conn, incoming);
            return;
        }
        let mut strict = map.values_mut().filter(|r| r.strict).peekable();
        match incoming {
            Incoming::Notification { .. } => {
                for route in strict {
                    (route.handler)(conn, incoming.clone());
                }
            }
            Incoming::Request { .. } if strict.peek().is_some() => {
                if let Some(route) = strict.next() {
                    (route.handler)(conn, incoming);
                }
            }
            Incoming::Request {
                id: rid, method, ..
            } => {
                tracing::debug!(%method, session = ?id, "refusing a request for no session of this process");
                conn.refuse(rid, format!("no session {} here", id.unwrap_or_default()));
            }
        }
    }

    /// The process's output ended: every session is told.
    pub fn closed(&self, info: &CloseInfo) {
        let hooks: Vec<_> = self
            .lock()
            .values_mut()
            .filter_map(|r| r.on_closed.take())
            .collect();
        for hook in hooks {
            hook(info);
        }
    }
}
