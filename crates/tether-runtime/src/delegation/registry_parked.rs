//! Tokens kept for a thread the agent holds loaded after its session left (issue 33
//! item 4): codex keeps an unsubscribed thread, and the MCP servers it was opened with,
//! while its shared process runs, so the session's token lives as long as that process
//! and a resume there needs no new servers.

use std::sync::Arc;

use tether_proto::SessionId;

use super::Registry;

/// A token kept after its session left a process that holds its thread.
pub(super) struct ParkedToken {
    /// The shared process holding the thread (its task waits for this one).
    pub process: u64,
    /// The session is dormant (false once it starts again: the token is then in use).
    pub dormant: bool,
}

impl Registry {
    /// Keeps a session's token while the agent keeps its thread loaded after it left
    /// (`home` ends when that process ends), then revokes it — unless the session has
    /// started again by then (its token is in use: the process it runs in ends it), has
    /// another token, or lost this one already.
    pub fn park(self: &Arc<Self>, session_id: &SessionId, home: tether_agents::Parked) {
        let Some(token) = self
            .by_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .cloned()
        else {
            return;
        };
        {
            let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
            match parked.get_mut(&token) {
                // Parked on this process before: its task waits already.
                Some(p) if p.process == home.process() => {
                    p.dormant = true;
                    return;
                }
                _ => {
                    parked.insert(
                        token.clone(),
                        ParkedToken {
                            process: home.process(),
                            dormant: true,
                        },
                    );
                }
            }
        }
        let registry = Arc::downgrade(self);
        let session_id = session_id.clone();
        let process = home.process();
        tokio::spawn(async move {
            home.ended().await;
            let Some(registry) = registry.upgrade() else {
                return;
            };
            let dormant = {
                let mut parked = registry.parked.lock().unwrap_or_else(|e| e.into_inner());
                match parked.get(&token) {
                    Some(p) if p.process == process => {
                        parked.remove(&token).is_some_and(|p| p.dormant)
                    }
                    // Parked on another process since: that one's task decides.
                    _ => false,
                }
            };
            if dormant {
                registry.revoke_token(&session_id, &token);
            }
        });
    }

    /// Revokes `token` if it is still `session_id`'s.
    fn revoke_token(&self, session_id: &SessionId, token: &str) {
        let mut by_session = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
        if by_session.get(session_id).map(String::as_str) != Some(token) {
            return;
        }
        by_session.remove(session_id);
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = tokens.remove(token) {
            entry.revoked.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delegation::registry::{DelegationConfig, McpLaunch, token_in};
    use std::time::Duration;
    use tether_proto::{Session, SessionStatus};

    fn registry() -> Arc<Registry> {
        Arc::new(Registry::new(DelegationConfig {
            mcp: Some(McpLaunch {
                command: "tether".into(),
                args: vec!["mcp".into()],
                socket: "/tmp/mcp.sock".into(),
                http_url: None,
            }),
            ..DelegationConfig::default()
        }))
    }

    fn session(id: &str) -> Session {
        Session {
            id: id.into(),
            conversation_id: "c1".into(),
            agent: "codex".into(),
            model: None,
            cwd: "/w".into(),
            status: SessionStatus::Live,
            external_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_parked_token_lives_until_its_process_ends() {
        let r = registry();
        let s = session("s1");
        let token = token_in(&r.mcp_servers(&s)).unwrap().to_owned();
        let (end, ended) = tokio::sync::watch::channel(false);
        r.park(&s.id, tether_agents::Parked::new(7, ended));
        settle().await;
        assert!(r.admits(&token), "kept while the thread is loaded");
        // The resume on its process gets the same token.
        assert_eq!(token_in(&r.mcp_servers(&s)), Some(token.as_str()));
        // Dormant again on the same process: one task waits, and it revokes the token.
        let (_, again) = tokio::sync::watch::channel(false);
        r.park(&s.id, tether_agents::Parked::new(7, again));
        end.send_replace(true);
        settle().await;
        assert!(!r.admits(&token), "revoked with its process");
        assert_ne!(token_in(&r.mcp_servers(&s)), Some(token.as_str()));
    }

    #[tokio::test]
    async fn a_token_in_use_again_outlives_the_process_it_was_parked_on() {
        let r = registry();
        let s = session("s2");
        let token = token_in(&r.mcp_servers(&s)).unwrap().to_owned();
        let (end, ended) = tokio::sync::watch::channel(false);
        r.park(&s.id, tether_agents::Parked::new(1, ended));
        // The session starts again (on another process): the token is in use.
        assert_eq!(token_in(&r.mcp_servers(&s)), Some(token.as_str()));
        drop(end);
        settle().await;
        assert!(
            r.admits(&token),
            "the old process's end leaves a token in use"
        );
        // Parked on another process, which ends.
        let (end, ended) = tokio::sync::watch::channel(false);
        r.park(&s.id, tether_agents::Parked::new(2, ended));
        end.send_replace(true);
        settle().await;
        assert!(!r.admits(&token));
    }
}
