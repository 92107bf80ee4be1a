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
    ("GET", "/api/v1/tokens", Action::ManageOwnTokens),
    ("POST", "/api/v1/tokens", Action::ManageOwnTokens),
    ("DELETE", "/api/v1/tokens/{id}", Action::ManageOwnTokens),
    ("GET", "/api/v1/people", Action::ManagePeople),
    ("POST", "/api/v1/people", Action::ManagePeople),
    ("PATCH", "/api/v1/people/{id}", Action::ManagePeople),
    ("GET", "/api/v1/pairings", Action::DecidePairing),
    (
        "POST",
        "/api/v1/pairings/{code}/approve",
        Action::DecidePairing,
    ),
];

/// The action of a request to route `path` (its template) with `method`.
pub(crate) fn action(method: &Method, path: &str) -> Option<Action> {
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
