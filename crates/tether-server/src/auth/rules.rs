//! Every authenticated route's action in `tether_core::authz`'s table (issue 28): what a
//! request to it does. Actions on one conversation (read, write, answer) are decided by
//! the runtime, which knows whose the conversation is; the rest where the request is
//! admitted (`auth::check_route`). A route missing here is refused to everyone, and the
//! route × role test (tests of the `tether` binary) fails for any route of the OpenAPI
//! document that has no rule.

use axum::http::Method;
use tether_core::authz::Action;

/// `(method, route template, action)` for every route behind a token.
pub(crate) const RULES: &[(&str, &str, Action)] = &[
    ("GET", "/api/v1/agents", Action::ReadNode),
    ("GET", "/api/v1/workspace", Action::ReadNode),
    ("GET", "/api/v1/pool", Action::ReadNode),
    ("GET", "/api/v1/runtime", Action::ReadNode),
    ("GET", "/api/v1/cluster", Action::ReadNode),
    ("POST", "/api/v1/drain", Action::OperateNode),
    ("GET", "/api/v1/conversations/{id}/worktree", Action::Read),
    ("POST", "/api/v1/conversations/{id}/worktree", Action::Write),
    (
        "GET",
        "/api/v1/conversations/{id}/worktree/diff",
        Action::Read,
    ),
    ("GET", "/metrics", Action::OperateNode),
    ("GET", "/api/v1/conversations", Action::ReadNode),
    ("POST", "/api/v1/conversations", Action::CreateConversation),
    ("GET", "/api/v1/conversations/events", Action::ReadNode),
    ("GET", "/api/v1/conversations/{id}", Action::Read),
    ("PATCH", "/api/v1/conversations/{id}", Action::Write),
    ("GET", "/api/v1/conversations/{id}/messages", Action::Read),
    ("POST", "/api/v1/conversations/{id}/messages", Action::Write),
    (
        "POST",
        "/api/v1/conversations/{id}/new-session",
        Action::Write,
    ),
    ("POST", "/api/v1/conversations/{id}/detach", Action::Write),
    ("POST", "/api/v1/conversations/{id}/stop", Action::Write),
    ("GET", "/api/v1/conversations/{id}/events", Action::Read),
    (
        "GET",
        "/api/v1/conversations/{id}/events/page",
        Action::Read,
    ),
    (
        "GET",
        "/api/v1/conversations/{id}/continuation",
        Action::Read,
    ),
    ("POST", "/api/v1/conversations/{id}/continue", Action::Write),
    ("POST", "/api/v1/conversations/{id}/close", Action::Write),
    (
        "GET",
        "/api/v1/conversations/{id}/delegations",
        Action::Read,
    ),
    (
        "POST",
        "/api/v1/conversations/{id}/attachments",
        Action::Write,
    ),
    ("GET", "/api/v1/sessions/{id}", Action::Read),
    ("GET", "/api/v1/sessions/{id}/turns", Action::Read),
    ("GET", "/api/v1/sessions/{id}/events", Action::Read),
    ("GET", "/api/v1/approvals", Action::ReadNode),
    ("POST", "/api/v1/approvals/{id}", Action::Answer),
    ("GET", "/api/v1/questions", Action::ReadNode),
    ("POST", "/api/v1/questions/{id}", Action::Answer),
    ("GET", "/api/v1/attachments/{id}", Action::Read),
    ("GET", "/api/v1/turns/{id}/files", Action::Read),
    ("GET", "/api/v1/turns/{id}/files/content", Action::Read),
    ("POST", "/api/v1/links", Action::ReadNode),
    ("GET", "/api/v1/me", Action::ReadNode),
    ("POST", "/api/v1/auth/signout", Action::ReadNode),
    // MCP: let in to list the tools; each tool call is checked by the runtime.
    ("GET", "/mcp", Action::ReadNode),
    ("POST", "/mcp", Action::ReadNode),
    ("DELETE", "/mcp", Action::ReadNode),
    ("GET", "/api/v1/tokens", Action::ManageOwnTokens),
    ("POST", "/api/v1/tokens", Action::ManageOwnTokens),
    ("DELETE", "/api/v1/tokens/{id}", Action::ManageOwnTokens),
    ("GET", "/api/v1/people", Action::ManagePeople),
    ("POST", "/api/v1/people", Action::ManagePeople),
    ("PATCH", "/api/v1/people/{id}", Action::ManagePeople),
    ("GET", "/api/v1/audit", Action::ReadAudit),
    // Usage: the runtime checks the scope asked for (a conversation's is `Read` on it).
    ("GET", "/api/v1/usage", Action::ReadNode),
    ("GET", "/api/v1/budgets", Action::ManageBudgets),
    ("POST", "/api/v1/budgets", Action::ManageBudgets),
    ("DELETE", "/api/v1/budgets/{id}", Action::ManageBudgets),
    // Schedules: the runtime checks the schedule's conversation (`Read` to see, `Write`
    // to make or change one).
    ("GET", "/api/v1/schedules", Action::ReadNode),
    ("POST", "/api/v1/schedules", Action::ReadNode),
    ("GET", "/api/v1/schedules/{id}", Action::ReadNode),
    ("PATCH", "/api/v1/schedules/{id}", Action::ReadNode),
    ("DELETE", "/api/v1/schedules/{id}", Action::ReadNode),
    ("GET", "/api/v1/me/accounts", Action::LinkSelf),
    ("POST", "/api/v1/me/accounts", Action::LinkSelf),
    (
        "DELETE",
        "/api/v1/me/accounts/{channel}/{user_id}",
        Action::LinkSelf,
    ),
    ("POST", "/api/v1/me/link-codes", Action::LinkSelf),
    ("GET", "/api/v1/people/{id}/accounts", Action::LinkOthers),
    ("POST", "/api/v1/people/{id}/accounts", Action::LinkOthers),
    (
        "DELETE",
        "/api/v1/people/{id}/accounts/{channel}/{user_id}",
        Action::LinkOthers,
    ),
    ("GET", "/api/v1/pairings", Action::DecidePairing),
    ("GET", "/api/v1/conversations/{id}/chats", Action::Read),
    (
        "POST",
        "/api/v1/pairings/{code}/approve",
        Action::DecidePairing,
    ),
];

/// The action of a request to route `path` (its template) with `method`.
pub fn action(method: &Method, path: &str) -> Option<Action> {
    RULES
        .iter()
        .chain(TEST_RULES)
        .find(|(m, p, _)| *m == method.as_str() && *p == path)
        .map(|(_, _, a)| *a)
}

/// The routes of this crate's unit tests (`tests.rs`).
#[cfg(test)]
const TEST_RULES: &[(&str, &str, Action)] = &[
    ("POST", "/echo", Action::ReadNode),
    ("GET", "/query", Action::ReadNode),
    ("GET", "/panic", Action::ReadNode),
    ("GET", "/stream", Action::ReadNode),
];
#[cfg(not(test))]
const TEST_RULES: &[(&str, &str, Action)] = &[];

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::OpenApi;

    /// Every operation of the OpenAPI document, as (method, path, behind a token).
    fn operations() -> Vec<(Method, String, bool)> {
        let doc = crate::openapi::ApiDoc::openapi();
        let mut out = Vec::new();
        for (path, item) in doc.paths.paths {
            let ops = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, op) in ops {
                if let Some(op) = op {
                    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
                    out.push((method, path.clone(), secured));
                }
            }
        }
        out
    }

    #[test]
    fn every_route_behind_a_token_has_an_action_and_every_rule_a_route() {
        let ops = operations();
        assert!(ops.len() > 30, "the document lists the routes");
        let missing: Vec<String> = ops
            .iter()
            .filter(|(m, p, secured)| *secured && action(m, p).is_none())
            .map(|(m, p, _)| format!("{m} {p}"))
            .collect();
        assert!(missing.is_empty(), "routes without a rule: {missing:?}");
        // A rule for a route that does not exist is a typo that leaves the real one
        // refused; pairings and a conversation's chats are documented by the channels
        // (`extra_openapi`), `/metrics` (Prometheus text) is the binary's own.
        let stale: Vec<String> = RULES
            .iter()
            .filter(|(m, p, _)| {
                !p.starts_with("/api/v1/pairings")
                    && *p != "/api/v1/conversations/{id}/chats"
                    && *p != "/metrics"
                    && !ops.iter().any(|(om, op, _)| om.as_str() == *m && op == p)
            })
            .map(|(m, p, _)| format!("{m} {p}"))
            .collect();
        assert!(stale.is_empty(), "rules without a route: {stale:?}");
    }

    #[test]
    fn administration_needs_an_admin_and_conversations_are_decided_by_the_runtime() {
        use tether_core::authz::rule;
        use tether_proto::Role;
        for (method, path, a) in RULES {
            let r = rule(*a);
            if path.starts_with("/api/v1/people") || path.starts_with("/api/v1/pairings") {
                assert_eq!(r.own, Role::Admin, "{method} {path}");
            }
            if path.contains("{id}") && path.starts_with("/api/v1/conversations") {
                assert!(
                    a.on_conversation(),
                    "{method} {path} is on one conversation"
                );
            }
            if *method != "GET" && path.starts_with("/api/v1/conversations/{id}") {
                assert_ne!(*a, Action::Read, "{method} {path} changes something");
            }
        }
    }
}
